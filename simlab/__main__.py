"""`python -m simlab …` — see `python -m simlab --help`."""
from .cli import main

raise SystemExit(main())
