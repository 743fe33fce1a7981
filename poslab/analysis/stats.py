"""Seed-level statistics for every report and analysis: intervals, differences, ranks and split seeds.

**The seed is the unit of replication.** A run's figure (an accuracy, a loss, a fitted depth) is one draw of the
whole pipeline: initialisation, data order and, for the random encodings, their own draws all follow the seed.
The spread that matters when a write-up says "A beats B" is the spread *between seeds*; tokens, documents or
evaluation windows inside one run are not independent replicates of it. Hence:

* :meth:`Interval.of` -- **the primary interval**: the mean over seeds with the two-sided 95% Student-t interval
  over them (``mean ± t(n-1) * sd / sqrt(n)``). With 3 seeds it is wide (t = 4.303), which is honest: it is
  the interval a referee computes from the per-seed numbers in the tables.
* :func:`paired_difference` -- A minus B when the runs share data under a seed (same corpus, same seed ids):
  the per-seed differences remove what the seed does to both (data order, initialisation), then a t-interval
  over those differences. Use it for two encodings on one corpus.
* :func:`welch` / :func:`welch_difference` -- A minus B when nothing is shared (two corpora, two arms trained
  on different data): Welch's unequal-variance t with the Welch-Satterthwaite degrees of freedom.
* :func:`not_separated` -- groups the places whose rank intervals (below) overlap.
* :func:`hierarchical_bootstrap` -- for figures measured on many units inside each run (documents, windows):
  seeds first, then units within each resampled seed. It is a *secondary* interval: with 3 seeds any bootstrap
  under-covers (it can only ever see 3 seed values, and its percentile interval ignores that the seed sd is
  itself estimated from 3 numbers), so the t-interval over the seed means stays primary.
* :func:`resample_weights`, :class:`Estimate`, :func:`bootstrap_mean`, :func:`nested_interval` -- a run's own
  bootstrap over its documents (resamples as counts, so a sum over documents is reweighted, not copied), and the
  secondary interval over seeds then those document resamples (the hRoPE analysis's U* and interventions).
  :func:`unit_estimate` / :func:`independent_difference` -- a statistic of independent units (a corpus's documents)
  with the t-interval of its bootstrap standard error, and A − B of two such samples (the corpus statistics);
  :func:`interval_side`, the side of 0 an interval lies on.
* :class:`Difference` / :func:`seed_difference` -- a seed-level comparison A − B with its test, t and degrees of
  freedom: paired by seed where the runs share data under a seed, else Welch's.
* :func:`order_agreement` -- how many pairs of groups (corpora) a quantity orders as a reference orders them.
* :func:`spearman` / :func:`rank_correlation_by_seed` -- how far one ranking predicts another (the synthetic zoo's
  places against text's): Spearman's rho, per seed of the ranking measured anew (``Interval.of`` its values for
  the t-interval over those seeds; the reference's own uncertainty is not in it).
* :func:`crossed_interval` / :func:`crossed_difference` / :func:`linearised_ratio` -- **text figures: seeds and
  documents crossed** (every seed's model reads the same held-out documents): the mean of a seeds x documents
  table with a t-interval whose variance has a seed term and a document term (bits/byte linearised as the ratio it
  is), paired on both where two methods share seeds and documents. Coverage checked by simulation.
* :func:`rank_intervals` / :class:`RankInterval` / :func:`seed_tables` -- ranks with known coverage: the places a
  method's Bonferroni-corrected paired differences with every other allow; always holds its point rank (a
  percentile bootstrap over seeds, which poslab used before, under-covers at 3 seeds and can exclude it).
  :func:`mean_rank_intervals` -- a mean rank over tasks with known coverage: every task's rank interval at once
  (Bonferroni over the tasks), their lows and highs averaged. :func:`rank_cell` prints a place as every report
  does (a table's only method as ``only row``, not as a comparison that separated). :func:`shared_seed_means`:
  the seeds every method has and each method's mean over them, the mean a place is computed on (a table ordered by
  it agrees with its rank column).
* :func:`t_quantile_at` / :func:`t_cdf` -- Student's t at any level and fractional df (no scipy).
* :func:`roc_auc` -- how well a score separates two classes (the increments' word boundaries): Mann-Whitney U.
* :func:`best_auc_given` -- the in-sample ceiling of ``roc_auc`` over every score that is a function of a
  discrete key (the increments' word boundaries: what any function of the lead byte could reach).
* :func:`split_seeds` / :func:`seeds_cell` -- where seeds split into two outcomes (one seed learns a task, two
  do not) a mean and an interval describe no run that happened; reports print the per-seed values instead.
* :class:`SeedCell` / :func:`over_seeds` / :func:`seed_cell_text` -- one figure of a table over its seeds: the
  values by seed with their interval (and whether they split: on an accuracy's scale, or for a length in tokens
  more than one doubling apart, ``doublings``), JSON-ready for a report's summary, and its cell read back from that
  summary alone (a report's render layer).

scipy is not a dependency: Student-t quantiles come from a table (1-10 degrees of freedom) and a
Cornish-Fisher expansion beyond (accurate to 3 decimals).
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from statistics import mean, stdev
from typing import Any

import numpy as np

from poslab.io import number_or_nan

#: two-sided 95% Student-t quantiles by degrees of freedom (1 to 10); beyond, a Cornish-Fisher expansion
T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)
LEVEL = 0.95


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``df`` degrees of freedom (to 3 decimals).

    Only 95% is supported (scipy is not a dependency): other levels raise ``ValueError``.
    """
    if not math.isclose(level, LEVEL):
        raise ValueError(f"t_quantile supports only level={LEVEL} (got {level}); scipy is not a dependency")
    if df < 1:
        raise ValueError(f"t_quantile needs at least 1 degree of freedom (got {df})")
    if df <= len(T975):
        return T975[df - 1]
    z = 1.959964
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def t_quantile_real(df: float, level: float = LEVEL) -> float:
    """:func:`t_quantile` at a fractional ``df`` (Welch-Satterthwaite), interpolated linearly between integers.

    Below 1 degree of freedom it uses 1 (the widest tabulated quantile) rather than extrapolate.
    """
    if not df >= 1:  # also catches NaN
        return t_quantile(1, level)
    low = math.floor(df)
    frac = df - low
    if frac == 0:
        return t_quantile(low, level)
    return (1 - frac) * t_quantile(low, level) + frac * t_quantile(low + 1, level)


