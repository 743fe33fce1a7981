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
ones move up). Reported: the change in mean log attention of the pairs across that boundary (queries after it,
keys before it, within the two paragraphs involved). The distance trend is the same before and after, so this
is also the change of their residual.

**Shuffle test.** Paragraphs of each window are put in a random order (content, lengths and paragraph count
unchanged; indices renumbered in the new order), ``U*`` recomputed; reported: ``ΔU* = U*(shuffled) - U*``
with a paired bootstrap interval over documents, and its spread over seeds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
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


def shuffle_paragraphs(document: Document, rng: np.random.Generator) -> Document:
    """Paragraphs in a random order (not the identity when there are two or more); indices renumbered."""
    starts = np.concatenate(([0], boundaries(document.paragraph), [len(document)]))
    pieces = [slice(a, b) for a, b in zip(starts[:-1], starts[1:])]
    order = np.arange(len(pieces))
    while len(pieces) > 1 and np.array_equal(order, np.arange(len(pieces))):
        order = rng.permutation(len(pieces))
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

    def __len__(self) -> int:
        return len(self.xx)


def pair_statistics(
    attention: Tensor, lengths: Sequence[int], paragraphs: Sequence[np.ndarray], trend: str, max_displacement: int
) -> PairStatistics:
    """Sums over the pairs ``j < i`` of each document of ``y = log a_ij + log(i + 1)`` against the trend."""
    B, T, _ = attention.shape
    i = torch.arange(T, dtype=torch.float64)[:, None]
    j = torch.arange(T, dtype=torch.float64)[None, :]
    distance = (i - j).expand(T, T)
    x = features(distance, trend)  # [T, T, F]
    F_ = x.shape[-1]
    y = torch.log(attention.clamp_min(1e-300)) + torch.log(i + 1)  # [B, T, T]
    length = torch.as_tensor(list(lengths))[:, None, None]
    weight = ((distance > 0) & (i < length)).double()  # [B, T, T]: real pairs, key before query
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


def crossing_change(before: Tensor, after: Tensor, queries: np.ndarray, keys: np.ndarray) -> float:
    """Mean change of log attention over the (query, key) pairs across a boundary, for one document."""
    rows, cols = torch.as_tensor(queries)[:, None], torch.as_tensor(keys)[None, :]
    return float(
        (torch.log(after[rows, cols].clamp_min(1e-300)) - torch.log(before[rows, cols].clamp_min(1e-300))).mean()
    )


# ---- the well ---------------------------------------------------------------------------------------------------


@dataclass
class Well:
    residual: np.ndarray  # mean residual per displacement 0..K (0 at 0, the reference; nan: too few pairs)
    pairs: np.ndarray  # pairs per displacement 0..K
    depth: float  # U*: the most negative residual at a displacement >= 1 with enough pairs
    location: int  # its displacement (-1: none)
    coefficients: np.ndarray  # the distance trend's fitted coefficients


