"""The passkey arm seed by seed: how far each encoding copies, and when copying appears in training.

    python docs/lm_extrapolation/passkey_curve.py docs/lm_extrapolation/passkey/runs \
        > docs/lm_extrapolation/passkey/curve.md

Reads each run's ``results.json`` only. ``passkey.exact`` holds the greedy exact match of the 5-digit key after
training, per distance and depth (the same keys and filler for every seed: ``task.passkey.seed``), averaged here
over the depths; ``passkey_by_step`` (``task.passkey.at_validation``) holds the exact match at distances within one
context (32, 64, 128 bytes at context 128) at every ``task.val_every_n_steps``; ``figures.val_bpb`` the bits per
byte at 1x at the last validation. The copying warm-up (``task.passkey.warmup_steps``: a pair in every training
window) ends at step 960, so a column past it says whether copying survives text with a pair in one window of ten.
Every cell gives each seed's figure, in seed order, so a reader sees whether the seeds agree; the report
(``poslab report length``) gives their means.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from poslab.analysis.tables import markdown_table


def load(runs_dir: str) -> dict[str, dict[int, dict]]:
    """label: {seed: results} for every run with a passkey curve."""
    runs: dict[str, dict[int, dict]] = defaultdict(dict)
    for path in sorted(Path(runs_dir).glob("*/results.json")):
        results = json.loads(path.read_text(encoding="utf-8"))
        if results.get("passkey_by_step"):
            runs[results["label"]][int(results["seed"])] = results
    return runs


def by_distance(results: dict) -> list[float]:
    """Exact match per distance, the mean over depths."""
    return [sum(row) / len(row) for row in results["passkey"]["exact"]]


def curve(results: dict) -> dict[int, float]:
    return {int(point["step"]): float(point["exact"]) for point in results["passkey_by_step"]}


def cell(values: list[float | None], digits: int = 2) -> str:
    return " / ".join("" if value is None else f"{value:.{digits}f}" for value in values)


def main(runs_dir: str) -> None:
    runs = load(runs_dir)
    seeds = sorted({seed for per_seed in runs.values() for seed in per_seed})
    first = next(iter(next(iter(runs.values())).values()))["passkey"]
    multiples = first["distance_multiples"]
    steps = sorted({step for per_seed in runs.values() for r in per_seed.values() for step in curve(r)})
    # most copying past the context first (the sum over seeds of the exact match at every distance)
    order = sorted(runs, key=lambda label: -sum(sum(by_distance(r)) for r in runs[label].values()))
    in_seed_order = {label: [runs[label].get(seed) for seed in seeds] for label in order}  # None: no run

    print(f"Seeds {', '.join(map(str, seeds))}; every cell gives each seed's figure in that order (blank: no run).\n")
    print(
        f"Exact match after training by distance, the mean over the {len(first['depths'])} depths "
        f"({first['trials'] * len(first['depths'])} trials a cell and seed; chance {first['chance_exact']:g}):\n"
    )
    distance_rows = []
    for label, results in in_seed_order.items():
        per_seed = [None if r is None else by_distance(r) for r in results]
        distance_rows.append(
            [label, *(cell([None if d is None else d[i] for d in per_seed]) for i in range(len(multiples)))]
        )
    print(markdown_table(["encoding", *(f"{m:g}x" for m in multiples)], distance_rows) + "\n")

    print("Within-context exact match (results.json passkey_by_step) at each validation step; last column: bits/byte")
    print("at 1x at the last step.\n")
    curve_rows = []
    for label, results in in_seed_order.items():
        curves = [None if r is None else curve(r) for r in results]
        cells = [cell([None if c is None else c.get(step) for c in curves]) for step in steps]
        bpb = cell([None if r is None else float(r["figures"]["val_bpb"]) for r in results], digits=3)
        curve_rows.append([label, *cells, bpb])
    print(markdown_table(["encoding", *map(str, steps), "bits/byte at 1x"], curve_rows) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
