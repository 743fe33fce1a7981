"""``poslab report length DIR...``: the language models' runs read and computed (``poslab.analysis.length``), then
drawn (``poslab.analysis.length_render``) into ``--output-dir`` (default: the first directory's
``analysis/length/``): ``length.md``, ``length.csv``, ``length.json`` and the PNGs. ``--from length.json``
renders the same files again from the summary alone (no runs, no model), beside it by default."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from poslab.analysis.claims import names_row, parse_claim
from poslab.analysis.length import length_summary, load_length_runs
from poslab.analysis.length_claims import RATIO, claim_summary, constant
from poslab.analysis.length_render import length_csv, length_markdown, plot_bpb, plot_positions, safe_name
from poslab.analysis.output import AnalysisResult, read_summary
from poslab.analysis.passkey_render import plot_passkey
from poslab.errors import UsageError
from poslab.runs.files import default_analysis_dir

SUMMARY_FILE = "length.json"


def render_length(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report's text and files from ``summary`` (``length_summary``) alone."""
    text, csv = length_markdown(summary), length_csv(summary)
    result = AnalysisResult.with_tables("length", text, directory, csv, summary, SUMMARY_FILE)
    result.add_figure("length_bpb.png", plot_bpb(summary))
    result.add_figure("length_position.png", plot_positions(summary))
    for corpus, part in summary["corpora"].items():  # the needle picture, one per corpus with passkey grids
        if part["passkey"]:
            result.add_figure(f"length_passkey_{safe_name(corpus)}.png", plot_passkey(part["passkey"]))
    return result


def report_length(
    directories: list[str | Path], claims: Sequence[str] = (), rows: Sequence[str] = ()
) -> AnalysisResult:
    """The report of the runs under ``directories``, with each of ``claims`` (``A<B``, ``length_claims``) checked
    on every corpus; ``rows``: only those encodings' rows shown (``select_rows``)."""
    for claim in claims:  # a malformed claim stops before any run is read
        parsed = parse_claim(claim)
        if parsed.figure not in (None, RATIO):
            raise UsageError(
                f"--claim {claim!r}: report length checks bits/byte (no @figure) or the ratio to 1x (@{RATIO}); "
                f"@{parsed.figure} is neither."
            )
        if parsed.figure is None and constant(parsed.b) is not None:
            raise UsageError(f"--claim {claim!r}: a number as B is a ratio's level; write {claim}@{RATIO}.")
    runs, notes = load_length_runs(directories)
    default = default_analysis_dir("length", list(directories), [r.path for r in runs])
    summary = length_summary(runs, notes)
    for corpus, part in summary["corpora"].items():  # a report without claims writes the summary it always did
        if claims:
            part["claims"] = [claim_summary([r for r in runs if r.corpus == corpus], claim) for claim in claims]
    return render_length(select_rows(summary, rows) if rows else summary, default)


def rerender_length(path: str | Path, rows: Sequence[str] = ()) -> AnalysisResult:
    """``--from``: the files again from a ``length.json`` this report wrote, beside it by default; ``rows``: only
    those encodings' rows (``select_rows``)."""
    summary = read_summary(path, "length", "corpora")
    return render_length(select_rows(summary, rows) if rows else summary, Path(path).parent)


def select_rows(summary: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """The summary with only the rows of ``names`` (every way of each), for a figure a reader can follow: an
    encoding as the rows name it (``cope:129``) or its name before the settings (``cope``). Places and rank
    intervals stay those among all the rows, as a note says; the claims stay whole."""
    keep = lambda label: any(names_row(name, label) for name in names)  # noqa: E731
    selected = copy.deepcopy(summary)
    shown: set[str] = set()
    for part in selected["corpora"].values():
        shown |= {name for name in names for row in part["rows"] if names_row(name, row["encoding"])}
        part["rows"] = [row for row in part["rows"] if keep(row["encoding"])]
        for key in ("loss_by_position", "passkey", "cost"):
            part[key] = {label: value for label, value in part[key].items() if keep(label)}
        groups = ([label for label in group if keep(label)] for group in part["not_separated"])
        part["not_separated"] = [group for group in groups if len(group) > 1]
    unknown = [name for name in names if name not in shown]
    if unknown:
        every = sorted({row["encoding"] for part in summary["corpora"].values() for row in part["rows"]})
        raise UsageError(
            f"--rows {','.join(names)}: no row of {', '.join(unknown)} in this report; its rows: {', '.join(every)}."
        )
    note = f"Rows shown: {', '.join(names)} (--rows); places and rank intervals are those among all the rows."
    selected["notes"] = [*summary.get("notes", []), note]
    return selected
