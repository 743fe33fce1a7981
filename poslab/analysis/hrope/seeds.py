"""The hRoPE report over seeds: runs grouped by arm (the encoding, with its frequency allocation when the runs
have several) and corpus, each figure over an arm's seeds (``seed_figure``: per-seed values, the seed mean and its
95% Student-t interval), the secondary bootstrap over seeds then documents, and the write-up's comparisons
(``claims``: seed-level differences, paired by seed on one corpus, Welch's across corpora). Torch-free: the
compute layer writes these figures into the summary, and the render layer regroups the runs it reads back. The
statistics themselves (intervals, tests, bootstraps) are ``poslab.analysis.stats``'s.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poslab.analysis.hrope.readings import INTERVENTION_READINGS, INTERVENTIONS
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.stats import Difference, Estimate, Interval, nested_interval, seed_difference, split_seeds

#: how the write-up names the corpora (wikitext2_offline: trained on enwiki, evaluated on WikiText-2 test)
CORPUS_LABELS = {
    "python_code": "Code",
    "wikitext2": "WikiText-2",
    "wikitext2_offline": "WikiText-2",
    "openwebtext": "OpenWebText",
}


MODEL_ORDER = ("hrope_axial", "rand_axial", "period_axial", "rope", "bipe")
FREQUENCY_ORDER = ("split", "full", "interleaved", "token_first")


def corpus_label(name: str) -> str:
    return CORPUS_LABELS.get(name, name)


#: U* or ΔU* (log attention) whose seeds lie this far apart in one jump split into two outcomes (``split_seeds``)
SPLIT_GAP = 0.25


class Arms:
    """The arms of a report: each run's encoding, with its frequency allocation when the runs have more than one
    (``hrope_axial:interleaved``), and always with its variant (``bipe:rope:sentence``: BiPE-RoPE and BiPE-ALiBi
    are two arms); in the write-up's order (MODEL_ORDER, then FREQUENCY_ORDER)."""

    def __init__(self, analyses: list[RunAnalysis]) -> None:
        self.with_allocation = len({a.frequencies for a in analyses if a.frequencies is not None}) > 1

    def of(self, analysis: RunAnalysis) -> str:
        return analysis.arm if self.with_allocation or analysis.variant is not None else analysis.encoding

    @staticmethod
    def order(names: set[str]) -> list[str]:
        def key(name: str) -> tuple[int, int, str]:
            encoding, _, frequencies = name.partition(":")
            return (
                MODEL_ORDER.index(encoding) if encoding in MODEL_ORDER else len(MODEL_ORDER),
                FREQUENCY_ORDER.index(frequencies) if frequencies in FREQUENCY_ORDER else -1,
                name,
            )

        return sorted(names, key=key)


def grouped(analyses: list[RunAnalysis]) -> dict[tuple[str, str], list[RunAnalysis]]:
    arms = Arms(analyses)
    groups: dict[tuple[str, str], list[RunAnalysis]] = defaultdict(list)
    for a in analyses:
        groups[(arms.of(a), corpus_label(a.corpus))].append(a)
    return groups


def ordered_models(names: set[str]) -> list[str]:
    return Arms.order(names)


def ordered_corpora(groups: dict[tuple[str, str], Any]) -> list[str]:
    labels = list(CORPUS_LABELS.values())
    return sorted({c for _, c in groups}, key=lambda c: (labels.index(c) if c in labels else 99, c))


def cross_pairs(analysis: RunAnalysis) -> int:
    """The query/key pairs in different paragraphs behind a run's well (every displacement >= 1 shown)."""
    return int(analysis.well.pairs[1:].sum())


def rope_runs(groups: dict[tuple[str, str], list[RunAnalysis]], corpus: str) -> list[RunAnalysis]:
    return groups.get(("rope", corpus), [])


def by_seed(runs: list[RunAnalysis], value: Callable[[RunAnalysis], float]) -> dict[int, float]:
    """Seed -> ``value`` of its run (a seed analysed twice in one group counts once: its last run)."""
    return {r.seed: value(r) for r in runs}


def depth_of(reading: str) -> Callable[[RunAnalysis], float]:
    return lambda r: r.depths[reading].depth.value


