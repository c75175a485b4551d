"""Modules that moved in 0.2 (one stem per lesson in every layer), importable at their old paths for one
release, with a DeprecationWarning: a learner's own notebook that imports `simlab.exec.compare` still
runs. Installed by `simlab/__init__.py`; delete this file, and the call there, in 0.3.

    >>> import importlib, sys, warnings
    >>> _ = sys.modules.pop("simlab.exec.ddp", None)  # as if never imported in this process
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     old = importlib.import_module("simlab.exec.ddp")
    >>> old.__name__, "simlab.exec.data_parallel" in str(caught[0].message)
    ('simlab.exec.data_parallel', True)
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

MOVED = {
    "simlab.exec.compare": "simlab.parity.collectives",
    "simlab.exec.ddp": "simlab.exec.data_parallel",
    "simlab.exec.ddp_parity": "simlab.parity.data_parallel",
    "simlab.exec.dp": "simlab.parity.data_parallel",  # run_dp; ThreadDataParallel: exec.data_parallel_threads
    "simlab.exec.shards": "simlab.exec.zero_shards",
    "simlab.exec.zero_parity": "simlab.parity.zero",
    "simlab.exec.pipeline_parity": "simlab.parity.pipeline",
    "simlab.exec.pipeline_torch": "simlab.parity.pipeline_torch",
    "simlab.exec.tensor_parallel_parity": "simlab.parity.tensor_parallel",
    "simlab.sim.tp_choices": "simlab.sim.tensor_parallel_choices",
    "simlab.render.widgets": "simlab.render.collectives",
    "simlab.render.dp_widgets": "simlab.render.data_parallel",
    "simlab.render.zero_view": "simlab.render.zero",
    "simlab.render.pipeline_view": "simlab.render.pipeline",
    "simlab.render.tp_view": "simlab.render.tensor_parallel",
    "simlab.render.tp_widgets": "simlab.render.tensor_parallel_widgets",
    "simlab.grading_parallel": "simlab.grading.pipeline",
    "simlab.grading_tp": "simlab.grading.tensor_parallel",
    "simlab.cli_parallel": "simlab.cli.pipeline",
}


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An old name imports the new module itself (the same object, so state is shared)."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name in MOVED else None

    def create_module(self, spec):
        warnings.warn(f"{spec.name} moved to {MOVED[spec.name]}; the old name goes away in simlab 0.3",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module):
        pass  # already imported under its new name


def install() -> None:
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())
