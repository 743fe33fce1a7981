"""When copying appears: the passkey arm's within-context retrieval at every validation, per encoding.

    python docs/lm_extrapolation/passkey_curve.py docs/lm_extrapolation/passkey/runs \
        > docs/lm_extrapolation/passkey/curve.md

Reads each run's ``results.json`` only: ``passkey_by_step`` (``task.passkey.at_validation``) holds the greedy exact
match of the 5-digit key at distances within one context (32, 64, 128 bytes at context 128) at every
``task.val_every_n_steps``, and ``figures.val_bpb`` the bits per byte at 1x at the last validation. The copying
warm-up (``task.passkey.warmup_steps``: a pair in every training window) ends at step 960, so a column past it
says whether copying survives text with a pair in one window of ten. One seed per encoding: a first reading.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(runs_dir: str) -> None:
    curves = {}  # label: ({step: exact}, bits/byte at 1x)
    for path in sorted(Path(runs_dir).glob("*/results.json")):
        results = json.loads(path.read_text(encoding="utf-8"))
        if results.get("passkey_by_step"):
            exact = {int(point["step"]): float(point["exact"]) for point in results["passkey_by_step"]}
            curves[results["label"]] = (exact, float(results["figures"]["val_bpb"]))
    steps = sorted({step for exact, _ in curves.values() for step in exact})
    print("Within-context passkey exact match (results.json passkey_by_step) at each validation step; last column:")
    print("bits/byte at 1x at the last step. One seed each.\n")
    print("| encoding | " + " | ".join(str(s) for s in steps) + " | bits/byte at 1x |")
    print("|---|" + "---|" * (len(steps) + 1))
    final = lambda item: -max(item[1][0].items())[1]  # most copying at the end first
    for label, (exact, bpb) in sorted(curves.items(), key=final):
        cells = [f"{exact[s]:.2f}" if s in exact else "" for s in steps]
        print(f"| {label} | " + " | ".join(cells) + f" | {bpb:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1])
