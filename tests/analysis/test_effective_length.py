"""Effective context length: the margins as stated (85% of 1x accuracy, 1.05x of 1x bits/byte), the first
failing length stops it, and its interval over seeds is the report's Student-t interval."""

from __future__ import annotations

import math

import pytest

from poslab.analysis.effective_length import effective_length, effective_length_over_seeds
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
