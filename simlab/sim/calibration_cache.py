"""This machine as `simlab calibrate` measured it: the cache of measurements, one entry per world size, that
`hardware.cluster("cpu-this-machine", gpus=N)` turns into a GPU (`calibrated_gpu`).

Teaches that a cache is input like any other: a number read back from a file gets the same checks as the
number that was written, and every reader checks the whole file *before* any work, because the cache outlives
the program that wrote it — a hand edit, a half-synced home folder, another version of simlab. Unchecked, a
negative `ring_alpha` made a step take −960 s, `true` was read as 1 FLOP/s, NaN printed `nan s/step`, and a bad
file failed `simlab run hybrid` only after the whole run. Now one rule (`check_fields`) guards both directions,
and a bad file is refused in one line naming the file, the world size and the field.

Where it lives: `calibration_path()`, $SIMLAB_CALIBRATION, else ~/.cache/simlab/calibration.json (the test
suite points $SIMLAB_CALIBRATION at a temporary folder, so tests never touch a user's own). Writers share it:
`save_calibration` re-reads, merges and replaces it under a lock, atomically (`simlab.sim.shared_files`).

    >>> import tempfile
    >>> p = Path(tempfile.mkdtemp(), "calibration.json")
    >>> _ = save_calibration(4, {"matmul_flops": 4e10, "elementwise_bandwidth": 6e9, "op_overhead": 6e-6,
    ...                          "ring_alpha": 1e-3, "ring_bandwidth": 1e9}, path=p)
    >>> g = calibrated_gpu(2, path=p)
    >>> g.matmul_flops, g.intra_alpha, g.op_overhead, g.source.split(";")[0]
    (40000000000.0, 0.001, 6e-06, 'measured with 4 processes, the nearest to 2')
"""
from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

from .._checks import check_int
from .gpus import GPU
from .shared_files import check_target, locked, write_atomically

CALIBRATED = "cpu-this-machine"
# what the time model reads: rates per second must be ≥ 1 (less is no measurement, and 1e-300 FLOP/s would
# make a step last inf seconds); times must be ≥ 0 for the ring's α (a fast link fits to 0), > 0 otherwise
MEASURED = ("matmul_flops", "elementwise_bandwidth", "op_overhead", "ring_alpha", "ring_bandwidth")
RATES = ("matmul_flops", "elementwise_bandwidth", "ring_bandwidth")
WORLD_SIZE_KEY = re.compile(r"[1-9][0-9]{0,8}")  # "4", never "04", "٤" (a digit to isdigit) or "-1"


def calibration_path() -> Path:
    """$SIMLAB_CALIBRATION if set, else ~/.cache/simlab/calibration.json."""
    env = os.environ.get("SIMLAB_CALIBRATION")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "simlab" / "calibration.json"


def field_problem(key: str, value) -> str | None:
    """Why `value` cannot be the measured field `key` (None if it can). JSON's `true` is a bool, which Python
    would happily count as 1: refused; so are NaN, ±inf and numbers too large for a float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "must be a number"
    try:
        x = float(value)
    except OverflowError:  # an int beyond any float
        x = math.inf
    if not math.isfinite(x):
        return "must be a finite number"
    if key in RATES and x < 1:
        return "must be a rate of at least 1 per second"
    if key == "ring_alpha" and x < 0:
        return "must be >= 0 seconds"
    if key not in RATES and key != "ring_alpha" and x <= 0:
        return "must be a positive number of seconds" if key == "op_overhead" else "must be a positive number"
    return None


def check_fields(fields, where: str = "") -> dict:
    """The one rule for an entry, on save and on load: every `MEASURED` field present and sane, and
    `device_memory` (bytes of one GPU, under NCCL) None or a positive number. `where` begins the message (on
    load: the file and the world size). Returns `fields`."""
    if not isinstance(fields, dict):
        raise ValueError(f"{where}must be an object of measured fields, not {type(fields).__name__}")
    whose = "" if where else " (a field of the calibration)"
    for key in MEASURED + ("device_memory",):
        if key not in fields:
            if key == "device_memory":
                continue
            raise ValueError(f"{where}{key} is missing{whose}")
        value = fields[key]
        problem = None if key == "device_memory" and value is None else field_problem(key, value)
        if problem:
            raise ValueError(f"{where}{key}={value!r}: {problem}{whose}")
    return fields


def _entries(text: str, path: Path) -> tuple[dict, list[tuple[str | None, str]]]:
    """The file's text as (the entries that pass `check_fields`, [(world size or None, what is wrong)])."""
    name = f"calibration {str(path)!r}: "
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as err:
        return {}, [(None, f"{name}unreadable ({err})")]
    if not isinstance(data, dict):
        return {}, [(None, f"{name}not a {{world size: fields}} object")]
    good, problems = {}, []
    for key, fields in data.items():
        if not WORLD_SIZE_KEY.fullmatch(key):
            problems.append((None, f"{name}key {key!r} is not a world size"))
            continue
        try:
            good[key] = check_fields(fields, f"{name}world size {key}: ")
        except ValueError as err:
            problems.append((key, str(err)))
    return good, problems


