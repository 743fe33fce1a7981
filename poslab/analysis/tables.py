"""The one markdown-table writer and the one CSV writer of every report and analysis (render layer).

Both take a header and rows of cells already formatted the way the caller wants them shown, except that a float
in a CSV row is written with all its digits (``repr``) so that the file round-trips; None is an empty cell. CSV
lines end in ``\\n`` (not the csv module's default ``\\r\\n``), the same in every file poslab writes.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from typing import Any


def markdown_row(cells: Sequence[Any]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def markdown_table(header: Sequence[Any], rows: Iterable[Sequence[Any]], align: str = "") -> str:
    """A GitHub markdown table: the header, its separator, one line per row (cells shown with ``str``). ``align``
    has a letter per column, ``r`` for one aligned right (numbers: ``---:``); columns past it are left as they are.
    """
    lines = [markdown_row(header), "|" + "".join("---:|" if a == "r" else "---|" for a in align.ljust(len(header)))]
    lines += [markdown_row(row) for row in rows]
    return "\n".join(lines)


def csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    return repr(value) if isinstance(value, float) else value


def csv_text(header: Sequence[Any], rows: Iterable[Sequence[Any]]) -> str:
    """CSV with a header line; floats with all their digits, None empty, lines ending in ``\\n``."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])
    return buffer.getvalue()
