"""Install the build of PyTorch this machine needs, before `pip install -e .` (`make setup` calls it).

Why a script: `pip install torch` from PyPI on Linux is the CUDA build — torch plus ~16 `nvidia-*`
packages and triton, several GB — even on a laptop without a GPU. The course runs on the CPU there,
so set-up asks PyTorch's CPU wheel index for the CPU build instead. The choice, per machine:

| machine                              | what pip installs                                    |
|--------------------------------------|------------------------------------------------------|
| Linux, `nvidia-smi -L` finds a GPU   | the CUDA build from PyPI (`TORCH_GPU`, torch>=2.6)    |
| Linux, no NVIDIA GPU                 | the CPU build (`TORCH_CPU`) from PyTorch's CPU index; |
|                                      | that index unreachable: PyPI, with a one-line notice  |
| macOS                                | PyPI's wheel, which is CPU + MPS already              |
| Windows                              | PyPI's wheel, which is the CPU build                  |

`choose` is the decision alone (pure, tested in tests/test_setup.py); `main` looks at the machine and
runs pip with the venv's own Python.

    python tools/setup_torch.py [--cpu SPEC] [--gpu SPEC] [--cpu-index URL] [--dry-run]
"""
from __future__ import annotations

import argparse
import platform
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from typing import Callable

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
CPU_SPEC = "torch==2.13.0"
GPU_SPEC = "torch>=2.6"


def choose(system: str, machine: str, has_nvidia_gpu: bool, index_reachable: Callable[[str], bool], *,
           cpu: str = CPU_SPEC, gpu: str = GPU_SPEC, cpu_index: str = CPU_INDEX) -> tuple[list[str], str | None]:
    """(pip arguments, a one-line notice or None) for installing torch on this machine.

    `system` and `machine` are `platform.system()` and `platform.machine()`. `index_reachable(url)` is
    asked only where the answer matters (Linux without a GPU), so macOS and GPU machines never probe.
    """
    quiet = ["install", "--quiet"]
    if system == "Linux":
        if has_nvidia_gpu:
            return quiet + [gpu], f"torch: NVIDIA GPU found, installing the CUDA build ({gpu}; several GB)"
        if index_reachable(cpu_index):
            # --index-url for this one install: the CPU index then cannot lose to PyPI's CUDA wheel of the
            # same version (with --extra-index-url pip would weigh both). It also hosts torch's own deps.
            return quiet + [cpu, "--index-url", cpu_index], None
        return quiet + [cpu], (f"notice: PyTorch's CPU wheel index ({cpu_index}) is unreachable; installing "
                               f"{cpu} from your default index instead, which on Linux may be the CUDA build "
                               f"(several GB)")
    if system == "Darwin":
        if machine == "x86_64":
            # PyTorch stopped publishing wheels for Intel Macs after 2.2; say so before pip's own error.
            return quiet + [cpu], ("notice: PyPI has no torch wheels for Intel Macs after 2.2; if pip fails, "
                                   "use conda-forge: conda env create -f environment.yml")
        return quiet + [cpu], None  # arm64: PyPI's wheel is the CPU + MPS build
    if system == "Windows":
        if has_nvidia_gpu:
            return quiet + [cpu], ("notice: PyPI's Windows wheel is the CPU build; for CUDA, install torch "
                                   "from the index pytorch.org's selector gives (pip --index-url …/whl/cuXXX)")
        return quiet + [cpu], None
    return quiet + [cpu], f"notice: unknown system {system!r}; installing {cpu} from your default index"


def index_reachable(url: str, timeout: float = 5.0) -> bool:
    """Does `url` answer at all within `timeout` seconds? (DNS failure, refusal, timeout, HTTP error: no)"""
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/torch/", timeout=timeout):
            return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def has_nvidia_gpu() -> bool:
    """`nvidia-smi -L` lists at least one GPU (a driver without a GPU lists none and exits non-zero)."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def install(pip_args: list[str], *, dry_run: bool = False) -> int:
    """Run pip with this interpreter (the venv's); `dry_run` resolves without installing (pip --dry-run)."""
    if dry_run:  # loud, so that pip says what it would install
        pip_args = [a for a in pip_args if a != "--quiet"] + ["--dry-run", "--ignore-installed", "--no-deps"]
    return subprocess.run([sys.executable, "-m", "pip", *pip_args]).returncode


def main(argv: list[str] | None = None, *, system: str | None = None, machine: str | None = None,
         gpu_found: bool | None = None) -> int:
    parser = argparse.ArgumentParser(description="Install the torch build this machine needs.")
    parser.add_argument("--cpu", default=CPU_SPEC, help=f"requirement without an NVIDIA GPU (default {CPU_SPEC})")
    parser.add_argument("--gpu", default=GPU_SPEC, help=f"requirement with one (default {GPU_SPEC})")
    parser.add_argument("--cpu-index", default=CPU_INDEX, help=f"PyTorch's CPU wheel index (default {CPU_INDEX})")
    parser.add_argument("--dry-run", action="store_true", help="resolve with pip --dry-run, install nothing")
    args = parser.parse_args(argv)
    pip_args, notice = choose(system or platform.system(), machine or platform.machine(),
                              has_nvidia_gpu() if gpu_found is None else gpu_found, index_reachable,
                              cpu=args.cpu, gpu=args.gpu, cpu_index=args.cpu_index)
    if notice:
        print(notice, flush=True)
    code = install(pip_args, dry_run=args.dry_run)
    if code != 0 and "--index-url" in pip_args:
        # The index answered the probe but pip still failed (a proxy, a missing wheel): PyPI as the last try.
        print(f"notice: installing {args.cpu} from PyTorch's CPU index failed; trying your default index",
              flush=True)
        code = install([a for a in pip_args if a not in ("--index-url", args.cpu_index)], dry_run=args.dry_run)
    if code != 0:
        print(f"torch could not be installed (pip exit {code}); pip's message is above", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
