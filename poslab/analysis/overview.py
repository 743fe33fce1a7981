"""Where the runs under a directory stand (``poslab runs DIR``): a sweep of hundreds of jobs, resumed across days,
read at a glance without opening a log.

Each run directory below DIR (one holding a ``results.json``, a ``failed.json``, ``checkpoints/`` or Hydra's
``.hydra/``; ``analysis/`` folders aside) is one of:

- ``finished``, ``diverged`` or ``damaged: ...``: what its results.json records (``run_status``);
- ``failed``: its failed.json's first line (the job stopped on an error; ``ckpt_path=auto`` runs it again);
- ``running`` (a live process holds it) or ``in progress`` (none does: a stopped run, resumed by ``ckpt_path=auto``):
  how far it got, from what it saved: the step of its newest checkpoint out of
  ``trainer.max_steps``, and, once training has ended, its test saved so far (``checkpoints/evaluation.pt``: the
  rounds done and batches scored, ``poslab.running.evaluation_checkpoint``), with the time since anything in it was
  last written (a run a live process works on is written every few minutes; one a stopped sweep left is not).

The table lists the runs not finished (``--all``: every run), then the count of each state (for a multirun's sweep
directory: how many jobs its latest command names, Hydra's ``multirun.yaml``, how many have no folder yet and the
work in them, ``time_left``), and the process that holds DIR with its command. Nothing is written.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from poslab.errors import MissingRunError
from poslab.io import read_json
from poslab.runs.files import (
    CHECKPOINT_DIR,
    FAILURE_FILE,
    LAST_CHECKPOINT,
    RESULTS_FILE,
    directories_holding,
    saved_test,
)
from poslab.runs.guard import held_by
from poslab.runs.results import failure_message, run_status, whole_training_seconds

#: what makes a directory a run directory (any one of them)
RUN_MARKS = (RESULTS_FILE, FAILURE_FILE, CHECKPOINT_DIR, ".hydra")
RUNNING, IN_PROGRESS, FAILED, FINISHED = "running", "in progress", "failed", "finished"
STEP_CHECKPOINT = re.compile(r"step(\d+)\.ckpt$")


@dataclass
class RunState:
    folder: str  # relative to the directory asked about
    state: str  # finished, diverged, damaged: ..., failed, running, in progress
    detail: str


def run_directories(directory: Path) -> list[Path]:
    """The run directories at or below ``directory``, sorted (analyses left out: ``directories_holding``)."""
    return sorted({found for mark in RUN_MARKS for found in directories_holding(directory, mark)})


def run_state(run_dir: Path, root: Path, now: float) -> RunState:
    name = str(run_dir.relative_to(root)) if run_dir != root else "."
    if (run_dir / RESULTS_FILE).is_file():
        status = run_status(run_dir)
        return RunState(name, FINISHED if status == "success" else status, "")
    if (run_dir / FAILURE_FILE).is_file():
        return RunState(name, FAILED, failure_message(run_dir))
    parts = [training_progress(run_dir), test_progress(run_dir)]
    written = last_written(run_dir)
    parts.append(f"last written {duration_text(now - written)} ago" if written else "")
    holder = held_by(run_dir)
    state = RUNNING if holder else IN_PROGRESS
    parts.append(f"process {holder.get('pid', '?')}" if holder else "")
    return RunState(name, state, "; ".join(p for p in parts if p))


def training_progress(run_dir: Path) -> str:
    """``step 400 of 720 saved`` from the newest checkpoint's name and the run's config; what is known else."""
    checkpoints = run_dir / CHECKPOINT_DIR
    steps = [int(m.group(1)) for p in checkpoints.glob("step*.ckpt") if (m := STEP_CHECKPOINT.search(p.name))]
    total = max_steps(run_dir)
    of = f" of {total}" if total is not None else ""
    if steps:
        return f"step {max(steps)}{of} saved"
    if (checkpoints / LAST_CHECKPOINT).is_file():
        return f"a last checkpoint (step{of} not in its name)"
    return "nothing saved yet"


def max_steps(run_dir: Path) -> int | None:
    """``trainer.max_steps`` of the config Hydra recorded for the run, None where there is none to read."""
    import yaml

    try:
        config = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
        return int(config["trainer"]["max_steps"])
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError):
        return None


def test_progress(run_dir: Path) -> str:
    """The test saved so far (``checkpoints/evaluation.pt``), or nothing."""
    saved = saved_test(run_dir / CHECKPOINT_DIR)
    return f"in its test: {saved} saved" if saved else ""


def duration_text(seconds: float) -> str:
    """``40 s``, ``12 min``, ``3.5 h``, ``2 days``: a duration, coarsely."""
    if seconds < 60:
        return f"{max(0, round(seconds))} s"
    if seconds < 3600:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h" if seconds < 2 * 86400 else f"{round(seconds / 86400)} days"


def last_written(run_dir: Path) -> float | None:
    """The newest modification time of a file in the run directory."""
    times = [p.stat().st_mtime for p in run_dir.rglob("*") if p.is_file()]
    return max(times) if times else None


def holder_line(directory: Path, width: int = 200) -> str | None:
    """``DIR: held by process P (`command`, started T)`` where a live process holds ``directory``."""
    holder = held_by(directory)
    if holder is None:
        return None
    command = str(holder.get("command") or "")
    command = f"`{command[: width - 1]}…`, " if len(command) > width else f"`{command}`, " if command else ""
    return f"{directory}: held by process {holder.get('pid', '?')} ({command}started {holder.get('started', '?')})"


def latest_command_jobs(sweep: Path, finished: list[Path]) -> str | None:
    """For a multirun's sweep directory (Hydra's ``multirun.yaml`` in it): how many jobs its latest command names, how
    many of them have no folder yet (not started) and the work they hold (``time_left``); None for another directory.
    The command is expanded with this checkout's configs (its sweeper's parameters): a sweep run from another commit
    whose experiment sweeps otherwise is counted as this one would run it."""
    import yaml

    from poslab.runs.files import MULTIRUN_FILE
    from poslab.runs.folders import existing_job_folder

    if not (sweep / MULTIRUN_FILE).is_file():
        return None
    try:
        task = [str(o) for o in yaml.safe_load((sweep / MULTIRUN_FILE).read_text())["hydra"]["overrides"]["task"]]
        from poslab.running.precheck import job_overrides  # composes the configs: the sweeper's own parameters

        jobs = job_overrides(task, multirun=True)
    except Exception as error:  # noqa: BLE001  (a sweep of another checkout's configs: the folders still count)
        return f"its latest command's jobs not counted ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
    missing = [job for job in jobs if existing_job_folder(sweep, job) is None]
    return f"its latest command ({MULTIRUN_FILE}) names {len(jobs)} jobs, {len(missing)} not started" + time_left(
        missing, finished
    )


def time_left(missing: list[list[str]], finished: list[Path]) -> str:
    """``; about 41.2 h of work in them ...``: each job not started at the median seconds (training and test) of the
    finished runs of the same job at other seeds, else of every finished run (``whole_run_seconds``)."""
    measured: dict[str, list[float]] = {}
    for run_dir in finished:
        if (seconds := whole_run_seconds(run_dir)) is not None and (job := recorded_overrides(run_dir)) is not None:
            measured.setdefault(seedless(job), []).append(seconds)
    if not missing or not measured:
        return ""
    overall = statistics.median(s for times in measured.values() for s in times)
    kinds = [seedless(job) for job in missing]
    unmeasured = sum(kind not in measured for kind in kinds)
    total = sum(statistics.median(measured[kind]) if kind in measured else overall for kind in kinds)
    guessed = f"; {unmeasured} with none at the sweep's median" if unmeasured else ""
    return (
        f"; about {duration_text(total)} of work in them, one job at a time (each at the median training and test time "
        f"of its finished runs at other seeds{guessed})"
    )


def seedless(overrides: list[str]) -> str:
    """A job's name without its seed: the runs that differ only by seed are one kind of job."""
    from poslab.runs.folders import job_folder_name, override_key

    return job_folder_name([line for line in overrides if override_key(line) != "seed"])


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The overrides Hydra recorded for a run (``.hydra/overrides.yaml``), None where there are none to read."""
    import yaml

    try:
        found = yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return [str(line) for line in found] if isinstance(found, list) else None


def whole_run_seconds(run_dir: Path) -> float | None:
    """A finished run's training and test seconds: its training as one process ran it, or, resumed, its steps at its
    median step's time (``throughput.step_seconds``); None where its test was resumed or a figure is missing."""
    try:
        result = read_json(run_dir / RESULTS_FILE)
    except (OSError, ValueError, RecursionError):
        return None
    training, test = whole_training_seconds(result), result.get("test_seconds")
    if training is None:
        step, steps = (result.get("throughput") or {}).get("step_seconds"), result.get("steps")
        training = step * steps if isinstance(step, (int, float)) and isinstance(steps, int) else None
    if training is None or not isinstance(test, (int, float)) or "test_resumed" in result:
        return None
    return training + float(test)


