"""Where an analysis or report writes, and in what order: the report is complete before any file is written.

Every ``poslab analyze ...`` and ``poslab report ...`` builds an ``AnalysisResult``: the printed report and its
files (tables, JSON, PNGs) held in memory. The command prints the report, then writes the files into
``--output-dir``, or by default beside what it read (``RUN_DIR/analysis/<name>/`` for one run, the first
multirun directory's ``analysis/<name>/`` for several: ``poslab.runs.files.default_analysis_dir``). A run
directory that cannot be written to (read-only, another user's) still yields the report, then one message
naming the directory and ``--output-dir``. Nothing is written into the current directory unless asked.
"""

from __future__ import annotations

import functools
import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab.datamodules.corpora import describe_sources
from poslab.errors import MissingRunError, OutputNotWritableError
from poslab.io import read_json, write_atomic
from poslab.runs.files import RESULTS_FILE, run_overrides

#: runs after the files are written, with their directory: e.g. log the figures to the runs' loggers
AfterWrite = Callable[[Path], "str | None"]


def figure_png(fig: Any, dpi: int = 120) -> bytes:
    """A matplotlib figure as PNG bytes (and closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return buffer.getvalue()


@dataclass
class AnalysisResult:
    """The report of an analysis and the files it writes (by name, relative to the output directory)."""

    name: str
    report: str
    default_dir: Path
    files: dict[str, bytes] = field(default_factory=dict)
    after_write: list[AfterWrite] = field(default_factory=list)

    @classmethod
    def with_tables(
        cls, name: str, report: str, directory: Path, csv: str, summary: Any, summary_file: str, stem: str = ""
    ) -> AnalysisResult:
        """A report with its usual files: its text as ``<stem>.md``, its table as ``<stem>.csv`` and its summary
        (what ``--from`` renders again) as ``summary_file``, in that order; ``stem`` defaults to ``name``. Figures
        are added after."""
        result = cls(name, report, directory)
        result.add_text(f"{stem or name}.md", report)
        result.add_text(f"{stem or name}.csv", csv)
        result.add_json(summary_file, summary)
        return result

    def add_text(self, filename: str, text: str) -> str:
        self.files[filename] = (text if text.endswith("\n") else text + "\n").encode()
        return filename

    def add_json(self, filename: str, obj: Any) -> str:
        self.files[filename] = (json.dumps(obj, indent=2, default=str) + "\n").encode()
        return filename

    def add_figure(self, filename: str, fig: Any) -> str:
        self.files[filename] = figure_png(fig)
        return filename

    def write(self, output_dir: str | Path | None = None) -> tuple[Path, list[str]]:
        """Write every file (atomically) into ``output_dir`` or the default directory; then run the
        ``after_write`` steps. Returns the directory and the lines those steps report."""
        directory = Path(output_dir) if output_dir is not None else self.default_dir
        written: list[str] = []
        try:
            for filename, payload in self.files.items():
                write_atomic(directory / filename, payload)
                written.append(filename)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            done = f" ({len(written)} of {len(self.files)} files written)" if written else ""
            raise OutputNotWritableError(
                f"the report above is complete, but its files could not be written to {directory}: {reason}{done}; "
                f"give --output-dir DIR with a directory you can write to."
            ) from error
        lines = [line for step in self.after_write if (line := step(directory))]
        return directory, lines

    def written_line(self, directory: Path) -> str:
        names = ", ".join(self.files)
        return f"{self.name}: {len(self.files)} files written to {directory}: {names}"


def read_summary(
    path: str | Path,
    report: str,
    keys: str | tuple[str, ...],
    file_name: str | None = None,
    command: str = "",
    given_as: str = "--from",
) -> dict[str, Any]:
    """``--from SUMMARY``: the summary JSON a report or analysis wrote (``file_name``, by default
    ``<report>.json``), which its render layer reads alone. Refused, in one sentence naming what to give, unless it
    is a dict holding every key of ``keys`` and, where it says which report it is, ``report``'s (summaries written
    before they said so only need the keys). ``command``: what writes it (default: "this report"); ``given_as``:
    how the message names the path's argument (a positional one: the command and the argument's name)."""
    path, expected = Path(path), file_name or f"{report}.json"
    needed = (keys,) if isinstance(keys, str) else keys
    writer = f"`{command}`" if command else "this report"
    try:
        summary = read_json(path)
    except (OSError, ValueError) as error:
        raise MissingRunError(
            f"{given_as} {path} cannot be read as JSON ({error}); give a {expected} {writer} wrote."
        ) from error
    if (
        not isinstance(summary, dict)
        or any(k not in summary for k in needed)
        or summary.get("report", report) != report
    ):
        raise MissingRunError(
            f"{given_as} {path} holds no {report} summary (no {', '.join(needed)}: written by another report, "
            f"or before it could be re-rendered); give a {expected} {writer} wrote."
        )
    return summary


#: an interval (a bootstrap over documents) resting on fewer documents than this is flagged in the report
MIN_DOCUMENTS = 20
#: a run that trained fewer than this fraction of its recipe's ``trainer.max_steps`` is flagged in the report
MIN_RECIPE_FRACTION = 0.25
#: the label of a column holding a write-up's published values: a reference, not a measurement of these runs
REFERENCE_LABEL = "write-up (reference)"


def few_documents_warning(documents: dict[str, int], what: str = "runs") -> str | None:
    """One line naming the ``what`` (by label) whose figures rest on fewer than ``MIN_DOCUMENTS`` documents."""
    few = {label: n for label, n in documents.items() if n < MIN_DOCUMENTS}
    if not few:
        return None
    shown = ", ".join(f"{label}: {n}" for label, n in few.items())
    return (
        f"warning: {len(few)} of {len(documents)} {what} rest on fewer than {MIN_DOCUMENTS} documents ({shown}); "
        f"figures over so few documents are rough, and bootstrap intervals over them too narrow."
    )


def short_run_warning(steps: dict[str, tuple[int | None, int | None]]) -> str | None:
    """One line naming the runs (by label) that trained fewer than ``MIN_RECIPE_FRACTION`` of their recipe's
    steps; ``steps`` maps a label to (steps trained, the recipe's steps), either None when unknown."""
    short = {
        label: (done, recipe)
        for label, (done, recipe) in steps.items()
        if done is not None and recipe and done < MIN_RECIPE_FRACTION * recipe
    }
    if not short:
        return None
    shown = ", ".join(f"{label}: {done} of {recipe}" for label, (done, recipe) in short.items())
    return (
        f"warning: {len(short)} of {len(steps)} runs trained fewer than {MIN_RECIPE_FRACTION:.0%} of their "
        f"recipe's steps ({shown}); their figures describe undertrained models, not the write-up's."
    )


def training_steps(run_dir: str | Path, result: dict[str, Any] | None = None) -> tuple[int | None, int | None]:
    """(steps the run trained, its recipe's ``trainer.max_steps``), either None when unknown.

    Where one of the run's own overrides (``.hydra/overrides.yaml``) set ``trainer.max_steps``, the recipe is the
    config composed again from them without it: a run of ``experiment=hrope_axial_cpu trainer.max_steps=50`` has
    the experiment's 480 as its recipe. Otherwise (a sweep's runs, a run made without Hydra's files) it is the
    run's own ``trainer.max_steps``, with nothing composed."""
    run_dir = Path(run_dir)
    if result is None:
        path = run_dir / RESULTS_FILE
        result = read_json(path) if path.is_file() else {}
    done = result.get("steps")
    own = ((result.get("config") or {}).get("trainer") or {}).get("max_steps")
    overrides = run_overrides(run_dir)
    if overrides is None or not any(_sets_steps(o) for o in overrides):
        recipe = own  # nothing changed the recipe's steps: composing again (0.5 s a recipe) would give the same
    else:
        recipe = recipe_steps(tuple(o for o in overrides if not _ignored(o)))
    return (None if done is None else int(done)), (None if recipe is None else int(recipe))


@functools.cache
def recipe_steps(overrides: tuple[str, ...]) -> int | None:
    """``trainer.max_steps`` of the config these overrides compose, or None if they no longer compose; once per
    distinct set of overrides (a multirun's seeds share one)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from poslab.running.compose import compose_config

    try:
        steps = compose_config(list(overrides)).trainer.get("max_steps")
    except (HydraException, OmegaConfBaseException):  # the configs changed since: the recipe is unknown
        return None
    return None if steps is None else int(steps)


def _sets_steps(override: str) -> bool:
    return override.lstrip("+~").split("=")[0] == "trainer.max_steps"


def _ignored(override: str) -> bool:
    """Overrides that cannot change the recipe's steps: the steps themselves, and the seed."""
    return override.lstrip("+~").split("=")[0] in ("trainer.max_steps", "seed")


def steps_cell(done: int | None, recipe: int | None) -> str:
    """How a table shows a run's training length: ``50 of 2000`` (its recipe's steps), or ``50``."""
    if done is None:
        return "n/a"
    return f"{done} of {recipe}" if recipe and recipe != done else str(done)


def data_lines(results: list[dict[str, Any]]) -> list[str]:
    """The data the runs' figures come from, once per corpus and source group: its files (sizes, sha256, the
    split each fed) from ``results.json``'s ``sources``, and each of its ``data_notes`` (e.g. trained on a test
    split)."""
    lines: dict[str, None] = {}
    for result in results:
        for group, sources in (result.get("sources") or {}).items():
            if sources:
                lines[f"data: {result.get('corpus', '?')}/{group}: {describe_sources(sources)}"] = None
        for note in result.get("data_notes") or []:
            lines[f"data: {note}"] = None
    return list(lines)


def data_versions_apart(corpora: list[str], hashes: list[str | None]) -> tuple[list[str], list[str]]:
    """Runs of one corpus that read different text (different source hashes, ``results.data_hash``: another
    version of the files, another split) are not seeds of one figure. Given each run's corpus and data hash, in
    run order: each run's corpus as a report shows it (``corpus [data <hash>]`` where its corpus has several
    versions, else unchanged) and one note per such corpus saying so."""
    shown, notes = list(corpora), []
    for corpus in dict.fromkeys(corpora):
        members = [i for i, c in enumerate(corpora) if c == corpus]
        versions = sorted({str(hashes[i]) for i in members})
        if len(versions) < 2:
            continue
        for i in members:
            shown[i] = f"{corpus} [data {hashes[i]}]"
        counts = ", ".join(f"{v} ({sum(str(hashes[i]) == v for i in members)} runs)" for v in versions)
        notes.append(
            f"corpus {corpus}: the runs read {len(versions)} different versions of its data (source sha256: "
            f"{counts}); each is shown as a corpus of its own, never averaged as seeds."
        )
    return shown, notes


def hosts_note(hosts: dict[str, list[str]]) -> str | None:
    """One line where a table's runs ran on more than one CPU model (``results.host_of``; docs/verdicts.md, "Mixed
    hosts"), naming the rows (``hosts``: row name -> its runs' hosts) whose own seeds did; None where one host ran
    them all."""
    every = sorted({host for found in hosts.values() for host in found})
    if len(every) < 2:
        return None
    mixed = [name for name, found in hosts.items() if len(set(found)) > 1]
    rows = f"; rows whose seeds ran on different hosts: {', '.join(mixed)}" if mixed else ""
    unknown = "; 'unknown': a run that recorded none" if "unknown" in every else ""
    return (
        f"hosts mixed: {', '.join(every)} (bf16 kernels differ in their last digits between CPU models, so no "
        f"difference here is read as one between hosts{unknown}){rows}."
    )


def sample_notes(
    steps: dict[str, tuple[int | None, int | None]],
    results: list[dict[str, Any]],
    documents: dict[str, int] | None = None,
) -> list[str]:
    """What every report says under its tables about its sample: the few-documents warning (when the figures
    rest on documents), the short-run warning, and the data the runs read (``data_lines``)."""
    warnings = [few_documents_warning(documents) if documents is not None else None, short_run_warning(steps)]
    return [line for line in warnings if line] + data_lines(results)
