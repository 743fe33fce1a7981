"""``poslab analyze hrope RUN_DIR...``: the hRoPE write-up's table, well curves, shuffle test and interventions.

Each run is analysed on its own held-out documents (``poslab.analysis.hrope``); runs are then grouped by arm
(the encoding, and its frequency allocation when the runs have several) and corpus, and their seeds summarised
with ``poslab.analysis.stats``: the seed is the unit of replication, so every figure over seeds is the seed mean
with its 95% Student-t interval over the seeds (``Interval.of``), and per-seed values are printed beside it where
the seeds split (``split_seeds``). Every run of a corpus reads the same held-out documents, so the t-interval
treats them as fixed; the hierarchical bootstrap over seeds then documents (``nested_interval``) is a secondary
column that carries the document noise too (with 3 seeds it under-covers the seed scatter: secondary only).
Comparisons are judged on seed-level differences: two arms on one corpus share data under a seed (training batch
i is a function of (seed, i); the same held-out documents), so they are paired by seed (``paired_difference``);
two corpora share nothing, so Welch's t (``welch``). A comparison whose interval holds 0 is "not separated".
Each seed's own interval over documents is in the per-run table. Written to ``--output-dir`` (default: the first
multirun directory's ``analysis/hrope/``, or ``RUN_DIR/analysis/hrope/`` for one run): ``hrope_table.md``
(printed too), ``hrope_runs.json`` (per run), ``hrope_arms.json`` (per arm and corpus: per-seed values, the
intervals, and every comparison with its test and verdict), ``hrope_runs.csv``, ``hrope_well.png``,
``hrope_shuffle.png``; each run's own figures also go to its loggers.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import warnings
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.hrope import (
    INTERVENTION_READINGS,
    INTERVENTIONS,
    Estimate,
    RunAnalysis,
    analyze_run,
    nested_interval,
    u_readings,
)
from poslab.analysis.logging import log_analysis
from poslab.analysis.output import (
    REFERENCE_LABEL,
    AnalysisResult,
    sample_notes,
    steps_cell,
    training_steps,
)
from poslab.analysis.results import SUCCESS, run_status
from poslab.analysis.stats import Interval, paired_difference, split_seeds, welch, welch_difference
from poslab.errors import MissingRunError
from poslab.io import read_json
from poslab.run_files import RESULTS_FILE, default_analysis_dir, find_runs

log = logging.getLogger("poslab")

#: how the write-up names the corpora (wikitext2_offline: trained on enwiki, evaluated on WikiText-2 test)
CORPUS_LABELS = {
    "python_code": "Code",
    "wikitext2": "WikiText-2",
    "wikitext2_offline": "WikiText-2",
    "openwebtext": "OpenWebText",
}
#: the write-up's U* table (three seeds, 8 layers x 512)
REFERENCE_DEPTHS = {
    "hrope_axial": {"Code": -0.77, "WikiText-2": -0.48, "OpenWebText": -0.31},
    "rand_axial": {"Code": -0.24, "WikiText-2": -0.22, "OpenWebText": -0.33},
}
MODEL_ORDER = ("hrope_axial", "rand_axial", "period_axial", "rope")


FREQUENCY_ORDER = ("split", "full", "interleaved", "token_first")
#: how each intervention reading's cells are written: log attention (3 decimals), attention mass (3 decimals)
READING_LABELS = {
    "same_pairs": "same pairs",
    "persistent_mass": "persistent cross mass",
    "real_cross_mass": "real cross mass",
}


def corpus_label(name: str) -> str:
    return CORPUS_LABELS.get(name, name)


def fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}".replace("-", "−")


def fmt_ci(value: float, ci: tuple[float, float], digits: int = 2) -> str:
    return f"{fmt(value, digits)} [{fmt(ci[0], digits)}, {fmt(ci[1], digits)}]"


#: U* or ΔU* (log attention) whose seeds lie this far apart in one jump split into two outcomes (``split_seeds``)
SPLIT_GAP = 0.25


#: how the report's intervals over seeds are made (printed under the summary table)
INTERVALS_NOTE = (
    "Intervals: Student-t over seeds (the seed is the unit of replication; every run of a corpus reads the same "
    f"held-out documents); seeds that split into two outcomes (a jump over {SPLIT_GAP} in U* or ΔU*) are listed "
    "one by one. The last two columns: a bootstrap over seeds, then documents within each seed (secondary: with "
    "3 seeds it under-covers the seed scatter)."
)


def interval_cell(interval: Interval, digits: int = 2) -> str:
    """``−0.48 [−0.90, −0.06]``: a mean and its 95% interval (one seed: the value alone; none: n/a)."""
    if interval.n == 0:
        return "n/a"
    if not interval.has_interval:
        return fmt(interval.mean, digits)
    return fmt_ci(interval.mean, (interval.low, interval.high), digits)


def split_note(values: list[float], digits: int = 2) -> str:
    """`` (split: −0.05 / −0.02 / −0.90)``: the per-seed values, where a mean describes no run that happened."""
    return " (split: " + " / ".join(fmt(v, digits) for v in values) + ")"


def seed_cell(values: list[float], digits: int = 2) -> str:
    """A figure over seeds: mean [95% t-interval over seeds], and the per-seed values where the seeds split."""
    finite = [v for v in values if math.isfinite(v)]
    note = split_note(values, digits) if split_seeds(finite, SPLIT_GAP) else ""
    return interval_cell(Interval.of(finite), digits) + note


def depth_cell(values: list[float]) -> str:
    """The U* table's cell: ``−0.48 [−0.90, −0.06] sd 0.17 (3)`` (t-interval over seeds); one seed ``−0.30 (1)``."""
    finite = [v for v in values if math.isfinite(v)]
    interval = Interval.of(finite)
    if interval.n == 0:
        return "n/a"
    spread = f" sd {np.std(finite, ddof=1):.2f}" if interval.n > 1 else ""
    note = split_note(values) if split_seeds(finite, SPLIT_GAP) else ""
    return f"{interval_cell(interval)}{spread} ({interval.n}){note}"


