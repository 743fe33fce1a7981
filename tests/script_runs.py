"""``python train.py ...`` for the tests, in a forked copy of the test process (issue 26: a fast suite).

A user's ``python train.py`` spends about 5 s importing torch, Lightning, torchmetrics and Hydra before it does
anything; the suite ran train.py some hundreds of times, so imports were a third of its time. ``run_script``
forks the test worker, which has imported them already, and runs the script in the child as ``__main__``,
with the script's arguments, working directory, environment and its own stdout and stderr, then exits with the
script's status. What a test sees is what a subprocess gives: a ``CompletedProcess`` with the exit status and
both streams, a ``TimeoutExpired`` past the limit, and nothing of the run left in the test's process.

The child starts as a fresh interpreter would where that matters: no Hydra instance, no inherited logging
handlers (Lightning's own loggers as a train.py run leaves them), warnings as ``PYTHONWARNINGS`` says, the
default signal handlers, no exit handlers of the parent's, its own process group (a timeout ends the jobs and
DDP ranks it started too). It differs in what a fork cannot undo: modules are imported already (what train.py
does before importing torch is checked by tests/test_architecture.py in real interpreters) and module state the
parent changed stays changed (tests undo their changes with ``monkeypatch``).

``POSLAB_TEST_EXEC=1`` runs every script in a new interpreter instead (``subprocess.run``), as before: the check
that the forked runs change nothing (.ci/run runs train.py in new interpreters as well).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import logging
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import warnings
from pathlib import Path


def run_script(script: Path, args: list[str], cwd: Path, env: dict[str, str], timeout: float):
    """``[sys.executable, script, *args]`` in ``cwd`` with exactly ``env``; a ``subprocess.CompletedProcess``
    with text stdout and stderr. Raises ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    if os.environ.get("POSLAB_TEST_EXEC") == "1":
        command = [sys.executable, str(script), *args]
        return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    process = ScriptProcess(script, args, cwd, env)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, *process.communicate())


def start_script(script: Path, args: list[str], cwd: Path, env: dict[str, str], console: Path | None = None):
    """``run_script`` in the background: a ``ScriptProcess``, or under ``POSLAB_TEST_EXEC=1`` a
    ``subprocess.Popen`` of a new interpreter (stdout and stderr into ``console`` when given, else pipes)."""
    if os.environ.get("POSLAB_TEST_EXEC") != "1":
        return ScriptProcess(script, args, cwd, env, console)
    streams: dict = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    if console is not None:
        streams = {"stdout": console.open("w"), "stderr": subprocess.STDOUT}
    return subprocess.Popen([sys.executable, str(script), *args], cwd=cwd, env=env, text=True, **streams)


class ScriptProcess:
    """``python script args`` started in the background, as ``subprocess.Popen`` starts it, in a forked copy of
    this process: ``pid``, ``poll``, ``wait``, ``send_signal``, ``kill`` and ``communicate`` (the text of stdout
    and stderr, once it has ended). With a ``console`` file both streams go there, as ``stdout=file,
    stderr=STDOUT`` send them, and can be read while it runs."""

    def __init__(self, script: Path, args: list[str], cwd: Path, env: dict[str, str], console: Path | None = None):
        self.args = [sys.executable, str(script), *args]
        self.returncode: int | None = None
        self._folder = Path(tempfile.mkdtemp(prefix="poslab-run-"))
        self._out = console or self._folder / "stdout"
        self._err = self._out if console else self._folder / "stderr"
        sys.stdout.flush(), sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:  # the child: never returns
            _run_as_main(script, args, cwd, env, self._out, self._err)

    def poll(self) -> int | None:
        """The exit status once the process has ended (a signal's as subprocess gives it: minus its number)."""
        if self.returncode is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        """SIGKILL to the process and whatever it started (its process group: jobs, DDP ranks), then reap it."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.wait()

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        out = _read(self._out)
        err = "" if self._err == self._out else _read(self._err)
        shutil.rmtree(self._folder, ignore_errors=True)
        return out, err


def _read(path: Path) -> str:
    return path.read_bytes().decode("utf-8", errors="replace") if path.exists() else ""


def _run_as_main(script: Path, args: list[str], cwd: Path, env: dict[str, str], out: Path, err: Path) -> None:
    code = 1
    try:
        os.setpgid(0, 0)
        _fresh_process_state(cwd, env, out, err)
        sys.argv = [str(script), *args]
        try:
            runpy.run_path(str(script), run_name="__main__")
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            if not isinstance(stop.code, int | None):
                print(stop.code, file=sys.stderr)
        except BaseException:  # as the interpreter: the traceback on stderr, status 1
            traceback.print_exc()
        threading._shutdown()  # wait for the run's non-daemon threads, as an interpreter's exit does
        atexit._run_exitfuncs()  # the run's own exit handlers (the parent's were cleared)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _fresh_process_state(cwd: Path, env: dict[str, str], out: Path, err: Path) -> None:
    """What a new interpreter starting ``python script`` in ``cwd`` with ``env`` would have."""
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # append: one file may take both
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)
    sys.stdin = sys.__stdin__ = open(os.devnull)  # noqa: SIM115  (open for the whole run, as a real stdin)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    atexit._clear()
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGUSR1):
        signal.signal(number, signal.default_int_handler if number == signal.SIGINT else signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, 0)
    warnings.resetwarnings()
    for spec in filter(None, env.get("PYTHONWARNINGS", "").split(",")):
        warnings.filterwarnings(spec.split(":")[0])  # the action only: what the suite sets ("ignore")
    _fresh_logging()
    _fresh_hydra()


def _fresh_logging() -> None:
    """No handlers but those a train.py run adds itself: pytest's go from the root logger, and Lightning's
    loggers pass records up, as they do when Lightning is imported after Hydra has set logging up."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)
    for name in ("lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
    logging.disable(logging.NOTSET)


def _fresh_hydra() -> None:
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None
