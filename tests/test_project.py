"""The project's own promises: one environment two ways, a CI script that runs the README's command."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement.strip(), maxsplit=1)[0].lower()


def _environment_yml_deps() -> set[str]:
    """Package names under `dependencies:` (conda and pip alike), minus python, pip and the package itself."""
    text = (ROOT / "environment.yml").read_text().split("dependencies:", 1)[1]
    names = {_name(m) for m in re.findall(r"^\s+- ([^\s#][^#\n]*?)\s*$", text, re.M) if m != "pip:"}
    return names - {"python", "pip", "-e"}


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    assert _environment_yml_deps() == wanted


def test_runtime_dependencies_are_the_agreed_ones():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert {_name(r) for r in project["dependencies"]} == {"torch", "numpy", "matplotlib", "ipywidgets", "jupyterlab"}
    assert "torch>=2.4" in project["dependencies"]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:bash|sh)?\n(.*?)```", readme, re.S).group(1)
    commands = [line.strip() for line in first_block.splitlines() if line.strip() and not line.startswith("#")]
    assert commands == ["make lab", "make test"]
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()
          if line.strip() and not line.startswith("#") and not line.startswith(("set ", "cd "))]
    assert ci == ["make test"]


def test_setup_pins_the_cpu_build_without_a_gpu():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_CPU ?= torch==2.13.0" in makefile
    assert "nvidia-smi" in makefile


def test_gpu_check_script_runs_every_lesson(capsys):
    """`make gpu-check` runs on NCCL where there are GPUs; CI runs the very same script on gloo so it
    cannot rot unseen. Without a GPU the NCCL run refuses in one line."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import gpu_check
    assert gpu_check.main(["--backend", "gloo", "--world-size", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("✓") == 9 and "✗" not in out and "tensor parallel: attention" in out
    import torch
    if torch.cuda.device_count() == 0:
        assert gpu_check.main([]) == 2 and "no CUDA GPU" in capsys.readouterr().out


def test_old_module_paths_still_import_for_one_release():
    import importlib
    import sys
    import warnings

    from simlab._moved import MOVED
    for old, new in MOVED.items():
        sys.modules.pop(old, None)  # imported before in this session: import it afresh
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            module = importlib.import_module(old)
        assert module is importlib.import_module(new)
        assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) for w in caught), old


def test_readme_tables_are_the_models_numbers_today():
    """The README's published-vs-ours tables are what `tools/published_tables.py` prints now."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import published_tables
    readme = (ROOT / "README.md").read_text()
    block = readme.split(published_tables.START, 1)[1].split(published_tables.END, 1)[0]
    assert block == "\n" + published_tables.tables()
