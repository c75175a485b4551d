"""The test session never touches the user's own calibration cache (tests/conftest.py points $SIMLAB_CALIBRATION
at a temporary folder): lesson 6's notebook saves a calibration, and under nbval that runs during `make test`."""
import tempfile
from pathlib import Path

from simlab.sim.hardware import calibration_path

HOME_CACHE = Path.home() / ".cache" / "simlab" / "calibration.json"


def test_the_session_and_each_test_use_a_temporary_cache():
    session_dir = calibration_path().parent.parent  # <session folder>/test<N>/calibration.json
    assert session_dir.name.startswith("simlab-test-calibration-") and session_dir.parent == Path(tempfile.gettempdir())
    assert calibration_path() != HOME_CACHE and not calibration_path().exists()  # fresh for this test


def test_a_kernel_started_as_nbval_starts_one_inherits_it():
    """nbval starts each notebook's kernel with `nbval.kernel.RunningKernel`, through jupyter_client, which hands
    the kernel a copy of this process's environment: the notebook's `save_calibration` writes the temporary cache."""
    from nbval.kernel import RunningKernel
    kernel = RunningKernel("python3", cwd=str(Path(__file__).parent))
    printed = []

    def keep(msg):
        if msg["msg_type"] == "stream":
            printed.append(msg["content"]["text"])
    try:
        code = "from simlab.sim.hardware import calibration_path; print(calibration_path())"
        reply = kernel.kc.execute_interactive(code, output_hook=keep, timeout=120)
    finally:
        kernel.stop()
    assert reply["content"]["status"] == "ok", reply["content"]
    assert "".join(printed).strip() == str(calibration_path()) != str(HOME_CACHE)
