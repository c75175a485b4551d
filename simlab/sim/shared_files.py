"""Writing a file that other processes, or other people, may share: this machine's calibration cache, a trace
named on the command line.

Teaches the three rules of writing on a shared path, each learnt from a file that went wrong:
  1. **Never write the target in place.** Write a temporary file in the target's own folder, then `os.replace` it
     over the target: a reader opens the old file or the new one, never half of one (two runs writing the same
     `--trace` once left a file that was neither), and a crash leaves the target as it was.
  2. **Create the temporary file exclusively, under a name nobody can guess** (`tempfile.mkstemp`: O_CREAT |
     O_EXCL, a random name, mode 0600). A predictable `<path>.<pid>.tmp` lets anyone who can write the folder
     plant a symbolic link under that name first, and the write lands wherever the link points.
  3. **Never write through a symbolic link at the target.** `os.replace` renames over the link itself, so even a
     link planted while we worked is never followed; one that is there from the start is refused up front, in
     one line (`check_target`), so that a link the user made on purpose is not silently replaced by a file.
And for a file that several writers update (read it, change one entry, write it back): do that under a lock
(`locked`), or two writers that read the same old file each write back their own entry and one is lost — 8
concurrent `simlab calibrate` runs lost entries in 20 rounds of 20.

    >>> import json, tempfile
    >>> target = os.path.join(tempfile.mkdtemp(), "run.json")
    >>> write_atomically(target, json.dumps({"ok": True}), "--trace")
    >>> os.listdir(os.path.dirname(target)), json.load(open(target))
    (['run.json'], {'ok': True})
"""
from __future__ import annotations

import contextlib
import os
import stat
import tempfile


def check_target(path, what: str) -> None:
    """Refuse, in one line naming `what` (a flag, or "calibration"), a target that cannot be replaced by a regular
    file: a symbolic link (rule 3), a folder, or something else that is not a regular file (/dev/null: the
    temporary file's rename would replace the device itself)."""
    path = os.fspath(path)
    if os.path.islink(path):
        raise ValueError(f"{what}={path!r}: is a symbolic link (to {os.readlink(path)!r}); simlab does not write "
                         f"through links: name the file itself")
    if os.path.isdir(path):
        raise ValueError(f"{what}={path!r}: is a folder; name a file in it")
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        raise ValueError(f"{what}={path!r}: not a regular file; name a file to write")


def write_atomically(path, text: str, what: str) -> None:
    """Write `text` (UTF-8) to `path` all at once (rules 1-3). An existing file keeps its permissions; a new one
    gets the usual 0666 less the umask (mkstemp's 0600 would hide it from everyone else)."""
    path = os.fspath(path)
    check_target(path, what)
    folder, name = os.path.split(os.path.abspath(path))
    mode = stat.S_IMODE(os.stat(path).st_mode) if os.path.exists(path) else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename makes it the file: a crash leaves old or new
        os.chmod(tmp, mode)
        os.replace(tmp, path)  # renames over a link planted meanwhile; never follows it
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def locked(path, what: str):
    """Hold an exclusive lock on `<path>.lock` (beside `path`, created if needed and kept: removing a lock file
    lets a third writer lock a new one while the second still holds the old) for a read-modify-write of `path`.
    POSIX: `fcntl.flock`; Windows: `msvcrt.locking` on the lock file's first byte; where neither exists, no lock
    (concurrent writers may then lose an entry: the file itself is still never half-written)."""
    lock = os.fspath(path) + ".lock"
    try:  # O_NOFOLLOW: a link planted at the lock's name must not make us create or open another file
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    except OSError as err:
        raise ValueError(f"{what}={os.fspath(path)!r}: cannot open its lock file {lock} "
                         f"({err.strerror or err})") from None
    try:
        unlock = _lock(fd)
        try:
            yield
        finally:
            unlock()
    finally:
        os.close(fd)


def _lock(fd: int):
    """Block until `fd` is locked; return what unlocks it."""
    try:
        import fcntl
    except ImportError:  # Windows
        try:
            import msvcrt
        except ImportError:
            return lambda: None
        while True:
            try:  # LK_LOCK retries for about 10 s, then raises: keep waiting, as flock does
                msvcrt.locking(fd, msvcrt.LK_LOCK, 1)
                return lambda: msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
            except OSError:
                continue
    fcntl.flock(fd, fcntl.LOCK_EX)
    return lambda: fcntl.flock(fd, fcntl.LOCK_UN)


def _umask() -> int:
    """This process's umask, read without changing it where Linux says it (os.umask can only set it)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)  # elsewhere: set and restore at once
    os.umask(mask)
    return mask
