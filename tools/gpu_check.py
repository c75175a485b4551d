"""`make gpu-check` — `python tools/gpu_check.py [--device cpu | --plan | --only … | --backend gloo …]`: every
engine's CUDA device plumbing, CUDA memory per rank against the memory model, and one training step timed against
the time model, on one GPU or one GPU per rank. This is the launcher: the checks are the package beside it,
tools/gpu_checks/ (its __init__ says which module holds what; cli.py has the flags and exit statuses)."""
import os
import sys

from gpu_checks.cli import main  # tools/ is sys.path[0] when run; importers put it there (tests/test_project.py)
from gpu_checks.measure import LOG_ENV, log_devices

if __name__ == "__mp_main__" and os.environ.get(LOG_ENV):  # a rank that a check's launch spawned: multiprocessing
    log_devices(os.environ[LOG_ENV])  # re-runs this file first, so its collectives are logged as forked ones are

if __name__ == "__main__":
    sys.exit(main())
