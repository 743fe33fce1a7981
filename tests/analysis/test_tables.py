"""The one markdown-table and CSV writer (poslab.analysis.tables)."""

import csv
import io

from poslab.analysis.tables import csv_text, markdown_table


def test_markdown_table_has_a_header_a_separator_and_one_line_per_row():
    text = markdown_table(["encoding", "bpb"], [["rope", "2.61"], ["alibi", 2.5]])
    assert text.splitlines() == ["| encoding | bpb |", "|---|---|", "| rope | 2.61 |", "| alibi | 2.5 |"]


def test_markdown_table_aligns_the_columns_asked_to_the_right():
    text = markdown_table(["encoding", "bpb", "seeds"], [["rope", "2.61", 3]], align="lr")
    assert text.splitlines()[1] == "|---|---:|---|"


def test_csv_round_trips_floats_with_all_digits_and_writes_none_empty():
    value = 1 / 3
    text = csv_text(["name", "value", "missing"], [["a,b", value, None]])
    assert "\r" not in text
    rows = list(csv.reader(io.StringIO(text)))
    assert rows == [["name", "value", "missing"], ["a,b", repr(value), ""]]
    assert float(rows[1][1]) == value