def interval_from(saved: dict[str, Any]) -> Interval:
    """An ``Interval.as_dict()`` back (None: nan)."""
    value = lambda key: math.nan if saved[key] is None else float(saved[key])
    return Interval(value("mean"), value("low"), value("high"), int(saved["n"]))


@dataclass(frozen=True)
class Difference:
    """A minus B over seeds (``interval``), the test that judged it, its t statistic and degrees of freedom."""

    interval: Interval
    test: str
    t: float = math.nan
    df: float = math.nan

    @property
    def side(self) -> int:
        """-1: the interval lies below 0; +1: above 0; 0: not separated (it holds 0) or no interval."""
        if not self.interval.excludes(0.0):
            return 0
        return -1 if self.interval.high < 0 else 1

    def as_dict(self) -> dict[str, Any]:
        finite = lambda x: x if math.isfinite(x) else None
        return {"difference": self.interval.as_dict(), "test": self.test, "t": finite(self.t), "df": finite(self.df)}


def exact_t(difference: float) -> float:
    """t where every seed gives the same difference: infinite, or undefined for no difference."""
    return math.nan if difference == 0 else math.copysign(math.inf, difference)


def seed_difference(a: dict[int, float], b: dict[int, float], paired: bool) -> Difference:
    """``a`` minus ``b`` (seed -> value). ``paired``: the runs share data under a seed (one corpus), so the
    per-seed differences cancel what a seed does to both (``paired_difference``); needs two common seeds, else
    (or unpaired: two corpora) Welch's interval over the two groups' seeds."""
    a = {s: v for s, v in a.items() if math.isfinite(v)}
    b = {s: v for s, v in b.items() if math.isfinite(v)}
    common = sorted(set(a) & set(b))
    if paired and len(common) >= 2:
        interval = paired_difference(a, b)
        sd = float(np.std([a[s] - b[s] for s in common], ddof=1))
        t = interval.mean / (sd / math.sqrt(len(common))) if sd > 0 else exact_t(interval.mean)
        return Difference(interval, f"paired over {len(common)} seeds", t, len(common) - 1.0)
    t, df, _ = welch(list(a.values()), list(b.values()))
    test = f"Welch, {df:.1f} df" if math.isfinite(df) else "Welch: too few seeds"
    return Difference(welch_difference(list(a.values()), list(b.values())), test, t, df)


