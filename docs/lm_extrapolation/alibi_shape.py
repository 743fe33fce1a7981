"""The ALiBi paper's comparison as a shape: cross-entropy at a longer length over cross-entropy at the training length.

    python docs/lm_extrapolation/alibi_shape.py docs/lm_extrapolation/length.json > docs/lm_extrapolation/alibi_shape.md
    python docs/lm_extrapolation/alibi_shape.py docs/lm_zoo_rerun/length.json docs/lm_zoo_rerun/front/length.json \
        > docs/lm_zoo_rerun/alibi_shape.md      # the rerun: ratios on the test documents, the @ratio claims after

Reads only the summary of ``poslab report length`` (its ``length.json``). Press et al. (2022), Table 3 (WikiText-103,
trained at 512 tokens, perplexity at 512 / 1012 / 2512): a perplexity ratio is not comparable across tokenisations,
but a ratio of log perplexities is a ratio of cross-entropies, which is what poslab's "ratio to 1x" of bits per
byte is (bits per byte = nats per token x tokens per byte / ln 2: the factor cancels in the ratio). So the paper's
ln(ppl at L) / ln(ppl at 512) at L = 1012 (1.98x) and 2512 (4.9x) sits beside poslab's ratio at 2x and 4x (and
8x, 16x). The verdict the issue asks for is about ordering and shape: absolute encodings explode, RoPE rises, T5
and ALiBi stay flat.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from poslab.analysis.claims import names_row
from poslab.analysis.stats import Interval, paired_difference

PAPER = {  # perplexity at 512 / 1012 / 2512, Press et al. (2022), trained at 512
    "sinusoid": (20.05, 43.54, 132.41),
    "rope": (20.07, 21.37, 31.58),
    "t5_bias": (19.65, 18.79, 20.41),
    "alibi": (19.73, 18.73, 18.41),
}
MULTIPLES = ("2x", "4x", "8x", "16x")
# The paper's claims as paired contrasts of ratios (seeds share the corpus and the held-out bytes): "A - B" at a
# multiple is A's ratio to 1x minus B's; "A - 1" asks whether A is flat.
CONTRASTS = (
    ("alibi", None),
    ("t5_bias", None),
    ("rope", None),
    ("sinusoid", None),
    ("sinusoid", "rope"),
    ("rope", "alibi"),
    ("t5_bias", "alibi"),
    ("rope", "t5_bias"),
)


def paper_name(label: str) -> str | None:
    """The paper's row a label names: ``t5_bias:32x127`` (a label with its settings) is the paper's ``t5_bias``."""
    return next((name for name in PAPER if names_row(name, label)), None)


def paper_ratios(label: str) -> str:
    name = paper_name(label)
    if name is None:
        return ""
    at_512, at_1012, at_2512 = (math.log(p) for p in PAPER[name])
    return f"{at_1012 / at_512:.3f} / {at_2512 / at_512:.3f}"


def cell(figure: dict | None) -> str:
    if not figure or figure.get("mean") is None:
        return ""
    text = f"{figure['mean']:.3f}"
    if figure.get("low") is not None:
        text += f" [{figure['low']:.2f}, {figure['high']:.2f}]"
    return text


DOCUMENTS_NOTE = (
    "Ratios on the test documents, 95% interval over seeds and documents (`stats.crossed_interval`). The paper's "
    "claims as contrasts are `report length --claim ...@ratio`, paired on seeds and documents "
    "(docs/rerun.md: the README figure's report).\n"
)


def ratio_cell(row: dict, multiple: str) -> str:
    """A row's ratio at ``multiple``: on the test documents with the interval over seeds and documents where its
    runs recorded them (to 4 places: a ratio near 1), else over seeds."""
    on_documents = (row.get("ratio_documents") or {}).get(multiple)
    return Interval.from_dict(on_documents).cell(4) if on_documents else cell(row["ratio_to_1x"].get(multiple))


def per_seed(row: dict, multiple: str) -> dict[int, float]:
    return {int(seed): value for seed, value in row["ratio_to_1x"].get(multiple, {}).get("per_seed", {}).items()}


def contrast_table(rows: list[dict]) -> None:
    """Each claim of the paper's shape as an interval over seeds: a ratio minus 1 (flat?) or A's minus B's."""
    by_name = {paper_name(row["encoding"]) or row["encoding"]: row for row in rows}
    print("Paired over seeds (mean [95% t-interval]; n/a: fewer than two seeds in common):\n")
    print("| contrast | " + " | ".join(MULTIPLES) + " |")
    print("|---|" + "---|" * len(MULTIPLES))
    for first, second in CONTRASTS:
        if first not in by_name or (second is not None and second not in by_name):
            continue
        cells = []
        for multiple in MULTIPLES:
            a = per_seed(by_name[first], multiple)
            if second is None:
                interval = Interval.of(value - 1.0 for value in a.values())
            else:
                interval = paired_difference(a, per_seed(by_name[second], multiple))
            cells.append(f"{interval.cell(3)} (n={interval.n})")
        label = f"{first} - 1" if second is None else f"{first} - {second}"
        print(f"| {label} | " + " | ".join(cells) + " |")
    print()


