"""The calibration cache is input like any other (`simlab.sim.calibration_cache`): every bad value a file can hold
is refused on load, in one line naming the file, the world size and the field, by the very rule `save_calibration`
applies; and writers on a shared path neither follow a planted link nor lose each other's entries."""
import json
import multiprocessing
import os

import pytest

from simlab.sim.calibration_cache import MEASURED, check_fields
from simlab.sim.hardware import calibrated_gpu, cluster, load_calibration, save_calibration

GOOD = {"matmul_flops": 4.2e10, "elementwise_bandwidth": 6e9, "op_overhead": 6.5e-6, "ring_alpha": 8e-4,
        "ring_bandwidth": 1.1e9, "backend": "gloo", "device_memory": None}

# (field, the value as JSON text, what the refusal says): each one a value the old loader trusted
BAD = [
    ("ring_alpha", "-1.0", "ring_alpha=-1.0: must be >= 0 seconds"),  # was step_seconds −959.96, exit 0
    ("matmul_flops", "true", "matmul_flops=True: must be a number"),  # was read as 1 FLOP/s
    ("matmul_flops", "NaN", "matmul_flops=nan: must be a finite number"),  # was "nan s/step"
    ("elementwise_bandwidth", "Infinity", "elementwise_bandwidth=inf: must be a finite number"),
    ("ring_bandwidth", "-Infinity", "ring_bandwidth=-inf: must be a finite number"),
    ("ring_bandwidth", "1e400", "ring_bandwidth=inf: must be a finite number"),  # JSON's 1e400 is a float inf
    ("matmul_flops", "1" + "0" * 400, "matmul_flops=1000"),  # an int no float holds
    ("matmul_flops", "1e-300", "must be a rate of at least 1 per second"),  # a step would last inf seconds
    ("op_overhead", "0", "op_overhead=0: must be a positive number of seconds"),
    ("op_overhead", "-6.5e-06", "op_overhead=-6.5e-06: must be a positive number of seconds"),
    ("op_overhead", "null", "op_overhead=None: must be a number"),
    ("ring_alpha", '"8e-4"', "ring_alpha='8e-4': must be a number"),
    ("ring_alpha", "[0.001]", "ring_alpha=[0.001]: must be a number"),
    ("device_memory", "0", "device_memory=0: must be a positive number"),
    ("device_memory", "false", "device_memory=False: must be a number"),
]


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _entry(field, value_json):
    body = {k: v for k, v in GOOD.items() if k != field}
    text = json.dumps(body)[:-1] + f', "{field}": {value_json}}}'
    return '{"4": ' + text + "}"


def _refusal(path, action):
    with pytest.raises(ValueError) as err:
        action()
    message = str(err.value)
    assert "\n" not in message and repr(str(path)) in message, message
    return message


@pytest.fixture
def calib(tmp_path, monkeypatch):
    path = tmp_path / "cache" / "calibration.json"
    monkeypatch.setenv("SIMLAB_CALIBRATION", str(path))
    return path


@pytest.mark.parametrize("field, value, says", BAD, ids=[f"{f}={v[:8]}" for f, v, _ in BAD])
def test_every_bad_value_is_refused_on_load_naming_file_and_field(calib, field, value, says):
    _write(calib, _entry(field, value))
    for read in (load_calibration, lambda: calibrated_gpu(4), lambda: cluster("cpu-this-machine", gpus=4)):
        message = _refusal(calib, read)
        assert f"world size 4: {field}" in message and says in message, message
        assert "simlab calibrate --world-size 4" in message, message


@pytest.mark.parametrize("field, value, says", BAD, ids=[f"{f}={v[:8]}" for f, v, _ in BAD])
def test_save_refuses_what_load_refuses(calib, field, value, says):
    """One rule: a value load refuses, save refuses too, with the same words."""
    with pytest.raises(ValueError, match=f"^{field}=") as err:
        save_calibration(4, {**GOOD, field: json.loads(value)})
    assert says.split(": ", 1)[-1] in str(err.value)
    assert not calib.exists()