def shuffle_of(reading: str) -> Callable[[RunAnalysis], float]:
    return lambda r: r.depths[reading].shuffle_change.value


def intervention_of(reading: str, kind: str) -> Callable[[RunAnalysis], float]:
    return lambda r: r.interventions[reading][kind].value


def seed_figure(runs: list[RunAnalysis], value: Callable[[RunAnalysis], float]) -> dict[str, Any]:
    """JSON for a figure over seeds: per-seed values (the order of the group's ``seeds``), the seed mean with its
    95% t-interval over seeds, and whether the seeds split into two outcomes."""
    values = [value(r) for r in runs]
    finite = [v for v in values if math.isfinite(v)]
    per_seed = [v if math.isfinite(v) else None for v in values]
    return {"per_seed": per_seed, **Interval.of(finite).as_dict(), "split": split_seeds(finite, SPLIT_GAP)}


def bootstrap_list(estimates: list[Estimate]) -> list[float | None]:
    """The secondary interval (``nested_interval``: seeds, then documents); none under 2 seeds, where it would
    be an interval over documents alone (as ``stats.hierarchical_bootstrap``)."""
    if sum(math.isfinite(e.value) for e in estimates) < 2:
        return [None, None]
    return [v if math.isfinite(v) else None for v in nested_interval(estimates)[1]]


def arm_summary(runs: list[RunAnalysis], rope: list[RunAnalysis]) -> dict[str, Any]:
    """One arm on one corpus (``runs``, sorted by seed): every figure over its seeds (``seed_figure``), the
    secondary bootstrap over seeds and documents (crossed) for U* and ΔU*, and ΔU* minus RoPE's, paired by seed."""
    versus = (
        seed_difference(by_seed(runs, shuffle_of("main")), by_seed(rope, shuffle_of("main")), paired=True)
        if rope
        else None
    )
    return {
        "seeds": [r.seed for r in runs],
        "bootstrap_design": "crossed",  # seeds and documents (stats.nested_replicates); absent: drawn per seed
        "val_bpb": seed_figure(runs, lambda r: r.facts.val_bpb),
        "U*": seed_figure(runs, depth_of("main"))
        | {"bootstrap_seeds_documents": bootstrap_list([r.main.depth for r in runs])},
        "shuffle_change": seed_figure(runs, shuffle_of("main"))
        | {"bootstrap_seeds_documents": bootstrap_list([r.main.shuffle_change for r in runs])},
        "shuffle_change_minus_rope": None if versus is None else versus.as_dict(),
        "interventions": {
            reading: {kind: seed_figure(runs, intervention_of(reading, kind)) for kind in INTERVENTIONS}
            for reading in INTERVENTION_READINGS
        },
    }


def arm_summaries(analyses: list[RunAnalysis]) -> list[dict[str, Any]]:
    """Per arm and corpus (the tables' order), ``arm_summary``: what ``hrope_arms.json`` holds and the summary
    table shows."""
    groups = grouped(analyses)
    summaries = []
    for corpus in ordered_corpora(groups):
        rope = rope_runs(groups, corpus)
        for arm in ordered_models({m for m, c in groups if c == corpus}):
            runs = sorted(groups[(arm, corpus)], key=lambda r: r.seed)
            summaries.append({"arm": arm, "corpus": corpus, **arm_summary(runs, [] if arm == "rope" else rope)})
    return summaries


#: verdicts on a difference A − B whose 95% interval lies below 0, holds 0, lies above 0
DEEPER = ("deeper", "not separated", "shallower")
BEYOND = ("below RoPE's", "not separated", "above RoPE's")