def _finite(values: Iterable[float]) -> list[float]:
    """The values without NaNs (a run that did not produce the figure)."""
    return [float(v) for v in values if v == v]


@dataclass(frozen=True)
class Interval:
    """A mean over seeds with its 95% interval; ``n`` is the number of seeds (one seed: no interval)."""

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float], bounds: tuple[float, float] | None = None) -> Interval:
        """Mean and 95% Student-t interval over ``values`` (one per seed), NaNs dropped, clipped to ``bounds``.

        ``bounds`` clip the interval, not the values: they must hold every value (accuracies in 0..1; an effective
        length within the lengths every seed was counted over), or the mean can fall outside its own interval."""
        values = _finite(values)
        if not values:
            return cls(math.nan, math.nan, math.nan, 0)
        m = mean(values)
        if len(values) < 2:
            return cls(m, math.nan, math.nan, 1)
        half = t_quantile(len(values) - 1) * stdev(values) / math.sqrt(len(values))
        low, high = m - half, m + half
        if bounds is not None:  # e.g. accuracies: an interval past 0 or 1 says nothing more
            low, high = max(bounds[0], low), min(bounds[1], high)
        return cls(m, low, high, len(values))

    @property
    def has_interval(self) -> bool:
        return self.n >= 2 and math.isfinite(self.low) and math.isfinite(self.high)

    @property
    def degenerate(self) -> bool:
        """An interval of no width (sd 0: every seed the same value, or one clipped at a bound): no evidence of a
        narrow spread, so it decides no verdict and separates no places (docs/verdicts.md)."""
        return self.has_interval and self.low == self.high

    def cell(self, digits: int = 3) -> str:
        """``0.684 [0.52, 0.85]`` (bounds one digit shorter than the mean), the mean alone (one seed), ``n/a``, or
        ``1.000 [degenerate: all 3 seeds equal]`` where the interval has no width."""
        if self.n == 0 or self.mean != self.mean:
            return "n/a"
        if not self.has_interval:
            return f"{self.mean:.{digits}f}"
        if self.degenerate:
            return f"{self.mean:.{digits}f} [degenerate: all {self.n} seeds equal]"
        bd = max(digits - 1, 0)
        return f"{self.mean:.{digits}f} [{self.low:.{bd}f}, {self.high:.{bd}f}]"

    def excludes(self, value: float) -> bool:
        """True when the interval lies wholly on one side of ``value`` (False when there is no interval)."""
        return self.has_interval and (self.low > value or self.high < value)

    def as_dict(self) -> dict[str, float | int | None]:
        """JSON-ready: NaN becomes None (JSON has no NaN)."""
        clean = lambda x: None if x != x else x
        return {"mean": clean(self.mean), "low": clean(self.low), "high": clean(self.high), "n": self.n}

    @classmethod
    def from_dict(cls, cell: Mapping[str, Any]) -> Interval:
        """An ``Interval`` back from its JSON (``as_dict``: NaN written as null)."""
        value = lambda key: number_or_nan(cell.get(key))
        return cls(value("mean"), value("low"), value("high"), int(cell.get("n", 0)))


def paired_difference(a: Mapping[int, float], b: Mapping[int, float]) -> Interval:
    """A minus B over the seeds both have: per-seed differences and a t-interval over them (``n``: paired seeds).

    The paired test for runs that share data under a seed: the seed's own effect cancels in each difference.
    """
    seeds = sorted(set(a) & set(b))
    return Interval.of(a[s] - b[s] for s in seeds)


#: the verdicts of docs/verdicts.md, one set for every write-up
VERDICTS = ("reproduced", "contradicted", "not resolved", "not testable")


def direction_verdict(difference: Interval, claimed: int) -> str:
    """The verdict (``VERDICTS``) on a claimed sign of a difference (``claimed``: -1, below 0; +1, above):
    reproduced where the interval lies wholly on the claimed side of 0, contradicted where wholly on the other, not
    resolved where it holds 0, not testable where there is no interval (one seed) or it has no width (degenerate)."""
    if not difference.has_interval or difference.degenerate:
        return "not testable"
    if not difference.excludes(0.0):
        return "not resolved"
    return "reproduced" if (difference.mean > 0) == (claimed > 0) else "contradicted"


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's t of mean(a) - mean(b), its Welch-Satterthwaite degrees of freedom and the 95% half-width.

    For unpaired seed-level comparisons (different corpora or arms: nothing shared under a seed). NaNs are
    dropped; fewer than 2 values on a side gives NaNs (no variance to estimate).
    """
    a, b = _finite(a), _finite(b)
    if len(a) < 2 or len(b) < 2:
        return math.nan, math.nan, math.nan
    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    diff, se = mean(a) - mean(b), math.sqrt(va + vb)
    if se == 0:  # identical seeds on both sides: a difference is either exact or nothing
        return (math.nan if diff == 0 else math.copysign(math.inf, diff)), math.nan, 0.0
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return diff / se, df, t_quantile_real(df) * se


def welch_difference(a: Sequence[float], b: Sequence[float]) -> Interval:
    """mean(a) - mean(b) with Welch's 95% interval as an :class:`Interval` (``n``: seeds on both sides)."""
    a, b = _finite(a), _finite(b)
    if not a or not b:
        return Interval(math.nan, math.nan, math.nan, 0)
    diff = mean(a) - mean(b)
    _, _, half = welch(a, b)
    return Interval(diff, diff - half, diff + half, len(a) + len(b))