@pytest.mark.parametrize("text, says", [
    ("{not json", "unreadable"), ("[1, 2]", "not a {world size: fields} object"),
    ('{"four": {}}', "key 'four' is not a world size"), ('{"04": {}}', "key '04' is not a world size"),
    ('{"0": {}}', "key '0' is not a world size"), ('{"\u0663": {}}', "is not a world size"),  # Arabic-Indic 3
    ('{"4": 7}', "world size 4: must be an object of measured fields"),
    ('{"4": {"matmul_flops": 1e10}}', "world size 4: elementwise_bandwidth is missing"),
])
def test_a_malformed_file_is_one_line_naming_it(calib, text, says):
    _write(calib, text)
    assert says in _refusal(calib, load_calibration)


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_cache_that_is_not_a_file_is_refused_without_blocking(calib, kind):
    calib.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(calib)  # reading a FIFO would wait for a writer forever
    else:
        calib.mkdir()
    assert "not a regular file" in _refusal(calib, load_calibration)


def test_a_bad_entry_of_another_world_size_is_refused_too(calib):
    """Every entry is checked: the nearest-size rule may pick any of them for some N."""
    _write(calib, json.dumps({"4": GOOD, "8": {**GOOD, "ring_alpha": -1.0}}))
    assert "world size 8: ring_alpha=-1.0" in _refusal(calib, lambda: calibrated_gpu(4))


def test_calibrating_again_mends_a_broken_cache(calib):
    """The refusal says "run `simlab calibrate` again": saving keeps the good entries, drops the bad ones."""
    _write(calib, json.dumps({"2": GOOD, "8": {**GOOD, "matmul_flops": True}}))
    save_calibration(4, GOOD)
    assert sorted(load_calibration()) == ["2", "4"]
    _write(calib, "{truncated")
    save_calibration(4, GOOD)
    assert list(load_calibration()) == ["4"]


def test_the_rule_accepts_what_measure_returns():
    check_fields(GOOD)
    check_fields({**GOOD, "ring_alpha": 0, "device_memory": 85_000_000_000})  # a fast link fits α to 0
    assert set(MEASURED) <= set(GOOD)


# ---------------------------------------------------------------- writers on a shared path

def test_a_symlink_at_the_cache_is_refused_and_its_target_untouched(calib):
    calib.parent.mkdir(parents=True)
    victim = calib.parent / "victim.txt"
    victim.write_text("precious\n")
    calib.symlink_to(victim)
    message = _refusal(calib, lambda: save_calibration(4, GOOD))
    assert "symbolic link" in message
    assert victim.read_text() == "precious\n" and calib.is_symlink()


def test_a_link_planted_at_the_old_predictable_temp_name_is_never_followed(calib):
    """The old writer used `<path>.<pid>.tmp`: a link planted there redirected the write into another file."""
    calib.parent.mkdir(parents=True)
    victim = calib.parent / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, f"{calib}.{os.getpid()}.tmp")
    save_calibration(4, GOOD)
    assert victim.read_text() == "precious\n"
    assert not calib.is_symlink() and list(load_calibration()) == ["4"]


def test_a_link_planted_at_the_lock_file_is_refused(calib):
    calib.parent.mkdir(parents=True)
    elsewhere = calib.parent / "not-yet.txt"
    os.symlink(elsewhere, f"{calib}.lock")
    message = _refusal(calib, lambda: save_calibration(4, GOOD))
    assert "lock file" in message and not elsewhere.exists()  # nothing created through the link


def _save_one(args):
    world_size, path = args
    save_calibration(world_size, {**GOOD, "matmul_flops": 1e9 * world_size}, path=path)


@pytest.mark.parametrize("round_", range(5))
def test_eight_concurrent_calibrations_keep_every_entry(tmp_path, round_):
    """Read-modify-write under the lock: the old writer lost entries in 20 rounds of 20."""
    path = tmp_path / "calibration.json"
    sizes = list(range(2, 10))
    with multiprocessing.get_context("fork").Pool(8) as pool:
        pool.map(_save_one, [(n, str(path)) for n in sizes])
    data = load_calibration(path)
    assert sorted(data, key=int) == [str(n) for n in sizes]
    assert all(data[str(n)]["matmul_flops"] == 1e9 * n for n in sizes)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration.json", "calibration.json.lock"]
