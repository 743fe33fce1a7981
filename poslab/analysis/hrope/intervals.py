"""The hRoPE report's intervals over seeds AND held-out documents: what its verdicts read (docs/verdicts.md: a text
figure's interval is over seeds and held-out documents, paired where the runs share data).

Every run of a corpus is analysed on the same held-out documents and resamples them the same way (one set of
bootstrap resamples per analysis, drawn from its ``--seed``: replicate ``r`` is the same resample of the same
documents in every run, ``compute.analyze_documents``; the bits/byte's are resamples of the validation split's
documents, likewise the same in every run, ``compute.bits_per_byte_replicates``). A figure over an arm's seeds (U*,
ΔU*, an intervention's change, the well's shape, bits/byte) is then a seeds x documents design, crossed, whose
statistic is not a mean of per-document values (U* is a fitted minimum), so the document share of its variance is
read from the resamples:

    seed mean ± t(S − 1) · sqrt(seed term + document term)

- **seed term**: the variance of the S per-seed values / S: the seed scatter on these documents (what the
  Student-t interval over seeds, ``Interval.of``, reads alone);
- **document term**: the variance over the B document resamples of the seed mean of the replicates, replicate
  ``r`` of every seed being one resample of the shared documents: what drawing other documents would move the seed
  mean by (a resample drawn apart for each seed would divide it by S);
- **t on S − 1 degrees of freedom**: the seed term rests on S values, the document term on tens of documents and
  1000 resamples; the smaller one's, as ``stats.crossed_interval`` takes for a seeds x documents table (whose
  ``MS_seeds / (S D)`` is the seed term here and ``MS_documents / (S D)`` the document term: this is its stated
  equivalent for a fitted statistic). It is never narrower than the t-interval over seeds alone (the same t, a
  larger variance), which is kept beside it as a secondary figure (``seeds_only``: "the documents fixed").

**Paired** (two arms on one corpus: the same seed ids, hence training data order, and the same documents and
resamples): the per-seed differences and the per-replicate differences, then the interval above over them, so
what a seed or a document does to both arms cancels. **Across corpora** (nothing shared): each group's variance
(seed term + document term) adds, with Welch-Satterthwaite degrees of freedom on the groups' S − 1.

Resamples where some seed has no value (a resample without an eligible displacement: nan) are left out of the
document term, the same ones for every seed. A run without replicates (summaries written before they were kept,
``RunAnalysis.entry``) gives no interval over seeds and documents: the figure is then reported over seeds only,
said so, and decides no verdict (``seeds.Claim.verdict``). This replaces the percentile bootstrap over seeds and
documents (``stats.nested_interval``) the report showed as a secondary column: with 3 seeds it under-covers the
seed scatter. Torch-free: the render layer computes every interval from the summary.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from poslab.analysis.stats import Difference, Estimate, Interval, exact_t, t_quantile_real

#: what an interval is over: the verdicts read the first; the second is a secondary figure, or all there is
SEEDS_DOCUMENTS = "seeds and documents"
SEEDS_ONLY = "seeds only"


@dataclass(frozen=True)
class Crossed:
    """A figure over seeds (one arm, or A − B) with its 95% interval over seeds and documents (``interval``; no
    bounds when a run has no document replicates), its two variance terms, the degrees of freedom, the resamples
    the document term used, and the t-interval over seeds alone (``seeds_only``)."""

    interval: Interval
    seeds_only: Interval
    seed_term: float
    document_term: float
    df: float
    resamples: int
    test: str = ""

    @property
    def over(self) -> str:
        return SEEDS_DOCUMENTS if self.has_documents else SEEDS_ONLY

    @property
    def has_documents(self) -> bool:
        return math.isfinite(self.document_term)

    @property
    def shown(self) -> Interval:
        """The interval a cell shows: over seeds and documents, or over seeds alone where there is no other."""
        return self.interval if self.has_documents else self.seeds_only

    def difference(self) -> Difference:
        """As ``stats.Difference`` (interval, test, t, df), over seeds and documents (no bounds without them)."""
        variance = self.seed_term + self.document_term
        mean = self.interval.mean
        t = mean / math.sqrt(variance) if variance > 0 else exact_t(mean) if math.isfinite(mean) else math.nan
        return Difference(self.interval, self.test, t if self.has_documents else math.nan, self.df)

    def as_dict(self) -> dict[str, Any]:
        clean = lambda x: x if math.isfinite(x) else None
        return {
            **self.interval.as_dict(),
            "over": self.over,
            "seed_term": clean(self.seed_term),
            "document_term": clean(self.document_term),
            "df": clean(self.df),
            "resamples": self.resamples,
            "seeds_only": self.seeds_only.as_dict(),
        }

    @classmethod
    def from_dict(cls, saved: Mapping[str, Any]) -> Crossed:
        number = lambda key: math.nan if saved.get(key) is None else float(saved[key])
        return cls(
            Interval.from_dict(saved),
            Interval.from_dict(saved.get("seeds_only") or {}),
            number("seed_term"),
            number("document_term"),
            number("df"),
            int(saved.get("resamples") or 0),
            str(saved.get("test", "")),
        )


def _finite_runs(runs: Mapping[int, Estimate]) -> dict[int, Estimate]:
    return {seed: e for seed, e in sorted(runs.items()) if math.isfinite(e.value)}


def document_term(runs: list[Estimate]) -> tuple[float, int]:
    """(variance over resamples of the seed mean of the replicates, resamples used); (nan, 0) where a run has none
    or they do not line up (different lengths: not the same resamples)."""
    lengths = {len(e.replicates) for e in runs}
    if not runs or len(lengths) != 1 or 0 in lengths:
        return math.nan, 0
    stacked = np.stack([np.asarray(e.replicates, dtype=np.float64) for e in runs])  # [seeds, resamples]
    usable = np.all(np.isfinite(stacked), axis=0)
    if usable.sum() < 2:
        return math.nan, int(usable.sum())
    return float(np.var(stacked[:, usable].mean(axis=0), ddof=1)), int(usable.sum())


def over_seeds_documents(runs: Mapping[int, Estimate], test: str = "") -> Crossed:
    """One figure of one arm (seed -> the run's Estimate: its value and document replicates), over its seeds and
    the shared documents (the module docstring); runs without a value are left out."""
    usable = _finite_runs(runs)
    values = [e.value for e in usable.values()]
    seeds_only = Interval.of(values)
    n = len(values)
    if n < 2:
        return Crossed(Interval(seeds_only.mean, math.nan, math.nan, n), seeds_only, math.nan, math.nan, math.nan, 0,
                       test)  # fmt: skip
    seed_term = float(np.var(values, ddof=1)) / n
    documents, resamples = document_term(list(usable.values()))
    df = float(n - 1)
    if not math.isfinite(documents):
        return Crossed(Interval(seeds_only.mean, math.nan, math.nan, n), seeds_only, seed_term, math.nan, df, 0, test)
    half = t_quantile_real(df) * math.sqrt(seed_term + documents)
    interval = Interval(seeds_only.mean, seeds_only.mean - half, seeds_only.mean + half, n)
    return Crossed(interval, seeds_only, seed_term, documents, df, resamples, test)


def paired_estimates(a: Mapping[int, Estimate], b: Mapping[int, Estimate]) -> dict[int, Estimate]:
    """Per seed both have a value for, A − B and its replicates A − B, replicate by replicate (the same document
    resample in both runs; none where either has none or they do not line up)."""
    a, b = _finite_runs(a), _finite_runs(b)
    paired = {}
    for seed in sorted(set(a) & set(b)):
        ra, rb = np.asarray(a[seed].replicates, dtype=np.float64), np.asarray(b[seed].replicates, dtype=np.float64)
        replicates = ra - rb if len(ra) == len(rb) and len(ra) else np.zeros(0)
        paired[seed] = Estimate(a[seed].value - b[seed].value, (math.nan, math.nan), replicates)
    return paired


def paired_seeds_documents(a: Mapping[int, Estimate], b: Mapping[int, Estimate]) -> Crossed:
    """A − B for two arms on one corpus, paired by seed and by document resample (``paired_estimates``); needs two
    common seeds, else (no pairing possible) ``welch_seeds_documents``."""
    paired = paired_estimates(a, b)
    if len(paired) < 2:
        return welch_seeds_documents(a, b)
    crossed = over_seeds_documents(paired, f"paired over {len(paired)} seeds and the documents")
    return crossed if crossed.has_documents else replace(crossed, test=f"paired over {len(paired)} seeds")


def welch_seeds_documents(a: Mapping[int, Estimate], b: Mapping[int, Estimate]) -> Crossed:
    """A − B for groups that share nothing (two corpora: other runs, other documents): each group's variance over
    seeds and documents adds; Welch-Satterthwaite degrees of freedom on the groups' S − 1. ``seeds_only``: Welch's
    interval over the seeds alone (``stats.welch_difference``)."""
    one, other = over_seeds_documents(a), over_seeds_documents(b)
    na, nb = one.seeds_only.n, other.seeds_only.n
    mean = one.seeds_only.mean - other.seeds_only.mean
    nothing = Interval(mean, math.nan, math.nan, na + nb)
    if na < 2 or nb < 2:
        return Crossed(nothing, nothing, math.nan, math.nan, math.nan, 0, "Welch: too few seeds")
    seeds_only, seed_df = _welch_interval(one.seed_term, other.seed_term, na, nb, mean)
    seed_term = one.seed_term + other.seed_term
    if not (one.has_documents and other.has_documents):
        return Crossed(nothing, seeds_only, seed_term, math.nan, seed_df, 0, f"Welch, {seed_df:.1f} df")
    va, vb = one.seed_term + one.document_term, other.seed_term + other.document_term
    interval, df = _welch_interval(va, vb, na, nb, mean)
    return Crossed(interval, seeds_only, seed_term, one.document_term + other.document_term, df,
                   min(one.resamples, other.resamples), f"Welch over seeds and the documents, {df:.1f} df")  # fmt: skip


def _welch_interval(va: float, vb: float, na: int, nb: int, mean: float) -> tuple[Interval, float]:
    """(mean ± t(df) sqrt(va + vb), df) with Welch-Satterthwaite df on na − 1 and nb − 1."""
    n = na + nb
    if na < 2 or nb < 2 or not (math.isfinite(va) and math.isfinite(vb)):
        return Interval(mean, math.nan, math.nan, n), math.nan
    total = va + vb
    if total == 0:
        return Interval(mean, mean, mean, n), float(na + nb - 2)
    df = total**2 / (va**2 / (na - 1) + vb**2 / (nb - 1))
    half = t_quantile_real(df) * math.sqrt(total)
    return Interval(mean, mean - half, mean + half, n), df