def _seed_ids(scores: Mapping[str, Mapping[int, float]]) -> list[int]:
    """The seed ids any method has, sorted."""
    return sorted({s for per_seed in scores.values() for s in per_seed})


def _shared_seed_ids(scores: Mapping[str, Mapping[int, float]]) -> list[int]:
    """The seed ids every method has a figure for (a NaN is no figure: a run that did not score it), sorted: what a
    paired comparison may use. Where methods have different seeds (a sweep still running), resampling the union
    would give a method with fewer seeds a constant mean, or none (ranked last), in the rounds that draw seeds it
    lacks; and a NaN kept in a table would give its method no mean, which no comparison can place."""
    per_method = [{seed for seed, value in per_seed.items() if value == value} for per_seed in scores.values()]
    return sorted(set.intersection(*per_method)) if per_method else []


def shared_seed_means(scores: Mapping[str, Mapping[int, float]]) -> tuple[list[int], dict[str, float]]:
    """The seeds every method has a figure for (``_shared_seed_ids``) and each method's mean over them: the mean a
    task's rank is computed on (``_task_point_ranks``), so a table ordered by it agrees with its rank column;
    where the methods share no seed, each method's mean over its own seeds."""
    seeds = _shared_seed_ids(scores)
    _, matrix = _score_matrix(scores, seeds or None)
    return seeds, {m: float(v) for m, v in zip(scores, _seed_means(matrix))}


def _score_matrix(
    scores: Mapping[str, Mapping[int, float]], seeds: list[int] | None = None
) -> tuple[list[int], np.ndarray]:
    """Seed ids (``seeds``, or the union over methods) and a methods x seeds array, NaN where a method lacks a
    seed."""
    seeds = _seed_ids(scores) if seeds is None else seeds
    matrix = np.array([[per_seed.get(s, math.nan) for s in seeds] for per_seed in scores.values()], dtype=float)
    return seeds, matrix.reshape(len(scores), len(seeds))


def _seed_means(matrix: np.ndarray) -> np.ndarray:
    """Each method's mean over the seeds it has (NaN when it has none; nanmean would warn)."""
    counts = np.sum(~np.isnan(matrix), axis=-1)
    sums = np.nansum(matrix, axis=-1)
    return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)


def _ranks(means: np.ndarray, higher_is_better: bool) -> np.ndarray:
    """Competition ranks down axis 0 (1 = best; ties share the better rank; NaN ranks last)."""
    oriented = means if higher_is_better else -means
    oriented = np.where(np.isnan(oriented), -np.inf, oriented)
    # rank = 1 + how many methods are strictly better in the same round
    return 1 + np.sum(oriented[None, :, ...] > oriented[:, None, ...], axis=1)


def not_separated(intervals: Mapping[str, Sequence[float]], order: Sequence[str]) -> list[list[str]]:
    """``order`` (best first) cut into groups of consecutive places whose rank intervals overlap.

    ``intervals[method] = (low, high)`` (extra items are ignored). Two neighbours are joined when their
    intervals share a point (``max(lows) <= min(highs)``); groups chain, so A-B and B-C joined puts A, B and C
    in one group even if A's and C's intervals do not meet. The groups partition ``order``: a group of one is a
    place separated from both neighbours; a group of several is a set of places the data do not order.
    """
    groups: list[list[str]] = []
    for name in order:
        if groups:
            prev = intervals[groups[-1][-1]]
            low, high = intervals[name][0], intervals[name][1]
            if max(prev[0], low) <= min(prev[1], high):
                groups[-1].append(name)
                continue
        groups.append([name])
    return groups


def split_seeds(values: Sequence[float], gap: float = 0.25) -> bool:
    """True where the seeds split into two outcomes (bimodal): print per-seed values, not a mean.

    The rule, on the sorted finite values: the largest gap between neighbours exceeds ``gap`` (an absolute
    distance, 0.25 for accuracies; pass one on the figure's own scale otherwise) *and* is larger than all the
    other gaps together (more than half of the range), so the spread is one jump between two clusters rather
    than an even scatter. Both sides then hold at least one seed by construction; fewer than 2 values: False.
    """
    values = sorted(_finite(values))
    if len(values) < 2:
        return False
    gaps = [b - a for a, b in zip(values, values[1:])]
    widest = max(gaps)
    return widest > gap and widest > (values[-1] - values[0]) - widest


def seeds_cell(values: Sequence[float], digits: int = 2) -> str:
    """Per-seed values in seed order, ``0.02 / 0.98 / 1.00`` (a missing one: ``n/a``)."""
    return " / ".join("n/a" if v != v else f"{v:.{digits}f}" for v in values)


def over_seeds(by_seed: Mapping[int, float], bounds: tuple[float, float] | None = None) -> dict[str, Any]:
    """One figure over seeds, JSON-ready: its mean, 95% t-interval and seed count (``Interval.as_dict``) and the
    finite values by seed, in seed order."""
    finite = {s: v for s, v in sorted(by_seed.items()) if v == v}
    return {**Interval.of(finite.values(), bounds).as_dict(), "per_seed": finite}


