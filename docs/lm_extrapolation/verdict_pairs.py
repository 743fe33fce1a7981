"""Paired contrasts that docs/lm_extrapolation.md's verdicts cite beyond alibi_shape.md's table.

Ratios to 1x between encodings; bits/byte between test-time ways of one model.

    python docs/lm_extrapolation/verdict_pairs.py [docs/lm_extrapolation/length.json]

Each line is A's ratio to 1x minus B's at a multiple, over the seeds both have (``stats.paired_difference``: a
t-interval over seeds; the held-out documents are not resampled), as ``alibi_shape.py`` computes its contrasts.
"""

import json
import sys
from pathlib import Path

from poslab.analysis.stats import paired_difference

WAYS = [("rope", "plain", "test_yarn"), ("rope", "plain", "test_linear")]  # bits/byte: plain minus a rule
LIKE_ROPE = ["increments_layer", "increments_shared", "ssmax"]  # ratio to 1x minus RoPE's
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
        for name in LIKE_ROPE:
            i = paired_difference(per_seed(rows[name], "16x"), per_seed(rows["rope"], "16x"))
            print(f"{corpus} {name} - rope 16x: {i.mean:.3f} [{i.low:.2f}, {i.high:.2f}] n={i.n}")
        ways = {(row["encoding"], row["way"]): row for row in part["rows"]}
        for name, first, second in WAYS:
            for multiple in ("2x", "16x"):
                a, b = (ways[(name, way)]["bpb"][multiple]["per_seed"] for way in (first, second))
                i = paired_difference({int(s): v for s, v in a.items()}, {int(s): v for s, v in b.items()})
                line = f"{corpus} {name} {first} - {second} bits/byte {multiple}"
                print(f"{line}: {i.mean:.3f} [{i.low:.2f}, {i.high:.2f}] n={i.n}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/lm_extrapolation/length.json")
