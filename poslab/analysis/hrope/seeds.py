"""The hRoPE report over seeds and documents: runs grouped by arm (the encoding, with its frequency allocation when
the runs have several) and corpus, each figure over an arm's seeds and the held-out documents they share
(``figure``: per-seed values, the seed mean, its 95% interval over seeds and documents and the t-interval over
seeds alone beside it; ``poslab.analysis.hrope.intervals``), and the write-up's comparisons (``claims``: A − B over
seeds and documents, paired by seed and document resample on one corpus, Welch's across corpora), each judged on
its interval over seeds and documents (docs/verdicts.md). Torch-free: the render layer computes them again from the
runs of the summary (their values and document replicates).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from poslab.analysis.hrope.intervals import (
    Crossed,
    over_seeds_documents,
    paired_estimates,
    paired_seeds_documents,
    welch_seeds_documents,
)
from poslab.analysis.hrope.readings import INTERVENTION_READINGS, INTERVENTIONS
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.hrope.shape import SHAPE, last_displacement
from poslab.analysis.stats import Estimate, split_seeds

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


def by_seed(runs: list[RunAnalysis], value: Callable[[RunAnalysis], Estimate]) -> dict[int, Estimate]:
    """Seed -> ``value`` of its run (a seed analysed twice in one group counts once: its last run)."""
    return {r.seed: value(r) for r in runs}


def depth_of(reading: str) -> Callable[[RunAnalysis], Estimate]:
    return lambda r: r.depths[reading].depth


def shuffle_of(reading: str) -> Callable[[RunAnalysis], Estimate]:
    return lambda r: r.depths[reading].shuffle_change


def intervention_of(reading: str, kind: str) -> Callable[[RunAnalysis], Estimate]:
    return lambda r: r.interventions[reading][kind]


def bits_per_byte(run: RunAnalysis) -> Estimate:
    """A run's validation bits/byte with its document replicates (``compute.bits_per_byte_replicates``: resamples
    of the validation split's documents, the same in every run of a corpus); a run whose summary keeps none
    (written before they were kept, or results without per-document losses) has none, and its figures over seeds
    are over seeds only, said so."""
    return Estimate(run.facts.val_bpb, (math.nan, math.nan), run.facts.val_bpb_replicates)


def shape_reading(name: str) -> Callable[[RunAnalysis], Estimate]:
    """The well's shape reading ``name`` (``shape.SHAPE``: growth, recovery) of a run."""
    return lambda r: r.well_shape[name]


def per_seed_ints(values: list[int]) -> list[int | None]:
    return [v if v >= 1 else None for v in values]


def shape_summary(runs: list[RunAnalysis], rope: list[RunAnalysis]) -> dict[str, Any]:
    """The well's shape over an arm's seeds (H3, ``poslab.analysis.hrope.shape``): where each seed's well is
    deepest and the last displacement read (per seed), growth and recovery over seeds and documents, and growth
    minus RoPE's (paired by seed and resample: whether the growth is more than what an encoding without a paragraph
    index shows on these documents)."""
    return {
        "deepest_at": per_seed_ints([r.well.location for r in runs]),
        "last": per_seed_ints([last_displacement(r.well.residual) for r in runs]),
        **{name: figure(runs, shape_reading(name)) for name in SHAPE},
        "growth_minus_rope": versus(runs, rope, shape_reading("growth")) if rope else None,
    }


def figure(runs: list[RunAnalysis], value: Callable[[RunAnalysis], Estimate]) -> dict[str, Any]:
    """JSON for a figure over seeds: per-seed values (the order of the group's ``seeds``), the seed mean with its
    95% interval over seeds and documents (``over``: "seeds and documents", or "seeds only" where the runs keep no
    document replicates: no bounds then) and the t-interval over seeds alone (``seeds_only``), and whether the
    seeds split into two outcomes."""
    estimates = [value(r) for r in runs]
    values = [e.value for e in estimates]
    finite = [v for v in values if math.isfinite(v)]
    crossed = over_seeds_documents({r.seed: e for r, e in zip(runs, estimates)})
    per_seed = [v if math.isfinite(v) else None for v in values]
    return {"per_seed": per_seed, **crossed.as_dict(), "split": split_seeds(finite, SPLIT_GAP)}


def versus(a: list[RunAnalysis], b: list[RunAnalysis], value: Callable[[RunAnalysis], Estimate]) -> dict[str, Any]:
    """A − B on one corpus, paired by seed and document resample, as JSON (``intervals.Crossed.as_dict``)."""
    return paired_seeds_documents(by_seed(a, value), by_seed(b, value)).as_dict()


