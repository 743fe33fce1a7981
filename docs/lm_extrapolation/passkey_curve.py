"""When copying appears: the passkey arm's within-context retrieval at every validation, per encoding.

    python docs/lm_extrapolation/passkey_curve.py docs/lm_extrapolation/passkey/runs \
        > docs/lm_extrapolation/passkey/curve.md

Reads each run's ``csv/metrics.csv`` (Lightning's CSV log, kept with the run's ``results.json``):
``val/passkey_exact`` is the greedy exact match of the 5-digit key at distances within one context (32, 64, 128
bytes at context 128), ``val/bpb`` the bits per byte at 1x, both at every ``task.val_every_n_steps``. The copying
warm-up (``task.passkey.warmup_steps``: a pair in every training window) ends at step 960, so a column past it
says whether copying survives text with a pair in one window of ten. One seed per encoding: a first reading.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path


def validations(metrics: Path, column: str) -> dict[int, float]:
    """``column`` by step, from the rows that hold it (Lightning writes one row per logging call)."""
    with metrics.open(newline="", encoding="utf-8") as handle:
        return {int(row["step"]): float(row[column]) for row in csv.DictReader(handle) if row.get(column)}


def main(runs_dir: str) -> None:
    curves = {}
    for results in sorted(Path(runs_dir).glob("*/results.json")):
        metrics = results.parent / "csv" / "metrics.csv"
        if metrics.is_file():
            label = json.loads(results.read_text(encoding="utf-8"))["label"]
            curves[label] = (validations(metrics, "val/passkey_exact"), validations(metrics, "val/bpb"))
    steps = sorted({step for exact, _ in curves.values() for step in exact})
    print("Within-context passkey exact match (val/passkey_exact) at each validation step; last column: bits/byte")
    print("at 1x at the last step. One seed each.\n")
    print("| encoding | " + " | ".join(str(s + 1) for s in steps) + " | bits/byte at 1x |")
    print("|---|" + "---|" * (len(steps) + 1))
    final = lambda item: -max(item[1][0].items())[1]  # most copying at the end first
    for label, (exact, bpb) in sorted(curves.items(), key=final):
        cells = [f"{exact[s]:.2f}" if s in exact else "" for s in steps]
        print(f"| {label} | " + " | ".join(cells) + f" | {bpb[max(bpb)]:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
