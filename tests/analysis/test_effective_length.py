"""Effective context length: the margins as stated (85% of 1x accuracy, 1.05x of 1x bits/byte), the first
failing length stops it, and its interval over seeds is the report's Student-t interval."""

from __future__ import annotations

import math

import pytest

from poslab.analysis.effective_length import effective_length, effective_length_over_seeds, evaluated_lengths
from poslab.analysis.stats import Interval


def test_accuracy_counts_lengths_down_to_85_percent_of_1x_and_stops_at_the_first_failure():
    scores = {32: 1.0, 64: 0.86, 128: 0.84, 256: 0.99}  # 128 fails; 256's recovery does not count
    assert effective_length(scores, 32) == 64
    assert effective_length({32: 0.8, 64: 0.68, 128: 0.67}, 32) == 64  # 0.68 = 0.85 x 0.8 exactly holds
    assert effective_length({32: 1.0, 64: 0.5}, 32) == 32  # never below the training length
    assert math.isnan(effective_length({64: 1.0}, 32))  # no 1x figure


def test_bits_per_byte_counts_lengths_up_to_1_05x_of_1x():
    scores = {512: 1.0, 1024: 1.04, 2048: 1.06, 4096: 1.0}
    assert effective_length(scores, 512, higher_is_better=False) == 1024
    assert effective_length({512: 1.0, 1024: float("nan")}, 512, higher_is_better=False) == 512


def test_over_seeds_is_the_t_interval_of_each_seeds_length_clipped_to_the_evaluated_lengths():
    by_seed = {
        0: {32: 1.0, 64: 0.9, 128: 0.9},  # 128
        1: {32: 1.0, 64: 0.9, 128: 0.1},  # 64
        2: {32: 1.0, 64: 0.1, 128: 0.1},  # 32
    }
    got = effective_length_over_seeds(by_seed, 32)
    expected = Interval.of([128.0, 64.0, 32.0], bounds=(32.0, 128.0))
    assert got.n == 3 and got.mean == pytest.approx(224 / 3, abs=1e-9)
    assert (got.low, got.high) == pytest.approx((expected.low, expected.high), abs=1e-9)
    assert got.low == 32.0 and got.high == 128.0  # the t interval at 3 seeds is wider than the lengths: clipped


def test_a_1x_at_the_floor_has_no_effective_length_and_a_loss_has_no_floor():
    """A chance-level 1x (0.1) passes its own 85% margin at every length at chance: without the floor it would read
    the longest length. At or under the floor (the zoo: best baseline + FLOOR_MARGIN) it has none."""
    chance = {32: 0.1, 64: 0.1, 128: 0.1, 256: 0.1}
    assert effective_length(chance, 32) == 256  # no floor given: the old reading, kept for callers without one
    assert math.isnan(effective_length(chance, 32, floor=0.13)) and math.isnan(effective_length(chance, 32, floor=0.1))
    assert effective_length({32: 1.0, 64: 0.9, 128: 0.5}, 32, floor=0.13) == 64
    by_seed = {0: chance, 1: {32: 1.0, 64: 0.9, 128: 0.9, 256: 0.5}, 2: {32: 1.0, 64: 0.9, 128: 0.9, 256: 0.5}}
    got = effective_length_over_seeds(by_seed, 32, floor=0.13)
    assert got.n == 2 and got.mean == 128.0  # seed 0 left out, not read as 256
    bpb = {0: {512: 1.0, 1024: 1.04, 2048: 1.06}, 1: {512: 1.0, 1024: 1.1, 2048: 1.2}}
    assert effective_length_over_seeds(bpb, 512, higher_is_better=False).mean == 768.0  # report length: no floor


def test_the_lengths_counted_over_stop_where_a_seed_has_none_and_the_mean_stays_inside_its_interval():
    """Seed 0 was also evaluated at 512, which no other seed was: counting it gave 341 with the interval [32, 256].
    Seed 2 has no 128: its count stops at 64 (as a NaN does) instead of jumping to 256."""
    flat = {32: 1.0, 64: 1.0, 128: 1.0, 256: 1.0}
    by_seed = {0: {**flat, 512: 1.0}, 1: flat, 2: {32: 1.0, 64: 1.0, 256: 1.0}}
    assert evaluated_lengths(by_seed.values()) == [32, 64, 128, 256]
    got = effective_length_over_seeds(by_seed, 32)
    assert got.mean == pytest.approx((256 + 256 + 64) / 3) and got.low <= got.mean <= got.high == 256.0
    assert effective_length({32: 1.0, 64: 1.0, 256: 1.0}, 32, lengths=[32, 64, 128, 256]) == 64
    assert evaluated_lengths([{32: 1.0, 64: float("nan")}, {32: 1.0, 64: 1.0}]) == [32]  # NaN: not scored there
    assert evaluated_lengths([]) == [] and effective_length_over_seeds({}, 32).n == 0
