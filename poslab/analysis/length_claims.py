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

``@ratio`` compares the ratio to 1x instead (bits/byte at the multiple over the plain model's at the training
length: the ALiBi paper's shape, "RoPE rises, ALiBi stays flat"): ``t5_bias<rope@ratio`` says T5 rises less than
RoPE, and B may be a number, ``rope>1@ratio`` (RoPE rises past its context) or ``alibi<1@ratio``. On the documents
the ratio is linearised as bits/byte is (``stats.linearised_ratio``: every length scores the same bytes of each
document, so the ratio of bits is the ratio of bits/byte).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poslab.analysis.claims import parse_claim, resolve
from poslab.analysis.length import PLAIN, LengthRun, linearised_documents, one_x_bpb
from poslab.analysis.stats import (
    Interval,
    crossed_difference,
    direction_verdict,
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


def constant(name: str) -> float | None:
    """A number as a ratio claim's B side (``rope>1@ratio``); None for a row's name."""
    try:
        return float(name)
    except ValueError:
        return None


def seed_figure(run: LengthRun, way: str, multiple: int, ratio: bool) -> float:
    """One seed's figure without documents: bits/byte, or its ratio to the plain 1x (as the report's rows)."""
    value = run.bpb.get(way, {}).get(multiple, np.nan)
    if not ratio:
        return value
    return value / one_x_bpb(run, way)


def difference_at(
    a: dict[int, LengthRun], b: dict[int, LengthRun] | float, ways: tuple[str, str], multiple: int, ratio: bool = False
) -> dict:
    """A - B at ``multiple`` over the shared seeds (and the test documents, where every run has the same ones); B
    a number (a ratio claim's constant) is subtracted as it is."""
    seeds = sorted(set(a) & set(b)) if isinstance(b, dict) else sorted(a)
    first = linearised_documents([a[s] for s in seeds], ways[0], multiple, ratio)
    second = linearised_documents([b[s] for s in seeds], ways[1], multiple, ratio) if isinstance(b, dict) else None
    if first is not None and (not isinstance(b, dict) or (second is not None and second[1] == first[1])):
        crossed = crossed_difference(first[0], second[0] if second is not None else np.full_like(first[0], b))
        return {**crossed.interval.as_dict(), "documents": crossed.documents, "paired_on": "seeds and documents"}
    values = {s: seed_figure(a[s], ways[0], multiple, ratio) for s in seeds}
    others = {s: seed_figure(b[s], ways[1], multiple, ratio) if isinstance(b, dict) else b for s in seeds}
    return {**paired_difference(values, others).as_dict(), "documents": None, "paired_on": "seeds"}


RATIO = "ratio"  # the one @figure report length checks besides bits/byte (the default)


def claim_summary(runs: list[LengthRun], text: str) -> dict[str, Any]:
    """One claim on one corpus's runs: its difference and verdict at every multiple both sides were scored at (past
    the context only for ``@ratio``, which is 1 at 1x by construction)."""
    claim = parse_claim(text)  # report_length refuses an @figure other than @ratio before reading runs
    first, second, claimed, ratio = claim.a, claim.b, claim.sign, claim.figure == RATIO
    level = constant(second) if ratio else None
    a = seed_runs(runs, first)
    b: dict[int, LengthRun] | float = level if level is not None else seed_runs(runs, second)
    missing = [name for name, found in ((first, a), (second, b)) if not isinstance(found, float) and not found]
    rows = [next(iter(found.values())).encoding if isinstance(found, dict) and found else None for found in (a, b)]
    summary: dict[str, Any] = {"claim": text, "a": first, "b": second, "claimed_sign": claimed, "missing": missing}
    summary["rows"] = rows  # the rows the sides name (a label with its settings where the claim gave the encoding)
    summary["figure"] = "ratio to 1x" if ratio else "bits/byte"
    if missing:
        summary["by_multiple"] = {}
        return summary
    ways = (side(first)[1], side(second)[1])
    sides = [(a, ways[0])] if isinstance(b, float) else [(a, ways[0]), (b, ways[1])]
    scored = [set(r.bpb[way]) for found, way in sides for r in found.values()]
    multiples = [m for m in sorted(set.intersection(*scored)) if not (ratio and m <= 1)]
    by_multiple = {}
    for multiple in multiples:
        cell = difference_at(a, b, ways, multiple, ratio)
        cell["verdict"] = direction_verdict(Interval.from_dict(cell), claimed)
        by_multiple[f"{multiple}x"] = cell
    summary["by_multiple"] = by_multiple
    return summary
