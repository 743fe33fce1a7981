"""Seed-level figures behind the hRoPE verdicts of docs/reproduction.md, from committed per-run files only.

    .venv/bin/python docs/reproduction/seed_intervals.py > docs/reproduction/seed_intervals.md
    .venv/bin/python docs/reproduction/seed_intervals.py causal > docs/reproduction/seed_intervals_causal.md

``causal``: the 54 runs of the causal rerun (docs/hrope/allocation_causal/analysis, the merge of
docs/hrope/causal/analysis, session 42: hrope_axial, rand_axial and period_axial under `split`, and RoPE, on the three
corpora; and of the allocation study's Code arms under `interleaved` and `token_first`, session 43; seeds 0-2, with
the causal segmentation of docs/causality.md), the figures that replace the leaky Code rows; without it, the
allocation study's runs below.

Reads docs/hrope/allocation/hrope_runs.{csv,json} (python_code and wikitext2_offline: hrope_axial, rand_axial and
period_axial under split / interleaved / token_first, and RoPE; seeds 0-2) and docs/hrope/openwebtext/
hrope_runs.{csv,json} (openwebtext: the same four arms under split; seeds 0-2). The run directories named in those
files (/tmp/poslab_alloc, /tmp/poslab_owt) were not kept, so `poslab analyze hrope RUN_DIR...` cannot be rerun on
them; this script applies the same statistics (poslab/analysis/stats.py) to the per-seed values the runs left:

* a figure over seeds: the seed mean with its 95% Student-t interval over the 3 seeds (``Interval.of``);
* two arms on one corpus (same seed ids, so the same training data order, and the same held-out documents): the
  per-seed differences with a t-interval over them (``paired_difference``); Welch's t beside it for comparison;
* one arm on two corpora (nothing shared): Welch's interval (``welch``, ``welch_difference``).

Each run's U* and intervention figures are measured on that corpus's fixed held-out documents, so these intervals
carry the seed-to-seed scatter, not the document sampling (the per-run intervals over documents are in the
committed hrope_table.md files).
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from statistics import mean, stdev

from poslab.analysis.stats import Interval, paired_difference, t_quantile, welch, welch_difference

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "docs/hrope/allocation", ROOT / "docs/hrope/openwebtext"]
CAUSAL = [ROOT / "docs/hrope/allocation_causal/analysis"]
#: what each set of runs holds: its files, held-out documents per corpus (those the shuffle could use)
DESCRIPTIONS = {
    "allocation": (
        "`docs/hrope/allocation/hrope_runs.{csv,json}` and `docs/hrope/openwebtext/hrope_runs.{csv,json}`",
        "25 Code, 62 WikiText-2, 43 OpenWebText; the shuffle on 22, 8 and 24 of them",
    ),
    "causal": (
        "`docs/hrope/allocation_causal/analysis/hrope_runs.{csv,json}` (the causal rerun: `split` and RoPE on three "
        "corpora, session 42; `interleaved` and `token_first` on Code, session 43)",
        "21 Code, 62 WikiText-2, 39 OpenWebText; the shuffle on 19, 8 and 22 of them",
    ),
}
CORPORA = {"python_code": "Code", "wikitext2_offline": "WikiText-2", "openwebtext": "OpenWebText"}
ORDER = ["Code", "WikiText-2", "OpenWebText"]
CORPUS_PAIRS = [("Code", "WikiText-2"), ("WikiText-2", "OpenWebText"), ("Code", "OpenWebText")]
READINGS = ["main", "no_log_n", "no_key_0", "same_paragraph_trend", "log_trend"]
WRITEUP_U = {  # the write-up's U* table
    "hrope_axial": {"Code": -0.77, "WikiText-2": -0.48, "OpenWebText": -0.31},
    "rand_axial": {"Code": -0.24, "WikiText-2": -0.22, "OpenWebText": -0.33},
}
Runs = dict[tuple[str, str], dict[int, dict]]


def table_header(columns: str) -> list[str]:
    """A Markdown table's header row (``columns``: its cells, " | " between them) and the rule under it."""
    return [f"| {columns} |", "|" + "---|" * len(columns.split(" | "))]


