"""The readings of the hRoPE analysis: the ways attention becomes a well depth U* (``u_readings``: the main one
and four changes for robustness) and the ways an intervention's change of cross-paragraph attention is read
(``INTERVENTION_READINGS``). Plain data, no torch: the render layer names them too."""

from __future__ import annotations

from dataclasses import dataclass

from poslab.errors import ConfigError

TRENDS = ("linear", "log")


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
