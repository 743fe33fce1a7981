"""The ``results.json`` of finished runs, read for the reports: which runs count, which are listed apart, and
which settings tell the runs of a table apart.

* A run counts when its ``status`` is ``success`` (a results file without a status is an older run: it
  counts). Any other status (``diverged`` ...) leaves it out of the table, and the report lists it.
* A job directory of a multirun (it has ``.hydra/``) with ``failed.json`` is listed as failed, with the
  first line of its error; one with neither ``results.json`` nor ``failed.json`` as missing (still running,
  or killed).
* A ``results.json`` that cannot be read, does not parse as JSON, or does not fit the schema the reports read
  (``results_problem``: the fields every report and analysis takes from it, with their types) is *damaged*: it is
  listed by path with what is wrong, left out of every table and counted under it, whatever the report keeps;
  the multirun summary counts its job as ``damaged``, and ``ckpt_path=auto`` runs its job again.
* One config and one seed count once (``run_identity``: the settings below and the seed; a report's task and
  label besides). Where a set of directories holds two runs of one config and seed (a sweep run twice into one
  directory, or the same job in two folders), the one that counts is the successful one, of several the newest
  (its results.json written last: the latest code and data); the others are listed as duplicates, by path with
  the run that counts, and counted under the table, never averaged as seeds.
* Runs are grouped by their whole config minus the seed and minus what differs from run to run without
  changing what is trained (``PER_RUN``: paths, the run's name, loggers, callbacks, display settings, and
  any value naming the run's own directory). Where runs that share a table row's labels (task and scheme,
  or corpus and encoding) differ in anything else, those settings become columns of the table, so no two
  different configs are ever averaged as seeds of one.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab.config.targets import filled_encoding, flatten, with_added_settings
from poslab.errors import PoslabError
from poslab.io import read_json
from poslab.runs.files import FAILURE_FILE, RESULTS_FILE, directories_holding

SUCCESS = "success"
#: settings (dotted keys, or whole sections) that differ between runs without changing what is trained
PER_RUN = (
    "seed",
    "name",
    "paths",
    "ckpt_path",
    "parent",  # a context extension's parent run: its directory differs from seed to seed
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
    """A run's settings as flat keys, minus ``PER_RUN`` and any value that names the run's own directory. What ran
    is compared: an encoding setting the config leaves null takes the value the run recorded it was filled with
    (``encoding_settings``: the learned table's ``init_std`` from the model), and one added since the run was
    recorded the value it ran with (``with_added_settings``)."""
    config = with_added_settings(result.get("config") or {})
    encoding, filled = config.get("encoding"), result.get("encoding_settings") or {}
    if isinstance(encoding, dict) and filled.get("name") == encoding.get("name"):
        config = {**config, "encoding": filled_encoding(encoding, filled)}
    output_dir = str((config.get("paths") or {}).get("output_dir") or "\0")
    return {
        key: value
        for key, value in flatten(config).items()
        if not _covered(key, PER_RUN) and not (isinstance(value, str) and output_dir in value)
    }


def run_identity(config: dict[str, Any]) -> str:
    """What makes two runs one run of one config and one seed: their settings (``run_settings``) and their seed, as
    one text to compare. Compared between configs of one kind: resolved ones (a results.json's, in the reports) or
    recorded ones (a job folder's ``.hydra/config.yaml``, unresolved, under ``ckpt_path=auto``:
    ``poslab.runs.folders``)."""
    settings = run_settings({"config": config})
    return json.dumps([config.get("seed"), settings], sort_keys=True, default=str)


DAMAGED = "damaged"  # the status the multirun summary and ``run_status`` give a job whose results.json is damaged
#: what to do about a damaged results.json (said once under a report's tables)
DAMAGED_ADVICE = (
    "train its run again or delete the file; a multirun started with ckpt_path=auto reruns such jobs when its "
    "command is given again"
)


class ResultsFileError(PoslabError, ValueError):
    """A ``results.json`` that cannot be read, does not parse as JSON, or does not fit the schema the reports read
    (``results_problem``); ``path`` is the file and ``problem`` what is wrong (it reads after the file's name)."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} {problem}")
        self.path, self.problem = path, problem


def read_results(run_dir: str | Path) -> dict[str, Any]:
    """A run directory's ``results.json``, checked against the schema the reports read; raises
    ``ResultsFileError`` naming the file and what is wrong (never a JSON or type error of its own)."""
    path = Path(run_dir) / RESULTS_FILE
    try:
        data = path.read_bytes()
    except OSError as error:
        raise ResultsFileError(path, f"cannot be read ({error.strerror or error})") from None
    try:
        result = json.loads(data)
    except (ValueError, RecursionError) as error:  # JSONDecodeError, bytes that are not text
        raise ResultsFileError(path, f"does not parse as JSON ({one_line(error)})") from None
    problem = results_problem(result)
    if problem is not None:
        raise ResultsFileError(path, problem)
    return result


def finished_results(run_dir: str | Path) -> dict[str, Any] | None:
    """A run directory's results when its results.json reads (``read_results``): the run finished, and
    ``ckpt_path=auto`` skips it. None when there is none, or a damaged one: the run is unfinished, and
    ``ckpt_path=auto`` runs it again."""
    if not (Path(run_dir) / RESULTS_FILE).is_file():
        return None
    try:
        return read_results(run_dir)
    except ResultsFileError:
        return None


def one_line(error: BaseException) -> str:
    return first_line(error) if str(error).strip() else type(error).__name__


# ---- the schema: what the reports and analyses read of a results.json ----------------------------------------
def results_problem(result: Any) -> str | None:
    """What keeps the reports from reading ``result`` (a parsed results.json), as words that follow the file's
    name (``holds a list ...``, ``does not fit the schema: seed is "zero" (a string), expected an integer``);
    None when it fits. Every status: an object; ``status`` a string; ``figures`` an object (or null, a diverged
    run's), ``config`` an object. A successful run besides: ``task`` and ``label`` strings, ``seed`` an integer,
    ``figures`` not empty and ``steps``, ``parameters``, ``train_seconds`` numbers where present; a synthetic task's
    ``train_length`` and its figures by evaluation length (digits), each row of numbers with ``accuracy``, at least
    one length at or past ``train_length``; a language model's ``val_loss`` and ``val_bpb`` (and any figures by
    evaluation length: numbers, ``bpb`` among them), and its ``groups``,
    ``sources`` and ``data_notes`` in the form a run writes them."""
    if not isinstance(result, dict):
        return f"holds {_kind(result)} ({_shown(result)}), not an object of a run's results"
    problem = _fields_problem(result)
    return None if problem is None else f"does not fit the schema: {problem}"


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _shown(value: Any, width: int = 40) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= width else text[: width - 3] + "..."


def _wrong(key: str, value: Any, expected: str) -> str:
    return f"{key} is {_shown(value)} ({_kind(value)}), expected {expected}"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_object(value: Any) -> bool:
    return isinstance(value, dict)


def _check(
    mapping: dict[str, Any], prefix: str, rules: list[tuple[str, Callable[[Any], bool], str, bool]]
) -> str | None:
    """The first of ``rules`` (key, test, what is expected, required) that ``mapping`` breaks."""
    for key, test, expected, required in rules:
        if key not in mapping:
            if required:
                return f"{prefix}{key} is missing, expected {expected}"
            continue
        if not test(mapping[key]):
            return _wrong(f"{prefix}{key}", mapping[key], expected)
    return None


def _or_null(test: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda value: value is None or test(value)


INTEGER, NUMBER, OBJECT, STRING = "an integer", "a finite number", "an object", "a string"


def _fields_problem(result: dict[str, Any]) -> str | None:
    problem = _check(
        result,
        "",
        [
            ("status", lambda v: isinstance(v, str), f"a string ({SUCCESS}, diverged, ...)", False),
            ("figures", _or_null(_is_object), OBJECT, False),
            ("config", _is_object, OBJECT, False),
        ],
    )
    if problem is not None:
        return problem
    config = result.get("config") or {}
    problem = _check(
        config,
        "config.",
        [
            ("task", _is_object, OBJECT, False),
            ("trainer", _or_null(_is_object), f"{OBJECT} or null", False),
            ("paths", _or_null(_is_object), f"{OBJECT} or null", False),
        ],
    ) or _check(config.get("trainer") or {}, "config.trainer.", [("max_steps", _or_null(_is_int), INTEGER, False)])
    if problem is not None or str(result.get("status", SUCCESS)) != SUCCESS:
        return problem  # a run listed apart (diverged ...): only what sorts it is read
    problem = _check(
        result,
        "",
        [
            ("task", lambda v: isinstance(v, str) and bool(v), "the task's name (a string)", True),
            ("label", lambda v: isinstance(v, str), "the encoding's label (a string)", True),
            ("seed", _is_int, INTEGER, True),
            ("figures", lambda v: _is_object(v) and bool(v), "an object of the run's figures, not empty", True),
            ("steps", _or_null(_is_int), INTEGER, False),
            ("parameters", _is_int, INTEGER, False),
            ("train_seconds", _is_number, NUMBER, False),
            ("trained_steps", _is_int, INTEGER, False),
            (
                "data_notes",
                _or_null(lambda v: isinstance(v, list) and all(isinstance(n, str) for n in v)),
                "a list of strings",
                False,
            ),
        ],
    )
    if problem is not None:
        return problem
    return _language_model_problem(result) if result["task"] == "lm" else _synthetic_problem(result)


def _synthetic_problem(result: dict[str, Any]) -> str | None:
    """A synthetic task's run: its figures by evaluation length (the reports compare lengths from the training
    length up), with the ways its config asked for (``_asked_every_way``)."""
    problem = _check(result, "", [("train_length", lambda v: _is_int(v) and v > 0, "a positive integer", True)])
    if problem is not None:
        return problem
    figures, train_length = result["figures"], result["train_length"]
    for length, row in figures.items():
        if not (length.isdigit() and int(length) > 0):
            return f"figures has the key {_shown(length)}, expected evaluation lengths (positive integers)"
        if not _is_object(row):
            return _wrong(f"figures.{length}", row, "an object of the figures at that length")
        for key, value in row.items():
            if not _is_number(value):
                return _wrong(f"figures.{length}.{key}", value, NUMBER)
        if "accuracy" not in row:
            return f"figures.{length}.accuracy is missing, expected {NUMBER}"
    longest = max(figures, key=int)
    if _asked_every_way(result) and "accuracy_log_scaled" not in figures[longest]:
        return f"figures.{longest}.accuracy_log_scaled is missing, expected {NUMBER} (task.eval_ways=all)"
    if int(longest) < train_length:
        return (
            f"figures has no evaluation length at or past train_length={train_length} (lengths "
            f"{', '.join(sorted(figures, key=int))}): the reports compare lengths from the training length up"
        )
    return None


def _asked_every_way(result: dict[str, Any]) -> bool:
    """Whether the run's own config asked for every way of evaluating (``task.eval_ways=all``, and a record older
    than the setting): then its figures hold log scaling. ``plain`` (debug=fast's smoke run) scores the plain model
    alone, so its figures are whole without it."""
    task = (result.get("config") or {}).get("task")
    return not isinstance(task, dict) or task.get("eval_ways") != "plain"  # a record without it: every way


def _language_model_problem(result: dict[str, Any]) -> str | None:
    """A language model's run: its validation figures, and what the reports say of its data."""
    problem = _check(
        result["figures"], "figures.", [("val_loss", _is_number, NUMBER, True), ("val_bpb", _is_number, NUMBER, True)]
    ) or _check(
        result,
        "",
        [("groups", _or_null(_is_object), OBJECT, False), ("sources", _or_null(_is_object), OBJECT, False)],
    )
    if problem is not None:
        return problem
    for length, row in result["figures"].items():  # the figures by evaluation length (from the context up)
        if length.isdigit() and not (_is_object(row) and all(_is_number(v) for v in row.values()) and "bpb" in row):
            return _wrong(f"figures.{length}", row, "an object of finite numbers with bpb (the figures at that length)")
    for group, splits in (result.get("groups") or {}).items():
        if not _is_object(splits) or not _is_object(splits.get("validation")):
            return _wrong(f"groups.{group}", splits, "an object with the group's validation split")
        documents = splits["validation"].get("documents")
        if not _is_int(documents):
            return _wrong(f"groups.{group}.validation.documents", documents, INTEGER)
    for group, sources in (result.get("sources") or {}).items():
        if sources is None:
            continue
        if not _is_object(sources):
            return _wrong(f"sources.{group}", sources, f"{OBJECT} or null")
        problem = _check(
            sources,
            f"sources.{group}.",
            [
                ("files", _is_int, INTEGER, False),
                ("file_bytes", _is_number, NUMBER, False),
                ("listing", lambda v: isinstance(v, list), "a list", False),
            ],
        )
        if problem is not None:
            return problem
        for i, entry in enumerate(sources.get("listing") or []):
            problem = (
                _check(
                    entry,
                    f"sources.{group}.listing.{i}.",
                    [("path", lambda v: isinstance(v, str), STRING, True), ("bytes", _is_number, NUMBER, True)],
                )
                if _is_object(entry)
                else _wrong(f"sources.{group}.listing.{i}", entry, OBJECT)
            )
            if problem is not None:
                return problem
    return None


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
    damaged: list[tuple[Path, str]] = field(default_factory=list)  # (results.json, what is wrong: ResultsFileError)
    #: (run directory left out, the run directory of the same config and seed that counts or is listed instead)
    duplicates: list[tuple[Path, Path]] = field(default_factory=list)

    def notes(self) -> list[str]:
        """One line per kind of job left out of the table (none when every job counted)."""
        lines = []
        if self.not_success:
            shown = ", ".join(f"{path} ({status})" for path, status in self.not_success)
            lines.append(f"{len(self.not_success)} run(s) left out, their status is not {SUCCESS}: {shown}")
        if self.failed:
            shown = "; ".join(f"{path}: {error}" for path, error in self.failed)
            lines.append(f"{len(self.failed)} job(s) failed (see their {FAILURE_FILE}): {shown}")
        if self.damaged:
            shown = "; ".join(f"{path} {problem}" for path, problem in self.damaged)
            lines.append(
                f"{len(self.damaged)} {RESULTS_FILE} file(s) left out, damaged (for each, {DAMAGED_ADVICE}): {shown}"
            )
        if self.duplicates:
            shown = "; ".join(f"{path} (the same as {kept})" for path, kept in self.duplicates)
            lines.append(
                f"{len(self.duplicates)} run(s) left out as duplicates, each of the same config and seed as a run "
                f"kept (a successful one, of several the newest), so no seed counts twice: {shown}"
            )
        if self.missing:
            shown = ", ".join(map(str, self.missing))
            lines.append(
                f"{len(self.missing)} job(s) wrote no {RESULTS_FILE} nor {FAILURE_FILE} (still running, or killed): "
                f"{shown}"
            )
        return lines


#: an older run (no ``trained_steps``) whose training took under this share of its steps x its median step was
#: resumed: its ``train_seconds`` are the last process's part
RESUMED_SHARE = 0.75  # whole runs measure 0.84-5 (a median step above the mean, validations), halves 0.5


def whole_training_seconds(result: dict[str, Any]) -> float | None:
    """The seconds of a run's whole training, or None where one process did not train all of it (a resumed run's
    ``train_seconds`` are its last process's part, which a cost figure must not average as a whole run). Read from
    ``trained_steps`` (the steps the last process trained) where recorded; before it was, from the run's median
    step (``throughput.step_seconds``): under ``RESUMED_SHARE`` of steps x step, or no step timed, is a resume. A
    run that recorded neither (before either existed) is taken whole."""
    seconds, steps = result.get("train_seconds"), result.get("steps")
    if not _is_number(seconds):
        return None
    if "trained_steps" in result:
        return float(seconds) if result["trained_steps"] == steps else None
    throughput = result.get("throughput")
    if not isinstance(throughput, dict) or not _is_int(steps):
        return float(seconds)
    step = throughput.get("step_seconds")
    return float(seconds) if _is_number(step) and seconds >= RESUMED_SHARE * steps * step else None


def run_status(run_dir: str | Path) -> str:
    """The ``status`` a run's results.json records; ``success`` for an older one without it, or none there;
    ``damaged: <the file> <what is wrong>`` for one the reports cannot read (``read_results``)."""
    path = Path(run_dir) / RESULTS_FILE
    if not path.is_file():
        return SUCCESS
    try:
        return result_status(read_results(run_dir))
    except ResultsFileError as error:
        return f"{DAMAGED}: {error}"


def first_line(text: Any) -> str:
    lines = str(text).strip().splitlines()
    return lines[0] if lines else "(no message)"


def failure_message(job: Path) -> str:
    """The first line of the error a failed job recorded (its failed.json), or why that file cannot be read."""
    try:
        recorded = read_json(job / FAILURE_FILE)
    except (OSError, ValueError, RecursionError) as error:
        return f"its {FAILURE_FILE} does not parse as JSON ({one_line(error)})"
    return first_line(recorded.get("error", "") if isinstance(recorded, dict) else recorded)


def collect_runs(directories: list[str | Path], keep: Callable[[dict[str, Any]], bool] = lambda r: True) -> Runs:
    """Every run and job below ``directories``; ``keep`` selects the results a report reads (others are
    neither counted nor listed: e.g. the language-model runs of a grid report)."""
    runs = Runs()
    seen: set[Path] = set()
    read: list[tuple[Path, dict[str, Any]]] = []
    for directory in map(Path, directories):
        for run_dir in directories_holding(directory, RESULTS_FILE):
            if run_dir.resolve() in seen:
                continue
            seen.add(run_dir.resolve())
            try:
                result = read_results(run_dir)
            except ResultsFileError as error:  # listed whatever the report keeps: what it was is unknown
                runs.damaged.append((error.path, error.problem))
                continue
            if keep(result):
                read.append((run_dir, result))
        for job in directories_holding(directory, FAILURE_FILE):
            if job.resolve() not in seen:
                seen.add(job.resolve())
                runs.failed.append((job, failure_message(job)))
        for job in directories_holding(directory, ".hydra"):
            if job.resolve() not in seen and job.is_dir():
                seen.add(job.resolve())
                runs.missing.append(job)
    kept, runs.duplicates = one_run_per_config_and_seed(read)
    for run_dir, result in kept:
        status = result_status(result)
        if status != SUCCESS:
            runs.not_success.append((run_dir, status))
        else:
            runs.counted.append(FinishedRun(run_dir, result, run_settings(result)))
    return runs


def result_status(result: dict[str, Any]) -> str:
    return str(result.get("status", SUCCESS))  # no status: written before runs recorded one


def one_run_per_config_and_seed(
    read: list[tuple[Path, dict[str, Any]]],
) -> tuple[list[tuple[Path, dict[str, Any]]], list[tuple[Path, Path]]]:
    """``read`` (run directories and their results) with one run per config and seed, in their order, and the
    others as (left out, kept). The one kept: a successful one (a rerun that succeeded after a diverged attempt),
    of several the newest results.json (the latest code), then the path (one answer on every machine)."""
    groups: dict[tuple[Any, ...], list[tuple[Path, dict[str, Any]]]] = defaultdict(list)
    for run_dir, result in read:
        groups[duplicate_key(result)].append((run_dir, result))
    kept_dirs: dict[Path, Path] = {}
    for members in groups.values():
        best = max(members, key=lambda member: (result_status(member[1]) == SUCCESS, *written_at(member[0])))
        kept_dirs |= {run_dir: best[0] for run_dir, _ in members}
    kept = [(run_dir, result) for run_dir, result in read if kept_dirs[run_dir] == run_dir]
    duplicates = sorted(
        ((run_dir, best) for run_dir, best in kept_dirs.items() if best != run_dir), key=lambda pair: str(pair[0])
    )
    return kept, duplicates


def duplicate_key(result: dict[str, Any]) -> tuple[Any, ...]:
    """Runs with the same key are one config and one seed: the task, label and seed a report reads, and the
    config's identity (``run_identity``; a results.json without a config: the first three alone)."""
    config = result.get("config") or {}
    seed = result.get("seed", config.get("seed"))
    return str(result.get("task")), str(result.get("label")), str(seed), run_identity(config)


def written_at(run_dir: Path) -> tuple[int, str]:
    try:
        return (run_dir / RESULTS_FILE).stat().st_mtime_ns, str(run_dir)
    except OSError:  # gone since it was read: the oldest
        return 0, str(run_dir)


def differing_settings(runs: list[FinishedRun], row: Callable[[FinishedRun], Hashable]) -> list[str]:
    """The settings that differ between runs sharing a table row's labels (``row``): they become columns.

    Only values two runs both record can differ: a setting one run records and another does not is a setting
    added after the other was run, and every setting added to poslab keeps the earlier behaviour as its default
    (``tests/runs/test_resume_added_settings.py``), so its absence is no difference (and rows do not split between
    runs of two versions)."""
    rows: dict[Hashable, list[FinishedRun]] = defaultdict(list)
    for run in runs:
        rows[row(run)].append(run)
    keys: set[str] = set()
    for members in rows.values():
        for key in set().union(*(m.settings for m in members)):
            if len({repr(m.settings[key]) for m in members if key in m.settings}) > 1:
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


def data_hash(result: dict[str, Any]) -> str | None:
    """The data a run read, as one short hash: every source group's ``sha256`` (its files' contents, as the cache
    records them), in group order; None for a run without source hashes (a synthetic task, an older run). Two runs
    with different hashes read different text, whatever their config says: a report never averages them."""
    import hashlib

    groups = result.get("sources") or {}
    hashes = [f"{name}:{source.get('sha256')}" for name, source in sorted(groups.items()) if isinstance(source, dict)]
    if not hashes or any(h.endswith(":None") for h in hashes):
        return None
    return hashlib.sha256("\n".join(hashes).encode()).hexdigest()[:12]


def host_of(result: dict[str, Any]) -> str:
    """The CPU model a run ran on (results.json's ``environment.cpu``), or ``unknown`` for a run that did not record
    it: bf16 kernels differ in their last digits between CPU models, so a table says when it mixes them."""
    cpu = (result.get("environment") or {}).get("cpu")
    return str(cpu) if cpu else "unknown"
