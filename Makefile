# Two commands on a fresh machine (Python 3.10+):  `make lab` opens the course, `make test` runs every test.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build on machines without an NVIDIA GPU; any CUDA build >= 2.4 where `nvidia-smi -L` finds one.
TORCH_CPU ?= torch==2.13.0
TORCH_GPU ?= torch>=2.4
NBVAL_PATHS := notebooks solutions

.PHONY: setup lab test test-fast bench gpu-check exercises notebooks clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	if nvidia-smi -L >/dev/null 2>&1; then $(BIN)/pip install --quiet "$(TORCH_GPU)"; \
	else $(BIN)/pip install --quiet "$(TORCH_CPU)"; fi
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $@

setup: $(BIN)/.installed

lab: setup
	$(BIN)/jupyter lab notebooks/01_collectives.ipynb

test: setup
	$(BIN)/python -m pytest tests simlab $(NBVAL_PATHS) --nbval -p no:cacheprovider

test-fast: setup
	$(BIN)/python -m pytest tests simlab -x -q -m "not slow"

bench: setup
	$(BIN)/python benchmarks/collectives.py
	$(BIN)/python benchmarks/collectives_memory.py
	$(BIN)/python benchmarks/data_parallel.py
	$(BIN)/python benchmarks/zero.py
	$(BIN)/python benchmarks/pipeline.py
	$(BIN)/python benchmarks/tensor_parallel.py
	$(BIN)/python benchmarks/advisor.py
	$(BIN)/python benchmarks/hybrid.py

# every lesson's parity on NCCL and ZeRO's CUDA memory vs the model (needs NVIDIA GPUs; prints a table)
gpu-check: setup
	$(BIN)/python tools/gpu_check.py

exercises: setup
	$(BIN)/python tools/make_exercises.py

notebooks: setup
	$(BIN)/python tools/run_notebooks.py

clean:
	rm -rf $(VENV) .pytest_cache