PAIRED_HEADER = table_header(
    "comparison | A − B per seed | A − B [95% CI] | paired t | interval | Welch t (unpaired) | "
    "seeds to clear 0 (projection)"
)


def load(sources: list[Path]) -> Runs:
    """(arm, corpus) -> seed -> the run's CSV row, with the residual curve from its JSON record."""
    runs: Runs = {}
    for folder in sources:
        curves = {r["run_dir"]: r["residual"] for r in json.loads((folder / "hrope_runs.json").read_text())}
        with open(folder / "hrope_runs.csv", newline="") as handle:
            for row in csv.DictReader(handle):
                arm = row["encoding"] if row["encoding"] == "rope" else f"{row['encoding']}:{row['frequencies']}"
                row["residual"] = [math.nan if v is None else v for v in curves[row["run_dir"]]]
                runs.setdefault((arm, CORPORA[row["corpus"]]), {})[int(row["seed"])] = row
    return runs


def num(value: float, digits: int = 2) -> str:
    return "n/a" if not math.isfinite(value) else f"{value:+.{digits}f}".replace("-", "−")


def cell(interval: Interval, digits: int = 2) -> str:
    if interval.n < 2:
        return num(interval.mean, digits)
    return f"{num(interval.mean, digits)} [{num(interval.low, digits)}, {num(interval.high, digits)}]"


def side(interval: Interval) -> str:
    if not interval.has_interval:
        return "no interval"
    return "holds 0" if interval.low <= 0 <= interval.high else ("below 0" if interval.high < 0 else "above 0")


def values(runs: dict[int, dict], key: str) -> dict[int, float]:
    """Seed -> the run's figure ``key``."""
    return {s: float(r[key]) for s, r in sorted(runs.items()) if r.get(key) not in (None, "")}


def per_seed(v: dict[int, float], digits: int = 2) -> str:
    return " / ".join(num(x, digits) for _, x in sorted(v.items()))


def seeds_needed(diffs: Iterable[float], half_width: float | None = None, most: int = 50) -> str:
    """A projection, not a result: the fewest seeds whose 95% t-interval would clear 0 (with ``half_width``: be that
    narrow) if the seed mean and sd stayed as measured. "—" where the measured seeds already do."""
    diffs = list(diffs)
    if len(diffs) < 2:
        return "n/a"
    sd = stdev(diffs)
    target = abs(mean(diffs)) if half_width is None else half_width
    if sd == 0:
        return "—"
    for n in range(2, most + 1):
        if t_quantile(n - 1) * sd / math.sqrt(n) < target:
            return "—" if n <= len(diffs) else str(n)
    return f"> {most}"


def paired_row(label: str, a: dict[int, float], b: dict[int, float], digits: int = 2) -> str:
    """A − B paired by seed: per-seed differences, their t-interval, t, the side of 0; Welch's t unpaired."""
    seeds = sorted(set(a) & set(b))
    diffs = {s: a[s] - b[s] for s in seeds}
    d = paired_difference(a, b)
    sd = stdev(diffs.values())
    t_paired = d.mean / (sd / math.sqrt(len(seeds))) if sd > 0 else math.nan
    t_w, df_w, _ = welch(list(a.values()), list(b.values()))
    return (
        f"| {label} | {per_seed(diffs, digits)} | {cell(d, digits)} | {num(t_paired)} ({len(seeds) - 1} df) | "
        f"{side(d)} | {num(t_w)} ({df_w:.1f} df) | {seeds_needed(diffs.values())} |"
    )


