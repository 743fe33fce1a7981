"""docs/extrapolation_grid_verdicts.py's rules (the review's item 5): a degenerate interval (both seeds the same
figure) makes no row "reproduced" on its own, and the write-up's conclusions are read as the magnitudes it states
(docs/verdicts.md), to the digits it prints them with, not against thresholds set after the runs. The doc's own
output is compared in tests/test_docs_scripts.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from poslab.analysis.stats import Interval

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "extrapolation_grid_verdicts.py"


def script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("extrapolation_grid_verdicts", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_row_on_degenerate_intervals_only_is_not_testable_not_reproduced():
    verdicts = script()
    ceiling = {0: [1.0] * 5, 1: [1.0] * 5}  # lag rope: both seeds 1.000 in every column, as the write-up's
    verdict = verdicts.row_verdict("lag", ceiling, [1.0] * 5)
    assert verdict.startswith("not testable") and "reproduced" not in verdict


def test_a_degenerate_column_is_not_testable_beside_the_columns_that_reproduce():
    verdicts = script()
    seeds = {0: [0.514, 0.345, 0.242, 0.161, 0.243], 1: [0.510, 0.343, 0.242, 0.165, 0.239]}  # lag none
    verdict = verdicts.row_verdict("lag", seeds, [0.524, 0.340, 0.241, 0.161, 0.241])
    assert verdict.startswith("reproduced at 32, 64, past 32, x log; not testable at 128 (degenerate")


def test_the_write_ups_conclusions_are_read_as_its_magnitudes():
    verdicts = script()
    steep = Interval.of([0.920 - 0.854, 0.926 - 0.854])  # steep ALiBi above always-"no": 0.069 [0.031, 0.107]
    assert verdicts.magnitude_verdict(steep, 0.08, 2) == "reproduced"  # "8 points": holds all of [0.075, 0.085)
    assert verdicts.magnitude_verdict(Interval.of([0.5, 0.5]), 0.5, 1) == "not testable"  # degenerate
    assert verdicts.magnitude_verdict(Interval.of([-0.1, 0.3]), 0.08, 2) == "not resolved"  # holds 0 and the value


def test_a_magnitude_is_the_range_its_printed_digits_stand_for():
    """The write-up's "96%" stands for [0.955, 0.965): an interval reaching into that range and past it neither holds
    nor excludes the write-up's value (not resolved), where against a figure printed to three digits it could."""
    verdicts = script()
    assert verdicts.printed_range(0.96, 2) == pytest.approx((0.955, 0.965))
    nope = Interval.of([0.985, 0.982])  # seen NoPE, log-scaled: 0.984 [0.964, 1.003]
    assert verdicts.magnitude_verdict(nope, 0.96, 2) == "not resolved"
    assert verdicts.magnitude_verdict(nope, 0.960, 3).startswith("contradicted (above")  # [0.9595, 0.9605)
    inside = Interval.of([0.959, 0.960, 0.961, 0.960, 0.960])  # [0.9591, 0.9609]: every value prints as 96%
    assert verdicts.magnitude_verdict(inside, 0.96, 2) == "reproduced"
    below = Interval.of([0.940, 0.941, 0.942, 0.941])
    assert verdicts.magnitude_verdict(below, 0.96, 2).startswith("contradicted (below")
