"""The comparison every pinned file goes through (``tests/close_text.py``): last digits may differ, nothing else."""

from __future__ import annotations

import pytest

from tests.close_text import assert_file_close, assert_json_close, assert_text_close, split_numbers


def test_the_last_digits_of_a_float_may_differ_between_cpus():
    # the two printings of one figure on the AMX and the AVX512-BF16 host (issue 37)
    assert_text_close("depth 0.49086995781 [0.1, 0.9]", "depth 0.4908699578 [0.1, 0.9]")
    assert_json_close('{"depth": [0.49086995781, 2]}', '{"depth": [0.4908699578, 2]}')


def test_a_rounded_figure_may_land_on_either_side_of_its_boundary():
    assert_text_close("| rope | 0.13 [0.10, 0.16] |", "| rope | 0.12 [0.10, 0.16] |")
    assert_text_close("1.5e-05", "1.6e-05")


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ("| rope | 0.14 |", "| rope | 0.12 |"),  # two units in the last place: a changed figure
        ("| alibi | 0.12 |", "| rope | 0.12 |"),  # a changed word
        ("1,605 tests", "1,604 tests"),  # integers exactly
        ("seeds 0, 1", "seeds 0, 1, 2"),  # a number missing
        ("a\nb", "a\nb\nc"),  # a line missing
        ("-0.5", "0.5"),  # the sign is part of the number
        ("0.4908", "0.4918"),
    ],
)
def test_anything_else_differs(found, expected):
    with pytest.raises(AssertionError):
        assert_text_close(found, expected)


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        ('{"a": 1.0001}', '{"a": 1.0}'),  # beyond rel 1e-6
        ('{"a": 2}', '{"a": 3}'),
        ('{"b": 1}', '{"a": 1}'),
        ('{"a": [1, 2]}', '{"a": [1, 2, 3]}'),
        ('{"a": "x"}', '{"a": "y"}'),
        ('{"a": true}', '{"a": 1}'),
        ('{"a": null}', '{"a": 0.0}'),
    ],
)
def test_json_differs_beyond_its_tolerance(found, expected):
    with pytest.raises(AssertionError):
        assert_json_close(found, expected)


def test_numbers_are_told_from_words_and_separators():
    words, numbers = split_numbers("2x-16x: -0.25, 3 (run_7) \u22121.5e-3")
    assert numbers == ["2", "16", "-0.25", "3", "7", "\u22121.5e-3"]
    assert words == ["", "x-", "x: ", ", ", " (run_", ") ", ""]


def test_a_file_is_compared_by_its_kind():
    assert_file_close('{"x": 0.30000000000000004}', '{"x": 0.3}', "a.json")
    assert_file_close("x,0.30000000000000004\n", "x,0.3\n", "a.csv")
    with pytest.raises(AssertionError):
        assert_file_close('{"x": 0.31}', '{"x": 0.3}', "a.json")
