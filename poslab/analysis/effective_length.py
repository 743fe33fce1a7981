"""Effective context length: the largest evaluated length at which a score stays within a stated margin of its
value at the training length (1x), and its interval over seeds.

- accuracy (higher is better): a length counts while ``score >= ACCURACY_MARGIN x score(1x)`` (85% of it);
- bits/byte or loss (lower is better): while ``score <= LOSS_MARGIN x score(1x)`` (1.05x of it).

"Stays": the lengths from 1x upward count until the first that fails; a later recovery does not count (a model
that fails at 4x and passes at 8x by chance has an effective length of 2x). The training length itself always
counts, so the effective length is never below it; a run missing its 1x figure has none (NaN).

Over seeds: each seed's effective length, then their mean and 95% Student-t interval (``stats.Interval.of``, the
interval every report here uses), clipped to the evaluated lengths. ``poslab report zoo`` shows it as a column
(``effective length``); ``poslab report length`` can call ``effective_length_over_seeds`` with its lengths and
bits/byte (``higher_is_better=False``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from poslab.analysis.stats import Interval

ACCURACY_MARGIN = 0.85  # accuracy: at least 85% of its 1x value
LOSS_MARGIN = 1.05  # bits/byte (or loss): at most 1.05x its 1x value


def within_margin(score: float, one_x: float, higher_is_better: bool) -> bool:
    """Whether ``score`` is within the stated margin of ``one_x`` (NaN: not within)."""
    if score != score or one_x != one_x:
        return False
    return score >= ACCURACY_MARGIN * one_x if higher_is_better else score <= LOSS_MARGIN * one_x


def effective_length(scores: Mapping[int, float], train_length: int, higher_is_better: bool = True) -> float:
    """The largest length of ``scores`` (length in tokens -> score) reached from ``train_length`` upward with every
    length on the way within the margin of the score at ``train_length``; NaN without a 1x score."""
    one_x = scores.get(train_length, math.nan)
    if one_x != one_x:
        return math.nan
    reached = train_length
    for length in sorted(n for n in scores if n > train_length):
        if not within_margin(scores[length], one_x, higher_is_better):
            break
        reached = length
    return float(reached)


def effective_length_over_seeds(
    by_seed: Mapping[int, Mapping[int, float]], train_length: int, higher_is_better: bool = True
) -> Interval:
    """Each seed's effective length (``by_seed``: seed -> length -> score), their mean and 95% interval, clipped to
    the evaluated lengths (no seed can reach past the longest)."""
    lengths = [effective_length(scores, train_length, higher_is_better) for _, scores in sorted(by_seed.items())]
    longest = max((n for scores in by_seed.values() for n in scores), default=train_length)
    return Interval.of(lengths, bounds=(float(train_length), float(longest)))
