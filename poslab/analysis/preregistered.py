"""The pre-registered claims' verdicts, each read at its one place (issue 37, item 8; docs/preregistered_claims.md).

``poslab report preregistered LENGTH_JSON ZOO_JSON`` reads the registry (the claims file's tables: a claim, the place
it is read at, the source of its direction) and the summaries ``report length --claim`` and ``report zoo --claim``
wrote, and gives one row per claim and corpus (language models: every corpus the summary holds, each its own
verdict) or per claim at its task (synthetic tasks): the paired difference A - B at the registered multiple, its 95%
interval, the seeds and the verdict the report gave (``stats.direction_verdict``). Nothing is recomputed: the
verdicts are the reports', read at the registered place only, so the table cannot pick a kinder multiple. A multiple
the summary did not score, or a side without runs, is not testable, and the row says why. A claim the summary lacks
(its report was run without that ``--claim``) has **no verdict** (``verdict`` null): "not computed" is a note on the
row, tallied apart from docs/verdicts.md's categories, never one of them. Rendering (``preregistered_markdown``,
``preregistered_figure``) reads the summary alone.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poslab.analysis.output import AnalysisResult, read_summary
from poslab.analysis.stats import Interval
from poslab.analysis.tables import csv_text, markdown_table
from poslab.errors import UsageError

DEFAULT_REGISTRY = Path("docs") / "preregistered_claims.md"
#: the note of a row whose report was run without its claim: no verdict
NOT_COMPUTED = "not computed: the report was run without this --claim"
#: a registry table row: | `claim` | read at | source of the direction |
ROW = re.compile(r"^\| `([^`]+)` \| ([^|]+?) \| ([^|]+?) \|\s*$", re.M)
PLACE = re.compile(r"^(?:(\w+), )?(\d+x)$")


@dataclass(frozen=True)
class Registered:
    claim: str
    task: str | None  # None: a language-model claim (report length), read on every corpus
    multiple: str  # "4x"
    source: str


def doc_commands(text: str) -> list[list[str]]:
    """The ``poslab report`` commands of a doc's indented code blocks, continuation lines joined, as argument
    lists: what the tests check is what a reader runs."""
    blocks = re.findall(r"\n    (poslab report .*?)(?=\n\n|\Z)", text, re.S)  # the blank line ends it, not the next
    return [shlex.split(block.replace("\\\n", " ")) for block in blocks]


def read_registry(text: str, name: str = "the registry") -> list[Registered]:
    """The claims of a registry's tables; a place is ``4x`` (report length) or ``task, 2x`` (report zoo)."""
    claims = []
    for claim, place, source in ROW.findall(text):
        match = PLACE.match(place.strip())
        if match is None:
            raise UsageError(
                f"{name}: the claim `{claim}` is read at {place.strip()!r}; write a multiple (4x) for a language-model "
                f"claim or a task and a multiple (flip_flop, 2x) for a synthetic-task claim."
            )
        claims.append(Registered(claim, match.group(1), match.group(2), source.strip()))
    if not claims:
        raise UsageError(f"{name} holds no claim table rows (| `A<B` | 4x | source |).")
    return claims


def reading(found: dict[str, Any] | None, figure: dict[str, Any] | None) -> dict[str, Any]:
    """A report's claim at one place, as this table keeps it, or why there is none there."""
    empty = {"mean": None, "low": None, "high": None, "n": 0}
    if found is None:  # no verdict at all: the claim was not checked, which docs/verdicts.md has no category for
        return {**empty, "verdict": None, "why": NOT_COMPUTED}
    if found.get("missing"):
        return {**empty, "verdict": "not testable", "why": "no runs of " + ", ".join(found["missing"])}
    if figure is None:
        return {**empty, "verdict": "not testable", "why": "not scored at this place"}
    return {**{key: figure.get(key) for key in ("mean", "low", "high", "n", "verdict")}, "why": figure.get("why", "")}