def welch_row(label: str, a: dict[int, float], b: dict[int, float]) -> str:
    """A − B unpaired (two corpora): Welch's interval, t and degrees of freedom."""
    d = welch_difference(list(a.values()), list(b.values()))
    t, df, _ = welch(list(a.values()), list(b.values()))
    return f"| {label} | {per_seed(a)} | {per_seed(b)} | {cell(d)} | {num(t)} ({df:.1f}) | {side(d)} |"


def arm_runs(runs: Runs) -> Iterator[tuple[str, str, dict[int, dict]]]:
    """(arm, corpus, seed -> run) for every arm, corpus by corpus in ``ORDER``, the arms of one in name order."""
    for corpus in ORDER:
        for arm in sorted(a for a, c in runs if c == corpus):
            yield arm, corpus, runs[(arm, corpus)]


def per_arm(runs: Runs) -> list[str]:
    out = [
        "## Per arm and corpus (seed mean [95% t-interval over seeds]; per seed: seed 0 / 1 / 2)",
        "",
        *table_header(
            "arm | corpus | val bits/byte | U* | U* per seed | U* sd | U* at k | ΔU* shuffle | ΔU* per seed | "
            "merge: persistent | split: persistent | merge: same pairs | split: same pairs"
        ),
    ]
    for arm, corpus, r in arm_runs(runs):
        u, shuffle = values(r, "U*"), values(r, "shuffle_change")
        cells = [
            arm,
            corpus,
            f"{mean(values(r, 'val_bpb').values()):.3f}",
            cell(Interval.of(u.values())),
            per_seed(u),
            f"{stdev(u.values()):.2f}",
            " / ".join(str(int(float(x["U*_at"]))) for _, x in sorted(r.items())),
            cell(Interval.of(shuffle.values())),
            per_seed(shuffle),
        ]
        cells += [cell(Interval.of(values(r, f"{k}[persistent_mass]").values()), 4) for k in ("merge", "split")]
        cells += [cell(Interval.of(values(r, f"{k}[same_pairs]").values()), 3) for k in ("merge", "split")]
        out.append("| " + " | ".join(cells) + " |")
    return out


def interventions(runs: Runs) -> list[str]:
    out = [
        "## H1, H2: intervention responses (after minus before)",
        "",
        "Single arms under `split`, persistent cross mass:",
        "",
        *table_header("arm | corpus | kind | per seed | mean [95% CI] | interval | seeds to clear 0 (projection)"),
    ]
    for corpus in ORDER:
        for encoding in ("hrope_axial", "rand_axial"):
            for kind in ("merge", "split"):
                v = values(runs[(f"{encoding}:split", corpus)], f"{kind}[persistent_mass]")
                i = Interval.of(v.values())
                out.append(
                    f"| {encoding}:split | {corpus} | {kind} | {per_seed(v, 4)} | {cell(i, 4)} | {side(i)} | "
                    f"{seeds_needed(v.values())} |"
                )
    for reading, label in (("persistent_mass", "persistent cross mass"), ("same_pairs", "same pairs")):
        out += ["", f"hrope_axial − rand_axial, paired by seed ({label}):", "", *PAIRED_HEADER]
        for corpus in ORDER:
            for allocation in ("split", "interleaved"):
                a, b = (f"hrope_axial:{allocation}", corpus), (f"rand_axial:{allocation}", corpus)
                if a in runs and b in runs:
                    for kind in ("merge", "split"):
                        key = f"{kind}[{reading}]"
                        out.append(
                            paired_row(f"{corpus}, {allocation}, {kind}", values(runs[a], key), values(runs[b], key), 4)
                        )
    out += ["", "One arm, `split` − `interleaved`, paired by seed (persistent cross mass):", "", *PAIRED_HEADER]
    for corpus in ("Code", "WikiText-2"):
        for encoding in ("hrope_axial", "rand_axial"):
            if (f"{encoding}:interleaved", corpus) not in runs:
                continue  # the causal rerun trains `split` only
            for kind in ("merge", "split"):
                key = f"{kind}[persistent_mass]"
                a, b = runs[(f"{encoding}:split", corpus)], runs[(f"{encoding}:interleaved", corpus)]
                out.append(paired_row(f"{corpus}, {encoding}, {kind}", values(a, key), values(b, key), 4))
    return out


