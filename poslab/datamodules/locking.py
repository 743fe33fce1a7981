"""A cross-process lock that leaves no file behind: ``flock`` on ``PATH``, the file removed on release.

Removing a lock file is safe only if a waiter re-checks, once it holds the lock, that the file it locked is
still the one at the path: a process that opened the file before the holder removed it would otherwise hold a
lock on a removed file while a newcomer locks a new one at the same path (two holders). So ``acquire`` locks,
compares the locked file with the one at the path (``samestat``), and starts again when they differ (as
``poslab.runs.guard.RunLock`` does). Off POSIX (no ``flock``) it falls back to ``filelock.FileLock``, whose
file stays.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def removed_lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive lock ``path`` (waiting for it); remove the file on release."""
    try:
        import fcntl
    except ImportError:  # Windows: filelock's lock, its file left behind
        from filelock import FileLock

        with FileLock(str(path)):
            yield
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:  # the holder before removed it between our open and our lock
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield
    finally:
        os.unlink(path)  # still holding the lock: a waiter on this file sees it gone and starts again
        os.close(fd)
