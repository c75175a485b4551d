"""Shared test helpers. The session's rule that no test reads or writes the user's own calibration cache lives
in the repository's root conftest.py (it sets $SIMLAB_CALIBRATION to a temporary folder, for notebook-only runs
too); here each test under tests/ also gets a fresh path of its own (`fresh_calibration`), so a calibration one
test or notebook saved never changes what a later one predicts.
"""
import itertools
import multiprocessing
import os

import pytest

_CALIBRATION_DIR = os.path.dirname(os.environ["SIMLAB_CALIBRATION"])  # the root conftest's folder


_tests = itertools.count()


@pytest.fixture(autouse=True)
def fresh_calibration(monkeypatch):
    """Every test starts with no calibration, at a path of its own that nothing has made yet (a test may still
    set its own; saving creates the folder)."""
    path = os.path.join(_CALIBRATION_DIR, f"test{next(_tests)}", "calibration.json")
    monkeypatch.setenv("SIMLAB_CALIBRATION", path)
    return path


@pytest.fixture
def rejected(capsys):
    """`rejected(argv, message)`: the CLI exits with 2 and one line naming the bad parameter, before any
    worker process started."""
    from simlab.cli import main

    def check(argv, message):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2
        assert message in err and err.count("\n") == 1, err
        assert multiprocessing.active_children() == []
    return check


@pytest.fixture
def english_afterwards():
    """The language back to English after a test that switched it: other tests and doctests expect English.
    Files that switch it use it for every test: `pytestmark = pytest.mark.usefixtures("english_afterwards")`."""
    yield
    from simlab import i18n
    i18n.set_language("en")


@pytest.fixture
def no_launch(monkeypatch):
    """Fails the test if anything tries to start worker processes (checks must refuse bad input first).
    Patched where every launch passes, whichever module imported `launch`."""
    import simlab.exec.launch as L
    monkeypatch.setattr(L, "_pick_start_method", lambda *a, **k: pytest.fail("a process was started"))
    monkeypatch.setattr(L, "_run_under_torchrun", lambda *a: pytest.fail("a process was started"))


@pytest.fixture
def one_thread():
    """Torch on one thread in this process for the test (tiny tensors: one thread is as fast, and two on shared,
    busy cores can be 30× slower); `pytestmark = pytest.mark.usefixtures("one_thread")` asks for it."""
    import torch  # only the tests that ask for it pay for the import

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_configure(config):
    """Fix the day's sample seed once, before xdist workers start (they inherit the environment)."""
    import os

    from sampling import seed
    os.environ.setdefault("SIMLAB_TEST_SEED", str(seed()))


def pytest_report_header(config):
    from sampling import FULL, seed
    return f"simlab sweeps: {'every case (SIMLAB_TEST_FULL=1)' if FULL else f'sampled, SIMLAB_TEST_SEED={seed()}'}"
