# Two commands on a fresh machine (Python 3.10+):  `make lab` opens the course, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# tools/setup_torch.py picks the build: the CPU one from PyTorch's CPU index on Linux without an NVIDIA GPU
# (PyPI's Linux wheel is the multi-GB CUDA build), PyPI's wheel on macOS and Windows, any CUDA build >= 2.6
# where `nvidia-smi -L` finds a GPU.
TORCH_CPU ?= torch==2.13.0
TORCH_GPU ?= torch>=2.6
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# the pin of pyproject's [export] extra (tests/test_project.py holds them equal): built first, see there
DEEPSPEED ?= deepspeed==0.19.8
# Flags for `jupyter lab`, e.g. make lab LAB_ARGS="--no-browser --ip=0.0.0.0 --port=8888"
LAB_ARGS ?=
NBVAL_PATHS := notebooks solutions
# setuptools' notice for flat-layout editable installs ("Editable installation … be careful with folders
# in your working directory"): informational, but a banner of asterisks in the middle of set-up.
QUIET_EDITABLE := PYTHONWARNINGS="ignore:Editable installation"
# browser_tests/ run only under `make test-browser`: they need chromium and playwright.
TEST_PATHS := tests simlab

.PHONY: setup lab work-reset test test-full test-fast test-browser bench bench-browser gpu-check exercises notebooks zh clean

$(BIN)/.installed: pyproject.toml tools/setup_torch.py
	@echo "setting up $(VENV) (the first time takes a few minutes)"
	@$(PYTHON) -m venv $(VENV)
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@$(BIN)/python tools/setup_torch.py --cpu "$(TORCH_CPU)" --gpu "$(TORCH_GPU)" --cpu-index "$(TORCH_CPU_INDEX)"
	@$(QUIET_EDITABLE) $(BIN)/python -m pip install --quiet -e ".[dev]"
	@$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	@touch $@

setup: $(BIN)/.installed

# Opens work/, your copy of the course (git-ignored; tools/learner_copy.py fills it, never overwrites it).
# make lab LANG=zh (or a zh_* locale, or SIMLAB_LANG=zh) opens the Chinese course: notebooks/zh/00_start_here.ipynb
lab: setup
	@$(BIN)/python tools/lab.py $(LAB_ARGS)

# make work-reset LESSON=03: move work/'s copies of lesson 03 aside and copy them afresh from the repository
work-reset:
	@$(PYTHON) tools/learner_copy.py --reset "$(LESSON)"

# -n: one pytest worker per core, at most 4 (each real run starts up to 8 processes of its own); loadfile: a
# file's tests, and a notebook's cells, stay on one worker in order. The notebooks go first: they are the longest.
PARALLEL := -n auto --maxprocesses=4 --dist loadfile

# the frameworks each export is validated with (pyproject's [export]); DS_BUILD_OPS=0: none of DeepSpeed's CUDA ops
$(BIN)/.export-installed: $(BIN)/.installed pyproject.toml
	@echo "installing Megatron-Core, DeepSpeed and torchtitan, which the export tests validate with"
	@DS_BUILD_OPS=0 $(BIN)/python -m pip install --quiet --no-build-isolation "$(DEEPSPEED)"
	@$(QUIET_EDITABLE) $(BIN)/python -m pip install --quiet -e ".[export]"
	@touch $@

test: setup $(BIN)/.export-installed
	$(BIN)/ruff check
	$(BIN)/python -m pytest $(NBVAL_PATHS) $(TEST_PATHS) --nbval -p no:cacheprovider $(PARALLEL)

# every case of the sweeps that `make test` samples (tests/sampling.py: a seed per day, edge cases always)
test-full: setup $(BIN)/.export-installed
	SIMLAB_TEST_FULL=1 $(BIN)/python -m pytest $(NBVAL_PATHS) $(TEST_PATHS) --nbval -p no:cacheprovider $(PARALLEL)

test-fast: setup $(BIN)/.export-installed
	$(BIN)/python -m pytest $(TEST_PATHS) -x -q -m "not slow"

$(BIN)/.browser-installed: $(BIN)/.installed
	@$(QUIET_EDITABLE) $(BIN)/python -m pip install --quiet -e ".[browser]"
	@touch $@

# JupyterLab in headless chromium (Debian's /usr/bin/chromium, driven by playwright; never `playwright install`).
# -n 2: two workers, each its own JupyterLab and chromium. A lesson's check mostly waits (page loads, a kernel's
# start, redraws): one worker used 1.2 of 2 cores; in a fresh-clone CI run two took 6.3 min where one took 7.5.
# worksteal: a worker left idle takes queued lessons from the other; the longest are queued first (conftest.py).
test-browser: setup $(BIN)/.browser-installed
	$(BIN)/python -m pytest browser_tests -p no:cacheprovider -q -n 2 --dist worksteal

bench: setup
	$(BIN)/python benchmarks/collectives.py
	$(BIN)/python benchmarks/collectives_memory.py
	$(BIN)/python benchmarks/data_parallel.py
	$(BIN)/python benchmarks/zero.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/tensor_parallel.py
	$(BIN)/python benchmarks/advisor.py
	$(BIN)/python benchmarks/hybrid.py

bench-browser: setup $(BIN)/.browser-installed
	$(BIN)/python benchmarks/browser.py

# every engine on CUDA, CUDA memory and a timed step vs the models, on one GPU or one per rank
# (tools/gpu_check.py, the launcher of the checks in tools/gpu_checks/)
gpu-check: setup
	$(BIN)/python tools/gpu_check.py

exercises: setup
	$(BIN)/python tools/make_exercises.py

notebooks: setup
	$(BIN)/python tools/run_notebooks.py

# the Chinese course: notebooks/zh, solutions/zh, exercises/zh from the English ones and i18n/zh/
zh: setup
	$(BIN)/python tools/build_zh.py --run

clean:
	rm -rf $(VENV) .pytest_cache
