"""The project's own promises: one environment two ways, a set-up that installs the right torch, a CI
script that runs the README's command and then the browser tests, notebooks that open anywhere."""
import json
import re
import subprocess
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (the project supports >= 3.10): pytest's own dependency, tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
# conda-forge's name for a package where it differs from PyPI's: `pytorch-cpu` is torch's CPU-only build
CONDA_TO_PYPI = {"pytorch-cpu": "torch", "pytorch-gpu": "torch", "pytorch": "torch"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[]", requirement.strip(), maxsplit=1)[0].lower()


def _environment_yml_deps() -> set[str]:
    """Package names under `dependencies:` (conda and pip alike, in PyPI's spelling), minus python, pip and
    the package itself."""
    text = (ROOT / "environment.yml").read_text().split("dependencies:", 1)[1]
    names = {_name(m) for m in re.findall(r"^\s+- ([^\s#][^#\n]*?)\s*$", text, re.M) if m != "pip:"}
    return {CONDA_TO_PYPI.get(name, name) for name in names} - {"python", "pip", "-e"}


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_environment_yml_lists_the_same_dependencies_as_pyproject():
    project = _project()
    wanted = {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["dev"]}
    assert _environment_yml_deps() == wanted


def test_environment_yml_installs_the_cpu_build_from_conda_forge():
    """Like `make setup` without a GPU: conda-forge's CPU-only torch, not pip's (CUDA on Linux)."""
    text = (ROOT / "environment.yml").read_text()
    assert re.search(r"^\s+- pytorch-cpu>=2\.6\s*$", text, re.M)
    pip_part = text.split("- pip:", 1)[1]
    assert "torch" not in pip_part


def test_runtime_dependencies_are_the_agreed_ones():
    project = _project()
    assert {_name(r) for r in project["dependencies"]} == {
        "torch", "numpy", "matplotlib", "ipywidgets", "anywidget", "jupyterlab"}
    assert "torch>=2.6" in project["dependencies"]
    assert project["optional-dependencies"]["browser"] == ["playwright>=1.40"]


def test_make_test_installs_the_export_frameworks_with_deepspeed_built_against_the_venvs_torch():
    """The export tests validate with the frameworks' own code (pyproject's [export]). DeepSpeed is a source
    archive whose set-up imports torch: an isolated build would fetch a CUDA torch, so the Makefile builds
    that very pin first, without isolation."""
    export = _project()["optional-dependencies"]["export"]
    assert {_name(r) for r in export} == {"megatron-core", "deepspeed", "torchtitan"}
    assert all("==" in r for r in export)  # the validations hold for these versions
    makefile = (ROOT / "Makefile").read_text()
    pin = re.search(r"^DEEPSPEED \?= (\S+)$", makefile, re.M)[1]
    assert pin in export
    rule = re.search(r"^\$\(BIN\)/\.export-installed:.*?\n\n", makefile, re.M | re.S)[0]
    assert rule.index('--no-build-isolation "$(DEEPSPEED)"') < rule.index('-e ".[export]"')
    for target in ("test", "test-full", "test-fast"):
        assert re.search(rf"^{target}: setup \$\(BIN\)/\.export-installed$", makefile, re.M), target


def test_packaging_metadata_is_current():
    """An SPDX license string needs setuptools >= 77; the old table form prints a deprecation banner."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert data["project"]["license"] == "MIT"
    assert data["build-system"]["requires"] == ["setuptools>=77"]


def _commands(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_ci_runs_the_readme_test_command_then_the_browser_tests():
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```(?:bash|sh)?\n(.*?)```", readme, re.S).group(1)
    assert _commands(first_block) == ["make lab", "make test"]
    ci = _commands((ROOT / ".ci/run").read_text())
    assert ci[-2:] == ["make test", "make test-browser"]
    assert not any("playwright install" in command for command in ci)


def test_ci_installs_chromium_only_as_root_on_debian_and_otherwise_says_what_to_install(tmp_path):
    """Run .ci/run's chromium step alone, on a machine without /usr/bin/chromium and without root:
    it must print what to install and fail, before any `make`."""
    script = (ROOT / ".ci/run").read_text()
    step = script[script.index("if [ ! -x /usr/bin/chromium ]"):script.index("make test")]
    assert "apt-get update" in step and "apt-get install -y -q chromium" in step
    assert "DEBIAN_FRONTEND=noninteractive" in step
    as_root = '[ "$(id -u)" = 0 ]'
    assert as_root in step  # replaced below: the test must never really run apt-get
    probe = step.replace("/usr/bin/chromium", str(tmp_path / "no-chromium")).replace(as_root, "false")
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + probe + "echo reached-make"],
                          capture_output=True, text=True)
    assert done.returncode == 1 and "reached-make" not in done.stdout
    assert "install Debian's chromium package" in done.stderr and done.stderr.count("\n") == 1


def test_make_test_leaves_the_browser_tests_out():
    """browser_tests/ needs chromium and playwright: only `make test-browser` collects it."""
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "browser_tests" not in ini["testpaths"]
    makefile = (ROOT / "Makefile").read_text()
    test_recipe = re.search(r"^test:.*\n((?:\t.*\n)+)", makefile, re.M).group(1)
    paths = re.search(r"^TEST_PATHS := (.*)$", makefile, re.M).group(1).split()
    nbval = re.search(r"^NBVAL_PATHS := (.*)$", makefile, re.M).group(1).split()
    assert "$(NBVAL_PATHS) $(TEST_PATHS)" in test_recipe and "browser_tests" not in paths + nbval
    assert "$(BIN)/ruff check" in test_recipe  # the lint runs first, on every make test
    browser_recipe = re.search(r"^test-browser:.*\n\t(.*)\n", makefile, re.M).group(1)
    assert browser_recipe.startswith("$(BIN)/python -m pytest browser_tests -p no:cacheprovider -q")


def test_learner_copy_and_browser_artefacts_are_git_ignored():
    for path in ("work/notebooks/01_collectives.ipynb", "browser_artifacts/shot.png"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=ROOT)
        assert ignored.returncode == 0, path
    kept = subprocess.run(["git", "check-ignore", "-q", "--no-index", "notebooks/work/x.ipynb"], cwd=ROOT)
    assert kept.returncode == 1  # only the top-level work/, not any folder of that name


def test_setup_pins_the_cpu_build_without_a_gpu():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_CPU ?= torch==2.13.0" in makefile
    assert "TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu" in makefile
    assert 'tools/setup_torch.py --cpu "$(TORCH_CPU)" --gpu "$(TORCH_GPU)" --cpu-index "$(TORCH_CPU_INDEX)"' \
        in makefile


def _notebooks() -> list[Path]:
    return sorted(p for folder in ("notebooks", "solutions", "exercises") for p in (ROOT / folder).glob("*.ipynb"))


def test_every_notebook_stores_the_kernel_it_was_run_with():
    """tools/run_notebooks.py stores the installed kernel's name; "Python 3" means an old run."""
    wrong = [f"{p.relative_to(ROOT)}: {json.loads(p.read_text())['metadata'].get('kernelspec')}"
             for p in _notebooks()
             if json.loads(p.read_text())["metadata"].get("kernelspec", {}).get("display_name")
             != "Python 3 (ipykernel)"]
    assert not wrong, "\n".join(wrong)


def test_notebooks_open_from_the_learner_copy():
    """`make lab` serves copies in work/notebooks and work/exercises: a relative link or path may only
    point at what tools/learner_copy.py copies there too."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import learner_copy
    copied = {str(p) for p in learner_copy._sources(ROOT)}
    broken = []
    for path in _notebooks():
        if path.parent.name == "solutions":
            continue  # never copied; opened from the repository
        for cell in json.loads(path.read_text())["cells"]:
            text = "".join(cell["source"])
            for target in re.findall(r"\]\((?!https?:|#|mailto:)([^)\s]+)\)", text):
                resolved = (path.parent / target.split("#")[0]).resolve()
                if str(resolved.relative_to(ROOT)) not in copied if resolved.is_relative_to(ROOT) else True:
                    broken.append(f"{path.relative_to(ROOT)} links {target}")
    assert not broken, "\n".join(broken)


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


def test_readme_tables_are_the_models_numbers_today():
    """The README's published-vs-ours tables are what `tools/published_tables.py` prints now."""
    import sys
    sys.path.insert(0, str(ROOT / "tools"))
    import published_tables
    readme = (ROOT / "README.md").read_text()
    block = readme.split(published_tables.START, 1)[1].split(published_tables.END, 1)[0]
    assert block == "\n" + published_tables.tables()


def test_every_noqa_says_why():
    """A silenced lint warning carries its reason after an em dash: `# noqa: E402 — after sys.path gains tools/`."""
    bare = []
    for folder in ("simlab", "tests", "tools", "benchmarks", "browser_tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"#\s*noqa\b", line) and not re.search(r"#\s*noqa: [A-Z0-9, ]+ — \S", line):
                    bare.append(f"{path.relative_to(ROOT)}:{n}")
    assert bare == []
