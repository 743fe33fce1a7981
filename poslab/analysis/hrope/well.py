"""The well: per document and displacement the sufficient statistics of its pairs (``PairStatistics``, summed by
``poslab.analysis.hrope.attention``); the trend in token distance fitted jointly with one offset per paragraph
displacement, the residual curve and its most negative point U* (``well_from``); U* refitted on bootstrap
resamples of the documents (``bootstrap_depths``, from the replicates' curves ``bootstrap_curves``: the resamples are
``poslab.analysis.stats.resample_weights``).
Torch-free: the render layer reads a ``Well`` back from the summary."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from poslab.analysis.hrope.readings import TREND_ON
from poslab.errors import ConfigError


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


def bootstrap_curves(
    stats: PairStatistics, eligible: np.ndarray, weights: np.ndarray, trend_on: str = "all"
) -> np.ndarray:
    """The residual curve ``[R, K + 1]`` of each bootstrap replicate (``weights [R, D]``: document counts of each
    resample), fitted at the ``eligible`` displacements of the whole sample (nan elsewhere, 0 at 0)."""
    xx = np.einsum("rd,dkfg->rkfg", weights, stats.xx)
    xy = np.einsum("rd,dkf->rkf", weights, stats.xy)
    return fit_well(xx, xy, eligible, trend_on)[0]


def curve_depths(curves: np.ndarray) -> np.ndarray:
    """U* of each curve of ``curves [R, K + 1]``: its most negative value at a displacement >= 1 (nan: none)."""
    cross = curves[:, 1:]
    if np.all(np.isnan(cross)):
        return np.full(len(curves), np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a replicate without any eligible displacement: nan
        return np.nanmin(cross, axis=1)


def bootstrap_depths(
    stats: PairStatistics, eligible: np.ndarray, weights: np.ndarray, trend_on: str = "all"
) -> np.ndarray:
    """U* for each bootstrap replicate (``weights [R, D]``: document counts of each resample)."""
    return curve_depths(bootstrap_curves(stats, eligible, weights, trend_on))