def arm_summary(runs: list[RunAnalysis], rope: list[RunAnalysis]) -> dict[str, Any]:
    """One arm on one corpus (``runs``, sorted by seed): every figure over its seeds and the documents
    (``figure``), its bits/byte and ΔU* minus RoPE's, paired by seed and document resample, and the well's shape
    (``shape_summary``)."""
    return {
        "seeds": [r.seed for r in runs],
        "intervals": "seeds and documents",  # t on S − 1 df, seed term + document term (hrope.intervals)
        "val_bpb": figure(runs, bits_per_byte),
        "val_bpb_minus_rope": versus(runs, rope, bits_per_byte) if rope else None,
        "U*": figure(runs, depth_of("main")),
        "shuffle_change": figure(runs, shuffle_of("main")),
        "shuffle_change_minus_rope": versus(runs, rope, shuffle_of("main")) if rope else None,
        "interventions": {
            reading: {kind: figure(runs, intervention_of(reading, kind)) for kind in INTERVENTIONS}
            for reading in INTERVENTION_READINGS
        },
        "shape": shape_summary(runs, rope),
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


def summary_figures(analyses: list[RunAnalysis]) -> dict[str, Any]:
    """The summary's figures over seeds and documents, from its runs (``RunAnalysis.from_summary`` of each entry:
    their values and document replicates, as the summary keeps them, so that the report computed and the report
    rendered again from the summary agree): the arms (``arm_summaries``) and the comparisons (``claims``)."""
    return {"arms": arm_summaries(analyses), "comparisons": [c.as_dict() for c in claims(analyses)]}


#: verdicts on a difference A − B whose 95% interval lies below 0, holds 0, lies above 0
DEEPER = ("deeper", "not separated", "shallower")
BEYOND = ("below RoPE's", "not separated", "above RoPE's")
#: the verdict of a claim whose runs keep no document replicates (summaries written before they were kept)
NO_DOCUMENTS = "n/a (no document replicates: over seeds only)"


def side(interval: Any) -> int:
    """-1: the interval lies below 0; +1: above 0; 0: it holds 0, has no bounds, or has no width (degenerate)."""
    if not interval.has_interval or interval.degenerate or not interval.excludes(0.0):
        return 0
    return -1 if interval.high < 0 else 1


@dataclass(frozen=True)
class Claim:
    """One of the write-up's comparisons, judged under every U* reading on A − B over seeds and documents."""

    text: str
    want: int  # the side of 0 the difference's interval must lie on for the claim to hold (0: either side)
    words: tuple[str, str, str]  # the verdict when the interval lies below 0, holds 0, lies above 0
    differences: dict[str, Crossed]  # reading -> A − B (over seeds and documents; over seeds only inside)

    @property
    def rule(self) -> str:
        where = {-1: "below 0", 0: "excludes 0", 1: "above 0"}[self.want]
        return f"{self.differences['main'].test}; the difference's 95% interval over seeds and documents {where}"

    def over_documents(self, reading: str) -> bool:
        """Whether ``reading``'s difference has an interval over seeds and documents (its runs keep replicates)."""
        return self.differences[reading].has_documents

    def holds(self, reading: str, seeds_only: bool = False) -> bool:
        """Whether ``reading``'s difference lies on the claim's side of 0, on its interval over seeds and documents
        (none: it does not hold); ``seeds_only`` (the robustness lines, which say so): on the t-interval over seeds
        where the runs keep no document replicates for the reading."""
        difference = self.differences[reading]
        interval = difference.shown if seeds_only else difference.interval
        where = side(interval)
        return where != 0 and self.want in (0, where)

    def verdict(self, reading: str = "main") -> str:
        difference = self.differences[reading]
        if not difference.seeds_only.has_interval:
            return "n/a (too few seeds)"
        if not difference.has_documents:
            return NO_DOCUMENTS
        if difference.interval.degenerate:
            return "n/a (degenerate: every seed and resample the same difference)"
        return self.words[side(difference.interval) + 1]

    def as_dict(self) -> dict[str, Any]:
        return {
            "claim": self.text,
            "holds_when": self.rule,
            "readings": {
                name: {"test": d.test, "difference": d.as_dict(), "verdict": self.verdict(name)}
                | {"holds": self.holds(name)}
                for name, d in self.differences.items()
            },
        }


def readings_of(runs: list[RunAnalysis]) -> list[str]:
    return list(runs[0].depths)


def compared(
    a: list[RunAnalysis], b: list[RunAnalysis], value: Callable[[str], Callable[[RunAnalysis], Estimate]], paired: bool
) -> dict[str, Crossed]:
    """A − B under every reading (the readings of A's first run): paired by seed and document resample (one
    corpus), or Welch's (two corpora)."""
    difference = paired_seeds_documents if paired else welch_seeds_documents
    return {name: difference(by_seed(a, value(name)), by_seed(b, value(name))) for name in readings_of(a)}


def gap_between_corpora(
    arm: tuple[list[RunAnalysis], list[RunAnalysis]], other: tuple[list[RunAnalysis], list[RunAnalysis]]
) -> dict[str, Crossed]:
    """(A − B on one corpus) − (A − B on another), each paired by seed and resample, the two Welch's: whether A's
    gap to B depends on the corpus."""
    found = {}
    for name in readings_of(arm[0]):
        one = paired_estimates(by_seed(arm[0], depth_of(name)), by_seed(arm[1], depth_of(name)))
        two = paired_estimates(by_seed(other[0], depth_of(name)), by_seed(other[1], depth_of(name)))
        found[name] = welch_seeds_documents(one, two)
    return found


def claims(analyses: list[RunAnalysis]) -> list[Claim]:
    """The write-up's comparisons the runs allow: on each corpus, hrope_axial deeper than rand_axial, the shuffle
    moving an arm's U* beyond RoPE's and hrope_axial's beyond rand_axial's (paired by seed and document resample),
    then BiPE against hRoPE (``bipe_claims``); across corpora (Welch's: two corpora share no data), hrope_axial
    deeper on one corpus than on the next in the write-up's order (Code, WikiText-2, OpenWebText), and its gap to
    rand_axial on one corpus against another (any two: the write-up's "spread" of U* over the corpora)."""
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
        for arm in (a for a in arms if a.startswith("hrope_axial")):
            control = arm.replace("hrope_axial", "rand_axial", 1)
            if control in arms:
                differences = compared(groups[(arm, corpus)], groups[(control, corpus)], shuffle_of, paired=True)
                words = (f"below {control}'s", "not separated", f"above {control}'s")
                found.append(Claim(f"{corpus}: the shuffle moves {arm}'s U* beyond {control}'s", 0, words, differences))
        found += bipe_claims(groups, corpus, arms)
    for arm in (m for m in ordered_models({m for m, _ in groups}) if m.startswith("hrope_axial")):
        present = [c for c in corpora if (arm, c) in groups]
        for deeper, shallower in zip(present, present[1:]):
            differences = compared(groups[(arm, deeper)], groups[(arm, shallower)], depth_of, paired=False)
            found.append(Claim(f"{arm}: deeper on {deeper} than on {shallower}", -1, DEEPER, differences))
        control = arm.replace("hrope_axial", "rand_axial", 1)
        both = [c for c in present if (control, c) in groups]
        for number, one in enumerate(both):
            for two in both[number + 1 :]:
                differences = gap_between_corpora(
                    (groups[(arm, one)], groups[(control, one)]), (groups[(arm, two)], groups[(control, two)])
                )
                words = (f"gap deeper on {one}", "not separated", f"gap deeper on {two}")
                text = f"{arm} − {control}: the gap on {one} against on {two}"
                found.append(Claim(text, 0, words, differences))
    return found


def bipe_claims(groups: dict[tuple[str, str], list[RunAnalysis]], corpus: str, arms: list[str]) -> list[Claim]:
    """BiPE against hRoPE on one corpus (issue 38), paired by seed and document resample: each hrope_axial arm's U*
    and shuffle change minus each BiPE arm's, two-sided (no direction was fixed before the runs: the comparison
    says which is deeper, and whether the shuffle moves one more)."""
    found = []
    for bipe in (a for a in arms if a.startswith("bipe")):
        for arm in (a for a in arms if a.startswith("hrope_axial")):
            a, b = groups[(arm, corpus)], groups[(bipe, corpus)]
            found.append(Claim(f"{corpus}: {arm}'s U* against {bipe}'s", 0, DEEPER, compared(a, b, depth_of, True)))
            words = (f"below {bipe}'s", "not separated", f"above {bipe}'s")
            differences = compared(a, b, shuffle_of, paired=True)
            found.append(Claim(f"{corpus}: the shuffle moves {arm}'s U* against {bipe}'s", 0, words, differences))
    return found