class Arms:
    """The arms of a report: each run's encoding, with its frequency allocation when the runs have more than one
    (``hrope_axial:interleaved``); in the write-up's order (MODEL_ORDER, then FREQUENCY_ORDER)."""

    def __init__(self, analyses: list[RunAnalysis]) -> None:
        self.with_allocation = len({a.frequencies for a in analyses if a.frequencies is not None}) > 1

    def of(self, analysis: RunAnalysis) -> str:
        return analysis.arm if self.with_allocation else analysis.encoding

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


def depth_table(analyses: list[RunAnalysis]) -> str:
    """The write-up's layout: models x corpora, U* (seed mean [95% t-interval over seeds] sd (seeds)); the
    write-up's values in columns of their own, labelled as a reference, for the corpora it has."""
    groups = grouped(analyses)
    corpora = ordered_corpora(groups)
    models = ordered_models({m for m, _ in groups})
    references = {m: REFERENCE_DEPTHS.get(m.partition(":")[0], {}) for m in models}
    referenced = [c for c in corpora if any(c in references[m] for m in models)]
    header = [*corpora, *(f"{c}: {REFERENCE_LABEL}" for c in referenced)]
    lines = ["| U* | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
    for model in models:
        cells = []
        for corpus in corpora:
            runs = groups.get((model, corpus), [])
            cells.append(depth_cell([r.well.depth for r in runs]) if runs else "—")
        cells += [fmt(references[model].get(corpus)) for corpus in referenced]
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def validation_bpb(run_dir: str) -> float:
    """The run's last validation bits per byte (``results.json``), nan when it has none."""
    path = Path(run_dir) / RESULTS_FILE
    value = (read_json(path).get("figures") or {}).get("val_bpb") if path.is_file() else None
    return math.nan if value is None else float(value)


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
    secondary seeds-then-documents bootstrap for U* and ΔU*, and ΔU* minus RoPE's, paired by seed."""
    versus = (
        seed_difference(by_seed(runs, shuffle_of("main")), by_seed(rope, shuffle_of("main")), paired=True)
        if rope
        else None
    )
    return {
        "seeds": [r.seed for r in runs],
        "val_bpb": seed_figure(runs, lambda r: validation_bpb(r.run_dir)),
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


def figure_cell(figure: dict[str, Any], digits: int = 2) -> str:
    """A ``seed_figure`` as a cell: mean [95% t-interval over seeds], with the per-seed values where they split."""
    values = [math.nan if v is None else v for v in figure["per_seed"]]
    return interval_cell(interval_from(figure), digits) + (split_note(values, digits) if figure["split"] else "")


def bootstrap_cell(figure: dict[str, Any]) -> str:
    low, high = figure["bootstrap_seeds_documents"]
    return "n/a" if low is None or high is None else f"[{fmt(low)}, {fmt(high)}]"


def summary_table(analyses: list[RunAnalysis]) -> str:
    """Per arm and corpus, seed means with 95% t-intervals over seeds: validation bits/byte, U*, the shuffle test
    (ΔU*, and ΔU* minus RoPE's, paired by seed), the interventions under every reading; last, the secondary
    bootstrap over seeds then documents for U* and ΔU*. The allocation study's table."""
    return render_summary(arm_summaries(analyses))


def render_summary(summaries: list[dict[str, Any]]) -> str:
    """``summary_table`` from ``arm_summaries`` (the content of ``hrope_arms.json``)."""
    header = ["arm", "corpus", "seeds", "val bits/byte", "U*", "ΔU* shuffle", "ΔU* − RoPE's"]
    for reading in INTERVENTION_READINGS:
        header += [f"merge: {READING_LABELS[reading]}", f"split: {READING_LABELS[reading]}"]
    header += ["U*: bootstrap seeds, documents", "ΔU* shuffle: bootstrap seeds, documents"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for s in summaries:
        versus = s["shuffle_change_minus_rope"]
        cells = [
            s["arm"],
            s["corpus"],
            str(len(s["seeds"])),
            interval_from(s["val_bpb"]).cell(3),
            figure_cell(s["U*"]),
            figure_cell(s["shuffle_change"]),
            "—" if versus is None else interval_cell(interval_from(versus["difference"])),
        ]
        for reading in INTERVENTION_READINGS:
            cells += [figure_cell(s["interventions"][reading][kind], 3) for kind in INTERVENTIONS]
        cells += [bootstrap_cell(s["U*"]), bootstrap_cell(s["shuffle_change"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_run_table(analyses: list[RunAnalysis]) -> str:
    arms = Arms(analyses)
    order = ordered_models({arms.of(a) for a in analyses})
    header = ["model", "corpus", "seed", "steps", "docs", "shuffled docs", "pairs", "val bits/byte", "U* [95% CI]"]
    header += ["at k", "ΔU* shuffle [95% CI]"]
    header += [f"{kind}: {READING_LABELS[r]} [CI]" for r in INTERVENTION_READINGS for kind in INTERVENTIONS]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for a in sorted(analyses, key=lambda a: (corpus_label(a.corpus), order.index(arms.of(a)), a.seed)):
        main = a.main
        cells = [
            arms.of(a),
            corpus_label(a.corpus),
            str(a.seed),
            steps_cell(*training_steps(a.run_dir)),
            str(a.documents),
            str(a.shuffled_documents),
            str(cross_pairs(a)),
            fmt(validation_bpb(a.run_dir), 3).lstrip("+"),
            fmt_ci(main.depth.value, main.depth.interval),
            str(main.well.location),
            fmt_ci(main.shuffle_change.value, main.shuffle_change.interval),
        ]
        for reading in INTERVENTION_READINGS:
            for kind in INTERVENTIONS:
                estimate = a.interventions[reading][kind]
                cells.append(fmt_ci(estimate.value, estimate.interval, 3))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


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
    moving an arm's U* beyond RoPE's (paired by seed: one corpus); hrope_axial deeper on one corpus than on the
    next in the write-up's order (Code, WikiText-2, OpenWebText; Welch's: two corpora share no data)."""
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
    for arm in (m for m in ordered_models({m for m, _ in groups}) if m.startswith("hrope_axial")):
        present = [c for c in corpora if (arm, c) in groups]
        for deeper, shallower in zip(present, present[1:]):
            differences = compared(groups[(arm, deeper)], groups[(arm, shallower)], depth_of, paired=False)
            found.append(Claim(f"{arm}: deeper on {deeper} than on {shallower}", -1, DEEPER, differences))
    return found


def comparison_table(found: list[Claim]) -> str:
    """The claims under the main reading: A − B with its 95% interval over seeds, the test, t, the verdict."""
    if not found:
        return "(none: the runs have no pair of arms or corpora to compare)"
    lines = ["| comparison | A − B [95% CI] | test | t | verdict |", "|---|---|---|---|---|"]
    for claim in found:
        d = claim.differences["main"]
        t = "n/a" if math.isnan(d.t) else f"{d.t:+.2f}".replace("-", "−").replace("inf", "∞")
        lines.append(f"| {claim.text} | {interval_cell(d.interval)} | {d.test} | {t} | {claim.verdict()} |")
    return "\n".join(lines)


def robustness_tables(analyses: list[RunAnalysis], trend: str = "linear", found: list[Claim] | None = None) -> str:
    """U* and the shuffle test under every reading of ``u_readings`` (t-intervals over seeds), and which of the
    write-up's claims (``claims``, or ``found``) hold under which readings (one that holds under one only is
    said to). A claim holds where its seed-level difference's interval lies on its side of 0."""
    groups = grouped(analyses)
    readings = list(analyses[0].depths)
    header = "| arm | corpus | " + " | ".join(readings) + " |\n|---|---|" + "---|" * len(readings)
    u_rows, shuffle_rows = [header], [header]
    for corpus in ordered_corpora(groups):
        for arm in ordered_models({m for m, c in groups if c == corpus}):
            runs = groups[(arm, corpus)]
            depths = [depth_cell([depth_of(name)(r) for r in runs]) for name in readings]
            changes = [seed_cell([shuffle_of(name)(r) for r in runs]) for name in readings]
            u_rows.append(f"| {arm} | {corpus} | " + " | ".join(depths) + " |")
            shuffle_rows.append(f"| {arm} | {corpus} | " + " | ".join(changes) + " |")
    found = claims(analyses) if found is None else found
    lines = [f"- {c.text} ({c.rule}): {holds_under({name: c.holds(name) for name in readings})}" for c in found]
    return "\n\n".join(
        [
            "U* (seed mean [95% t-interval over seeds] sd (seeds)) under each reading: "
            + "; ".join(f"{r.name}: {r.description}" for r in u_readings(trend)),
            "\n".join(u_rows),
            "ΔU* shuffle (seed mean [95% t-interval over seeds]) under each reading:",
            "\n".join(shuffle_rows),
            "Claims under each reading:\n"
            + ("\n".join(lines) if lines else "(none: the runs have no pair of arms to compare)"),
        ]
    )


def holds_under(verdicts: dict[str, bool]) -> str:
    held = [name for name, ok in verdicts.items() if ok]
    failed = [name for name, ok in verdicts.items() if not ok]
    if not failed:
        return f"holds under all {len(held)} readings"
    if not held:
        return "holds under none"
    if len(held) == 1:
        return f"holds only under {held[0]}"
    return f"holds under {', '.join(held)}; not under {', '.join(failed)}"


def run_label(analysis: RunAnalysis) -> str:
    return f"{analysis.arm}/{corpus_label(analysis.corpus)} seed {analysis.seed}"


def sample_lines(analyses: list[RunAnalysis]) -> list[str]:
    """What the figures rest on (runs, documents, pairs, training steps), and a warning line for each kind of
    sample too small for the intervals or the comparison with the write-up."""
    documents = [a.documents for a in analyses]
    shuffled = [a.shuffled_documents for a in analyses]
    pairs = [cross_pairs(a) for a in analyses]
    saved = {a.run_dir: read_json(path) for a in analyses if (path := Path(a.run_dir) / RESULTS_FILE).is_file()}
    steps = {run_label(a): training_steps(a.run_dir, saved.get(a.run_dir, {})) for a in analyses}
    trained = [done for done, _ in steps.values() if done is not None]

    def span(values: list[int]) -> str:
        return (
            "n/a"
            if not values
            else f"{min(values):,}"
            if min(values) == max(values)
            else f"{min(values):,}–{max(values):,}"
        )

    lines = [
        f"Sample: {len(analyses)} run(s); per run {span(documents)} held-out documents ({span(shuffled)} with four "
        f"or more paragraphs for the shuffle test), {span(pairs)} query/key pairs across paragraphs, "
        f"{span(trained)} training steps (per run: the last table)."
    ]
    return lines + sample_notes(steps, list(saved.values()), {run_label(a): a.documents for a in analyses})


def plot_wells(analyses: list[RunAnalysis], shuffled: bool = False) -> Any:
    """One panel per corpus, one line per model (seed mean; thin lines: single seeds); one legend beside the
    panels, where it covers no curve, and a model's colour the same in every panel. The displacement axis has
    whole-number ticks over the displacements drawn; a panel with no point drawn says "no data", one with a single
    displacement "one point", and why (a small run: too few query/key pairs, or no document to shuffle)."""
    from poslab.plotting import note_sparse_panel, plt, whole_number_axis  # Agg, the CJK font for Chinese names

    groups = grouped(analyses)
    corpora = sorted({c for _, c in groups})
    models = ordered_models({m for m, _ in groups})
    fig, axes = plt.subplots(
        1, len(corpora), figsize=(4.6 * len(corpora) + 1.8, 4), squeeze=False, layout="constrained"
    )
    handles: dict[str, Any] = {}
    for ax, corpus in zip(axes[0], corpora):
        drawn: set[int] = set()  # the displacements with a point in this panel
        for model in (m for m in models if (m, corpus) in groups):
            color = f"C{models.index(model) % 10}"
            curves = []
            for run in groups[(model, corpus)]:
                curve = (run.shuffled_well if shuffled else run.well).residual[1:]
                curves.append(curve)
                ax.plot(range(1, len(curve) + 1), curve, color=color, alpha=0.3, linewidth=0.8)
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # displacements no seed has: nan, not drawn
                mean = np.nanmean(np.vstack(curves), axis=0)
            drawn |= {k + 1 for k in np.flatnonzero(np.isfinite(mean))}
            (handles[model],) = ax.plot(range(1, len(mean) + 1), mean, color=color, marker="o", markersize=3)
        ax.set_title(corpus + (" (paragraphs shuffled)" if shuffled else ""))
        if drawn:
            ax.axhline(0.0, color="grey", linewidth=0.6)
            whole_number_axis(ax, 1, max(drawn))
        runs = [r for (_, c), members in groups.items() if c == corpus for r in members]
        note_sparse_panel(ax, len(drawn), sparse_well_reason(runs, drawn, shuffled))
        # two lines: on one, the label is wider than a single panel
        ax.set_xlabel("paragraph displacement\n(boundaries between key and query)")
        ax.set_ylabel("mean residual log attention")
    fig.legend(
        handles.values(),
        handles.keys(),
        loc="outside right upper",
        fontsize=8,
        title="line: seed mean\nthin lines: each seed",
        title_fontsize=8,
    )
    return fig


def sparse_well_reason(runs: list[RunAnalysis], drawn: set[int], shuffled: bool) -> str:
    """Why a panel of ``plot_wells`` draws no point, or one: the second line of its note."""
    if shuffled and not any(r.shuffled_documents for r in runs):
        return "no held-out document has the four or more\nparagraphs a shuffle needs"
    if not drawn:
        return "too few query/key pairs at every displacement"
    return f"displacement {min(drawn)}: the others have\ntoo few query/key pairs"


def csv_row(analysis: RunAnalysis) -> dict[str, Any]:
    """One run's CSV row: the main figures, U* and ΔU* under every reading, every intervention reading."""
    summary = analysis.summary()
    row = {k: summary[k] for k in ("encoding", "frequencies", "corpus", "seed", "documents", "shuffled_documents")}
    row["val_bpb"] = validation_bpb(analysis.run_dir)
    row |= {k: summary[k] for k in ("U*", "U*_at", "shuffled_U*", "shuffle_change")}
    for name, values in summary["readings"].items():
        row[f"U*[{name}]"] = values["U*"]
        row[f"shuffle_change[{name}]"] = values["shuffle_change"]
    for reading, values in summary["interventions"].items():
        for kind in INTERVENTIONS:
            row[f"{kind}[{reading}]"] = values[kind]
    row["run_dir"] = analysis.run_dir
    return row


def runs_csv(analyses: list[RunAnalysis]) -> str:
    rows = [csv_row(a) for a in analyses]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


def analyze_hrope(paths: list[str], documents: int = 200, **settings: Any) -> AnalysisResult:
    """Analyse every run under ``paths``: the printed report, and the tables and plots for the first multirun
    directory's ``analysis/hrope/`` (or ``RUN_DIR/analysis/hrope/`` for one run, or ``--output-dir``)."""
    found = find_runs(paths)
    # a run whose training did not succeed (results.json status: diverged ...) is left out and listed
    skipped = [(run, status) for run in found if (status := run_status(run)) != SUCCESS]
    runs = [run for run in found if run not in {r for r, _ in skipped}]
    left_out = (
        f"{len(skipped)} run(s) left out, their status is not {SUCCESS}: "
        + ", ".join(f"{run} ({status})" for run, status in skipped)
        if skipped
        else ""
    )
    if not runs:
        raise MissingRunError(f"no run to analyse under {', '.join(map(str, paths))}: {left_out}.")
    analyses = []
    for number, run in enumerate(runs, 1):
        log.info("analyze hrope: run %d/%d %s", number, len(runs), run)
        analyses.append(analyze_run(run, documents=documents, **settings))
    result = AnalysisResult("hrope", "", default_analysis_dir("hrope", paths, runs))
    wells = result.add_figure("hrope_well.png", plot_wells(analyses))
    shuffled = result.add_figure("hrope_shuffle.png", plot_wells(analyses, shuffled=True))
    shuffle = "whole paragraphs between the first and the last" if settings.get("keep_ends", True) else "all paragraphs"
    found, summaries = claims(analyses), arm_summaries(analyses)
    result.report = "\n\n".join(
        [
            f"## U* (seed mean [95% t-interval over seeds] sd (seeds); the write-up's values in the "
            f"{REFERENCE_LABEL} columns)",
            depth_table(analyses),
            "\n".join(sample_lines(analyses)),
            "## Per arm: bits/byte, U*, shuffle test, interventions (seed mean [95% t-interval over seeds])",
            render_summary(summaries),
            f"Shuffle: {shuffle} permuted; ΔU* = U*(shuffled) − U* on the same documents; ΔU* − RoPE's: under the "
            "same shuffles of the same documents, paired by seed. Interventions (after minus before): "
            + "; ".join(f"{READING_LABELS[k]}: {v}" for k, v in INTERVENTION_READINGS.items())
            + " (log attention for same pairs, attention mass for the other two). "
            + INTERVALS_NOTE,
            "## Comparisons (main reading; A − B over seeds: paired by seed on one corpus, Welch's across corpora)",
            comparison_table(found),
            "## U* robustness",
            robustness_tables(analyses, settings.get("trend", "linear"), found),
            "## Per run (intervals over documents)",
            per_run_table(analyses),
            f"Documents per run: up to {documents}; trend {settings.get('trend', 'linear')}; "
            f"plots: {wells}, {shuffled}.",
            *([left_out] if left_out else []),
        ]
    )
    result.add_text("hrope_table.md", result.report)
    result.add_text("hrope_runs.csv", runs_csv(analyses))
    result.add_json("hrope_runs.json", [a.summary() for a in analyses])
    result.add_json("hrope_arms.json", {"arms": summaries, "comparisons": [c.as_dict() for c in found]})

    def log_to_the_runs_loggers(directory: Path) -> str | None:
        for analysis in analyses:
            scalars = {
                f"hrope/{k}": float(v)
                for k, v in analysis.summary().items()
                if k in ("U*", "shuffle_change", "merge_change", "split_change") and v is not None and math.isfinite(v)
            }
            for reading, by_kind in analysis.interventions.items():
                for kind, estimate in by_kind.items():
                    if math.isfinite(estimate.value):
                        scalars[f"hrope/{kind}/{reading}"] = estimate.value
            curve = [
                [k, r, int(n)] for k, (r, n) in enumerate(zip(analysis.summary()["residual"], analysis.well.pairs))
            ]
            tables = {"hrope/well_curve": (["displacement", "mean_residual", "pairs"], curve)}
            log_analysis(analysis.config, analysis.run_dir, scalars, {"hrope/well": directory / wells}, tables)
        return None

    result.after_write.append(log_to_the_runs_loggers)
    return result