def fit_well(xx: np.ndarray, xy: np.ndarray, eligible: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(residual curve ``[..., K + 1]``, trend coefficients ``[..., F]``) from summed statistics.

    Least squares of ``y = trend(d) + u_k`` over same-paragraph pairs and pairs at the ``eligible``
    displacements, with ``u_0 = 0``: one offset per displacement, fitted together with the trend so that the
    trend (a function of distance, which grows with displacement) cannot absorb the well. Within each
    displacement the residuals from the trend then average exactly to ``u_k``: the curve is the mean residual.
    Leading dimensions of ``xx``/``xy`` (bootstrap replicates) are kept.
    """
    ks = [int(k) for k in np.flatnonzero(eligible) if k >= 1]
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
    try:
        solution = np.linalg.solve(system, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:  # a resample without pairs at some displacement: least-norm solution
        solution = (np.linalg.pinv(system) @ rhs[..., None])[..., 0]
    curve = np.full((*xx.shape[:-3], xx.shape[-3] - 1), np.nan)
    curve[..., 0] = 0.0
    for column, k in enumerate(ks, start=n_features):
        curve[..., k] = solution[..., column]
    return curve, solution[..., :n_features]


def well_from(stats: PairStatistics, min_pairs: int, weights: np.ndarray | None = None) -> Well:
    """The well of the documents in ``stats`` (optionally reweighted: ``weights [D]``)."""
    w = np.ones(len(stats)) if weights is None else weights
    xx, xy = np.einsum("d,dkfg->kfg", w, stats.xx), np.einsum("d,dkf->kf", w, stats.xy)
    pairs = xx[:-1, 0, 0]
    curve, beta = fit_well(xx, xy, pairs >= min_pairs)
    location, depth = well_minimum(curve)
    return Well(curve, pairs, depth, location, beta)


def well_minimum(residual: np.ndarray) -> tuple[int, float]:
    """(displacement, value) of the most negative residual at displacement >= 1; (-1, nan) without any."""
    cross = residual[..., 1:]
    if np.all(np.isnan(cross)):
        return -1, math.nan
    k = int(np.nanargmin(cross))
    return k + 1, float(cross[k])


def bootstrap_depths(stats: PairStatistics, eligible: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """U* for each bootstrap replicate (``weights [R, D]``: document counts of each resample)."""
    xx = np.einsum("rd,dkfg->rkfg", weights, stats.xx)
    xy = np.einsum("rd,dkf->rkf", weights, stats.xy)
    curves = fit_well(xx, xy, eligible)[0][:, 1:]
    if np.all(np.isnan(curves)):
        return np.full(len(weights), np.nan)
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


# ---- one run ----------------------------------------------------------------------------------------------------


@dataclass
class RunAnalysis:
    run_dir: str
    encoding: str
    corpus: str
    seed: int
    documents: int
    well: Well
    shuffled_well: Well
    depth_interval: tuple[float, float]
    shuffle_change: float
    shuffle_interval: tuple[float, float]
    merge_change: float
    merge_interval: tuple[float, float]
    split_change: float
    split_interval: tuple[float, float]
    config: Any = None  # the run's config (not in the summary)

    def summary(self) -> dict[str, Any]:
        return {
            "run_dir": self.run_dir,
            "encoding": self.encoding,
            "corpus": self.corpus,
            "seed": self.seed,
            "documents": self.documents,
            "U*": self.well.depth,
            "U*_at": self.well.location,
            "U*_ci": list(self.depth_interval),
            "shuffled_U*": self.shuffled_well.depth,
            "shuffle_change": self.shuffle_change,
            "shuffle_ci": list(self.shuffle_interval),
            "merge_change": self.merge_change,
            "merge_ci": list(self.merge_interval),
            "split_change": self.split_change,
            "split_ci": list(self.split_interval),
            "residual": [None if math.isnan(v) else float(v) for v in self.well.residual],
            "shuffled_residual": [None if math.isnan(v) else float(v) for v in self.shuffled_well.residual],
            "pairs": self.well.pairs.tolist(),
            "trend_coefficients": self.well.coefficients.tolist(),
        }


def mean_interval(values: np.ndarray, replicates: int, seed: int) -> tuple[float, tuple[float, float]]:
    """Mean of per-document values and its bootstrap interval over documents."""
    values = values[np.isfinite(values)]
    if not values.size:
        return math.nan, (math.nan, math.nan)
    weights = resample_weights(len(values), replicates, seed)
    return float(values.mean()), interval(weights @ values / len(values))


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
) -> dict[str, Any]:
    """Stream ``documents`` through ``model`` in batches; the well, shuffle test and interventions, with
    ``bootstrap`` resamples of the documents for their intervals (``poslab analyze hrope --bootstrap``)."""
    n_features = features(torch.ones(1), trend).shape[-1]
    original = PairStatistics.empty(n_features, max_displacement)
    shuffled = PairStatistics.empty(n_features, max_displacement)
    merges: list[float] = []
    splits: list[float] = []
    rng = np.random.default_rng(seed)
    count = 0

    def flush(batch: list[Document]) -> None:
        nonlocal count
        lengths = [len(d) for d in batch]
        base = mean_attention(model, batch, [d.paragraph for d in batch])
        original.extend(pair_statistics(base, lengths, [d.paragraph for d in batch], trend, max_displacement))
        mixed = [shuffle_paragraphs(d, rng) for d in batch]
        attention = mean_attention(model, mixed, [d.paragraph for d in mixed])
        shuffled.extend(pair_statistics(attention, lengths, [d.paragraph for d in mixed], trend, max_displacement))
        merge_at = [merge_boundary(d.paragraph) for d in batch]
        merged = mean_attention(model, batch, [fake_merge(d.paragraph, b) for d, b in zip(batch, merge_at)])
        split_at = [split_position(d.paragraph) for d in batch]
        split_paragraphs = [
            fake_split(d.paragraph, s) if s is not None else d.paragraph for d, s in zip(batch, split_at)
        ]
        split = mean_attention(model, batch, split_paragraphs)
        for row, document in enumerate(batch):
            queries, keys = crossing_pairs(document.paragraph, merge_at[row])
            merges.append(crossing_change(base[row], merged[row], queries, keys))
            if split_at[row] is not None:
                queries, keys = crossing_pairs(split_paragraphs[row], split_at[row])
                splits.append(crossing_change(base[row], split[row], queries, keys))
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
    well = well_from(original, min_pairs)
    shuffled_well = well_from(shuffled, min_pairs)
    eligible = (well.pairs >= min_pairs) & (shuffled_well.pairs >= min_pairs)  # the same displacements in both
    weights = resample_weights(count, bootstrap, seed + 1)
    depths = bootstrap_depths(original, well.pairs >= min_pairs, weights)
    changes = bootstrap_depths(shuffled, eligible, weights) - bootstrap_depths(original, eligible, weights)
    merge, merge_ci = mean_interval(np.asarray(merges), bootstrap, seed + 2)
    split_change, split_ci = mean_interval(np.asarray(splits), bootstrap, seed + 3)
    return {
        "documents": count,
        "well": well,
        "shuffled_well": shuffled_well,
        "depth_interval": interval(depths),
        "shuffle_change": shuffled_well.depth - well.depth,
        "shuffle_interval": interval(changes),
        "merge_change": merge,
        "merge_interval": merge_ci,
        "split_change": split_change,
        "split_interval": split_ci,
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
    return RunAnalysis(
        run_dir=str(run_dir),
        encoding=str(cfg.encoding.name),
        corpus=str(cfg.corpus.name),
        seed=int(cfg.seed),
        config=cfg,
        **result,
    )