@dataclass(frozen=True)
class Claim:
    """One of the write-up's comparisons, judged under every U* reading on a seed-level difference A − B."""

    text: str
    want: int  # the side of 0 the difference's interval must lie on for the claim to hold (0: either side)
    words: tuple[str, str, str]  # the verdict when the interval lies below 0, holds 0, lies above 0
    differences: dict[str, Difference]  # reading -> A − B

    @property
    def rule(self) -> str:
        side = {-1: "below 0", 0: "excludes 0", 1: "above 0"}[self.want]
        return f"{self.differences['main'].test}; the difference's 95% interval {side}"

    def holds(self, reading: str) -> bool:
        side = self.differences[reading].side
        return side != 0 and self.want in (0, side)

    def verdict(self, reading: str = "main") -> str:
        difference = self.differences[reading]
        if difference.interval.degenerate:
            return "n/a (degenerate: every seed the same difference)"
        return self.words[difference.side + 1] if difference.interval.has_interval else "n/a (too few seeds)"

    def as_dict(self) -> dict[str, Any]:
        return {
            "claim": self.text,
            "holds_when": self.rule,
            "readings": {
                name: d.as_dict() | {"verdict": self.verdict(name), "holds": self.holds(name)}
                for name, d in self.differences.items()
            },
        }


def compared(
    a: list[RunAnalysis], b: list[RunAnalysis], value: Callable[[str], Callable[[RunAnalysis], float]], paired: bool
) -> dict[str, Difference]:
    """A − B under every reading (the readings of A's first run)."""
    return {name: seed_difference(by_seed(a, value(name)), by_seed(b, value(name)), paired) for name in a[0].depths}


def claims(analyses: list[RunAnalysis]) -> list[Claim]:
    """The write-up's comparisons the runs allow: hrope_axial deeper than rand_axial on a corpus, and the shuffle
    moving an arm's U* beyond RoPE's (paired by seed: one corpus), then BiPE against hRoPE (``bipe_claims``);
    hrope_axial deeper on one corpus than on the next in the write-up's order (Code, WikiText-2, OpenWebText;
    Welch's: two corpora share no data)."""
    groups = grouped(analyses)
    corpora = ordered_corpora(groups)
    found = []
    for corpus in corpora:
        arms = ordered_models({m for m, c in groups if c == corpus})
        for arm in (a for a in arms if a.startswith("hrope_axial")):
            control = arm.replace("hrope_axial", "rand_axial", 1)
            if control in arms:
                differences = compared(groups[(arm, corpus)], groups[(control, corpus)], depth_of, paired=True)
                found.append(Claim(f"{corpus}: {arm} deeper than {control}", -1, DEEPER, differences))
        if ("rope", corpus) in groups:
            for arm in (a for a in arms if a != "rope"):
                differences = compared(groups[(arm, corpus)], groups[("rope", corpus)], shuffle_of, paired=True)
                found.append(Claim(f"{corpus}: the shuffle moves {arm}'s U* beyond RoPE's", 0, BEYOND, differences))
        found += bipe_claims(groups, corpus, arms)
    for arm in (m for m in ordered_models({m for m, _ in groups}) if m.startswith("hrope_axial")):
        present = [c for c in corpora if (arm, c) in groups]
        for deeper, shallower in zip(present, present[1:]):
            differences = compared(groups[(arm, deeper)], groups[(arm, shallower)], depth_of, paired=False)
            found.append(Claim(f"{arm}: deeper on {deeper} than on {shallower}", -1, DEEPER, differences))
    return found


def bipe_claims(groups: dict[tuple[str, str], list[RunAnalysis]], corpus: str, arms: list[str]) -> list[Claim]:
    """BiPE against hRoPE on one corpus (issue 38), paired by seed: each hrope_axial arm's U* and shuffle change
    minus each BiPE arm's, two-sided (no direction was fixed before the runs: the comparison says which is
    deeper, and whether the shuffle moves one more)."""
    found = []
    for bipe in (a for a in arms if a.startswith("bipe")):
        for arm in (a for a in arms if a.startswith("hrope_axial")):
            a, b = groups[(arm, corpus)], groups[(bipe, corpus)]
            found.append(Claim(f"{corpus}: {arm}'s U* against {bipe}'s", 0, DEEPER, compared(a, b, depth_of, True)))
            words = (f"below {bipe}'s", "not separated", f"above {bipe}'s")
            differences = compared(a, b, shuffle_of, paired=True)
            found.append(Claim(f"{corpus}: the shuffle moves {arm}'s U* against {bipe}'s", 0, words, differences))
    return found