@dataclass
class SeedCell:
    """One figure over seeds: its values by seed, their interval (clipped to ``bounds``: accuracies stay within
    0..1), and whether the seeds split."""

    by_seed: dict[int, float]
    bounds: tuple[float, float] | None = None
    #: a length in tokens: seeds split where they lie more than one doubling apart (``split_seeds`` on log2 of the
    #: lengths, gap 1), not 0.25 tokens apart as the accuracies' gap would say
    doublings: bool = False

    @property
    def interval(self) -> Interval:
        return Interval.of(list(self.by_seed.values()), bounds=self.bounds)

    @property
    def split(self) -> bool:
        if self.doublings:
            return split_seeds([math.log2(v) for v in _finite(self.by_seed.values()) if v > 0], gap=1.0)
        return split_seeds(list(self.by_seed.values()))

    def text(self, digits: int = 3) -> str:
        return seed_cell_text(self.as_dict(), digits, seed_digits=0 if self.doublings else 2)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: the interval, every seed's value (NaN as None) and the split; ``seed_cell_text`` reads it."""
        per_seed = {seed: None if value != value else value for seed, value in self.by_seed.items()}
        return {**self.interval.as_dict(), "per_seed": per_seed, "split": self.split}


def seed_cell_text(cell: Mapping[str, Any], digits: int = 3, seed_digits: int = 2) -> str:
    """A table's cell of a ``SeedCell.as_dict`` (read back from a summary): the per-seed values in seed order
    (``seed_digits`` decimals) where the seeds split, else the mean with its interval (``Interval.cell``)."""
    if cell.get("split"):
        per_seed = sorted((int(seed), value) for seed, value in cell["per_seed"].items())
        return f"{seeds_cell([number_or_nan(v) for _, v in per_seed], seed_digits)} (split)"
    return Interval.from_dict(cell).cell(digits)


def hierarchical_bootstrap(
    per_seed_units: Mapping[int, Sequence[float]], rounds: int = 2000, seed: int = 0
) -> Interval:
    """Seeds first, then units: mean of seed means with a 2.5%-97.5% percentile interval; ``n`` = seeds.

    Each round resamples the seeds with replacement, and for every resampled seed resamples its units (with
    replacement, independently each time a seed is drawn); the round's figure is the mean of those seed means
    (seeds weigh equally, however many units each has). Secondary to :meth:`Interval.of` over the seed means:
    with 3 seeds any bootstrap under-covers. Fewer than 2 seeds: no interval (the seed scatter is unknown).
    """
    units = {s: np.asarray(_finite(v), dtype=float) for s, v in sorted(per_seed_units.items())}
    units = {s: v for s, v in units.items() if v.size}
    if not units:
        return Interval(math.nan, math.nan, math.nan, 0)
    point = float(np.mean([v.mean() for v in units.values()]))
    if len(units) < 2:
        return Interval(point, math.nan, math.nan, len(units))
    arrays = list(units.values())
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(arrays), size=(rounds, len(arrays)))
    seed_means = np.empty((rounds, len(arrays)))
    for slot in range(len(arrays)):
        for j, arr in enumerate(arrays):
            rows = np.flatnonzero(idx[:, slot] == j)
            draws = rng.integers(0, arr.size, size=(rows.size, arr.size))
            seed_means[rows, slot] = arr[draws].mean(axis=1)
    boot = seed_means.mean(axis=1)
    low, high = np.percentile(boot, [2.5, 97.5])
    return Interval(point, float(low), float(high), len(arrays))


def roc_auc(scores: Any, labels: Any) -> float:
    """ROC-AUC of ``scores`` for binary ``labels``: the chance that a random positive outscores a random
    negative, ties counting half (Mann–Whitney U from average ranks). NaN if only one class is present."""
    s = np.asarray(scores).astype(np.float64).reshape(-1)
    y = np.asarray(labels).astype(bool).reshape(-1)
    if s.shape != y.shape:
        raise ValueError(f"{s.size} scores for {y.size} labels")
    if np.isnan(s).any():
        raise ValueError("scores contain NaN")
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    _, inverse, counts = np.unique(s, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = (ends - (counts - 1) / 2.0)[inverse]  # 1-based ranks, each tie group sharing its average rank
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def best_auc_given(keys: Any, labels: Any) -> float:
    """The highest ROC-AUC any score that is a function of ``keys`` reaches on these labels (an in-sample upper
    bound): each item is scored by its key's empirical positive rate. Ordering the key values by that rate is
    optimal (the Neyman-Pearson order of a discrete feature), and every score that is a function of the key
    ties the items sharing a key as this one does. ``keys`` is ``[G]`` or ``[G, k]`` (a key per row)."""
    k = np.asarray(keys)
    y = np.asarray(labels).astype(np.float64).reshape(-1)
    k = k.reshape(len(k), -1) if k.size else k.reshape(0, 1)
    if len(k) != len(y):
        raise ValueError(f"{len(k)} keys for {len(y)} labels")
    _, group = np.unique(k, axis=0, return_inverse=True)
    group = group.reshape(-1)
    rate = np.bincount(group, weights=y) / np.bincount(group) if len(y) else y
    return roc_auc(rate[group], y)


# ---- the document bootstrap of one run, and differences of seed-level figures --------------------------------


def resample_weights(n_units: int, replicates: int, seed: int) -> np.ndarray:
    """Bootstrap resamples of ``n_units`` units as counts ``[replicates, n_units]`` (how often each unit is drawn):
    a statistic that is a sum over units is its replicate by reweighting, without copying the units."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_units, np.full(n_units, 1.0 / n_units), size=replicates).astype(np.float64)


def percentile_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    """The percentile interval of bootstrap replicates (their non-finite ones dropped); NaNs when none is left."""
    values = values[np.isfinite(values)]
    if not values.size:
        return math.nan, math.nan
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


@dataclass
class Estimate:
    """A statistic of one run, its 95% bootstrap interval over the run's units (documents), and the bootstrap
    replicates behind it (kept for the secondary interval over seeds, then units: ``nested_interval``)."""

    value: float
    interval: tuple[float, float]
    replicates: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def of(cls, value: float, replicates: np.ndarray) -> Estimate:
        return cls(float(value), percentile_interval(replicates), replicates)

    @classmethod
    def missing(cls) -> Estimate:
        return cls(math.nan, (math.nan, math.nan))


def replicate_means(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per bootstrap replicate (``weights [R, D]``, ``resample_weights``), the mean of the finite ``values [D]``."""
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ np.where(finite, values, 0.0)) / (weights @ finite.astype(np.float64))


