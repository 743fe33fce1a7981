"""Attention through the explicit path and what the analysis keeps of it: per document and paragraph displacement,
the sufficient statistics of log attention against the distance trend (``pair_statistics``), and the
interventions' readings (``intervention_readings``). Everything here is a sum over query/key pairs, so documents
stream in batches and the bootstrap reweights the sums (``poslab.analysis.hrope.well``)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from poslab.analysis.hrope.documents import Document, crossing_pairs
from poslab.analysis.hrope.readings import TRENDS, Reading
from poslab.analysis.hrope.well import PairStatistics
from poslab.errors import ConfigError


def features(distance: Tensor, trend: str) -> Tensor:
    """The trend's regressors ``[..., F]`` of a token distance."""
    ones = torch.ones_like(distance)
    if trend == "linear":
        return torch.stack((ones, distance), dim=-1)
    if trend == "log":
        return torch.stack((ones, distance, torch.log(distance.clamp_min(1.0))), dim=-1)
    raise ConfigError(f"trend={trend!r} is not known; allowed: {', '.join(TRENDS)}.")


@torch.no_grad()
def mean_attention(
    model: torch.nn.Module,
    documents: Sequence[Document],
    paragraphs: Sequence[np.ndarray],
    sentences: Sequence[np.ndarray] | None = None,
) -> Tensor:
    """Attention averaged over layers and heads ``[B, T, T]`` (fp64), right-padded to the longest document, with
    the paragraph indices ``paragraphs`` and the sentence indices ``sentences`` (None: the documents' own)."""
    length = max(len(d) for d in documents)

    def pad(values: np.ndarray) -> Tensor:
        return torch.as_tensor(np.pad(values, (0, length - len(values)), mode="edge"), dtype=torch.long)

    tokens = torch.stack([pad(d.tokens) for d in documents])
    coordinates = {
        "paragraph": torch.stack([pad(p) for p in paragraphs]),
        "sentence": torch.stack([pad(s) for s in (sentences or [d.sentence for d in documents])]),
    }
    output = model(tokens, coordinates, return_attention=True)
    if not output.attention:
        raise ValueError("the model returned no attention weights (does it have attention layers?).")
    return torch.stack([a.double().mean(dim=1) for a in output.attention]).mean(dim=0)


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
