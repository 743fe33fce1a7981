"""What the synthetic zoo's ranking got right and wrong about text: its places beside the language models'.

    python docs/lm_extrapolation/zoo_vs_text.py docs/position_zoo/v2/zoo.json docs/lm_extrapolation/length.json \
        > docs/lm_extrapolation/zoo_vs_text.md

Reads only two report summaries: ``poslab report zoo``'s (the 5-seed synthetic zoo: each encoding's mean rank over
six tasks, trained at 32 tokens, scored past it) and ``poslab report length``'s (the lm_zoo, plain evaluation). For
each corpus it asks how well the synthetic mean rank predicts three text rankings, as Spearman's rho per text seed
with the t-interval over those seeds (``poslab.analysis.stats.rank_correlation_by_seed``; the synthetic ranks'
own uncertainty is not in the interval):

- *extrapolation*: mean bits/byte over 2x-16x (the length report's ranking: what the synthetic score measures);
- *rise*: bits/byte at 16x over 1x (flat or not, whatever the level);
- *1x*: bits/byte at the training length (modelling quality; the synthetic zoo does not claim to predict it).

A positive rho is agreement (lower mean rank, lower bits/byte). Labels carrying a setting tied to the training
length (``cope:33`` there, ``cope:129`` here) are matched by encoding name.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from poslab.analysis.stats import Interval, paired_difference, rank_correlation_by_seed, spearman
from poslab.analysis.tables import markdown_table

EXTRAPOLATION = "extrapolation (bits/byte 2x-16x)"
TEXT_RANKINGS = {  # label: how a row's per-seed value is read
    EXTRAPOLATION: lambda row: row["score"]["per_seed"],
    "rise (16x / 1x)": lambda row: row["ratio_to_1x"].get("16x", {}).get("per_seed", {}),
    "1x (bits/byte)": lambda row: row["bpb"].get("1x", {}).get("per_seed", {}),
}


def synthetic_ranks(zoo_summary: dict) -> dict[str, float]:
    return {base_name(entry["encoding"]): float(entry["mean_rank"]) for entry in zoo_summary["overall"]}


def base_name(label: str) -> str:
    """``cope:129`` -> ``cope``: the settings in a label follow the training length (33 positions at 32 tokens,
    129 at 128), so the two experiments' labels differ where the method is the same."""
    return label.split(":")[0]


def per_seed(rows: list[dict], read) -> dict[str, dict[int, float]]:
    return {base_name(row["encoding"]): {int(s): float(v) for s, v in read(row).items()} for row in rows}


def places(values: dict[str, float]) -> dict[str, int]:
    return {name: place for place, name in enumerate(sorted(values, key=values.get), start=1)}


def seed_means(by_seed: dict[str, dict[int, float]]) -> dict[str, float]:
    return {name: sum(v.values()) / len(v) for name, v in by_seed.items() if v}


def baseline_by_seed(rows: list[dict], seeds: list[int]) -> dict[int, float]:
    """Per text seed, rho of the trivial predictor a synthetic zoo has to beat (the text's own bits/byte at the
    training length, which needs no long evaluation) with the extrapolation ranking."""
    score = per_seed(rows, TEXT_RANKINGS[EXTRAPOLATION])
    one_x = per_seed(rows, TEXT_RANKINGS["1x (bits/byte)"])
    return {s: spearman({k: v[s] for k, v in score.items()}, {k: one_x[k][s] for k in score}) for s in seeds}


def corpus_section(corpus: str, rows: list[dict], reference: dict[str, float]) -> None:
    print(f"### {corpus}\n")
    print("Spearman's rho between the synthetic zoo's mean rank and the text's ranking, per text seed (mean [95%")
    print("t-interval over seeds]; seeds: those every encoding holds):\n")
    tables, rhos, rho_rows = {}, {}, []
    for label, read in TEXT_RANKINGS.items():
        by_seed = per_seed(rows, read)
        rhos[label] = rank_correlation_by_seed(by_seed, reference)
        interval = Interval.of(rhos[label].values())
        rho_rows.append([label, interval.cell(3), interval.n])
        tables[label] = places(seed_means(by_seed))
    baseline_rho = baseline_by_seed(rows, list(rhos[EXTRAPOLATION]))  # the same seeds as the synthetic rho
    baseline = Interval.of(baseline_rho.values())
    gain = paired_difference(rhos[EXTRAPOLATION], baseline_rho)
    rho_rows.append(["*baseline*: the text's 1x places predicting its extrapolation", baseline.cell(3), baseline.n])
    rho_rows.append(["extrapolation: synthetic zoo minus the baseline (paired by seed)", gain.cell(3), gain.n])
    print(markdown_table(["text ranking", "rho", "seeds"], rho_rows))
    print("\n(rho 0: no agreement, the chance level.)\n")
    synthetic = places(reference)
    labels = list(TEXT_RANKINGS)
    print("Places (text: by seed means), in the synthetic zoo's order:\n")
    place_rows = [
        [name, synthetic[name], *(tables[label].get(name, "") for label in labels)]
        for name in sorted(synthetic, key=synthetic.get)
        if name in tables[labels[0]]
    ]
    print(markdown_table(["encoding", "synthetic zoo", *(f"text: {label}" for label in labels)], place_rows) + "\n")


def main(zoo_path: str, length_path: str) -> None:
    reference = synthetic_ranks(json.loads(Path(zoo_path).read_text(encoding="utf-8")))
    summary = json.loads(Path(length_path).read_text(encoding="utf-8"))
    for corpus, part in summary["corpora"].items():
        rows = [row for row in part["rows"] if row["way"] == "plain" and base_name(row["encoding"]) in reference]
        corpus_section(corpus, rows, reference)


if __name__ == "__main__":
    main(*sys.argv[1:3])
