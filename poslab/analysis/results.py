"""The ``results.json`` of finished runs, read for the reports: which runs count, which are listed apart, and
which settings tell the runs of a table apart.

* A run counts when its ``status`` is ``success`` (a results file without a status is an older run: it
  counts). Any other status (``diverged`` ...) leaves it out of the table, and the report lists it.
* A job directory of a multirun (it has ``.hydra/``) with ``failed.json`` is listed as failed, with the
  first line of its error; one with neither ``results.json`` nor ``failed.json`` as missing (still running,
  or killed).
* Runs are grouped by their whole config minus the seed and minus what differs from run to run without
  changing what is trained (``PER_RUN``: paths, the run's name, loggers, callbacks, display settings, and
  any value naming the run's own directory). Where runs that share a table row's labels (task and scheme,
  or corpus and encoding) differ in anything else, those settings become columns of the table, so no two
  different configs are ever averaged as seeds of one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab.io import read_json
from poslab.run_files import FAILURE_FILE, RESULTS_FILE, directories_holding
from poslab.targets import flatten

SUCCESS = "success"
#: settings (dotted keys, or whole sections) that differ between runs without changing what is trained
PER_RUN = (
    "seed",
    "name",
    "paths",
    "ckpt_path",
    "resume_allow_changes",
    "threads",
    "keep_freed_memory",
    "save_model",
    "logger",
    "callbacks",
    "hydra",
    "task.data_dir",
    "task.cache_dir",
    "task.corpus",  # the corpus section again
    "trainer.enable_progress_bar",
    "trainer.enable_model_summary",
    "trainer.log_every_n_steps",
    "trainer.default_root_dir",
)
_ABSENT = "(not set)"


def _covered(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(f"{p}.") for p in prefixes)


def run_settings(result: dict[str, Any]) -> dict[str, Any]:
    """A run's settings as flat keys, minus ``PER_RUN`` and any value that names the run's own directory."""
    config = result.get("config") or {}
    output_dir = str((config.get("paths") or {}).get("output_dir") or "\0")
    return {
        key: value
        for key, value in flatten(config).items()
        if not _covered(key, PER_RUN) and not (isinstance(value, str) and output_dir in value)
    }


@dataclass
class FinishedRun:
    path: Path  # the run directory
    result: dict[str, Any]
    settings: dict[str, Any]


@dataclass
class Runs:
    """What a set of directories holds: runs that count, and the jobs listed apart."""

    counted: list[FinishedRun] = field(default_factory=list)
    not_success: list[tuple[Path, str]] = field(default_factory=list)  # (run directory, its status)
    failed: list[tuple[Path, str]] = field(default_factory=list)  # (job directory, first line of its error)
    missing: list[Path] = field(default_factory=list)  # job directories with no results.json nor failed.json

    def notes(self) -> list[str]:
        """One line per kind of job left out of the table (none when every job counted)."""
        lines = []
        if self.not_success:
            shown = ", ".join(f"{path} ({status})" for path, status in self.not_success)
            lines.append(f"{len(self.not_success)} run(s) left out, their status is not {SUCCESS}: {shown}")
        if self.failed:
            shown = "; ".join(f"{path}: {error}" for path, error in self.failed)
            lines.append(f"{len(self.failed)} job(s) failed (see their {FAILURE_FILE}): {shown}")
        if self.missing:
            shown = ", ".join(map(str, self.missing))
            lines.append(
                f"{len(self.missing)} job(s) wrote no {RESULTS_FILE} nor {FAILURE_FILE} (still running, or killed): "
                f"{shown}"
            )
        return lines


def run_status(run_dir: str | Path) -> str:
    """The ``status`` a run's results.json records; ``success`` for an older one without it, or none there."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.is_file():
        return SUCCESS
    return str(read_json(path).get("status", SUCCESS))


def first_line(text: Any) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else "(no message)"


def collect_runs(directories: list[str | Path], keep: Callable[[dict[str, Any]], bool] = lambda r: True) -> Runs:
    """Every run and job below ``directories``; ``keep`` selects the results a report reads (others are
    neither counted nor listed: e.g. the language-model runs of a grid report)."""
    runs = Runs()
    seen: set[Path] = set()
    for directory in map(Path, directories):
        for run_dir in directories_holding(directory, RESULTS_FILE):
            if run_dir.resolve() in seen:
                continue
            seen.add(run_dir.resolve())
            result = read_json(run_dir / RESULTS_FILE)
            if not keep(result):
                continue
            status = str(result.get("status", SUCCESS))  # no status: written before runs recorded one
            if status != SUCCESS:
                runs.not_success.append((run_dir, status))
            else:
                runs.counted.append(FinishedRun(run_dir, result, run_settings(result)))
        for job in directories_holding(directory, FAILURE_FILE):
            if job.resolve() not in seen:
                seen.add(job.resolve())
                error = read_json(job / FAILURE_FILE).get("error", "")
                runs.failed.append((job, first_line(error)))
        for job in directories_holding(directory, ".hydra"):
            if job.resolve() not in seen and job.is_dir():
                seen.add(job.resolve())
                runs.missing.append(job)
    return runs


def differing_settings(runs: list[FinishedRun], row: Callable[[FinishedRun], Hashable]) -> list[str]:
    """The settings that differ between runs sharing a table row's labels (``row``): they become columns."""
    rows: dict[Hashable, list[FinishedRun]] = defaultdict(list)
    for run in runs:
        rows[row(run)].append(run)
    keys: set[str] = set()
    for members in rows.values():
        for key in set().union(*(m.settings for m in members)):
            if len({repr(m.settings.get(key, _ABSENT)) for m in members}) > 1:
                keys.add(key)
    return sorted(keys)


def setting_values(run: FinishedRun, keys: list[str]) -> tuple[str, ...]:
    """The run's values of ``keys``, as a table shows them."""
    return tuple(_show(run.settings.get(key, _ABSENT)) for key in keys)


def _show(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ",".join(map(_show, value)) + "]"
    return str(value)


def validation_documents(result: dict[str, Any]) -> int:
    """The held-out documents a language-model run's validation figures come from, over its corpus's groups."""
    return sum(int(splits["validation"]["documents"]) for splits in (result.get("groups") or {}).values())