def length_rows(claim: Registered, summary: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    for corpus, section in sorted(summary["corpora"].items()):
        found = next((c for c in section.get("claims", []) if c["claim"] == claim.claim), None)
        figure = None if found is None else found.get("by_multiple", {}).get(claim.multiple)
        rows.append({"claim": claim.claim, "report": "length", "place": corpus, "multiple": claim.multiple,
                     "source": claim.source, **reading(found, figure)})  # fmt: skip
    return rows


def zoo_row(claim: Registered, summary: dict[str, Any]) -> dict[str, Any]:
    found = next((c for c in summary.get("claims", []) if c["claim"] == claim.claim), None)
    figure = None if found is None else found.get("tasks", {}).get(claim.task, {}).get(claim.multiple)
    return {"claim": claim.claim, "report": "zoo", "place": claim.task, "multiple": claim.multiple,
            "source": claim.source, **reading(found, figure)}  # fmt: skip


def load_summary(path: str | Path, report: str) -> dict[str, Any]:
    """``length.json`` or ``zoo.json``, refused in one sentence where it is not that report's summary."""
    argument = "LENGTH_JSON" if report == "length" else "ZOO_JSON"
    keys = "corpora" if report == "length" else "tasks"
    command = f"poslab report {report} ... --claim ..."
    return read_summary(path, report, keys, command=command, given_as=f"poslab report preregistered's {argument}")


def preregistered_summary(length_json: str | Path, zoo_json: str | Path, registry: str | Path) -> dict[str, Any]:
    claims = read_registry(Path(registry).read_text(encoding="utf-8"), str(registry))
    length, zoo = load_summary(length_json, "length"), load_summary(zoo_json, "zoo")
    rows = []
    for claim in claims:
        rows.extend(length_rows(claim, length) if claim.task is None else [zoo_row(claim, zoo)])
    return {"report": "preregistered", "registry": str(registry), "length": str(length_json), "zoo": str(zoo_json),
            "rows": rows}  # fmt: skip


def difference_text(row: dict[str, Any]) -> str:
    if row["mean"] is None:
        return row["why"]
    return Interval.from_dict(row).cell() + (f" ({row['why']})" if row["why"] else "")


def tally(rows: list[dict[str, Any]]) -> str:
    """The verdicts counted by docs/verdicts.md's categories, then the rows without one (not computed) apart."""
    counts = Counter(row["verdict"] for row in rows if row["verdict"] is not None)
    said = ", ".join(f"{verdict} {n}" for verdict, n in sorted(counts.items())) or "none"
    unread = sum(row["verdict"] is None for row in rows)
    apart = f" No verdict (not computed: the report was run without the claim): {unread} rows." if unread else ""
    return f"Verdicts as docs/verdicts.md: {said}.{apart}"


def preregistered_markdown(summary: dict[str, Any]) -> str:
    header = ["claim", "read at", "A - B [95%]", "seeds", "verdict", "source of the direction"]
    table = [[f"`{r['claim']}`", f"{r['place']}, {r['multiple']}", difference_text(r), str(r["n"]),
              r["verdict"] or "", r["source"]] for r in summary["rows"]]  # fmt: skip
    return "\n".join([
        "### Pre-registered claims, each read at its one place", "",
        f"Registry: {summary['registry']}; language models: {summary['length']} (bits/byte, A - B; every corpus its "
        f"own verdict); synthetic tasks: {summary['zoo']} (the claim's figure). {tally(summary['rows'])}", "",
        markdown_table(header, table),
    ])  # fmt: skip


def preregistered_csv(summary: dict[str, Any]) -> str:
    keys = ["claim", "report", "place", "multiple", "mean", "low", "high", "n", "verdict", "why", "source"]
    return csv_text(keys, [[row[key] for key in keys] for row in summary["rows"]])


def report_preregistered(length_json: str, zoo_json: str, registry: str | None = None) -> AnalysisResult:
    """The table, its CSV, ``preregistered.json`` and the figure (default: beside the registry, ``preregistered/``)."""
    registry_path = Path(registry) if registry is not None else DEFAULT_REGISTRY
    if not registry_path.is_file():
        raise UsageError(f"poslab report preregistered: no registry at {registry_path} (--claims FILE).")
    summary = preregistered_summary(length_json, zoo_json, registry_path)
    text, csv = preregistered_markdown(summary), preregistered_csv(summary)
    directory = registry_path.parent / "preregistered"
    result = AnalysisResult.with_tables("preregistered", text, directory, csv, summary, "preregistered.json")
    from poslab.analysis.preregistered_figure import preregistered_figure

    result.add_figure("preregistered.png", preregistered_figure(summary))
    return result
