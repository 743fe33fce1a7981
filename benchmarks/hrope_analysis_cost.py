"""Cost of ``poslab analyze hrope`` against the number of documents: time and peak memory, 100 vs 400 documents.

    python benchmarks/hrope_analysis_cost.py [--run RUN_DIR] [--small 100] [--large 400] [--quick]

Each size runs in a fresh process (a process's peak RSS only grows): the model of ``--run`` (a trained run) or,
without it, a freshly initialised hrope_axial model of the ``hrope_cpu`` size, on synthetic documents of 256
tokens with 4-40-token paragraphs (the same documents for both sizes, the small set a prefix of the large one).
Prints seconds, peak RSS, the memory the analysis added beyond loading, and the ratios large/small
(targets: time <= 4.5x and memory <= 1.5x for 4x the documents). ``--quick``: 10 against 40 documents (a smoke
check: at that size loading dominates, and the ratios are not the targets').
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
import numpy as np, torch
from poslab.analysis.hrope.compute import analyze_documents
from poslab.analysis.hrope.documents import Document
torch.set_num_threads(1)
n, run = int(sys.argv[1]), sys.argv[2]
if run:
    from poslab.running.builders import load_run
    cfg, module = load_run(run)
    model, vocab, context = module.model, module.model.cfg.vocab_size, int(cfg.task.context_length)
else:
    from poslab.running.compose import compose_config
    from poslab.model import ModelConfig, Transformer
    from omegaconf import OmegaConf
    cfg = compose_config(["experiment=hrope_axial_cpu", "corpus=python_code"])
    vocab, context = 2048, int(cfg.task.context_length)
    settings = OmegaConf.to_container(cfg.model, resolve=True)
    model = Transformer(ModelConfig(vocab_size=vocab, n_outputs=vocab, encoding={"name": "hrope_axial"}, **settings),
                        context).eval()

def documents():
    rng = np.random.default_rng(0)
    for ordinal in range(n):
        lengths = rng.integers(4, 41, size=40)
        paragraph = np.repeat(np.arange(40), lengths)[:context]
        yield Document(ordinal, rng.integers(0, vocab, len(paragraph)), paragraph, paragraph * 3)

before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
result = analyze_documents(model, documents(), progress=False, bootstrap=1000)
seconds = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"documents": result["documents"], "seconds": seconds, "peak_kb": after, "added_kb": after - before,
                  "U*": result["depths"]["main"].well.depth}))
"""


def measure(n: int, run: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(n), run], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--run", default="", help="a trained run directory (default: an untrained hrope_cpu model)")
    parser.add_argument("--small", type=int, default=100)
    parser.add_argument("--large", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="10 against 40 documents")
    args = parser.parse_args()
    if args.quick:
        args.small, args.large = 10, 40
    rows = []
    for n in (args.small, args.large):  # a line as each size ends
        rows.append(row := measure(n, args.run))
        print(
            f"{row['documents']:5d} documents: {row['seconds']:8.1f} s, peak RSS {row['peak_kb'] / 1024:7.1f} MB "
            f"(analysis added {row['added_kb'] / 1024:6.1f} MB), U* {row['U*']:+.3f}",
            flush=True,
        )
    small, large = rows
    factor = large["documents"] / small["documents"]
    print(
        f"{factor:.0f}x the documents: time x{large['seconds'] / small['seconds']:.2f} (target <= 4.5), "
        f"peak memory x{large['peak_kb'] / small['peak_kb']:.3f} (target <= 1.5)"
    )


if __name__ == "__main__":
    main()