def bootstrap_mean(values: np.ndarray, weights: np.ndarray) -> Estimate:
    """The mean of per-unit ``values`` (the finite ones), with the replicates of ``weights``."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return Estimate.missing()
    return Estimate.of(float(finite.mean()), replicate_means(values, weights))


def nested_replicates(
    runs: Sequence[Estimate], replicates: int = 2000, seed: int = 0, document_seed: int = 1
) -> np.ndarray | None:
    """Bootstrap replicates of the seed mean of ``runs`` (one Estimate per seed), seeds and documents crossed:
    each replicate draws the seeds with replacement and one document resample, the same for every drawn seed (each
    run's replicate of that index: runs of one corpus read the same documents and resample them with the same
    seed, so replicate r is the same resample in each) -- each run's document replicates standing in for per-unit
    values (a fitted statistic such as U* is not a mean of its documents). A resample drawn apart for each seed
    would treat the seeds' documents as independent and divide the documents' share of the variance by the seeds.
    Two groups drawn with the same ``document_seed`` pick the same document resamples (paired by documents);
    ``seed`` draws the seeds. None when a run has no replicates (read back from JSON) or no run has a value."""
    usable = [r for r in runs if math.isfinite(r.value)]
    if not usable or any(len(r.replicates) == 0 for r in usable):
        return None
    length = min(len(r.replicates) for r in usable)
    stacked = np.stack([r.replicates[:length] for r in usable])  # [seeds, replicates]
    n = len(usable)
    picked_seeds = np.random.default_rng(seed).integers(0, n, size=(replicates, n))
    picked_documents = np.random.default_rng(document_seed).integers(0, length, size=(replicates, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate of only nan draws stays nan
        return np.nanmean(stacked[picked_seeds, picked_documents], axis=1)


def nested_interval(
    runs: Sequence[Estimate], replicates: int = 2000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """The seed mean of ``runs`` and its 95% hierarchical bootstrap interval, seeds then documents
    (``nested_replicates``). Secondary: with 3 seeds it under-covers; the t-interval over seeds is primary."""
    mean_value = seed_mean(runs)
    if not math.isfinite(mean_value):
        return math.nan, (math.nan, math.nan)
    draws = nested_replicates(runs, replicates, seed)
    return mean_value, (math.nan, math.nan) if draws is None else percentile_interval(draws)


def unit_standard_error(replicates: np.ndarray, units: int) -> float:
    """The bootstrap standard error of a statistic of ``units`` resampled units, scaled by sqrt(n / (n - 1)): the
    bootstrap's variance is the plug-in one, (n - 1) / n of the unbiased, which narrows small samples' intervals."""
    finite = replicates[np.isfinite(replicates)]
    if units < 2 or finite.size < 2:
        return math.nan
    return float(np.std(finite, ddof=1)) * math.sqrt(units / (units - 1))


def unit_estimate(value: float, replicates: np.ndarray, units: int, level: float = LEVEL) -> Estimate:
    """A statistic of ``units`` independent units (a corpus's documents) with the t-interval of its bootstrap
    standard error, ``value ± t(units - 1) * se`` (``unit_standard_error``): a percentile interval under-covers
    for skewed per-document values at 60 documents (about 93%; tests/analysis/test_stats_coverage.py), this one
    does not. The replicates are kept for differences (``independent_difference``)."""
    se = unit_standard_error(replicates, units)
    if not (math.isfinite(value) and math.isfinite(se)):
        return Estimate(float(value), (math.nan, math.nan), replicates)
    half = t_quantile_at(units - 1, level) * se
    return Estimate(float(value), (value - half, value + half), replicates)


def independent_difference(a: Estimate, b: Estimate, units_a: int, units_b: int, level: float = LEVEL) -> Estimate:
    """A minus B for statistics of two independent samples (two corpora's documents: ``unit_estimate``s of
    ``units_a`` and ``units_b`` units): the t-interval of the two standard errors combined, with Welch-Satterthwaite
    degrees of freedom. Missing where either side has no value or no standard error."""
    se_a, se_b = unit_standard_error(a.replicates, units_a), unit_standard_error(b.replicates, units_b)
    difference = a.value - b.value
    if not all(math.isfinite(x) for x in (difference, se_a, se_b)):
        return Estimate.missing()
    va, vb = se_a**2, se_b**2
    if va + vb == 0:  # every resample the same on both sides: an interval of no width, said so by its reader
        return Estimate(difference, (difference, difference))
    df = (va + vb) ** 2 / (va**2 / (units_a - 1) + vb**2 / (units_b - 1))
    half = t_quantile_at(df, level) * math.sqrt(va + vb)
    return Estimate(difference, (difference - half, difference + half))


def interval_side(interval: Sequence[float]) -> int:
    """Which side of 0 an interval lies wholly on: +1 above, -1 below, 0 where it holds 0 or is undefined."""
    low, high = interval
    if not (math.isfinite(low) and math.isfinite(high)):
        return 0
    return 1 if low > 0 else -1 if high < 0 else 0


def seed_mean(runs: Sequence[Estimate]) -> float:
    """The mean of the runs' finite values (NaN when none has one)."""
    usable = [r.value for r in runs if math.isfinite(r.value)]
    return float(np.mean(usable)) if usable else math.nan


@dataclass(frozen=True)
class Difference:
    """A minus B over seeds (``interval``), the test that judged it, its t statistic and degrees of freedom."""

    interval: Interval
    test: str
    t: float = math.nan
    df: float = math.nan

    @property
    def side(self) -> int:
        """-1: the interval lies below 0; +1: above 0; 0: not separated (it holds 0), no interval, or one of no
        width (``Interval.degenerate``)."""
        if not self.interval.excludes(0.0) or self.interval.degenerate:
            return 0
        return -1 if self.interval.high < 0 else 1

    def as_dict(self) -> dict[str, Any]:
        finite = lambda x: x if math.isfinite(x) else None
        return {"difference": self.interval.as_dict(), "test": self.test, "t": finite(self.t), "df": finite(self.df)}


def exact_t(difference: float) -> float:
    """t where every seed gives the same difference: infinite, or undefined for no difference."""
    return math.nan if difference == 0 else math.copysign(math.inf, difference)


def seed_difference(a: Mapping[int, float], b: Mapping[int, float], paired: bool) -> Difference:
    """``a`` minus ``b`` (seed -> value). ``paired``: the runs share data under a seed (one corpus), so the
    per-seed differences cancel what a seed does to both (``paired_difference``); needs two common seeds, else
    (or unpaired: two corpora) Welch's interval over the two groups' seeds."""
    a = {s: v for s, v in a.items() if math.isfinite(v)}
    b = {s: v for s, v in b.items() if math.isfinite(v)}
    common = sorted(set(a) & set(b))
    if paired and len(common) >= 2:
        interval = paired_difference(a, b)
        sd = float(np.std([a[s] - b[s] for s in common], ddof=1))
        t = interval.mean / (sd / math.sqrt(len(common))) if sd > 0 else exact_t(interval.mean)
        return Difference(interval, f"paired over {len(common)} seeds", t, len(common) - 1.0)
    t, df, _ = welch(list(a.values()), list(b.values()))
    test = f"Welch, {df:.1f} df" if math.isfinite(df) else "Welch: too few seeds"
    return Difference(welch_difference(list(a.values()), list(b.values())), test, t, df)


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def order_agreement(
    values: Mapping[str, float], reference: Mapping[str, float]
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """How ``values`` order the pairs of keys that ``reference`` orders: (pairs ordered the same way, pairs
    ordered the opposite way, pairs where both have a value), over the pairs of ``values``' keys in their order.
    A tie on either side (or a NaN value) is neither the same nor the opposite (a concordance count, as
    Kendall's tau's, without its p-value: with three groups there are only three pairs)."""
    pairs = list(combinations(values, 2))
    valid = [(a, b) for a, b in pairs if not (math.isnan(values[a]) or math.isnan(values[b]))]
    agreement = {(a, b): _sign(values[a] - values[b]) * _sign(reference[a] - reference[b]) for a, b in valid}
    same = [pair for pair in valid if agreement[pair] > 0]
    opposite = [pair for pair in valid if agreement[pair] < 0]
    return same, opposite, valid


def _average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank (Spearman's convention)."""
    array = np.asarray(values, dtype=float)
    order = np.argsort(array, kind="stable")
    ranks = np.empty(len(array))
    ranks[order] = np.arange(1, len(array) + 1)
    for value in np.unique(array):
        tied = array == value
        ranks[tied] = ranks[tied].mean()
    return ranks


def spearman(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Spearman's rank correlation of two scorings over the keys both hold with a finite value (NaN when fewer
    than three keys or when either side is constant): 1 the same order, -1 the reverse."""
    keys = [k for k in a if k in b and math.isfinite(a[k]) and math.isfinite(b[k])]
    if len(keys) < 3:
        return math.nan
    ranks_a, ranks_b = _average_ranks([a[k] for k in keys]), _average_ranks([b[k] for k in keys])
    if ranks_a.std() == 0 or ranks_b.std() == 0:
        return math.nan
    return float(np.corrcoef(ranks_a, ranks_b)[0, 1])


def rank_correlation_by_seed(
    by_seed: Mapping[str, Mapping[int, float]], reference: Mapping[str, float]
) -> dict[int, float]:
    """Spearman's rho between ``reference`` and each seed's scoring, over the seeds every key of ``reference``
    holds (``_shared_seed_ids``)."""
    scores = {k: v for k, v in by_seed.items() if k in reference}
    return {seed: spearman({k: v[seed] for k, v in scores.items()}, reference) for seed in _shared_seed_ids(scores)}


# ------------------------------------------------------------------------ seeds x documents: the crossed design
# Every seed's model of a method reads the same held-out documents, so a text figure is a seeds x documents table:
# seeds and documents are crossed, not nested. Its grand mean varies with both (another seed, other text):
#     y[s, d] = mu + a[s] + b[d] + e[s, d],   Var(mean) = var_a / S + var_b / D + var_e / (S D)
# estimated from the two-way mean squares (E[MS_seeds] = D var_a + var_e, E[MS_documents] = S var_b + var_e) as
# (MS_seeds + MS_documents) / (S D): that counts var_e / (S D) once more than it is, a small and conservative
# excess (the "pigeonhole" bootstrap's; Owen 2007) that keeps both terms positive. The t quantile takes the
# smaller component's degrees of freedom, min(S - 1, D - 1), not Welch-Satterthwaite's: simulated at 3 and 5 seeds,
# Satterthwaite's df covered 92-95% (liberal when one term has 2 or 4 df), the smaller df 97-100% at an interval
# about 11% wider at 5 seeds (tests/analysis/test_stats_coverage.py checks coverage by simulation).


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` (> 0) degrees of freedom: the regularised incomplete beta function
    ``I_x(df/2, 1/2)`` at ``x = df / (df + t^2)``, by its continued fraction (Numerical Recipes' betacf)."""
    x = df / (df + t * t)
    a, b = df / 2, 0.5
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        tail = front * _beta_fraction(a, b, x) / a
    else:
        tail = 1 - front * _beta_fraction(b, a, 1 - x) / b
    return 1 - tail / 2 if t >= 0 else tail / 2


def _beta_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return h


def t_quantile_at(df: float, level: float) -> float:
    """The two-sided ``level`` quantile of Student's t at any (fractional) ``df`` and any level, by bisection on
    :func:`t_cdf` (for Bonferroni levels such as 1 - 0.05 / 20, which the 95% table has not)."""
    target = 1 - (1 - level) / 2
    low, high = 0.0, 1.0
    while t_cdf(high, df) < target:
        high *= 2
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if t_cdf(middle, df) < target else (low, middle)
    return (low + high) / 2


def linearised_ratio(losses: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per-(seed, document) values whose mean over documents is each seed's ratio ``sum_d loss / sum_d size``
    (bits per byte: a byte-weighted mean, not a mean of per-document figures), linearised about the grand ratio R:
    ``R + (loss - R size) / mean size``, so a document's share of the variance is what it moves the ratio.
    ``sizes`` is one row of documents, or a [seeds, documents] table when the denominator differs by seed too (a
    ratio of losses at two lengths, seed by seed); each seed's mean size divides its row, so that its mean over
    documents is still exactly its own ratio (and the grand mean the mean of the seeds' ratios)."""
    losses = np.asarray(losses, dtype=float)
    sizes = np.broadcast_to(np.asarray(sizes, dtype=float), losses.shape)
    ratio = float(losses.sum() / sizes.sum())
    return ratio + (losses - ratio * sizes) / sizes.mean(axis=1, keepdims=True)


@dataclass(frozen=True)
class CrossedInterval:
    """The mean of a seeds x documents table with its interval (``crossed_interval``): ``seeds`` and ``documents``
    the table's shape, ``df`` the t quantile's degrees of freedom (the smaller component's), and the two variance
    terms of the mean (``seed_term`` = MS_seeds / (S D), ``document_term`` = MS_documents / (S D)): which one the
    width comes from."""

    interval: Interval
    seeds: int
    documents: int
    df: float
    seed_term: float
    document_term: float

    def as_dict(self) -> dict[str, Any]:
        clean = lambda x: None if x != x else x
        terms = {"df": clean(self.df), "seed_term": clean(self.seed_term), "document_term": clean(self.document_term)}
        return {**self.interval.as_dict(), "seeds": self.seeds, "documents": self.documents, **terms}


def crossed_interval(values: np.ndarray, level: float = LEVEL) -> CrossedInterval:
    """Mean and ``level`` interval of a seeds x documents table (rows seeds, columns documents; the comment above):
    t with min(S - 1, D - 1) degrees of freedom on ``(MS_seeds + MS_documents) / (S D)``. One document column: the
    t-interval over seeds (``Interval.of``, exactly). One seed: no interval (the seed scatter is unknown)."""
    values = np.asarray(values, dtype=float)
    seeds, documents = values.shape
    grand = float(values.mean())
    if seeds < 2:
        return CrossedInterval(
            Interval(grand, math.nan, math.nan, seeds), seeds, documents, math.nan, math.nan, math.nan
        )
    ms_seeds = documents * float(np.sum((values.mean(axis=1) - grand) ** 2)) / (seeds - 1)
    ms_documents = seeds * float(np.sum((values.mean(axis=0) - grand) ** 2)) / (documents - 1) if documents > 1 else 0.0
    seed_term, document_term = ms_seeds / (seeds * documents), ms_documents / (seeds * documents)
    variance = seed_term + document_term
    df = float(min(seeds, documents) - 1) if documents > 1 else float(seeds - 1)  # the module comment: conservative
    half = t_quantile_at(df, level) * math.sqrt(variance)
    return CrossedInterval(
        Interval(grand, grand - half, grand + half, seeds), seeds, documents, df, seed_term, document_term
    )


def crossed_difference(a: np.ndarray, b: np.ndarray, level: float = LEVEL) -> CrossedInterval:
    """A minus B where both tables hold the same seeds (rows) and documents (columns): paired on both, so what a
    seed or a document does to both methods cancels."""
    return crossed_interval(np.asarray(a, dtype=float) - np.asarray(b, dtype=float), level)


@dataclass(frozen=True)
class RankInterval:
    """A method's place (1 = best) and the places the data allow: ``low`` is 1 plus the methods shown better than
    it, ``high`` the number of methods less those shown worse, so ``low <= rank <= high`` always."""

    rank: int
    low: int
    high: int

    def cell(self) -> str:
        return rank_cell(self.rank, self.low, self.high)


#: why a rank interval can have no width: the place is certain at the interval's level
RESOLVED_PLACE = "degenerate: every paired comparison separated"
#: a place with nothing to compare it with: one method alone
ONLY_ROW = "only row"


def rank_cell(rank: float, low: float, high: float, digits: int = 0, methods: int | None = None) -> str:
    """A place and its interval as every report prints it: ``3 [2-5]`` (whole places), ``4.50 [2.33, 6.00]`` (a mean
    rank, ``digits`` > 0), a zero-width interval said as such with its reason (``RESOLVED_PLACE``), and a place
    with no other method to compare (``methods`` 1) as ``ONLY_ROW``, not as a comparison that separated."""
    place = f"{rank:.{digits}f}"
    if methods == 1:
        return f"{place} [{ONLY_ROW}]"
    if low == high:
        return f"{place} [{RESOLVED_PLACE}]"
    return (
        f"{place} [{low:.{digits}f}-{high:.{digits}f}]"
        if digits == 0
        else f"{place} [{low:.{digits}f}, {high:.{digits}f}]"
    )


def rank_intervals(
    tables: Mapping[str, np.ndarray], higher_is_better: bool = True, level: float = LEVEL
) -> dict[str, RankInterval]:
    """Each method's rank with a ``level`` interval, from its paired differences with every other method.

    ``tables[method]``: a seeds x documents table (one column: seeds only), the same seeds and documents in every
    method. Method i is shown better than j when their ``crossed_difference`` interval at the level
    ``1 - 2 (1 - level) / (M - 1)`` excludes 0. i's true rank leaves the interval only if one of its M - 1
    comparisons is shown in the wrong direction, which each two-sided interval allows with probability at most
    half its error, ``(1 - level) / (M - 1)``: by Bonferroni, i's interval holds its true rank with probability at
    least ``level`` (a confidence set for ranks; Klein, Wright & Wieczorek 2020). A rank interval can never exclude
    its own point rank, unlike a bootstrap's percentiles.
    """
    methods = list(tables)
    if not methods:
        return {}
    sign = 1.0 if higher_is_better else -1.0
    means = {m: sign * float(np.mean(tables[m])) for m in methods}
    means = {m: -math.inf if value != value else value for m, value in means.items()}  # no figure: last, as _ranks
    pair_level = 1 - 2 * (1 - level) / max(1, len(methods) - 1)  # the wrong direction is half of each error
    better = {m: 0 for m in methods}  # methods shown better than m
    worse = {m: 0 for m in methods}
    for a, b in combinations(methods, 2):
        difference = crossed_difference(tables[a], tables[b], pair_level).interval
        if not difference.has_interval or difference.degenerate:  # a zero-width difference separates nothing
            continue
        low, high = sorted((sign * difference.low, sign * difference.high))
        if low > 0:  # a shown better than b
            better[b] += 1
            worse[a] += 1
        elif high < 0:
            better[a] += 1
            worse[b] += 1
    result = {}
    for m in methods:
        rank = 1 + sum(means[o] > means[m] for o in methods)
        result[m] = RankInterval(rank, 1 + better[m], len(methods) - worse[m])
    return result


def mean_rank_intervals(
    per_task: Mapping[str, Mapping[str, Mapping[int, float]]], higher_is_better: bool = True, level: float = LEVEL
) -> dict[str, tuple[float, float, float]]:
    """Per method: (its mean rank over the tasks it was run on, and a ``level`` interval for it with known coverage).

    ``per_task[task][method][seed_id]``. In each of the T tasks :func:`rank_intervals` over the seeds all its
    methods share (:func:`seed_tables`), at the level ``1 - (1 - level) / T``: by Bonferroni every task's interval
    holds its true rank at once with probability at least ``level``, and then the mean of the lows and the mean of
    the highs hold the mean true rank. Conservative (two Bonferroni steps), never under-covering, and it always
    holds its point, the mean of the per-task point ranks. A task where the methods share fewer than two seeds
    allows every place (1 .. its methods). It replaced a percentile bootstrap of the mean rank, which under-covers
    at few seeds (82% at 3 seeds in ``tests/analysis/test_stats_coverage.py``'s simulation).
    """
    tasks = [scores for scores in per_task.values() if scores]
    task_level = 1 - (1 - level) / max(1, len(tasks))
    places: dict[str, list[RankInterval]] = defaultdict(list)
    for scores in tasks:
        for method, place in _task_rank_intervals(scores, higher_is_better, task_level).items():
            places[method].append(place)
    return {
        method: (
            float(mean(p.rank for p in found)),
            float(mean(p.low for p in found)),
            float(mean(p.high for p in found)),
        )
        for method, found in sorted(places.items())
    }


def mean_ranks(
    per_task: Mapping[str, Mapping[str, Mapping[int, float]]], higher_is_better: bool = True
) -> dict[str, float]:
    """Per method: the point of :func:`mean_rank_intervals` alone (no comparisons computed), for a ranking
    recomputed many times (one task left out at a time)."""
    places: dict[str, list[int]] = defaultdict(list)
    for scores in (scores for scores in per_task.values() if scores):
        for method, rank in _task_point_ranks(scores, higher_is_better).items():
            places[method].append(rank)
    return {method: float(mean(found)) for method, found in sorted(places.items())}


def _task_point_ranks(scores: Mapping[str, Mapping[int, float]], higher_is_better: bool) -> dict[str, int]:
    """Each method's rank by its mean over the seeds all methods share (:func:`rank_intervals`' point); where they
    share none (a sweep still running), by its mean over its own seeds."""
    _, matrix = _score_matrix(scores, _shared_seed_ids(scores) or None)
    return {m: int(r) for m, r in zip(scores, _ranks(_seed_means(matrix), higher_is_better))}


def _task_rank_intervals(
    scores: Mapping[str, Mapping[int, float]], higher_is_better: bool, level: float
) -> dict[str, RankInterval]:
    """:func:`rank_intervals` over the shared seeds; where the methods share none, every place allowed."""
    if _shared_seed_ids(scores):
        return rank_intervals(seed_tables(scores), higher_is_better, level)
    return {m: RankInterval(r, 1, len(scores)) for m, r in _task_point_ranks(scores, higher_is_better).items()}


def seed_tables(scores: Mapping[str, Mapping[int, float]]) -> dict[str, np.ndarray]:
    """``scores[method][seed]`` as seeds x 1 tables over the seeds every method has (``_shared_seed_ids``), for
    :func:`rank_intervals` where a figure has no documents (a synthetic task's accuracy)."""
    seeds = _shared_seed_ids(scores)
    return {
        m: np.array([[per_seed[s]] for s in seeds], dtype=float).reshape(len(seeds), 1)
        for m, per_seed in scores.items()
    }