def load_calibration(path=None) -> dict:
    """{world size (str): measured fields} from the file; {} when there is none. Every entry is checked as
    `save_calibration` checks it; the first problem is refused in one line naming the file and the field."""
    path = Path(path) if path is not None else calibration_path()
    if path.exists() and not path.is_file():  # a folder, or a FIFO that would block the read forever
        raise ValueError(f"calibration {str(path)!r}: not a regular file; point $SIMLAB_CALIBRATION at a file")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"calibration {str(path)!r}: unreadable ({err}); run `simlab calibrate` again") from None
    data, problems = _entries(text, path)
    if problems:
        world_size, problem = problems[0]
        again = "simlab calibrate" + (f" --world-size {world_size}" if world_size else "")
        raise ValueError(f"{problem}; run `{again}` again (it replaces what cannot be used)")
    return data


def save_calibration(world_size: int, fields: dict, path=None) -> Path:
    """Merge `fields` (`check_fields`: at least `MEASURED`) into the file under str(world_size), creating its
    folder; returns the path. Under a lock, so concurrent calibrations each keep their entry, and atomically, so
    a reader never sees half a file. Entries already there that cannot be used (they would be refused on load)
    are dropped: running `simlab calibrate` again is how a broken cache is mended. A symbolic link at the path
    is refused, not written through."""
    check_int("world_size", world_size, 1)
    check_fields(fields)
    path = Path(path) if path is not None else calibration_path()
    check_target(path, "calibration")  # before the work of making folders and locking
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path, "calibration"):  # read-modify-write: no other writer in between
        try:
            data = _entries(path.read_text(encoding="utf-8"), path)[0]
        except FileNotFoundError:
            data = {}
        except (OSError, UnicodeDecodeError):
            data = {}  # unreadable: replaced by this measurement
        data[str(world_size)] = dict(fields)
        text = json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n"
        write_atomically(path, text, "calibration")
    return path


def calibrated_gpu(world_size: int, path=None, data: dict | None = None) -> GPU:
    """This machine as one of `world_size` processes: the measurement for that world size, or the nearest
    measured one (a larger on a tie: more sharing, more cautious), as `.source` says. `data`: the file's
    entries if the caller has loaded them already (read once, checked once)."""
    check_int("world_size", world_size, 1)
    path = Path(path) if path is not None else calibration_path()
    data = load_calibration(path) if data is None else data
    if not data:
        raise ValueError(f"world_size={world_size}: this machine is not calibrated (no {path}); "
                         f"run `simlab calibrate --world-size {world_size}` first")
    near = min((int(k) for k in data), key=lambda n: (abs(n - world_size), -n))
    m = data[str(near)]
    how = (f"measured with {near} processes" + ("" if near == world_size else f", the nearest to {world_size}")
           + f"; {m.get('backend', '?')}, {m.get('date', '?')}, {path}")
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")  # a CPU "GPU": its share of the RAM
    memory = float(m.get("device_memory") or ram / world_size)  # under NCCL: the GPU's own memory
    return GPU(CALIBRATED, memory, float(m["matmul_flops"]), 1.0, float(m["elementwise_bandwidth"]),
               float(m["ring_bandwidth"]), float(m["ring_alpha"]), float(m["elementwise_bandwidth"]), how,
               op_overhead=float(m["op_overhead"]), gemm_latency=0.0, roofline=False)
