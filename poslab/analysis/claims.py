"""A claim a report checks: ``A<B`` (A's figure lower than B's) or ``A>B``, optionally ``@figure`` (which of a run's
figures; each report has its default). ``report length`` checks them on bits/byte (``length_claims``), ``report
zoo`` on a synthetic task's figures (``zoo_claims``); both give the paired difference A - B, its interval and the
verdict it allows (``stats.direction_verdict``, docs/verdicts.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from poslab.errors import UsageError

CLAIM = re.compile(r"^\s*([^<>@]+?)\s*([<>])\s*([^<>@]+?)\s*(?:@\s*(\S+)\s*)?$")


@dataclass(frozen=True)
class Claim:
    text: str
    a: str
    b: str
    sign: int  # -1: A - B claimed below 0 (A<B); +1: above (A>B)
    figure: str | None  # None: the report's default figure


def parse_claim(text: str, option: str = "--claim") -> Claim:
    """``"path<rope"`` -> Claim(a="path", b="rope", sign=-1); ``"path>rope@accuracy"`` names the figure."""
    match = CLAIM.match(text)
    if match is None:
        raise UsageError(
            f"{option} {text!r} is not a claim; write A<B (A's figure lower than B's) or A>B, each side a row as the "
            "report names it (rope, randomized_rope:2048), optionally @figure (report zoo: a key of the runs' figures, "
            "e.g. path<rope@read_error_pct_ffl0.98)."
        )
    first, sign, second, figure = match.groups()
    return Claim(text, first, second, -1 if sign == "<" else 1, figure)


def names_row(name: str, label: str) -> bool:
    """A side or a ``--rows`` entry names a row: its whole label, or the encoding before its settings
    (``dape`` names ``dape:kerple_log``)."""
    return name in (label, label.split(":")[0])


def resolve(name: str, rows: set[str]) -> str | None:
    """The row a claim's side names: the row of that name, else the one row whose label starts with ``name:`` (a
    claim written as ``dape`` reads the row ``dape:kerple_log``, the label with its settings); None if there is no
    such row, or several."""
    if name in rows:
        return name
    matches = [row for row in rows if names_row(name, row)]
    return matches[0] if len(matches) == 1 else None