def runs_overview(directory: str | Path, every_run: bool = False) -> str:
    """The table of ``poslab runs DIR``: a row a run directory not finished (``every_run``: every one), the count of
    each state, and the processes holding directories."""
    root = Path(directory)
    if not root.is_dir():
        raise MissingRunError(f"poslab runs {directory}: no such directory; give a run or multirun directory.")
    now = time.time()
    run_dirs = run_directories(root)
    states = [run_state(run_dir, root, now) for run_dir in run_dirs]
    if not states:
        raise MissingRunError(
            f"poslab runs {directory}: no run directory below it (none holds {', '.join(RUN_MARKS)}); give a run or "
            f"multirun directory (logs/runs/..., logs/multirun/...)."
        )
    order = {RUNNING: 0, IN_PROGRESS: 1, FAILED: 2}
    shown = sorted(
        (s for s in states if every_run or s.state != FINISHED), key=lambda s: (order.get(s.state, 3), s.folder)
    )
    lines = ["| run | state | detail |", "|---|---|---|", *(f"| {s.folder} | {s.state} | {s.detail} |" for s in shown)]
    counts = Counter(s.state.split(":")[0] for s in states)
    summary = ", ".join(f"{n} {state}" for state, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    held = holder_line(root)
    finished = [run_dir for run_dir, s in zip(run_dirs, states) if s.state == FINISHED]
    jobs = latest_command_jobs(root, finished)
    if jobs is not None:
        summary += f"; {jobs}"
    table = [*lines, ""] if shown else []
    count = f"{len(states)} run{'' if len(states) == 1 else 's'}: {summary}"
    return "\n".join([*table, count, *([held] if held else [])])
