"""simlab: see and run parallel training — one plan, two engines (simulator, executor), one renderer.

Light to import: the simulator needs only numpy; names from the torch executor load on first use.
"""
from .plan import Action, CollectivePlan, Transfer, split_sizes
from .sim.collectives import (
    make_inputs,
    make_plan,
    naive_all_reduce,
    ring_all_gather,
    ring_all_reduce,
    ring_reduce_scatter,
    tree_broadcast,
)
from .sim.collectives_stepper import PlanError, simulate
from .sim.cost import alpha_beta
from .trace import Event, Trace

__version__ = "0.2.0"
__all__ = ["Action", "CollectivePlan", "Transfer", "split_sizes", "make_inputs", "make_plan", "naive_all_reduce",
           "ring_all_gather", "ring_all_reduce", "ring_reduce_scatter", "tree_broadcast", "alpha_beta", "PlanError",
           "simulate", "Event", "Trace", "launch", "WorkerError", "set_language"]

# set_language("zh"): Chinese figures, tables and grader lines (simlab.i18n; loads matplotlib only for zh)
_LAZY = {"launch": "simlab.exec.launch", "WorkerError": "simlab.exec.launch", "set_language": "simlab.i18n"}


def __getattr__(name):
    if name in _LAZY:
        import importlib
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'simlab' has no attribute {name!r}")
