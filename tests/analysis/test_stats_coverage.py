"""Issue 37, item 4: intervals with known coverage. On generated seeds x documents tables with a known truth
(seed effects, document effects shared by every method, noise), nominal 95% intervals must cover the truth at least
93% of the time, for means, paired differences and ranks; and a rank interval always holds its point rank.

The simulations are seeded (the same draws on every machine); 400 repetitions put the binomial standard error of a
95% coverage near 1.1%, so a method that covers 95% passes 93% with about 96% probability and one at 90% fails."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from poslab.analysis.stats import (
    crossed_difference,
    crossed_interval,
    independent_difference,
    linearised_ratio,
    mean_rank_intervals,
    rank_intervals,
    resample_weights,
    seed_tables,
    t_cdf,
    t_quantile,
    t_quantile_at,
    unit_estimate,
)

REPETITIONS = 400
#: true bits/byte of five methods: two pairs close together (the hard case for ranks), one apart
TRUTH = np.array([1.00, 1.02, 1.10, 1.13, 1.30])


def simulated_tables(rng: np.random.Generator, seeds: int, documents: int) -> tuple[np.ndarray, np.ndarray]:
    """Methods x seeds x documents of loss (bits) and the documents' sizes (bytes): each document its own
    difficulty, shared by every method and seed (the paired case), each method and seed its own offset, and noise.
    The truth is each method's mean rate (``TRUTH``): a document's difficulty has mean 0."""
    sizes = rng.integers(500, 12_000, size=documents).astype(float)  # unequal: the ratio matters
    difficulty = rng.normal(0, 0.25, size=documents)  # shared: cancels in a paired difference
    seed_offset = rng.normal(0, 0.03, size=(len(TRUTH), seeds, 1))
    interaction = rng.normal(0, 0.03, size=(len(TRUTH), 1, documents))  # a method likes some documents more
    noise = rng.normal(0, 0.02, size=(len(TRUTH), seeds, documents))
    rate = TRUTH[:, None, None] + difficulty[None, None, :] + seed_offset + interaction + noise
    return rate * sizes[None, None, :], sizes


def covers(interval, truth: float) -> bool:
    return interval.low <= truth <= interval.high


@pytest.mark.parametrize(("seeds", "documents"), [(5, 40), (3, 30), (5, 10)])
def test_mean_and_difference_intervals_cover_at_least_93_percent(seeds, documents):
    rng = np.random.default_rng(7)
    mean_hits, difference_hits = 0, 0
    for _ in range(REPETITIONS):
        losses, sizes = simulated_tables(rng, seeds, documents)
        tables = [linearised_ratio(losses[m], sizes) for m in range(len(TRUTH))]
        mean_hits += covers(crossed_interval(tables[0]).interval, TRUTH[0])
        difference_hits += covers(crossed_difference(tables[2], tables[1]).interval, TRUTH[2] - TRUTH[1])
    assert mean_hits / REPETITIONS >= 0.93, mean_hits / REPETITIONS
    assert difference_hits / REPETITIONS >= 0.93, difference_hits / REPETITIONS


@pytest.mark.parametrize(("seeds", "documents"), [(5, 40), (3, 30)])
def test_the_ratio_to_the_training_length_covers_its_rise(seeds, documents):
    """``report length --claim "A>1@ratio"``: bits at a longer length over bits at the training length, document
    by document (``linearised_ratio`` with a seeds x documents denominator). Each method's loss grows by its true
    factor (``GROWTH``) times a document's and a seed's own growth, shared across methods where the data are."""
    growth = np.array([1.00, 1.05, 1.40])
    rng = np.random.default_rng(17)
    hits = {"rise": 0, "flat": 0, "difference": 0}
    for _ in range(REPETITIONS):
        losses, sizes = simulated_tables(rng, seeds, documents)
        document_growth = rng.normal(0, 0.05, size=(1, documents))  # some documents suffer more at length
        longer = []
        for m, factor in enumerate(growth):
            own = rng.normal(0, 0.03, size=(seeds, 1)) + rng.normal(0, 0.02, size=(seeds, documents))
            longer.append(losses[m] * (factor + factor * document_growth + own))
        tables = [linearised_ratio(longer[m], losses[m]) for m in range(len(growth))]
        hits["rise"] += covers(crossed_interval(tables[2] - 1).interval, growth[2] - 1)
        hits["flat"] += covers(crossed_interval(tables[0] - 1).interval, 0.0)
        hits["difference"] += covers(crossed_difference(tables[2], tables[1]).interval, growth[2] - growth[1])
    for name, count in hits.items():
        assert count / REPETITIONS >= 0.93, (name, count / REPETITIONS)


def test_rank_intervals_cover_the_true_rank_and_hold_their_point_rank():
    rng = np.random.default_rng(11)
    true_rank = {f"m{i}": i + 1 for i in range(len(TRUTH))}  # lower bits/byte is better: TRUTH is sorted
    hits = {m: 0 for m in true_rank}
    separated = 0
    for _ in range(REPETITIONS):
        losses, sizes = simulated_tables(rng, 5, 40)
        tables = {f"m{i}": linearised_ratio(losses[i], sizes) for i in range(len(TRUTH))}
        ranks = rank_intervals(tables, higher_is_better=False)
        for m, place in ranks.items():
            assert place.low <= place.rank <= place.high, (m, place)
            hits[m] += place.low <= true_rank[m] <= place.high
        separated += ranks["m4"].low == ranks["m4"].high == 5  # the method far apart is placed
    for m, count in hits.items():
        assert count / REPETITIONS >= 0.93, (m, count / REPETITIONS)
    assert separated / REPETITIONS > 0.9  # not covering by saying nothing: a clear last place is resolved


def simulated_zoo(rng: np.random.Generator, truth: np.ndarray, seeds: int) -> dict[str, dict[str, dict[int, float]]]:
    """``per_task[task][method][seed]`` accuracies: each task's true means (a row of ``truth``), a seed effect
    shared by every method in the task (the same data under a seed: the paired case), and noise."""
    per_task = {}
    for t, means in enumerate(truth):
        shared = rng.normal(0, 0.05, size=seeds)
        values = means[:, None] + shared[None, :] + rng.normal(0, 0.02, size=(len(means), seeds))
        per_task[f"t{t}"] = {f"m{m}": dict(enumerate(values[m].tolist())) for m in range(len(means))}
    return per_task


@pytest.mark.parametrize("seeds", [5, 3])
def test_the_mean_rank_over_tasks_covers_the_true_mean_rank(seeds):
    """The overall ranking of ``report zoo``: five methods on four tasks, near ties in some (the hard case). The
    true mean rank is each method's mean over tasks of its rank by the true means. (The percentile bootstrap it
    replaced covered 82% for the second method at 3 seeds in this simulation, 93% at 5.)"""
    rng = np.random.default_rng(13)
    truth = np.array(
        [
            [0.90, 0.89, 0.60, 0.58, 0.30],
            [0.50, 0.52, 0.51, 0.90, 0.10],
            [0.95, 0.95, 0.94, 0.40, 0.41],
            [0.20, 0.30, 0.40, 0.50, 0.60],
        ]
    )
    true_ranks = 1 + (truth[:, None, :] > truth[:, :, None]).sum(axis=2)  # ties share the better rank
    true_mean = {f"m{m}": true_ranks[:, m].mean() for m in range(truth.shape[1])}
    hits, repetitions = {m: 0 for m in true_mean}, REPETITIONS // 4  # conservative: it covers near 100%
    for _ in range(repetitions):
        found = mean_rank_intervals(simulated_zoo(rng, truth, seeds))
        for m, (point, low, high) in found.items():
            assert low <= point <= high, (m, point, low, high)
            hits[m] += low <= true_mean[m] <= high
    for m, count in hits.items():
        assert count / repetitions >= 0.93, (m, count / repetitions)


def test_the_mean_rank_interval_resolves_a_clear_order_and_allows_every_place_without_seeds():
    rng = np.random.default_rng(2)
    truth = np.array([[0.9, 0.6, 0.3], [0.8, 0.5, 0.2]])
    found = mean_rank_intervals(simulated_zoo(rng, truth, 5))
    assert found == {"m0": (1.0, 1.0, 1.0), "m1": (2.0, 2.0, 2.0), "m2": (3.0, 3.0, 3.0)}
    one_seed = {"t": {"a": {0: 0.9}, "b": {0: 0.1}}, "u": {"a": {0: 0.2}, "b": {1: 0.8}}}  # u: no shared seed
    assert mean_rank_intervals(one_seed) == {"a": (1.5, 1.0, 2.0), "b": (1.5, 1.0, 2.0)}


def test_an_interval_over_seeds_on_one_document_misses_the_corpus():
    """Why every text figure is measured on all held-out text: on one document the seeds agree about that
    document, and the interval over them says nothing about other text (the lm_zoo's old 16 KB sample)."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(REPETITIONS):
        losses, sizes = simulated_tables(rng, 5, 1)
        hits += covers(crossed_interval(linearised_ratio(losses[0], sizes)).interval, TRUTH[0])
    assert hits / REPETITIONS < 0.5


def test_the_linearised_ratio_averages_to_each_seeds_bits_per_byte():
    rng = np.random.default_rng(3)
    losses, sizes = simulated_tables(rng, 4, 25)
    values = linearised_ratio(losses[0], sizes)
    np.testing.assert_allclose(values.mean(axis=1), losses[0].sum(axis=1) / sizes.sum(), rtol=1e-12)


def test_a_ratio_with_a_denominator_per_seed_averages_to_each_seeds_ratio():
    """Bits at a longer length over bits at 1x (``report length``'s ``@ratio``): each seed's row averages to its
    own ratio of sums exactly, whatever its denominator."""
    rng = np.random.default_rng(4)
    losses, _ = simulated_tables(rng, 4, 25)
    longer = losses[0] * rng.uniform(1.0, 1.5, size=losses[0].shape)
    values = linearised_ratio(longer, losses[0])
    np.testing.assert_allclose(values.mean(axis=1), longer.sum(axis=1) / losses[0].sum(axis=1), rtol=1e-12)


def test_one_document_column_is_the_t_interval_over_seeds_and_one_seed_has_none():
    values = np.array([[2.1], [2.4], [2.2], [2.6], [2.3]])
    found = crossed_interval(values).interval
    half = t_quantile(4) * values.std(ddof=1) / np.sqrt(5)
    assert found.mean == pytest.approx(2.32) and found.high - found.mean == pytest.approx(half, rel=1e-3)
    assert not crossed_interval(np.array([[1.0, 2.0, 3.0]])).interval.has_interval


def test_rank_intervals_over_seeds_alone():
    scores = {
        "a": {0: 0.9, 1: 0.91, 2: 0.92, 3: 0.9},
        "b": {0: 0.5, 1: 0.52, 2: 0.49, 3: 0.51},
        "c": {0: 0.6, 1: 0.4, 2: 0.55, 3: 0.5, 9: 0.1},
    }
    ranks = rank_intervals(seed_tables(scores))
    assert (ranks["a"].rank, ranks["a"].low, ranks["a"].high) == (1, 1, 1)
    assert ranks["b"].low == 2 and ranks["c"].low == 2 and ranks["b"].high == ranks["c"].high == 3  # b, c not ordered
    assert ranks["b"].cell() in {"2 [2-3]", "3 [2-3]"}
    assert ranks["a"].cell() == "1 [degenerate: every paired comparison separated]"  # said, with its reason


def test_a_seed_without_a_figure_is_left_out_never_ranked_first():
    """A run that scored no figure (NaN: nothing past the training length) once gave its method no mean, which
    every comparison then ranked first. Now the seeds compared are those every method has a figure for."""
    scores = {
        "a": {0: 0.91, 1: 0.90, 2: 0.93},
        "b": {0: 0.51, 1: 0.50, 2: 0.52},
        "failed": {0: float("nan"), 1: 0.10, 2: 0.12},
    }
    tables = seed_tables(scores)
    assert all(table.shape == (2, 1) for table in tables.values())  # seeds 1 and 2
    ranks = rank_intervals(tables)
    assert [ranks[m].rank for m in ("a", "b", "failed")] == [1, 2, 3]
    mean_rank = mean_rank_intervals({"task": scores})
    assert mean_rank["failed"][0] == 3.0 and mean_rank["failed"][1] <= 3.0 <= mean_rank["failed"][2]
    nothing = {"a": {0: 0.9, 1: 0.8}, "none": {0: float("nan"), 1: float("nan")}}  # no figure in any seed
    assert mean_rank_intervals({"task": nothing})["none"] == (2.0, 1.0, 2.0)  # last, every place allowed


def test_a_difference_of_no_width_separates_no_places():
    """Every seed the same difference (1.0 against 0.5, a ceiling): an interval of no width is no evidence of a
    narrow spread (docs/verdicts.md), so it does not order the two."""
    ranks = rank_intervals(seed_tables({"a": {0: 1.0, 1: 1.0, 2: 1.0}, "b": {0: 0.5, 1: 0.5, 2: 0.5}}))
    assert (ranks["a"].rank, ranks["a"].low, ranks["a"].high) == (1, 1, 2)
    assert (ranks["b"].rank, ranks["b"].low, ranks["b"].high) == (2, 1, 2)


@pytest.mark.parametrize("df", [1, 2, 3.5, 7, 30, 400])
@pytest.mark.parametrize("level", [0.5, 0.95, 0.99875])
def test_t_quantiles_at_any_level_are_students(df, level):
    assert t_quantile_at(df, level) == pytest.approx(scipy.stats.t.ppf(1 - (1 - level) / 2, df), rel=1e-7)
    assert t_cdf(-1.7, df) == pytest.approx(scipy.stats.t.cdf(-1.7, df), rel=1e-9)


def skewed_corpus(rng: np.random.Generator, mu: float, documents: int) -> tuple[np.ndarray, np.ndarray]:
    """Per document: the summed length of its 2 + Poisson(8) paragraphs (lognormal, sd 0.8 on the log scale) and
    their count. The true mean paragraph length is exp(mu + 0.32)."""
    counts = 2 + rng.poisson(8, size=documents)
    sums = np.array([rng.lognormal(mu, 0.8, size=c).sum() for c in counts])
    return sums, counts.astype(float)


@pytest.mark.slow
def test_document_intervals_of_a_ratio_and_of_two_corpora_cover_at_least_93_percent():
    """The corpus statistics' intervals (``unit_estimate``, ``independent_difference``): a pooled mean paragraph
    length (a ratio of sums over documents, skewed) and the difference between two corpora's, at the sizes the
    corpus statistics read (62 and 100 documents). Their coverage here is about 94% and 95.5% (measured with
    2,000 repetitions of another seed), so 2,000 repetitions (standard error 0.5%) keep a pass from resting on
    the draw. At 20 documents a percentile interval covered about 92% of this ratio and this one about 93%."""
    rng = np.random.default_rng(5)
    documents_a, documents_b, repetitions = 62, 100, 2000

    def estimate(mu: float, documents: int, seed: int):
        sums, counts = skewed_corpus(rng, mu, documents)
        weights = resample_weights(documents, 400, seed)
        return unit_estimate(sums.sum() / counts.sum(), (weights @ sums) / (weights @ counts), documents)

    truth_a, truth_b = np.exp(5.0 + 0.32), np.exp(5.3 + 0.32)
    mean_hits, difference_hits = 0, 0
    for repetition in range(repetitions):
        a, b = estimate(5.0, documents_a, 2 * repetition), estimate(5.3, documents_b, 2 * repetition + 1)
        mean_hits += a.interval[0] <= truth_a <= a.interval[1]
        difference = independent_difference(a, b, documents_a, documents_b)
        difference_hits += difference.interval[0] <= truth_a - truth_b <= difference.interval[1]
    assert mean_hits / repetitions >= 0.93, mean_hits / repetitions
    assert difference_hits / repetitions >= 0.93, difference_hits / repetitions
