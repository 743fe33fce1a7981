"""Effective context length: the largest evaluated length at which a score stays within a stated margin of its
value at the training length (1x), and its interval over seeds.

- accuracy (higher is better): a length counts while ``score >= ACCURACY_MARGIN x score(1x)`` (85% of it);
- bits/byte or loss (lower is better): while ``score <= LOSS_MARGIN x score(1x)`` (1.05x of it).

"Stays": the lengths from 1x upward count until the first that fails; a later recovery does not count (a model
that fails at 4x and passes at 8x by chance has an effective length of 2x). A length the run has no score at (NaN,
or never evaluated there while other runs were) stops the count as a failure does: it is never skipped. The
training length itself always counts, so the effective length is never below it; a run missing its 1x figure has
none (NaN).

**Not learned: no effective length.** A margin of a chance-level 1x is passed by every longer length at chance, so
a run that never learned the task would get the longest length there is. Where a 1x at or below a ``floor`` means
nothing was learned (``poslab report zoo``: the task's best trivial baseline plus ``zoo.FLOOR_MARGIN``), such a run
has none (NaN): left out of the mean, and counted apart by the caller. Bits/byte has no floor (``floor=None``).

**The lengths counted over** (``evaluated_lengths``): every length any run was evaluated at, up to the longest
that every run was evaluated at. No run is followed past where every run could be (so each seed's length lies
within the interval's bounds), and below it a length one run lacks stops that run rather than being skipped.

Over seeds: each seed's effective length, then their mean and 95% Student-t interval (``stats.Interval.of``, the
interval every report here uses), clipped to the lengths counted over. ``poslab report zoo`` shows it as a column
(``effective length``, the lengths of every run of the task); ``poslab report length`` calls
``effective_length_over_seeds`` with its lengths and bits/byte (``higher_is_better=False``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from poslab.analysis.stats import Interval

ACCURACY_MARGIN = 0.85  # accuracy: at least 85% of its 1x value
LOSS_MARGIN = 1.05  # bits/byte (or loss): at most 1.05x its 1x value


def within_margin(score: float, one_x: float, higher_is_better: bool) -> bool:
    """Whether ``score`` is within the stated margin of ``one_x`` (NaN: not within)."""
    if score != score or one_x != one_x:
        return False
    return score >= ACCURACY_MARGIN * one_x if higher_is_better else score <= LOSS_MARGIN * one_x


def learned(one_x: float, floor: float | None, higher_is_better: bool = True) -> bool:
    """Whether a 1x score is past ``floor`` (above it for accuracy, below for a loss); no floor: always."""
    if floor is None:
        return True
    return one_x > floor if higher_is_better else one_x < floor


def evaluated_lengths(runs: Iterable[Mapping[int, float]]) -> list[int]:
    """The lengths to count over, from each run's scores (length -> score, NaN: not scored): every length any run
    has a score at, up to the longest every run has one at (none where the runs share no length)."""
    scored = [{n for n, score in scores.items() if score == score} for scores in runs]
    common = set.intersection(*scored) if scored else set()
    if not common:
        return []
    longest = max(common)
    return sorted(n for n in set.union(*scored) if n <= longest)


def effective_length(
    scores: Mapping[int, float],
    train_length: int,
    higher_is_better: bool = True,
    floor: float | None = None,
    lengths: Sequence[int] | None = None,
) -> float:
    """The largest of ``lengths`` (default: those of ``scores``, length in tokens -> score) reached from
    ``train_length`` upward with every length on the way scored and within the margin of the score at
    ``train_length``; NaN without a 1x score or with one that is not ``learned`` past ``floor``."""
    one_x = scores.get(train_length, math.nan)
    if one_x != one_x or not learned(one_x, floor, higher_is_better):
        return math.nan
    reached = train_length
    for length in sorted(n for n in (scores if lengths is None else lengths) if n > train_length):
        if not within_margin(scores.get(length, math.nan), one_x, higher_is_better):
            break  # a failing length, or one this run has no score at: the count stops here
        reached = length
    return float(reached)


def effective_length_over_seeds(
    by_seed: Mapping[int, Mapping[int, float]],
    train_length: int,
    higher_is_better: bool = True,
    floor: float | None = None,
) -> Interval:
    """Each seed's effective length (``by_seed``: seed -> length -> score) over the ``evaluated_lengths`` of all
    the seeds, their mean and 95% interval, clipped to those lengths (no seed can reach past the longest)."""
    lengths = evaluated_lengths(by_seed.values())
    values = [effective_length(s, train_length, higher_is_better, floor, lengths) for _, s in sorted(by_seed.items())]
    return Interval.of(values, bounds=(float(train_length), float(max(lengths, default=train_length))))
