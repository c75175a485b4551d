"""`make gpu-check` — `python tools/gpu_check.py [--device cpu | --plan | --only … | --backend gloo …]`: every
engine's CUDA device plumbing, CUDA memory per rank against the memory model, and one training step timed against
the time model, on one GPU or one GPU per rank. This is the launcher: the checks are the package beside it,
tools/gpu_checks/ (its __init__ says which module holds what; cli.py has the flags and exit statuses)."""
import sys

from gpu_checks.cli import main  # tools/ is sys.path[0] when run; importers put it there (tests/test_project.py)

if __name__ == "__main__":
    sys.exit(main())
