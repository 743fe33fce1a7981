"""Paired contrasts of ratios to 1x that the verdicts of docs/lm_extrapolation.md cite beyond alibi_shape.md's table.

    python docs/lm_extrapolation/verdict_pairs.py [docs/lm_extrapolation/length.json]

Each line is A's ratio to 1x minus B's at a multiple, over the seeds both have (``stats.paired_difference``: a
t-interval over seeds; the held-out documents are not resampled), as ``alibi_shape.py`` computes its contrasts.
"""

import json
import sys
from pathlib import Path

from poslab.analysis.stats import paired_difference

PAIRS = [("sinusoid", "t5_bias"), ("learned", "t5_bias"), ("sinusoid", "rope"), ("rope", "t5_bias")]
MULTIPLES = ["2x", "4x", "8x", "16x"]


def per_seed(row: dict, multiple: str) -> dict[int, float]:
    return {int(seed): value for seed, value in row["ratio_to_1x"][multiple]["per_seed"].items()}


def main(path: str) -> None:
    summary = json.loads(Path(path).read_text(encoding="utf-8"))
    for corpus, part in summary["corpora"].items():
        rows = {row["encoding"]: row for row in part["rows"] if row["way"] == "plain"}

        for first, second in PAIRS:
            for multiple in MULTIPLES:
                i = paired_difference(per_seed(rows[first], multiple), per_seed(rows[second], multiple))
                print(f"{corpus} {first} - {second} {multiple}: {i.mean:.3f} [{i.low:.2f}, {i.high:.2f}] n={i.n}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/lm_extrapolation/length.json")
