"""simlab.sim.shared_files: a file replaced all at once keeps the permissions it had (a new one gets the umask's),
leaves nothing behind when the write fails, and never writes through a symbolic link."""
import os
import stat

import pytest

from simlab.sim import shared_files
from simlab.sim.shared_files import check_target, locked, write_atomically


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_new_file_gets_the_umask_and_an_old_one_keeps_its_mode(tmp_path):
    old = os.umask(0o027)
    try:
        write_atomically(tmp_path / "new.json", "{}", "--trace")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "new.json") == 0o640  # not mkstemp's 0600
    (tmp_path / "old.json").write_text("[]")
    os.chmod(tmp_path / "old.json", 0o604)
    write_atomically(tmp_path / "old.json", "{}", "--trace")
    assert _mode(tmp_path / "old.json") == 0o604 and (tmp_path / "old.json").read_text() == "{}"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "t.json"
    target.write_text("old")

    def fail(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(shared_files.os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        write_atomically(target, "new", "--trace")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_symlinks_folders_and_devices_are_refused_in_one_line(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")  # dangling: writing through it would create a file
    for path, says in ((tmp_path / "link", "symbolic link"), (tmp_path, "is a folder"),
                       (os.devnull, "not a regular file")):
        with pytest.raises(ValueError, match=says) as err:
            check_target(path, "--trace")
        assert str(err.value).startswith(f"--trace={str(path)!r}: ") and "\n" not in str(err.value)
    assert not (tmp_path / "nowhere").exists()


def test_the_lock_is_exclusive_between_processes(tmp_path):
    """While this process holds the lock, another one cannot take it (flock would block; LOCK_NB says so)."""
    import fcntl
    import multiprocessing
    target = tmp_path / "c.json"

    def try_lock(q):
        fd = os.open(f"{target}.lock", os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            q.put("took it")
        except BlockingIOError:
            q.put("blocked")
    ctx = multiprocessing.get_context("fork")

    def attempt():
        q = ctx.Queue()
        p = ctx.Process(target=try_lock, args=(q,))
        p.start()
        p.join()
        return q.get(timeout=10)
    with locked(target, "calibration"):
        assert attempt() == "blocked"
    assert attempt() == "took it"