def well_shape(runs: Runs) -> list[str]:
    out = [
        "## H3: the well's shape",
        "",
        "r(k): the mean residual at paragraph displacement k. r(2) − r(1) < 0: suppression grows from 1 to 2; "
        "r(last) − U* > 0, at the largest displacement every seed has: the well shrinks again.",
        "",
        *table_header(
            "arm | corpus | r(2) − r(1) per seed | r(2) − r(1) [95% CI] | last k | r(last) − U* per seed | "
            "r(last) − U* [95% CI]"
        ),
    ]
    for arm, corpus, r in arm_runs(runs):
        grow = {s: x["residual"][2] - x["residual"][1] for s, x in sorted(r.items())}
        last = min(max(k for k, v in enumerate(x["residual"]) if math.isfinite(v)) for x in r.values())
        back = {s: x["residual"][last] - float(x["U*"]) for s, x in sorted(r.items())}
        out.append(
            f"| {arm} | {corpus} | {per_seed(grow)} | {cell(Interval.of(grow.values()))} | {last} | "
            f"{per_seed(back)} | {cell(Interval.of(back.values()))} |"
        )
    return out


def depths(runs: Runs) -> list[str]:
    out = [
        "## H4: the write-up's U* against our interval over seeds",
        "",
        *table_header("arm | corpus | write-up | ours | write-up's value inside our interval"),
    ]
    for allocation in ("split", "interleaved"):
        for corpus in ORDER:
            for encoding, by_corpus in WRITEUP_U.items():
                arm = f"{encoding}:{allocation}"
                if (arm, corpus) in runs:
                    i = Interval.of(values(runs[(arm, corpus)], "U*").values())
                    inside = "yes" if i.low <= by_corpus[corpus] <= i.high else "no"
                    out.append(f"| {arm} | {corpus} | {num(by_corpus[corpus])} | {cell(i)} | {inside} |")
    out += [
        "",
        "## H5: the depth gap U*(hrope_axial) − U*(rand_axial), paired by seed (negative: hrope_axial deeper), "
        "under each U* reading",
        "",
        *PAIRED_HEADER,
    ]
    for corpus in ORDER:
        for allocation in ("split", "interleaved", "token_first"):
            a, b = (f"hrope_axial:{allocation}", corpus), (f"rand_axial:{allocation}", corpus)
            if a in runs and b in runs:
                for reading in READINGS:
                    key = f"U*[{reading}]"
                    label = f"{corpus}, {allocation}, U* {reading}"
                    out.append(paired_row(label, values(runs[a], key), values(runs[b], key)))
    gaps = {}
    for corpus in ORDER:
        h, r = values(runs[("hrope_axial:split", corpus)], "U*"), values(runs[("rand_axial:split", corpus)], "U*")
        gaps[corpus] = [h[s] - r[s] for s in sorted(h)]
    out += [
        "",
        "Seeds for a paired 95% interval of half-width 0.10 on the `split` depth gap (projection at the measured sd): "
        + "; ".join(f"{c} {seeds_needed(g, 0.10)} (sd {stdev(g):.2f})" for c, g in gaps.items())
        + ".",
        "",
        "## H6: one arm across corpora, U*(first) − U*(second), Welch (negative: deeper on the first)",
        "",
        *table_header(
            "arm, corpora | first per seed | second per seed | difference [95% CI] | Welch t (df) | interval"
        ),
    ]
    for arm in sorted({a for a, _ in runs}):
        for first, second in CORPUS_PAIRS:
            if (arm, first) in runs and (arm, second) in runs:
                a, b = values(runs[(arm, first)], "U*"), values(runs[(arm, second)], "U*")
                out.append(welch_row(f"{arm}, {first} − {second}", a, b))
    out += [
        "",
        "Is the corpus dependence larger for hrope_axial? Its per-seed depth gap to rand_axial (paired within a "
        "corpus) on one corpus minus on another, Welch (0: both arms depend on the corpus alike):",
        "",
        *table_header(
            "allocation, corpora | gap per seed, first | gap per seed, second | first − second [95% CI] | "
            "Welch t (df) | interval"
        ),
    ]
    for allocation in ("split", "interleaved"):
        for first, second in CORPUS_PAIRS:
            keys = [(f"{e}:{allocation}", c) for e in ("hrope_axial", "rand_axial") for c in (first, second)]
            if all(k in runs for k in keys):
                gap = {}
                for corpus in (first, second):
                    h = values(runs[(f"hrope_axial:{allocation}", corpus)], "U*")
                    r = values(runs[(f"rand_axial:{allocation}", corpus)], "U*")
                    gap[corpus] = {s: h[s] - r[s] for s in sorted(set(h) & set(r))}
                out.append(welch_row(f"{allocation}, {first} − {second}", gap[first], gap[second]))
    return out


