"""The well's shape, the write-up's claim H3 ("suppression grows to about 2-5 paragraphs, then shrinks"), read on the
residual curve of the main U* reading, r(k) the mean residual at paragraph displacement k (``well.Well.residual``):

- **growth**, ``r(2) − r(1)``: below 0, the suppression grows from one paragraph to two;
- **recovery**, ``r(last) − U*``, ``last`` the largest displacement with enough pairs (``--min-pairs``): above 0, the
  well shrinks again by there; 0 where the well is deepest at ``last`` itself;
- **deepest**: the displacement of U* (``Well.location``), per seed, a description (no interval).

Each run's growth and recovery come with their document replicates, the same statistic on each bootstrap resample's
curve (``well.bootstrap_curves``; its U* that curve's minimum), so that a figure over seeds gets its interval over
seeds and documents like U* (``poslab.analysis.hrope.intervals``). Which displacements count is fixed by the pairs
of the whole sample, which depend on the documents alone: every run of a corpus (every arm) has the same ``last``.
A run read back from a summary written before the replicates were kept has the values (from its saved curve and
U*) and no replicates: its figures are over seeds only. Torch-free.
"""

from __future__ import annotations

import math

import numpy as np

from poslab.analysis.hrope.well import Well, curve_depths
from poslab.analysis.stats import Estimate

#: the shape's readings and what each says (the report's note)
SHAPE = {
    "growth": "r(2) − r(1), below 0: the suppression grows from one paragraph to two",
    "recovery": "r(last) − U*, above 0: the well shrinks again by the largest displacement with enough pairs",
}


def last_displacement(residual: np.ndarray) -> int:
    """The largest displacement >= 1 with a value on the curve (enough pairs), -1 without any."""
    finite = [k for k in range(1, len(residual)) if math.isfinite(residual[k])]
    return max(finite) if finite else -1


def shape_of(curves: np.ndarray, depths: np.ndarray, last: int) -> dict[str, np.ndarray]:
    """Growth and recovery of the curves ``[..., K + 1]`` whose U* are ``depths [...]``, at ``last`` (nan where a
    displacement is missing)."""
    curves = np.asarray(curves, dtype=np.float64)
    missing = np.full(curves.shape[:-1], np.nan)
    growth = curves[..., 2] - curves[..., 1] if curves.shape[-1] > 2 else missing
    recovery = curves[..., last] - depths if last >= 1 else missing
    return {"growth": growth, "recovery": recovery}


def shape_values(well: Well) -> dict[str, float]:
    """A run's growth and recovery from its well (the curve and U*) alone."""
    values = shape_of(well.residual, np.asarray(well.depth), last_displacement(well.residual))
    return {name: float(value) for name, value in values.items()}


def shape_estimates(well: Well, curves: np.ndarray) -> dict[str, Estimate]:
    """A run's growth and recovery with their document replicates (``curves [R, K + 1]``: the bootstrap
    resamples' curves, ``well.bootstrap_curves``)."""
    replicates = shape_of(curves, curve_depths(curves), last_displacement(well.residual))
    return {name: Estimate.of(value, replicates[name]) for name, value in shape_values(well).items()}


def shape_without_replicates(well: Well) -> dict[str, Estimate]:
    """Growth and recovery of a run whose replicates are unknown (a summary written before they were kept, a
    run built by hand): the values, no interval over documents."""
    return {name: Estimate(value, (math.nan, math.nan)) for name, value in shape_values(well).items()}