def ratio_claims_table(claims: list[dict]) -> None:
    """The paper's claims as ``report length --claim ...@ratio`` read them (paired on seeds and test documents):
    per claim and multiple, A - B with its interval and verdict."""
    claims = [claim for claim in claims if claim.get("figure") == "ratio to 1x"]
    if not claims:
        return
    print("The paper's claims on the ratio, A - B [95% over seeds and test documents] and its verdict:\n")
    print("| claim | " + " | ".join(MULTIPLES) + " |")
    print("|---|" + "---|" * len(MULTIPLES))
    for claim in claims:
        found = claim["by_multiple"]
        cells = [
            f"{Interval.from_dict(found[m]).cell(4)} {found[m]['verdict']}" if m in found else "not testable"
            for m in MULTIPLES
        ]
        print(f"| `{claim['claim']}` | " + " | ".join(cells) + " |")
    print()


def main(summary_path: str, claims_path: str | None = None) -> None:
    """``claims_path``: a summary whose ``@ratio`` claims to print after each corpus's ratios (the README figure's
    report, docs/rerun.md); None: the contrasts over seeds below the ratios, where the runs kept no documents."""
    summary = json.loads(Path(summary_path).read_text(encoding="utf-8"))
    claimed = json.loads(Path(claims_path).read_text(encoding="utf-8"))["corpora"] if claims_path else {}
    for corpus, part in summary["corpora"].items():
        rows = [row for row in part["rows"] if row["way"] == "plain"]
        rows.sort(key=lambda row: row["ratio_to_1x"].get("16x", {}).get("mean") or math.inf)
        print(f"### {corpus}: cross-entropy at L over cross-entropy at the training length (plain evaluation)\n")
        print("| encoding | seeds | 1x bits/byte | " + " | ".join(MULTIPLES) + " | paper: 1.98x / 4.9x |")
        print("|---|---|---|" + "---|" * len(MULTIPLES) + "---|")
        documents = any(row.get("ratio_documents") for row in rows)  # runs since issue 37: seeds and documents
        for row in rows:
            ratios = [ratio_cell(row, m) for m in MULTIPLES]
            at_1x = (row.get("bpb_documents") or {}).get("1x")  # the test documents, as the ratios
            one_x = Interval.from_dict(at_1x).cell() if documents and at_1x else cell(row["bpb"].get("1x"))
            cells = [row["encoding"], str(row["seeds"]), one_x, *ratios, paper_ratios(row["encoding"])]
            print("| " + " | ".join(cells) + " |")
        print()
        if documents:
            print(DOCUMENTS_NOTE)
            ratio_claims_table(claimed.get(corpus, {}).get("claims") or [])
        else:
            contrast_table(rows)


if __name__ == "__main__":
    main(*sys.argv[1:3])