def shuffle(runs: Runs) -> list[str]:
    out = ["## H7: the shuffle, ΔU*(arm) − ΔU*(RoPE) and ΔU*(hrope_axial) − ΔU*(rand_axial), paired by seed", ""]
    out += PAIRED_HEADER
    for corpus in ORDER:
        rope = values(runs[("rope", corpus)], "shuffle_change")
        for arm in sorted(a for a, c in runs if c == corpus and a != "rope"):
            out.append(paired_row(f"{corpus}, {arm} − RoPE", values(runs[(arm, corpus)], "shuffle_change"), rope, 3))
        for allocation in ("split", "interleaved"):
            a, b = (f"hrope_axial:{allocation}", corpus), (f"rand_axial:{allocation}", corpus)
            if a in runs and b in runs:
                label = f"{corpus}, hrope_axial:{allocation} − rand_axial:{allocation}"
                out.append(paired_row(label, values(runs[a], "shuffle_change"), values(runs[b], "shuffle_change"), 3))
    return out


def main() -> None:
    which = sys.argv[1] if len(sys.argv) > 1 else "allocation"
    if which not in DESCRIPTIONS:
        raise SystemExit(f"seed_intervals.py {which}: give nothing (the allocation study's runs) or 'causal'.")
    runs = load(CAUSAL if which == "causal" else SOURCES)
    files, documents = DESCRIPTIONS[which]
    command = "seed_intervals.py" + (" causal" if which == "causal" else "")
    sections = [
        [
            "# Seed-level figures behind docs/reproduction.md (hRoPE rows)"
            + (": the causal rerun" if which == "causal" else ""),
            "",
            f"Generated by `.venv/bin/python docs/reproduction/{command}` from the committed per-run files "
            f"{files}, with `poslab/analysis/stats.py`. Every interval is 95% over the 3 seeds (Student-t, 2 df, "
            "t = 4.303): a seed "
            "mean's is `Interval.of`; an A − B on one corpus is paired by seed (`paired_difference`: the arms share "
            "seed ids, hence training data order, and the held-out documents), Welch's t beside it for comparison; "
            "across corpora Welch (`welch_difference`). 'holds 0': not separated. 'seeds to clear 0 (projection)': "
            "the fewest seeds whose 95% t-interval would exclude 0 if the mean and sd stayed as measured (a "
            "projection, not a result; '—': the 3 seeds already do). These intervals carry the seed scatter on each "
            f"corpus's fixed held-out documents ({documents}), not the document sampling.",
        ],
        per_arm(runs),
        interventions(runs),
        well_shape(runs),
        depths(runs),
        shuffle(runs),
    ]
    print("\n\n".join("\n".join(section) for section in sections))


if __name__ == "__main__":
    main()
