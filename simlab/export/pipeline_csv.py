"""A pipeline schedule as the CSV that torch's own pipeline runtime loads: lesson 4's lists, run by torch.

torch.distributed.pipelining can take its schedule from a file instead of a class: torchtitan's
``--parallelism.pipeline_parallel_schedule_csv FILE`` builds a `_PipelineScheduleRuntime` over the rank's
stages and calls ``schedule._load_csv(FILE)`` (format ``"compute_only"``, the default). The file is the
course's schedule grid, transposed into a spreadsheet:

- one row per pipeline rank, row r = rank r (torch numbers the ranks by the row it reads them from);
- one cell per action, in execution order: ``<stage><op><micro-batch>`` with global stage numbers, the very
  notation `simlab.plan.Action` prints. torch reads a cell with `_Action.from_str`; an empty cell is None,
  an idle time step, which a per-rank list has no need of (torch's own dumps have them);
- compute actions only: F (FORWARD), B (FULL_BACKWARD), I (BACKWARD_INPUT), W (BACKWARD_WEIGHT). Our four
  letters are torch's four computation types letter for letter, so nothing is converted: B stays one full
  backward, a split backward stays I then W. torch adds the rest itself when it loads the file (its
  lowering passes): SEND_F/RECV_F/SEND_B/RECV_B between ranks, REDUCE_GRAD after a stage's last backward,
  UNSHARD/RESHARD under FSDP;
- written by Python's `csv.writer` with its default dialect (comma-separated, lines ending in CRLF): byte for
  byte what torch's `_dump_csv(format="compute_only")` writes for the same schedule.

torch infers which rank holds which stage from the rows (a stage belongs to the rank whose row runs it); the
course's looped placement (rank r holds stages r, r+p, …) is one such layout, so interleaved schedules load as
they are. Every data-parallel replica of the pipeline loads the same file.

    >>> from simlab.sim.pipeline_schedules import one_f_one_b
    >>> to_csv(one_f_one_b(2, 3)).splitlines()
    ['0F0,0F1,0B0,0F2,0B1,0B2', '1F0,1B0,1F1,1B1,1F2,1B2']
    >>> [" ".join(map(str, rank)) for rank in from_csv("0F0,0I0,0W0\\n")]
    ['0F0 0I0 0W0']
"""
from __future__ import annotations

import csv
import io
import re

from ..plan import Action
from ..sim.hybrid import check_plan, microbatches
from ..sim.pipeline_check import validate
from ..sim.pipeline_engine import as_actions
from ..sim.pipeline_schedules import make_schedule

# what torch's `_Action.from_str` accepts beyond compute actions: communication and FSDP actions (the
# "compute_comms" format, or a lowered schedule) and DualPipeV's fused pair "(0F1;3B0)OVERLAP_F_B"
_TORCH_ONLY = re.compile(r"^\(.*\)OVERLAP_F_B$|^\d+(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d*$")


def to_csv(schedule) -> str:
    """`schedule` (one list of `Action`s or "2F0" strings per rank) as torch's compute-only schedule CSV.

    The schedule must be runnable (`simlab.sim.pipeline_check.validate`): torch's loader would refuse a
    missing or doubled action, and a deadlocking order would hang its ranks, so neither is ever written.
    >>> to_csv([["0F0", "0B0"], ["1B0", "1F0"]])
    Traceback (most recent call last):
    ValueError: schedule: rank 1, step 0: 1B0 comes before 1F0 (step 1): a backward needs the activations its own forward saves (and 2 more)
    """
    plan = as_actions(schedule)
    problems = validate(plan)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise ValueError(f"schedule: {problems[0]}{more}")
    out = io.StringIO()
    writer = csv.writer(out)  # torch's `_dump_csv` uses the default dialect too: ',' and CRLF
    for actions in plan:
        writer.writerow([str(a) for a in actions])  # str(Action) is torch's `repr(_Action)`: '2F0'
    return out.getvalue()


def _cell(text: str, row: int, col: int) -> Action | None:
    """One cell as an Action, None for an empty (idle) cell; a one-line error naming where it is otherwise."""
    cell = text.strip()  # torch strips each cell too
    if not cell:
        return None
    where = f"text: row {row + 1}, column {col + 1} (rank {row}, step {col})"
    if _TORCH_ONLY.match(cell):
        raise ValueError(f"{where}: {cell!r} is not a compute action: a simlab schedule is torch's 'compute_only' "
                         "format (F, B, I, W), whose communication torch adds itself when it loads the file")
    try:
        return Action.parse(cell)
    except ValueError:
        raise ValueError(f"{where}: {cell!r} is not an action such as '2F0' "
                         "(<stage><F|B|I|W><micro-batch>)") from None


def from_csv(text: str) -> list[list[Action]]:
    """A compute-only schedule CSV (what `to_csv` or torch's `_dump_csv` writes) back as one Action list per rank.

    Empty cells are torch's idle time steps and are dropped (a rank's list keeps only its order). Blank rows
    are refused: torch would read each as a rank with nothing to do.
    >>> from_csv("0F0,0B0\\n1F0,1X0\\n")
    Traceback (most recent call last):
    ValueError: text: row 2, column 2 (rank 1, step 1): '1X0' is not an action such as '2F0' (<stage><F|B|I|W><micro-batch>)
    """
    if not isinstance(text, str):
        raise ValueError(f"text={type(text).__name__}: must be the CSV as a str")
    try:
        rows = list(csv.reader(io.StringIO(text)))  # the reader torch uses: quoting, CRLF or LF
    except csv.Error as err:
        raise ValueError(f"text: not readable as CSV ({err})") from None
    if not rows:
        raise ValueError("text: no rows; a schedule CSV has one row per pipeline rank")
    schedule = []
    for r, row in enumerate(rows):
        actions = [_cell(cell, r, c) for c, cell in enumerate(row)]
        if not any(actions):
            raise ValueError(f"text: row {r + 1} (rank {r}) is empty; every rank of a pipeline runs actions")
        schedule.append([a for a in actions if a is not None])
    return schedule


def emit(model, cluster, global_batch: int, plan) -> str:
    """The CSV torch's runtime runs for lesson 6's `plan` (a `simlab.sim.hybrid.Plan`): `plan.pp` ranks,
    m = global_batch / (dp·b) micro-batches, `plan.schedule` with `plan.chunks` chunks per rank.

    The plan is checked first (`check_plan`, the cluster's `gpus`); TP, DP and ZeRO are not the schedule's
    business (each DP replica loads the same file). A plan without pipeline parallelism has nothing to write.
    >>> from simlab.sim.model import PRESETS
    >>> from simlab.sim.hardware import cluster
    >>> from simlab.sim.hybrid import Plan
    >>> emit(PRESETS["llama3-8b"], cluster(gpus=8), 16, Plan(tp=8))
    Traceback (most recent call last):
    ValueError: pp=1: one stage, nothing to pipeline: torch's pipeline runtime runs pp >= 2 stages over pp ranks
    """
    check_plan(model, plan, cluster.gpus, global_batch)
    if plan.pp == 1:
        # torchtitan, too, builds no pipeline schedule unless pipeline_parallel_degree > 1
        raise ValueError("pp=1: one stage, nothing to pipeline: torch's pipeline runtime runs pp >= 2 stages "
                         "over pp ranks")
    return to_csv(make_schedule(plan.schedule, plan.pp, microbatches(plan, global_batch), plan.chunks))
