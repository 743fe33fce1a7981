"""One run per directory: a run holds a lock in its run directory (``RunLock``, the file ``.poslab.lock``) from
before Hydra writes anything there (``poslab.running.hydra_callbacks.RunGuard`` takes it) to the run's end, and a
multirun
holds one in its sweep directory. A second run into a held directory stops at start (exit status 2) with one message
naming the process that holds it, and writes nothing: two runs into one directory would otherwise mix their files
(one run's results.json beside the other's checkpoint, both in metrics.csv and train.log). The lock is ``flock`` on
the file, which the system lets go when its process ends however it ends, so a lock file left by a killed process
blocks nothing (``ckpt_path=auto`` relaunches into the same directory); the file itself goes at a normal end, an
exception or Ctrl-C. Of the ranks of a DDP run, which all work in one directory, only the launching process (rank
0) takes it. Light at import (no torch).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from poslab.errors import ConfigError, PoslabError
from poslab.runs.files import LOCK_FILE


def stop(error: PoslabError) -> None:
    """train.py's one message for a bad setting, and exit status 2 (here, and in ``poslab.running.training.main``)."""
    print(f"poslab: configuration error: {error}", file=sys.stderr)
    sys.exit(2)


class RunDirectoryInUse(ConfigError):
    """Another live process holds the directory's run lock; nothing of that directory may be touched."""


#: the environment variables that give a process its rank in a distributed run (those Lightning reads)
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


def secondary_rank() -> bool:
    """A rank other than the first of a distributed run: one Lightning started from the launching process's command
    line (``LOCAL_RANK=1``), or one that a cluster started (``SLURM_PROCID``, torchrun's ``RANK``). It works in
    the directory rank 0 holds."""
    for name in RANK_VARIABLES:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) != 0:
            return True
    return False


class RunLock:
    """The lock of one run directory: ``flock`` on ``DIR/.poslab.lock``, which holds the holder's process id, host,
    command line and start time (for the message a second run stops with). ``acquire`` makes the directory (and
    its missing parents) first; ``release`` removes the file, and the directories ``acquire`` made if nothing
    else was written into them. POSIX only (``fcntl``): elsewhere no lock is taken."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.fd: int | None = None
        self.owner = os.getpid()
        self.created: list[Path] = []  # the directories acquire made, innermost first

    def check_free(self) -> None:
        """Raise ``RunDirectoryInUse`` if a live process holds the lock now; creates nothing (a probe before the
        config's checks, which may refuse the directory for what the holder is writing into it)."""
        import fcntl

        try:
            fd = os.open(self.path, os.O_RDWR)
        except OSError:  # no lock file (or none that can be opened): nobody holds it
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunDirectoryInUse(self.in_use_message()) from None
        finally:
            os.close(fd)  # and with it the probe's lock, if it took it

    def acquire(self) -> RunLock:
        import fcntl

        missing = [d for d in (self.directory, *self.directory.parents) if not d.exists()]
        self.directory.mkdir(parents=True, exist_ok=True)
        self.created = missing
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self.remove_created()
                raise RunDirectoryInUse(self.in_use_message()) from None
            try:  # the holder before may have removed the file between open and flock: lock the file at the path
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": " ".join([Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python", *sys.argv[1:]]),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(holder) + "\n").encode())
        self.fd = fd
        return self

    def holder(self) -> dict[str, Any]:
        """What the holding process wrote into the lock file; it writes just after it takes the lock, so an empty
        file (or a dead process's record the holder is about to replace) is read again, for up to a second."""
        found: dict[str, Any] = {}
        for _ in range(20):
            try:
                found = json.loads(self.path.read_text())
            except (OSError, ValueError):
                found = {}
            if isinstance(found, dict) and (found.get("host") != socket.gethostname() or alive(found.get("pid"))):
                return found
            time.sleep(0.05)
        return found if isinstance(found, dict) else {}

    def in_use_message(self) -> str:
        holder = self.holder()
        pid, host = holder.get("pid"), holder.get("host")
        who = f"process {pid}" if pid else "another process"
        if host and host != socket.gethostname():
            who += f" on {host}"
        details = [f"`{holder['command']}`"] if holder.get("command") else []
        details += [f"started {holder['started']}"] if holder.get("started") else []
        return (
            f"the directory {self.directory} is in use: {who} ({', '.join(details) or 'no details recorded'}) is "
            f"running in it and holds its lock {self.path}; two runs into one directory would mix their files. "
            f"Nothing was written: give another directory (drop hydra.run.dir / hydra.sweep.dir, or name an empty "
            f"one), or wait for that run to end (ckpt_path=auto then continues it)."
        )

    def release(self) -> None:
        """Remove the lock file and let the lock go (in the process that took it; a forked child leaves it)."""
        if self.fd is None or os.getpid() != self.owner:
            return
        try:
            if os.path.samestat(os.fstat(self.fd), os.stat(self.path)):
                os.unlink(self.path)  # while still held: a process waiting on this file finds it gone, and retries
        except FileNotFoundError:  # its directory was removed (a run that stopped before it trained)
            pass
        finally:
            os.close(self.fd)
            self.fd = None
        self.remove_created()

    def remove_created(self) -> None:
        """The directories ``acquire`` made, where nothing was written into them."""
        for directory in self.created:
            try:
                directory.rmdir()
            except OSError:  # something is in it (or it is gone): it and those above stay
                break
        self.created = []


def alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


#: the run locks this process holds, by resolved directory
HELD: dict[Path, RunLock] = {}
#: ``flock`` exists (POSIX): the run lock is taken
HAS_FLOCK = importlib.util.find_spec("fcntl") is not None


def check_run_directory_free(directory: str | Path) -> None:
    """``RunDirectoryInUse`` if another live process holds ``directory``'s lock (nothing is created)."""
    if Path(directory).resolve() not in HELD and not secondary_rank() and HAS_FLOCK:
        RunLock(directory).check_free()


def take_run_directory(directory: str | Path) -> RunLock | None:
    """Take ``directory``'s run lock for this process (held until ``release_run_directory`` or the process's end);
    None where there is nothing to take: this process holds it already, or it is a secondary DDP rank. Raises
    ``RunDirectoryInUse`` when another live process holds it."""
    key = Path(directory).resolve()
    if key in HELD or secondary_rank() or not HAS_FLOCK:
        return None
    lock = RunLock(directory).acquire()
    HELD[key] = lock
    atexit.unregister(release_all)  # registered once
    atexit.register(release_all)  # a normal end, sys.exit, an exception or Ctrl-C out of main
    return lock


def release_run_directory(directory: str | Path) -> None:
    lock = HELD.pop(Path(directory).resolve(), None)
    if lock is not None:
        lock.release()


def release_all() -> None:
    for key in list(HELD):
        HELD.pop(key).release()


@contextlib.contextmanager
def holding_run_directory(directory: str | Path) -> Iterator[None]:
    """``directory``'s run lock for the block, unless this process held it already (then it stays held)."""
    try:
        lock = take_run_directory(directory)
    except OSError as error:  # a directory that cannot be written: the run says so when it writes (or skips)
        logging.getLogger("poslab").warning("no run lock in %s: %s", directory, error)
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            release_run_directory(directory)


def held_by(directory: Path) -> dict | None:
    """What the live process holding ``directory``'s run lock recorded (its pid, command, start), or None."""
    from poslab.runs.files import LOCK_FILE

    if not (Path(directory) / LOCK_FILE).is_file():
        return None
    lock = RunLock(Path(directory))
    try:
        lock.check_free()
    except RunDirectoryInUse:
        return lock.holder()
    return None
