"""Claims about two language models' bits per byte, checked by a paired interval: ``poslab report length DIR...
--claim "path<rope"`` says that path's bits/byte is lower than rope's, and the report gives, at every multiple of
the training length both were evaluated at, the difference path - rope with its 95% interval and the verdict it
allows (``stats.direction_verdict``: the categories of docs/verdicts.md).

The difference is paired on the seeds both have and, where every run recorded its test documents (runs since
issue 37), on the documents too: ``stats.crossed_difference`` of the two seeds x documents tables, each linearised
so that a seed's mean over documents is its byte-weighted bits per byte (``stats.linearised_ratio``). Without
documents it is the t-interval over the seeds' differences (``stats.paired_difference``).

A side names an encoding's row as the report does (its label, e.g. ``rope`` or ``randomized_rope:2048``), its plain
model, or one test-time way of it: ``rope/test_yarn``, ``rope/chosen on selection``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poslab.analysis.claims import parse_claim, resolve
from poslab.analysis.length import PLAIN, LengthRun, document_sums
from poslab.analysis.stats import (
    Interval,
    crossed_difference,
    direction_verdict,
    linearised_ratio,
    paired_difference,
)


def side(name: str) -> tuple[str, str]:
    """``"rope/test_yarn"`` -> ("rope", "test_yarn"); ``"rope"`` -> ("rope", "plain")."""
    encoding, _, way = name.partition("/")
    return encoding, way or PLAIN


def seed_runs(runs: list[LengthRun], name: str) -> dict[int, LengthRun]:
    encoding, way = side(name)
    row = resolve(encoding, {r.encoding for r in runs})
    return {r.seed: r for r in runs if r.encoding == row and way in r.bpb}


def difference_at(a: dict[int, LengthRun], b: dict[int, LengthRun], ways: tuple[str, str], multiple: int) -> dict:
    """A - B at ``multiple`` over the shared seeds (and the test documents, where every run has the same ones)."""
    seeds = sorted(set(a) & set(b))
    tables = [document_sums(runs[s], way, multiple * runs[s].train_length) for s in seeds for runs, way in
              ((a, ways[0]), (b, ways[1]))]  # fmt: skip
    if seeds and all(t is not None for t in tables) and len({tuple(t[1]) for t in tables}) == 1:
        sizes = np.array(tables[0][1])
        first, second = (np.array([t[0] for t in tables[i::2]]) for i in (0, 1))
        crossed = crossed_difference(linearised_ratio(first, sizes), linearised_ratio(second, sizes))
        return {**crossed.interval.as_dict(), "documents": crossed.documents, "paired_on": "seeds and documents"}
    values = [{s: runs[s].bpb.get(way, {}).get(multiple, np.nan) for s in seeds} for runs, way in zip((a, b), ways)]
    return {**paired_difference(*values).as_dict(), "documents": None, "paired_on": "seeds"}


def claim_summary(runs: list[LengthRun], text: str) -> dict[str, Any]:
    """One claim on one corpus's runs: its difference and verdict at every multiple both sides were scored at."""
    claim = parse_claim(text)  # report_length refuses an @figure before reading runs
    first, second, claimed = claim.a, claim.b, claim.sign
    a, b = seed_runs(runs, first), seed_runs(runs, second)
    missing = [name for name, found in ((first, a), (second, b)) if not found]
    rows = [next(iter(found.values())).encoding if found else None for found in (a, b)]
    summary: dict[str, Any] = {"claim": text, "a": first, "b": second, "claimed_sign": claimed, "missing": missing}
    summary["rows"] = rows  # the rows the sides name (a label with its settings where the claim gave the encoding)
    if missing:
        summary["by_multiple"] = {}
        return summary
    ways = (side(first)[1], side(second)[1])
    scored = [set(r.bpb[way]) for runs, way in zip((a, b), ways) for r in runs.values()]
    multiples = sorted(set.intersection(*scored))
    by_multiple = {}
    for multiple in multiples:
        cell = difference_at(a, b, ways, multiple)
        cell["verdict"] = direction_verdict(Interval.from_dict(cell), claimed)
        by_multiple[f"{multiple}x"] = cell
    summary["by_multiple"] = by_multiple
    return summary
