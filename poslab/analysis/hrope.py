"""The hRoPE write-up's analyses: interventions on the paragraph index, residual attention, the well, the shuffle test.

Everything runs on held-out documents (the run's validation split), one window per document (its first
``context_length`` tokens, kept when it holds at least two paragraphs), through the explicit attention path
(``Transformer.forward(..., return_attention=True)``), whatever the encoding.

**Residual attention.** Attention is averaged over layers and heads, then its log is taken (as the write-up
does). Before fitting we add ``log(n_keys)`` (``n_keys = i + 1`` for query ``i``): a softmax over more keys
spreads thinner, and that has nothing to do with distance; the result is log attention relative to uniform.
Over all query/key pairs ``j < i`` of all documents a trend in the token distance ``d = i - j`` is fitted by
least squares, and the residual is what distance alone does not explain. The trend is ``linear`` by default
(``a + b d``, the write-up's form: one slope, no freedom to soak up paragraph structure); ``log`` adds a
``c log d`` term (attention often decays like a power of distance at short range) for a robustness check.
The trend is fitted *together with one offset per paragraph displacement* (same-paragraph pairs are the
reference, offset 0): fitted alone over all pairs, the trend would absorb part of the well, since
displacement grows with distance (a planted well of depth -0.9 came back as -0.51); fitted jointly, the mean
residual at each displacement is exactly its offset, the attention change at a fixed token distance.

**The well.** For pairs in different paragraphs (displacement ``k`` = number of paragraph boundaries between
key and query, ``k >= 1``), the mean residual per ``k``; ``U*`` is its most negative point among displacements
with at least ``min_pairs`` pairs. Every statistic is a sum over pairs, so each document contributes a few
sufficient statistics (``X'X``, ``X'y`` and per-``k`` sums): the analysis streams over documents in batches,
its memory does not grow with their number, and the bootstrap over documents reweights those sums.

**Interventions** change only the paragraph index (tokens, order, token distances, sentence indices fixed):
``fake-merge`` gives the two real paragraphs around the boundary nearest the window's middle one index (later
paragraphs move down by one); ``fake-split`` gives the second half of the longest paragraph a new index (later
ones move up). "Cross-paragraph attention" has more than one reading (``INTERVENTION_READINGS``), each the
change after minus before: ``same_pairs``, the mean log attention of the pairs across that boundary (queries
after it, keys before it, within the two paragraphs involved); ``persistent_mass``, the attention mass the
queries just after the boundary put on keys lying in another paragraph both before and after; and
``real_cross_mass``, their mass on keys outside their real paragraph. A model blind to the paragraph index
gives exactly 0 under each (attention does not move). The mass by the labels *after* the intervention is not
offered: it moves for a blind model too (the labels move, the attention does not).

**Shuffle test** (the write-up's): the whole paragraphs between the first and the last are put in a random
order, the first (token 0, the attention sink) and the last (truncated by the window) stay in place, so a
window needs four paragraphs; indices are renumbered in the new order and U* recomputed on those documents.
Reported: ``ΔU* = U*(shuffled) - U*`` on the same documents, with a paired bootstrap interval over documents.

**Over seeds** (``poslab.analysis.hrope_report``) the seed is the unit of replication: a figure's interval is
the Student-t interval over the seed values (``poslab.analysis.stats.Interval``), and comparisons are seed-level
differences (paired by seed on one corpus, Welch's across corpora). The intervals over documents here serve the
per-run table, and ``nested_interval`` (seeds, then documents within each seed: a hierarchical bootstrap) a
secondary column: with 3 seeds any bootstrap under-covers the seed scatter.

**Readings of U*** (``u_readings``): the main one above, and four changes for robustness: without ``+log n``,
key 0 left out, the trend fitted on same-paragraph pairs only, the other trend form.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from poslab.builders import load_run_and_data
from poslab.datamodules.corpora import PreparedSplit
from poslab.errors import ConfigError

log = logging.getLogger("poslab")

TRENDS = ("linear", "log")


# ---- documents and interventions -------------------------------------------------------------------------------


@dataclass
class Document:
    """One analysis window: tokens and their paragraph and sentence indices (each from 0)."""

    ordinal: int
    tokens: np.ndarray
    paragraph: np.ndarray
    sentence: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_paragraphs(self) -> int:
        return int(self.paragraph[-1] - self.paragraph[0]) + 1 if len(self) else 0


def held_out_documents(
    split: PreparedSplit, context: int, limit: int | None = None, min_paragraphs: int = 2, min_tokens: int = 8
) -> Iterator[Document]:
    """The first ``context`` tokens of each document of ``split`` with ``min_paragraphs`` paragraphs in them."""
    found = 0
    for ordinal, start, end in split.document_spans():
        if limit is not None and found >= limit:
            return
        stop = min(end - 1, start + context)  # drop the separator closing the document
        if stop - start >= min_tokens:
            paragraph = np.asarray(split.paragraphs[start:stop], dtype=np.int64)
            sentence = np.asarray(split.sentences[start:stop], dtype=np.int64)
            if paragraph[-1] - paragraph[0] + 1 >= min_paragraphs:
                tokens = np.asarray(split.tokens[start:stop], dtype=np.int64)
                yield Document(ordinal, tokens, paragraph - paragraph[0], sentence - sentence[0])
                found += 1


def boundaries(paragraph: np.ndarray) -> np.ndarray:
    """Token positions where a new paragraph starts (after the first)."""
    return np.flatnonzero(np.diff(paragraph)) + 1


def fake_merge(paragraph: np.ndarray, boundary: int) -> np.ndarray:
    """The paragraphs on both sides of ``boundary`` (a position in ``boundaries``) get one index."""
    if boundary not in set(boundaries(paragraph).tolist()):
        raise ValueError(f"position {boundary} is not a paragraph boundary.")
    merged = paragraph.copy()
    merged[boundary:] -= 1
    return merged


def fake_split(paragraph: np.ndarray, position: int) -> np.ndarray:
    """Tokens from ``position`` on in its paragraph, and all later paragraphs, move up by one index."""
    if position <= 0 or position >= len(paragraph) or paragraph[position] != paragraph[position - 1]:
        raise ValueError(f"position {position} is not inside a paragraph.")
    split = paragraph.copy()
    split[position:] += 1
    return split


def merge_boundary(paragraph: np.ndarray) -> int:
    """The boundary nearest the middle of the window (where both sides have context)."""
    starts = boundaries(paragraph)
    return int(starts[np.argmin(np.abs(starts - len(paragraph) / 2))])


def split_position(paragraph: np.ndarray, min_tokens: int = 4) -> int | None:
    """The middle of the longest paragraph, or None when no paragraph has ``min_tokens`` tokens."""
    values, starts, counts = np.unique(paragraph, return_index=True, return_counts=True)
    longest = int(np.argmax(counts))
    if counts[longest] < min_tokens:
        return None
    return int(starts[longest] + counts[longest] // 2)


def crossing_pairs(paragraph: np.ndarray, position: int) -> tuple[np.ndarray, np.ndarray]:
    """(queries, keys): tokens after ``position`` and before it, within the paragraphs meeting there."""
    before, after = paragraph[position - 1], paragraph[position]
    index = np.arange(len(paragraph))
    queries = index[(index >= position) & (paragraph == after)]
    keys = index[(index < position) & (paragraph == before)]
    return queries, keys


def shuffle_paragraphs(document: Document, rng: np.random.Generator, keep_ends: bool = True) -> Document | None:
    """Paragraphs in a random order (never the identity); indices renumbered in the new order.

    ``keep_ends`` (the write-up's test, the default): the first paragraph (token 0, the attention sink, and the
    document's start) and the last one (the window cuts it short) stay where they are and only the whole
    paragraphs between them move; a window needs four paragraphs for that (None otherwise). Without it every
    paragraph moves (two suffice), which also moves the truncated last paragraph into the middle and changes
    token 0 for every model.
    """
    starts = np.concatenate(([0], boundaries(document.paragraph), [len(document)]))
    pieces = [slice(a, b) for a, b in zip(starts[:-1], starts[1:])]
    fixed = 1 if keep_ends else 0
    movable = len(pieces) - 2 * fixed
    if movable < 2:
        return None
    order = np.arange(len(pieces))
    while np.array_equal(order, np.arange(len(pieces))):
        order[fixed : len(pieces) - fixed] = fixed + rng.permutation(movable)
    tokens = np.concatenate([document.tokens[pieces[i]] for i in order])
    paragraph = np.concatenate([np.full(pieces[i].stop - pieces[i].start, rank) for rank, i in enumerate(order)])
    # sentences keep their grouping, renumbered in reading order (a paragraph start is a sentence start)
    sentence_pieces = [document.sentence[pieces[i]] for i in order]
    sentence, offset = [], 0
    for piece in sentence_pieces:
        local = piece - piece[0]
        sentence.append(local + offset)
        offset += int(local[-1]) + 1
    return Document(document.ordinal, tokens, paragraph.astype(np.int64), np.concatenate(sentence))


# ---- attention and its sufficient statistics -------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """One way to turn attention into residuals and the well (the U* robustness table has one column each)."""

    name: str
    description: str
    trend: str = "linear"
    add_log_keys: bool = True  # + log(i + 1): attention relative to uniform over the query's keys
    skip_first_key: bool = False  # leave key 0 (the attention sink) out of every statistic
    trend_on: str = "all"  # "all": trend fitted jointly with the offsets; "same_paragraph": on k = 0 pairs only


TREND_ON = ("all", "same_paragraph")


def u_readings(trend: str = "linear") -> tuple[Reading, ...]:
    """The main reading (``trend``) first, then one change each: what the U* robustness table compares."""
    if trend not in TRENDS:
        raise ConfigError(f"trend={trend!r} is not known; allowed: {', '.join(TRENDS)}.")
    other = "log" if trend == "linear" else "linear"
    return (
        Reading("main", f"{trend} trend fitted jointly with one offset per displacement, + log n", trend),
        Reading("no_log_n", "without the + log(n_keys) term", trend, add_log_keys=False),
        Reading("no_key_0", "key 0 (the attention sink) left out", trend, skip_first_key=True),
        Reading("same_paragraph_trend", "trend fitted on same-paragraph pairs only", trend, trend_on="same_paragraph"),
        Reading(f"{other}_trend", f"{other} trend", other),
    )


#: the intervention readings: name -> what is measured (the change after minus before)
INTERVENTION_READINGS = {
    "same_pairs": "mean change of log attention over the pairs across the manipulated boundary",
    "persistent_mass": "change of the attention mass the queries just after the boundary put on keys that lie in "
    "another paragraph both before and after the intervention",
    "real_cross_mass": "change of the attention mass the queries just after the boundary put on keys outside their "
    "real paragraph (the document's own paragraphs)",
}
INTERVENTIONS = ("merge", "split")


def features(distance: Tensor, trend: str) -> Tensor:
    """The trend's regressors ``[..., F]`` of a token distance."""
    ones = torch.ones_like(distance)
    if trend == "linear":
        return torch.stack((ones, distance), dim=-1)
    if trend == "log":
        return torch.stack((ones, distance, torch.log(distance.clamp_min(1.0))), dim=-1)
    raise ConfigError(f"trend={trend!r} is not known; allowed: {', '.join(TRENDS)}.")


@torch.no_grad()
def mean_attention(model: torch.nn.Module, documents: Sequence[Document], paragraphs: Sequence[np.ndarray]) -> Tensor:
    """Attention averaged over layers and heads ``[B, T, T]`` (fp64), right-padded to the longest document."""
    length = max(len(d) for d in documents)

    def pad(values: np.ndarray) -> Tensor:
        return torch.as_tensor(np.pad(values, (0, length - len(values)), mode="edge"), dtype=torch.long)

    tokens = torch.stack([pad(d.tokens) for d in documents])
    coordinates = {
        "paragraph": torch.stack([pad(p) for p in paragraphs]),
        "sentence": torch.stack([pad(d.sentence) for d in documents]),
    }
    output = model(tokens, coordinates, return_attention=True)
    if not output.attention:
        raise ValueError("the model returned no attention weights (does it have attention layers?).")
    return torch.stack([a.double().mean(dim=1) for a in output.attention]).mean(dim=0)


@dataclass
class PairStatistics:
    """Per document and displacement: sums of ``x x'`` and ``x y`` over its pairs (``x``: the trend's features).

    Displacements ``0..K`` and one bin for "more than K" (``K + 2`` bins); the pair count of a bin is
    ``xx[..., 0, 0]`` (the first feature is the constant). Everything is additive over documents.
    """

    xx: np.ndarray  # [D, K + 2, F, F]
    xy: np.ndarray  # [D, K + 2, F]

    @classmethod
    def empty(cls, n_features: int, max_displacement: int) -> PairStatistics:
        bins = max_displacement + 2
        return cls(np.zeros((0, bins, n_features, n_features)), np.zeros((0, bins, n_features)))

    def extend(self, other: PairStatistics) -> None:
        self.xx = np.concatenate((self.xx, other.xx))
        self.xy = np.concatenate((self.xy, other.xy))

    def subset(self, rows: np.ndarray) -> PairStatistics:
        return PairStatistics(self.xx[rows], self.xy[rows])

    def __len__(self) -> int:
        return len(self.xx)


def pair_statistics(
    attention: Tensor,
    lengths: Sequence[int],
    paragraphs: Sequence[np.ndarray],
    trend: str | Reading,
    max_displacement: int,
) -> PairStatistics:
    """Sums over the pairs ``j < i`` of each document of ``y = log a_ij (+ log(i + 1))`` against the trend
    (``trend``: a trend's name, or a whole ``Reading``)."""
    reading = trend if isinstance(trend, Reading) else Reading("main", "", trend)
    B, T, _ = attention.shape
    i = torch.arange(T, dtype=torch.float64)[:, None]
    j = torch.arange(T, dtype=torch.float64)[None, :]
    distance = (i - j).expand(T, T)
    x = features(distance, reading.trend)  # [T, T, F]
    F_ = x.shape[-1]
    y = torch.log(attention.clamp_min(1e-300))  # [B, T, T]
    if reading.add_log_keys:
        y = y + torch.log(i + 1)
    length = torch.as_tensor(list(lengths))[:, None, None]
    weight = ((distance > 0) & (i < length)).double()  # [B, T, T]: real pairs, key before query
    if reading.skip_first_key:
        weight[:, :, 0] = 0.0
    para = torch.stack([torch.as_tensor(np.pad(p, (0, T - len(p)), mode="edge"), dtype=torch.long) for p in paragraphs])
    k = (para[:, :, None] - para[:, None, :]).clamp(0, max_displacement + 1).flatten(1)  # [B, T * T]
    outer = (x[..., :, None] * x[..., None, :]).reshape(1, T * T, F_ * F_) * weight.reshape(B, T * T, 1)
    xy = x.reshape(1, T * T, F_) * (weight * torch.nan_to_num(y, neginf=0.0)).reshape(B, T * T, 1)
    bins = max_displacement + 2
    xx_sum = torch.zeros(B, bins, F_ * F_, dtype=torch.float64).scatter_add_(
        1, k[..., None].expand(B, T * T, F_ * F_), outer
    )
    xy_sum = torch.zeros(B, bins, F_, dtype=torch.float64).scatter_add_(1, k[..., None].expand(B, T * T, F_), xy)
    return PairStatistics(xx_sum.reshape(B, bins, F_, F_).numpy(), xy_sum.numpy())


def intervention_readings(
    before: Tensor, after: Tensor, real: np.ndarray, changed: np.ndarray, position: int
) -> dict[str, float]:
    """Every reading of ``INTERVENTION_READINGS`` for one document (nan where a reading has nothing to average).

    ``before`` / ``after``: its attention ``[T, T]`` (padding beyond ``len(real)`` is ignored) with the real
    paragraph indices ``real`` and with ``changed`` (the intervention's); ``position``: the boundary merged
    away or inserted. The queries are those just after it: the paragraph after the boundary, from it on.
    """
    labels = real if real[position] != real[position - 1] else changed  # the labelling with that boundary
    queries, keys = crossing_pairs(labels, position)
    rows = torch.as_tensor(queries)
    n = len(real)
    a0, a1 = before[rows, :n], after[rows, :n]  # [Q, n]
    causal = torch.as_tensor(np.arange(n)[None, :] <= queries[:, None])
    real_cross = causal & torch.as_tensor(real[queries][:, None] != real[None, :])
    persistent = real_cross & torch.as_tensor(changed[queries][:, None] != changed[None, :])

    def mass_change(mask: Tensor) -> float:
        has = mask.any(dim=1)
        if not bool(has.any()):
            return math.nan
        change = (a1 * mask).sum(dim=1) - (a0 * mask).sum(dim=1)
        return float(change[has].mean())

    cols = torch.as_tensor(keys)[None, :]
    log_ratio = torch.log(a1[:, cols[0]].clamp_min(1e-300)) - torch.log(a0[:, cols[0]].clamp_min(1e-300))
    return {
        "same_pairs": float(log_ratio.mean()),
        "persistent_mass": mass_change(persistent),
        "real_cross_mass": mass_change(real_cross),
    }


# ---- the well ---------------------------------------------------------------------------------------------------


@dataclass
class Well:
    residual: np.ndarray  # mean residual per displacement 0..K (0 at 0, the reference; nan: too few pairs)
    pairs: np.ndarray  # pairs per displacement 0..K
    depth: float  # U*: the most negative residual at a displacement >= 1 with enough pairs
    location: int  # its displacement (-1: none)
    coefficients: np.ndarray  # the distance trend's fitted coefficients


def fit_well(
    xx: np.ndarray, xy: np.ndarray, eligible: np.ndarray, trend_on: str = "all"
) -> tuple[np.ndarray, np.ndarray]:
    """(residual curve ``[..., K + 1]``, trend coefficients ``[..., F]``) from summed statistics.

    ``trend_on="all"``: least squares of ``y = trend(d) + u_k`` over same-paragraph pairs and pairs at the
    ``eligible`` displacements, with ``u_0 = 0``: one offset per displacement, fitted together with the trend so
    that the trend (a function of distance, which grows with displacement) cannot absorb the well. Within each
    displacement the residuals from the trend then average exactly to ``u_k``: the curve is the mean residual.
    ``trend_on="same_paragraph"``: the trend from same-paragraph pairs alone, ``u_k`` the mean residual of the
    pairs at ``k`` from it (a robustness check: no cross-paragraph pair shapes the trend).
    Leading dimensions of ``xx``/``xy`` (bootstrap replicates) are kept.
    """
    if trend_on not in TREND_ON:
        raise ConfigError(f"trend_on={trend_on!r} is not known; allowed: {', '.join(TREND_ON)}.")
    ks = [int(k) for k in np.flatnonzero(eligible) if k >= 1]
    curve = np.full((*xx.shape[:-3], xx.shape[-3] - 1), np.nan)
    curve[..., 0] = 0.0
    if trend_on == "same_paragraph":
        beta = solve(xx[..., 0, :, :], xy[..., 0, :])
        for k in ks:
            count = xx[..., k, 0, 0]
            with np.errstate(invalid="ignore", divide="ignore"):
                curve[..., k] = (xy[..., k, 0] - np.einsum("...f,...f->...", xx[..., k, 0, :], beta)) / count
        return curve, beta
    base_xx = xx[..., 0, :, :] + sum((xx[..., k, :, :] for k in ks), np.zeros_like(xx[..., 0, :, :]))
    base_xy = xy[..., 0, :] + sum((xy[..., k, :] for k in ks), np.zeros_like(xy[..., 0, :]))
    n_features, m = xx.shape[-1], len(ks)
    system = np.zeros((*xx.shape[:-3], n_features + m, n_features + m))
    rhs = np.zeros((*xx.shape[:-3], n_features + m))
    system[..., :n_features, :n_features] = base_xx
    rhs[..., :n_features] = base_xy
    for column, k in enumerate(ks, start=n_features):
        system[..., :n_features, column] = xx[..., k, :, 0]  # sum of x over the pairs at displacement k
        system[..., column, :n_features] = xx[..., k, 0, :]
        system[..., column, column] = xx[..., k, 0, 0]  # their count
        rhs[..., column] = xy[..., k, 0]  # sum of y
    solution = solve(system, rhs)
    for column, k in enumerate(ks, start=n_features):
        curve[..., k] = solution[..., column]
    return curve, solution[..., :n_features]


def solve(system: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    """``system^-1 rhs`` over leading dimensions; the least-norm solution where a resample left a system
    singular (no pairs at some displacement)."""
    try:
        return np.linalg.solve(system, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return (np.linalg.pinv(system) @ rhs[..., None])[..., 0]


def well_from(stats: PairStatistics, min_pairs: int, weights: np.ndarray | None = None, trend_on: str = "all") -> Well:
    """The well of the documents in ``stats`` (optionally reweighted: ``weights [D]``)."""
    w = np.ones(len(stats)) if weights is None else weights
    xx, xy = np.einsum("d,dkfg->kfg", w, stats.xx), np.einsum("d,dkf->kf", w, stats.xy)
    pairs = xx[:-1, 0, 0]
    curve, beta = fit_well(xx, xy, pairs >= min_pairs, trend_on)
    location, depth = well_minimum(curve)
    return Well(curve, pairs, depth, location, beta)


def well_minimum(residual: np.ndarray) -> tuple[int, float]:
    """(displacement, value) of the most negative residual at displacement >= 1; (-1, nan) without any."""
    cross = residual[..., 1:]
    if np.all(np.isnan(cross)):
        return -1, math.nan
    k = int(np.nanargmin(cross))
    return k + 1, float(cross[k])


def bootstrap_depths(
    stats: PairStatistics, eligible: np.ndarray, weights: np.ndarray, trend_on: str = "all"
) -> np.ndarray:
    """U* for each bootstrap replicate (``weights [R, D]``: document counts of each resample)."""
    xx = np.einsum("rd,dkfg->rkfg", weights, stats.xx)
    xy = np.einsum("rd,dkf->rkf", weights, stats.xy)
    curves = fit_well(xx, xy, eligible, trend_on)[0][:, 1:]
    if np.all(np.isnan(curves)):
        return np.full(len(weights), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate without any eligible displacement: nan
        return np.nanmin(curves, axis=1)


def resample_weights(n_documents: int, replicates: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_documents, np.full(n_documents, 1.0 / n_documents), size=replicates).astype(np.float64)


def interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    values = values[np.isfinite(values)]
    if not values.size:
        return math.nan, math.nan
    tail = (1 - level) / 2 * 100
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


# ---- estimates and their intervals over documents and seeds ----------------------------------------------------


@dataclass
class Estimate:
    """A statistic of one run, its 95% bootstrap interval over documents, and the bootstrap replicates behind
    it (kept for the secondary interval over seeds, then documents: ``nested_interval``)."""

    value: float
    interval: tuple[float, float]
    replicates: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @classmethod
    def of(cls, value: float, replicates: np.ndarray) -> Estimate:
        return cls(float(value), interval(replicates), replicates)

    @classmethod
    def missing(cls) -> Estimate:
        return cls(math.nan, (math.nan, math.nan))


def weighted_means(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per bootstrap replicate (``weights [R, D]``), the mean of the finite per-document ``values [D]``."""
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ np.where(finite, values, 0.0)) / (weights @ finite.astype(np.float64))


def document_mean(values: np.ndarray, weights: np.ndarray) -> Estimate:
    """The mean of per-document values, with the replicates of ``weights``."""
    finite = values[np.isfinite(values)]
    if not finite.size:
        return Estimate.missing()
    return Estimate.of(float(finite.mean()), weighted_means(values, weights))


def nested_replicates(
    runs: Sequence[Estimate], replicates: int = 2000, seed: int = 0, document_seed: int = 1
) -> np.ndarray | None:
    """Bootstrap replicates of the seed mean of ``runs`` (one Estimate per seed), hierarchical, seeds first:
    each replicate draws the seeds with replacement and, for each drawn seed, one of its own replicates over
    documents (a resample of its documents) -- ``stats.hierarchical_bootstrap`` with each run's document
    replicates standing in for per-unit values (U* is fitted on all documents at once, not a mean of them).
    Two groups drawn with the same ``document_seed`` pick the same document resamples slot by slot (paired by
    documents when their runs share the documents and the resampling seed, as runs of one corpus do); ``seed``
    draws the seeds. None when a run has no replicates (read back from JSON) or no run has a value."""
    usable = [r for r in runs if math.isfinite(r.value)]
    if not usable or any(len(r.replicates) == 0 for r in usable):
        return None
    length = min(len(r.replicates) for r in usable)
    stacked = np.stack([r.replicates[:length] for r in usable])  # [seeds, replicates]
    n = len(usable)
    picked_seeds = np.random.default_rng(seed).integers(0, n, size=(replicates, n))
    picked_documents = np.random.default_rng(document_seed).integers(0, length, size=(replicates, n))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate of only nan draws stays nan
        return np.nanmean(stacked[picked_seeds, picked_documents], axis=1)


def nested_interval(
    runs: Sequence[Estimate], replicates: int = 2000, seed: int = 0
) -> tuple[float, tuple[float, float]]:
    """The seed mean of ``runs`` and its 95% hierarchical bootstrap interval, seeds then documents
    (``nested_replicates``). Secondary: with 3 seeds it under-covers; the t-interval over seeds is primary."""
    mean = seed_mean(runs)
    if not math.isfinite(mean):
        return math.nan, (math.nan, math.nan)
    draws = nested_replicates(runs, replicates, seed)
    return mean, (math.nan, math.nan) if draws is None else interval(draws)


def seed_mean(runs: Sequence[Estimate]) -> float:
    usable = [r.value for r in runs if math.isfinite(r.value)]
    return float(np.mean(usable)) if usable else math.nan


# ---- one run ----------------------------------------------------------------------------------------------------


@dataclass
class Depth:
    """U* under one ``Reading``, on all documents, and the shuffle test on the documents it can shuffle."""

    well: Well
    shuffled_well: Well
    depth: Estimate  # U* and its interval over documents
    shuffle_change: Estimate  # U*(shuffled) - U* on the shuffled documents


@dataclass
class RunAnalysis:
    run_dir: str
    encoding: str
    corpus: str
    seed: int
    documents: int
    shuffled_documents: int  # documents with enough paragraphs to shuffle
    depths: dict[str, Depth]  # reading name -> U* and the shuffle test; "main" first
    interventions: dict[str, dict[str, Estimate]]  # reading -> {"merge": ..., "split": ...}
    frequencies: str | None = None  # the hRoPE encodings' allocation (None: not an hRoPE encoding)
    config: Any = None  # the run's config (not in the summary)

    @property
    def main(self) -> Depth:
        return self.depths["main"]

    @property
    def well(self) -> Well:
        return self.main.well

    @property
    def shuffled_well(self) -> Well:
        return self.main.shuffled_well

    @property
    def arm(self) -> str:
        """The encoding, with its frequency allocation for the hRoPE encodings (``hrope_axial:interleaved``)."""
        return self.encoding if self.frequencies is None else f"{self.encoding}:{self.frequencies}"

    def summary(self) -> dict[str, Any]:
        main, same = self.main, self.interventions["same_pairs"]
        return {
            "run_dir": self.run_dir,
            "encoding": self.encoding,
            "frequencies": self.frequencies,
            "corpus": self.corpus,
            "seed": self.seed,
            "documents": self.documents,
            "shuffled_documents": self.shuffled_documents,
            "U*": main.depth.value,
            "U*_at": main.well.location,
            "U*_ci": list(main.depth.interval),
            "shuffled_U*": main.shuffled_well.depth,
            "shuffle_change": main.shuffle_change.value,
            "shuffle_ci": list(main.shuffle_change.interval),
            "merge_change": same["merge"].value,
            "merge_ci": list(same["merge"].interval),
            "split_change": same["split"].value,
            "split_ci": list(same["split"].interval),
            "interventions": {
                reading: {
                    **{kind: estimate.value for kind, estimate in by_kind.items()},
                    **{f"{kind}_ci": list(estimate.interval) for kind, estimate in by_kind.items()},
                }
                for reading, by_kind in self.interventions.items()
            },
            "readings": {
                name: {
                    "U*": d.depth.value,
                    "U*_at": d.well.location,
                    "U*_ci": list(d.depth.interval),
                    "shuffle_change": d.shuffle_change.value,
                    "shuffle_ci": list(d.shuffle_change.interval),
                }
                for name, d in self.depths.items()
            },
            "residual": curve_list(main.well.residual),
            "shuffled_residual": curve_list(main.shuffled_well.residual),
            "pairs": main.well.pairs.tolist(),
            "trend_coefficients": main.well.coefficients.tolist(),
        }

    @classmethod
    def from_summary(cls, summary: dict[str, Any]) -> RunAnalysis:
        """A RunAnalysis back from its ``hrope_runs.json`` entry (``summary``), without bootstrap replicates; an
        entry written before the readings existed gives the main reading and same-pairs interventions only."""

        def well(residual: list[float | None], depth: float, location: int, coefficients: Any = (0.0,)) -> Well:
            curve = np.array([math.nan if v is None else v for v in residual], dtype=float)
            return Well(curve, np.asarray(summary["pairs"]), depth, location, np.asarray(coefficients))

        def estimate(value: float | None, ci: Any) -> Estimate:
            return Estimate(math.nan if value is None else float(value), tuple(ci) if ci else (math.nan, math.nan))

        readings = summary.get("readings") or {"main": summary}
        depths = {}
        for name, r in readings.items():
            main = name == "main"
            depths[name] = Depth(
                well(
                    summary["residual"] if main else [0.0],
                    r["U*"],
                    r["U*_at"],
                    summary.get("trend_coefficients", [0.0]),
                ),
                well(summary["shuffled_residual"] if main else [0.0], summary.get("shuffled_U*", math.nan), -1),
                estimate(r["U*"], r.get("U*_ci")),
                estimate(r["shuffle_change"], r.get("shuffle_ci")),
            )
        saved = summary.get("interventions") or {
            "same_pairs": {k: summary[f"{k}_change"] for k in INTERVENTIONS}
            | {f"{k}_ci": summary[f"{k}_ci"] for k in INTERVENTIONS}
        }
        interventions = {
            reading: {kind: estimate(values[kind], values.get(f"{kind}_ci")) for kind in INTERVENTIONS}
            for reading, values in saved.items()
        }
        return cls(
            run_dir=summary["run_dir"],
            encoding=summary["encoding"],
            corpus=summary["corpus"],
            seed=summary["seed"],
            documents=summary["documents"],
            shuffled_documents=summary.get("shuffled_documents", summary["documents"]),
            depths=depths,
            interventions=interventions,
            frequencies=summary.get("frequencies"),
        )


def curve_list(curve: np.ndarray) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in curve]


def analyze_documents(
    model: torch.nn.Module,
    documents: Iterator[Document],
    batch_size: int = 8,
    trend: str = "linear",
    max_displacement: int = 16,
    min_pairs: int = 200,
    bootstrap: int = 1000,
    seed: int = 0,
    progress: bool = True,
    keep_ends: bool = True,
) -> dict[str, Any]:
    """Stream ``documents`` through ``model`` in batches: the well under every reading of ``u_readings(trend)``,
    the shuffle test (``shuffle_paragraphs(..., keep_ends)``) and the interventions under every reading of
    ``INTERVENTION_READINGS``, with ``bootstrap`` resamples of the documents for their intervals (one set of
    resamples for every statistic of the run, the same for runs with the same documents)."""
    readings = u_readings(trend)

    def empty() -> dict[str, PairStatistics]:
        return {
            r.name: PairStatistics.empty(features(torch.ones(1), r.trend).shape[-1], max_displacement) for r in readings
        }

    original, shuffled = empty(), empty()
    shuffled_rows: list[int] = []  # which documents the shuffle test could use
    changes: dict[str, dict[str, list[float]]] = {
        kind: {r: [] for r in INTERVENTION_READINGS} for kind in INTERVENTIONS
    }
    rng = np.random.default_rng(seed)
    count = 0

    def flush(batch: list[Document]) -> None:
        nonlocal count
        lengths = [len(d) for d in batch]
        base = mean_attention(model, batch, [d.paragraph for d in batch])
        for r in readings:
            original[r.name].extend(pair_statistics(base, lengths, [d.paragraph for d in batch], r, max_displacement))
        mixed = [(row, m) for row, d in enumerate(batch) if (m := shuffle_paragraphs(d, rng, keep_ends)) is not None]
        if mixed:
            attention = mean_attention(model, [m for _, m in mixed], [m.paragraph for _, m in mixed])
            mixed_lengths, mixed_paragraphs = [len(m) for _, m in mixed], [m.paragraph for _, m in mixed]
            for r in readings:
                shuffled[r.name].extend(
                    pair_statistics(attention, mixed_lengths, mixed_paragraphs, r, max_displacement)
                )
            shuffled_rows.extend(count + row for row, _ in mixed)
        merge_at = [merge_boundary(d.paragraph) for d in batch]
        merged_paragraphs = [fake_merge(d.paragraph, b) for d, b in zip(batch, merge_at)]
        merged = mean_attention(model, batch, merged_paragraphs)
        split_at = [split_position(d.paragraph) for d in batch]
        split_paragraphs = [
            fake_split(d.paragraph, s) if s is not None else d.paragraph for d, s in zip(batch, split_at)
        ]
        split = mean_attention(model, batch, split_paragraphs)
        for row, document in enumerate(batch):
            values = intervention_readings(
                base[row], merged[row], document.paragraph, merged_paragraphs[row], merge_at[row]
            )
            for name, value in values.items():
                changes["merge"][name].append(value)
            values = (
                intervention_readings(base[row], split[row], document.paragraph, split_paragraphs[row], split_at[row])
                if split_at[row] is not None
                else dict.fromkeys(INTERVENTION_READINGS, math.nan)
            )
            for name, value in values.items():
                changes["split"][name].append(value)
        count += len(batch)
        if progress:
            log.info("  %d documents", count)

    batch: list[Document] = []
    for document in documents:
        batch.append(document)
        if len(batch) == batch_size:
            flush(batch)
            batch = []
    if batch:
        flush(batch)
    if count < 2:
        raise ConfigError(
            f"only {count} held-out document(s) with two or more paragraphs in the window: the corpus has no (or too "
            f"few) paragraph boundaries in its validation split; the hRoPE analyses need documents with paragraphs."
        )
    weights = resample_weights(count, bootstrap, seed + 1)
    rows = np.asarray(shuffled_rows, dtype=np.int64)
    depths = {}
    for r in readings:
        stats = original[r.name]
        well = well_from(stats, min_pairs, trend_on=r.trend_on)
        depth = Estimate.of(well.depth, bootstrap_depths(stats, well.pairs >= min_pairs, weights, r.trend_on))
        if len(rows):
            # the shuffle test compares the same documents: the shuffled ones and their originals
            same_documents = stats.subset(rows)
            unshuffled = well_from(same_documents, min_pairs, trend_on=r.trend_on)
            shuffled_well = well_from(shuffled[r.name], min_pairs, trend_on=r.trend_on)
            eligible = (unshuffled.pairs >= min_pairs) & (shuffled_well.pairs >= min_pairs)
            w = weights[:, rows]
            replicates = bootstrap_depths(shuffled[r.name], eligible, w, r.trend_on) - bootstrap_depths(
                same_documents, eligible, w, r.trend_on
            )
            change = Estimate.of(shuffled_well.depth - unshuffled.depth, replicates)
        else:
            shuffled_well = Well(
                np.full_like(well.residual, np.nan), np.zeros_like(well.pairs), math.nan, -1, well.coefficients
            )
            change = Estimate.missing()
        depths[r.name] = Depth(well, shuffled_well, depth, change)
    interventions = {
        name: {
            kind: document_mean(np.asarray(changes[kind][name], dtype=np.float64), weights) for kind in INTERVENTIONS
        }
        for name in INTERVENTION_READINGS
    }
    return {
        "documents": count,
        "shuffled_documents": len(rows),
        "depths": depths,
        "interventions": interventions,
    }


def analyze_run(run_dir: str | Path, documents: int = 200, **settings: Any) -> RunAnalysis:
    """Load a finished run and analyse ``documents`` of its held-out split."""
    cfg, module, datamodule = load_run_and_data(run_dir)
    if cfg.task.name != "lm":
        raise ConfigError(f"{run_dir} is a {cfg.task.name!r} run; the hRoPE analyses need a language-model run.")
    datamodule.setup()  # idempotent: maps the prepared corpus once
    context = int(cfg.task.context_length)
    streams = (held_out_documents(g.splits["validation"], context) for g in datamodule.groups)
    chained = (d for stream in streams for d in stream)
    limited = (d for _, d in zip(range(documents), chained))
    result = analyze_documents(module.model, limited, **settings)
    frequencies = cfg.encoding.get("frequencies")
    return RunAnalysis(
        run_dir=str(run_dir),
        encoding=str(cfg.encoding.name),
        corpus=str(cfg.corpus.name),
        seed=int(cfg.seed),
        frequencies=None if frequencies is None else str(frequencies),
        config=cfg,
        **result,
    )
