"""How many documents and bytes each corpus holds out, and how they split into selection and test (issue 37,
item 4): a quick look at the prepared corpora, no training.

    POSLAB_DATA_DIR=../shared/corpora python benchmarks/held_out_sample.py wikitext2 openwebtext python_code \
        [--fraction corpus=0.15 ...] [--quick]

Per corpus and group: held-out documents and bytes, the selection and test splits' documents and bytes
(task.selection_fraction, task.selection_seed from conf/task/lm.yaml), and the tokens the test scores at the
lm_zoo lengths (128 .. 2048). ``--quick``: the first corpus named only (a smoke check; a corpus prepared before
comes from ``--cache`` in seconds)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

import numpy as np

from poslab.datamodules.corpora import prepare_corpus
from poslab.datamodules.held_out import select_documents
from poslab.running.compose import compose_config


def measure(corpus: str, fraction: float | None, cache: str, lengths: list[int]) -> list[str]:
    overrides = [f"corpus={corpus}", "corpus.tokenizer=bytes"]
    if fraction is not None:
        overrides.append(f"corpus.validation_fraction={fraction}")
    with tempfile.TemporaryDirectory() as run_dir:
        cfg = compose_config(overrides, run_dir)
    task = cfg.task
    groups = prepare_corpus(dict(cfg.corpus), os.environ.get("POSLAB_DATA_DIR", "data"), cache)
    lines = []
    for group in groups:
        split = group.splits["validation"]
        ordinals = np.asarray(split.documents.values).astype(np.int64)
        starts = np.append(np.asarray(split.documents.starts).astype(np.int64), len(split))
        sizes = np.diff(starts)  # tokens = bytes (byte tokenizer), separator included
        mask = select_documents(group.name, ordinals, float(task.selection_fraction), int(task.selection_seed))
        tile = math.lcm(*lengths)
        scored = (len(split) - 1) // tile * tile
        lines.append(
            f"| {corpus} | {cfg.corpus.validation_fraction} | {group.name} | {len(ordinals)} | {len(split):,} | "
            f"{int(mask.sum())} | {int(sizes[mask].sum()):,} | {int((~mask).sum())} | {int(sizes[~mask].sum()):,} | "
            f"{scored:,} | {len(group.splits['train']):,} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpora", nargs="+")
    parser.add_argument("--quick", action="store_true", help="the first corpus only")
    parser.add_argument("--fraction", action="append", default=[], help="corpus=validation_fraction")
    parser.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "poslab_held_out_cache"))
    args = parser.parse_args()
    fractions = dict(item.split("=") for item in args.fraction)
    if args.quick:
        args.corpora = args.corpora[:1]
    print("| corpus | validation_fraction | group | held-out documents | held-out bytes | selection documents | "
          "selection bytes | test documents | test bytes | bytes scored (lcm 2048) | train bytes |")  # fmt: skip
    print("|---" * 11 + "|")
    for corpus in args.corpora:
        frac = float(fractions[corpus]) if corpus in fractions else None
        for line in measure(corpus, frac, args.cache, [128 * k for k in (1, 2, 4, 8, 16)]):
            print(line)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
