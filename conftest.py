"""One rule for every pytest session in this repository, whatever it collects (`make test`, or nbval on one
notebook alone): it never reads or writes the user's own calibration cache (~/.cache/simlab/calibration.json,
which lesson 6's notebook writes).

$SIMLAB_CALIBRATION is set here, at import: pytest imports this file before collecting anything, in the main
process and in every xdist worker (each imports it afresh: each gets its own folder). Everything started
afterwards inherits it: `simlab` subprocesses, the workers of a real run, and the Jupyter kernels nbval starts
(jupyter_client launches a kernel with a copy of os.environ; tests/test_calibration_isolation.py checks it in a
kernel). tests/conftest.py gives each test a fresh path inside this folder.
"""
import atexit
import os
import shutil
import tempfile

_CALIBRATION_DIR = tempfile.mkdtemp(prefix="simlab-test-calibration-")
os.environ["SIMLAB_CALIBRATION"] = os.path.join(_CALIBRATION_DIR, "calibration.json")
_OWNER = os.getpid()
# removed when this process ends; not by a forked child that happens to run atexit handlers on its way out
atexit.register(lambda: os.getpid() == _OWNER and shutil.rmtree(_CALIBRATION_DIR, ignore_errors=True))
