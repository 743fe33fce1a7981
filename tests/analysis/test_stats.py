"""poslab.analysis.stats: seed-level intervals, paired and Welch differences, bootstrap ranks, split seeds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poslab.analysis import stats
from poslab.analysis.stats import Interval


def test_t_quantile_table_and_expansion():
    assert stats.t_quantile(2) == 4.303
    assert stats.t_quantile(30) == pytest.approx(2.042, abs=1e-3)
    assert stats.t_quantile(1000) == pytest.approx(1.962, abs=1e-3)
    with pytest.raises(ValueError):
        stats.t_quantile(2, level=0.9)
    with pytest.raises(ValueError):
        stats.t_quantile(0)


def test_t_interval_matches_a_hand_computation():
    iv = Interval.of([1.0, 2.0, 3.0])
    half = 4.303 * 1.0 / math.sqrt(3)  # sd of [1, 2, 3] is 1
    assert (iv.mean, iv.n) == (2.0, 3)
    assert iv.low == pytest.approx(2 - half) and iv.high == pytest.approx(2 + half)
    assert iv.cell() == "2.000 [-0.48, 4.48]"
    assert iv.excludes(-1.0) and iv.excludes(5.0) and not iv.excludes(0.0)


def test_interval_nans_bounds_and_small_n():
    iv = Interval.of([0.9, math.nan, 1.0, 0.95], bounds=(0.0, 1.0))
    assert iv.n == 3 and iv.high == 1.0 and iv.low < 0.95
    one = Interval.of([0.684])
    assert one.n == 1 and math.isnan(one.low) and one.cell() == "0.684" and not one.excludes(0.0)
    none = Interval.of([math.nan])
    assert none.n == 0 and none.cell() == "n/a" and none.as_dict() == {"mean": None, "low": None, "high": None, "n": 0}
    assert Interval(0.684, 0.52, 0.85, 3).cell() == "0.684 [0.52, 0.85]"
    assert Interval(0.684, 0.52, 0.85, 3).cell(digits=2) == "0.68 [0.5, 0.8]"


def test_paired_difference_removes_a_shared_seed_effect():
    rng = np.random.default_rng(1)
    offsets = {s: float(rng.normal(0, 5)) for s in range(5)}  # what a seed does to both runs: large
    noise = {s: float(rng.normal(0, 0.01)) for s in range(5)}
    a = {s: offsets[s] + 0.3 + noise[s] for s in range(5)}
    b = {s: offsets[s] for s in range(5)}
    b[99] = 123.0  # a seed only b has is not paired
    diff = stats.paired_difference(a, b)
    assert diff.n == 5
    assert diff.mean == pytest.approx(0.3, abs=0.02)
    assert diff.high - diff.low < 0.1 and diff.excludes(0.0)
    unpaired = stats.welch_difference([a[s] for s in range(5)], [b[s] for s in range(5)])
    assert not unpaired.excludes(0.0)  # the same data unpaired: the seed effect swamps the difference


def test_welch_matches_a_hand_computation():
    a, b = [1.0, 2.0, 3.0], [2.0, 4.0, 7.0, 8.0]
    va, vb = 1.0 / 3, (np.var(b, ddof=1)) / 4  # sd(a)=1; var(b)=22/3
    t, df, half = stats.welch(a, b)
    se = math.sqrt(va + vb)
    assert t == pytest.approx((2.0 - 5.25) / se)
    assert df == pytest.approx((va + vb) ** 2 / (va**2 / 2 + vb**2 / 3))
    lo, hi = stats.t_quantile(math.floor(df)), stats.t_quantile(math.ceil(df))
    assert hi * se <= half <= lo * se
    diff = stats.welch_difference(a, b)
    assert diff.mean == pytest.approx(-3.25) and diff.high - diff.mean == pytest.approx(half)
    assert all(math.isnan(x) for x in stats.welch([1.0], [2.0, 3.0]))


def places(scores):
    """``rank_intervals`` over the shared seeds, as (low, high, rank) per method."""
    return {m: (r.low, r.high, r.rank) for m, r in stats.rank_intervals(stats.seed_tables(scores)).items()}


def test_rank_intervals_clear_winner_and_indistinguishable_pair():
    rng = np.random.default_rng(2)
    scores = {
        "best": {s: 0.9 + 0.01 * rng.random() for s in range(5)},
        "twin_a": {s: 0.5 + 0.05 * rng.random() for s in range(5)},
        "twin_b": {s: 0.5 + 0.05 * rng.random() for s in range(5)},
        "worst": {s: 0.1 + 0.01 * rng.random() for s in range(5)},
    }
    ranks = places(scores)
    assert ranks["best"] == (1, 1, 1) and ranks["worst"] == (4, 4, 4)
    (la, ha, _), (lb, hb, _) = ranks["twin_a"], ranks["twin_b"]
    assert max(la, lb) <= min(ha, hb)  # overlapping rank intervals
    lower = stats.rank_intervals(stats.seed_tables(scores), higher_is_better=False)
    assert (lower["worst"].low, lower["worst"].high) == (1, 1)
    groups = stats.not_separated({m: r[:2] for m, r in ranks.items()}, ["best", "twin_a", "twin_b", "worst"])
    assert groups == [["best"], ["twin_a", "twin_b"], ["worst"]]


def test_rank_intervals_are_paired_over_seeds():
    # b is below a by about 0.01 in every seed, while seeds move both by a lot: paired, a is always first
    scores = {"a": {0: 0.2, 1: 0.9, 2: 0.5}, "b": {0: 0.19, 1: 0.888, 2: 0.491}}
    assert places(scores) == {"a": (1, 1, 1), "b": (2, 2, 2)}


def test_a_method_missing_seeds_is_ranked_on_the_seeds_all_share():
    """A sweep still running: c lacks seed 3. The places come from the seeds every method has, so c is neither
    ranked last nor given an interval on fewer seeds than the others."""
    scores = {
        "a": {0: 0.5, 1: 0.6, 2: 0.55, 3: 0.52},
        "b": {0: 0.3, 1: 0.4, 2: 0.35, 3: 0.33},
        "c": {0: 0.9, 1: 0.99, 2: 0.96},
    }
    assert places(scores) == {"a": (2, 2, 2), "b": (3, 3, 3), "c": (1, 1, 1)}
    per_task = {"t1": scores, "t2": {"a": {0: 0.1, 1: 0.2}, "b": {0: 0.5, 1: 0.6}, "c": {3: 0.9}}}  # t2: none shared
    found = stats.mean_rank_intervals(per_task)
    assert found["c"] == (1.0, 1.0, 2.0)  # t1 places it; t2 allows every place


def test_ties_share_the_better_rank():
    scores = {"a": {0: 1.0, 1: 1.0}, "b": {0: 1.0, 1: 1.0}, "c": {0: 0.0, 1: 0.0}}
    assert {m: r[2] for m, r in places(scores).items()} == {"a": 1, "b": 1, "c": 3}


def test_one_seed_gives_no_rank_interval_and_separates_nothing():
    """One seed has no scatter, so no comparison is shown: each method's rank interval is the whole range and the
    ranking says that no place is separated; the point ranks stay."""
    scores = {"a": {0: 0.9}, "b": {0: 0.5}, "c": {0: 0.1}}
    ranks = places(scores)
    assert ranks == {"a": (1, 3, 1), "b": (1, 3, 2), "c": (1, 3, 3)}
    assert stats.not_separated({m: r[:2] for m, r in ranks.items()}, ["a", "b", "c"]) == [["a", "b", "c"]]
    per_task = {"t1": scores, "t2": {"a": {0: 0.8, 1: 0.7}, "b": {0: 0.6, 1: 0.5}, "c": {0: 0.2, 1: 0.1}}}
    found = stats.mean_rank_intervals(per_task)
    assert found["a"][0] == 1.0 and found["c"][0] == 3.0 and found["a"][1] == 1.0 and found["c"][2] == 3.0


def test_not_separated_chains():
    iv = {"a": (1, 2), "b": (2, 3), "c": (3, 4), "d": (6, 6)}
    assert stats.not_separated(iv, ["a", "b", "c", "d"]) == [["a", "b", "c"], ["d"]]


def test_split_seeds_and_seeds_cell():
    assert stats.split_seeds([0.0, 0.02, 0.98])
    assert stats.split_seeds([1.0, 0.0])
    assert not stats.split_seeds([0.5, 0.52, 0.55])
    assert not stats.split_seeds([0.0, 0.3, 0.6, 0.9])  # an even scatter, not two outcomes
    assert not stats.split_seeds([0.9])
    assert stats.seeds_cell([0.02, 0.98, 1.0]) == "0.02 / 0.98 / 1.00"
    assert stats.seeds_cell([0.5, math.nan]) == "0.50 / n/a"


def _pooled_bootstrap(units: list[float], rounds: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    arr = np.asarray(units)
    boot = arr[rng.integers(0, arr.size, size=(rounds, arr.size))].mean(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return float(low), float(high)


def test_hierarchical_bootstrap_covers_the_seed_scatter():
    rng = np.random.default_rng(5)
    per_seed = {s: list(rng.normal(centre, 0.1, size=200)) for s, centre in enumerate([-1.0, 0.0, 1.0])}
    iv = stats.hierarchical_bootstrap(per_seed, rounds=1000, seed=6)
    seed_means = [float(np.mean(v)) for v in per_seed.values()]
    assert iv.n == 3 and iv.mean == pytest.approx(np.mean(seed_means))
    pooled_low, pooled_high = _pooled_bootstrap([u for v in per_seed.values() for u in v], 1000, 6)
    assert iv.high - iv.low > 5 * (pooled_high - pooled_low)  # units within a seed are not replicates
    assert iv.low < min(seed_means) + 0.5 and iv.high > max(seed_means) - 0.5
    assert stats.hierarchical_bootstrap(per_seed, rounds=1000, seed=6) == iv
    one = stats.hierarchical_bootstrap({0: [1.0, 2.0]})
    assert one.n == 1 and one.mean == 1.5 and math.isnan(one.low)


def test_document_resamples_are_counts_and_reweight_a_mean():
    weights = stats.resample_weights(5, 400, seed=3)
    assert weights.shape == (400, 5) and np.all(weights.sum(axis=1) == 5)
    assert np.array_equal(weights, stats.resample_weights(5, 400, seed=3))  # the same seed, the same resamples
    values = np.array([1.0, 2.0, np.nan, 4.0, 5.0])  # a document without a value is left out of every mean
    estimate = stats.bootstrap_mean(values, weights)
    assert estimate.value == pytest.approx(3.0) and estimate.replicates.shape == (400,)
    kept = weights[:, [0, 1, 3, 4]]
    expected = kept @ values[[0, 1, 3, 4]] / kept.sum(axis=1)
    assert np.allclose(estimate.replicates, expected, equal_nan=True)
    low, high = estimate.interval
    assert 1.0 <= low < 3.0 < high <= 5.0
    assert math.isnan(stats.bootstrap_mean(np.full(5, np.nan), weights).value)


def test_order_agreement_counts_pairs_ordered_as_the_reference():
    reference = {"code": -0.77, "wiki": -0.48, "web": -0.31}
    same, opposite, valid = stats.order_agreement({"code": 1.0, "wiki": 2.0, "web": 3.0}, reference)
    assert len(same) == 3 and opposite == [] and len(valid) == 3
    same, opposite, valid = stats.order_agreement({"code": 3.0, "wiki": 1.0, "web": 2.0}, reference)
    assert same == [("wiki", "web")] and opposite == [("code", "wiki"), ("code", "web")]
    tied = stats.order_agreement({"code": 1.0, "wiki": 1.0, "web": math.nan}, reference)
    assert tied == ([], [], [("code", "wiki")])  # a tie is neither; a NaN leaves its pairs out


def test_spearman_is_one_for_the_same_order_minus_one_reversed_and_handles_ties():
    a = {"x": 1.0, "y": 2.0, "z": 3.0, "w": 4.0}
    assert stats.spearman(a, {k: 10 * v + 3 for k, v in a.items()}) == pytest.approx(1.0)  # any monotone map
    assert stats.spearman(a, {k: -(v**3) for k, v in a.items()}) == pytest.approx(-1.0)
    # ties take their mean rank: (1, 2.5, 2.5, 4) against (1, 2, 3, 4) -> rho = 0.9487
    assert stats.spearman({"x": 1, "y": 2, "z": 2, "w": 3}, a) == pytest.approx(0.9486833, abs=1e-6)
    assert math.isnan(stats.spearman({"x": 1.0, "y": 2.0}, a))  # two keys in common: no correlation to speak of
    assert math.isnan(stats.spearman({"x": 1.0, "y": 1.0, "z": 1.0}, a))  # a constant scoring


def test_rank_correlation_by_seed_takes_one_rho_per_shared_seed():
    reference = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0}
    by_seed = {  # seed 0 agrees fully, seed 1 swaps the last two, seed 2 is held by "a" alone (left out)
        "a": {0: 0.1, 1: 0.1, 2: 9.0},
        "b": {0: 0.2, 1: 0.2},
        "c": {0: 0.3, 1: 0.4},
        "d": {0: 0.4, 1: 0.3},
    }
    interval = Interval.of(stats.rank_correlation_by_seed(by_seed, reference).values())
    assert interval.n == 2
    assert interval.mean == pytest.approx((1.0 + 0.8) / 2)
    assert interval.low < 0.8 and interval.high > 1.0  # a t-interval over two seeds: wide
