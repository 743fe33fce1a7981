"""The lm_zoo's evaluation against its training, per encoding and corpus (issue 37, item 3: an lm_zoo run's whole
evaluation, every length and way on the whole held-out sample, at most its training time).

    POSLAB_DATA_DIR=../shared/corpora python benchmarks/lm_zoo_eval_cost.py [--quick] [--encodings rope,alibi]
        [--corpora openwebtext,python_code] [--rounds 3] [--threads 1] [--flops]

**What is counted** (no training, no evaluation run): ``experiment=lm_zoo``'s datamodule for each corpus (its held-out
fraction, selection split and lengths), and the windows each round of the test scores at each length
(``EvaluationBatches`` with ``test_round``): the first round (windows touching a selection document) in every way
of the encoding (the plain model, log scaling, its test-time rules), the second (the rest) in the plain model and
one way chosen past the context (the usual case: a rule chosen for every length; two where a length's own choice
differs, which this does not count). Beside it, one round of every way on every window (the test before the two
rounds).

**What is measured**, in this process, in alternating rounds (so that a machine slowing down slows both): a bf16
training step of the lm_zoo model (batch 16 x 128, AdamW) and one evaluation batch (2,048 tokens, inference under
bf16 autocast) at each length, medians. Seconds = windows x ways x a batch's seconds / windows a batch; training =
``trainer.max_steps`` x a step. Printed: a line per measurement, then per (encoding, corpus) the evaluation's
seconds in two rounds and in one, the training's, and their ratio (target: at most 1).

**What is counted in FLOPs** (``--flops``: this table only, no timing), with ``poslab.running.callbacks``'s count:
the training, ``trainer.max_steps x 16 x 128`` tokens at ``flops_per_token`` (6 a matrix weight, attention's full
T x T product, the encoding's own products), against the test's forward passes, a third of that count per scored
token at each length (2 a weight, forward only): in two rounds as run, in one round of every way on every window
(the issue's letter), and the plain model alone on every window; randomized positions count once per evaluation
draw. Attention is counted as the full T x T product (the explicit and bias-mask paths); the fused causal path
computes about half of it, so at long lengths these counts overstate RoPE's. A ratio well above 1 cannot be
batched away: the forward pass would have to run faster per FLOP than the training step does.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.frontier_cost import BATCH, BYTES, CONTEXT, build, step_seconds  # noqa: E402

LENGTHS = (128, 256, 512, 1024, 2048)


def batch_seconds(encoding: str, length: int, repeats: int) -> float:
    """The median seconds of one evaluation batch of ``BATCH x CONTEXT`` tokens in windows of ``length``."""
    import torch

    model = build(encoding, length).eval()
    tokens = torch.randint(0, BYTES, (max(1, BATCH * CONTEXT // length), length), generator=torch.Generator())
    times = []
    for repeat in range(repeats + 1):
        start = time.perf_counter()
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            model(tokens)
        if repeat:  # the first allocates
            times.append(time.perf_counter() - start)
    return statistics.median(times)


@functools.cache  # the FLOP table and the timed table read the same counts: one datamodule setup each
def rounds_windows(corpus: str, encoding: str) -> tuple[dict, dict, int]:
    """Per length: windows in the first and the second round, the ways of each; and ``trainer.max_steps``."""
    from poslab.datamodules.language import EvaluationBatches
    from poslab.running.builders import build_datamodule, build_module
    from poslab.running.compose import compose_config

    with tempfile.TemporaryDirectory() as run_dir:
        cfg = compose_config(["experiment=lm_zoo", f"corpus={corpus}", f"encoding={encoding}"], run_dir)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    module = build_module(cfg, datamodule)
    plan, windows, ways = datamodule.evaluation, {}, {}
    for test_round in ("selection", "test"):
        batches = EvaluationBatches(datamodule.groups, plan, test_round=test_round, selection=datamodule.selection)
        for length in plan.lengths:
            count = sum(len(part.starts) for _, n, _, part in batches.items if n == length)
            windows.setdefault(length, {})[test_round] = count
            every = len([w for w in module.ways(length) if w != "sliding"])
            ways.setdefault(length, {})[test_round] = every if test_round == "selection" else min(every, 2)
    return windows, ways, int(cfg.trainer.max_steps)


def forward_flops(encoding: str) -> dict[int, float]:
    """Forward FLOPs per scored token at each length: a third of the training count (2 of 6 per weight, and
    likewise for attention and the encoding's own products), times the position draws the evaluation averages
    over (randomized positions score every window once per draw)."""
    from poslab.running.callbacks import flops_per_token

    flops = {}
    for n in LENGTHS:
        model = build(encoding, n)
        flops[n] = flops_per_token(model, n, max(1, BATCH * CONTEXT // n)) / 3 * model.encoding.evaluation_draws()
    return flops


def evaluation_flops(windows: dict, ways: dict, forward: dict[int, float]) -> dict[str, float]:
    """The test's FLOPs: as run (two rounds), one round of every way on every window, the plain model alone.
    ``windows[n][round]`` windows of ``n`` scored tokens, ``ways[n][round]`` ways each, ``forward[n]`` per token."""
    rounds = ("selection", "test")
    every = {n: sum(windows[n][r] for r in rounds) * n * forward[n] for n in windows}
    return {
        "two rounds": sum(windows[n][r] * n * ways[n][r] * forward[n] for n in windows for r in rounds),
        "every way": sum(every[n] * ways[n]["selection"] for n in windows),
        "plain": sum(every.values()),
    }


def flops_table(encodings: list[str], corpora: list[str]) -> None:
    """Training against test FLOPs, per encoding and corpus (no timing)."""
    from poslab.running.callbacks import flops_per_token

    print("\n| encoding | corpus | training (TFLOP) | test, two rounds | / training | every way | / training | "
          "plain only | / training |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    for corpus in corpora:
        for encoding in encodings:
            windows, ways, steps = rounds_windows(corpus, encoding)
            training = steps * BATCH * CONTEXT * flops_per_token(build(encoding, CONTEXT), CONTEXT, BATCH)
            test = evaluation_flops(windows, ways, forward_flops(encoding))
            cells = " | ".join(
                f"{test[k] / 1e12:.2f} | {test[k] / training:.2f}" for k in ("two rounds", "every way", "plain")
            )
            print(f"| {encoding} | {corpus} | {training / 1e12:.2f} | {cells} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="rope only, 2 rounds of 2 repeats")
    parser.add_argument("--encodings", default="rope,alibi,path")
    parser.add_argument("--corpora", default="openwebtext,python_code")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--flops", action="store_true", help="the FLOP table only (no timing)")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    encodings = ["rope"] if args.quick else args.encodings.split(",")
    flops_table(encodings, args.corpora.split(","))
    if args.flops:
        return
    rounds, repeats = (2, 2) if args.quick else (args.rounds, 3)
    step: dict[str, list[float]] = {e: [] for e in encodings}
    batch: dict[tuple[str, int], list[float]] = {(e, n): [] for e in encodings for n in LENGTHS}
    for round_ in range(rounds):
        for encoding in encodings:
            step[encoding].append(step_seconds(encoding, 3))
            for length in LENGTHS:
                batch[encoding, length].append(batch_seconds(encoding, length, repeats))
            per_length = ", ".join(f"{n}: {batch[encoding, n][-1]:.3f}" for n in LENGTHS)
            print(f"round {round_ + 1}/{rounds} {encoding}: step {step[encoding][-1]:.3f} s; a batch {per_length} s",
                  flush=True)  # fmt: skip
    print("\n| encoding | corpus | training (s) | test, two rounds (s) | / training | one round (s) | / training |")
    print("|---|---|---|---|---|---|---|")
    for corpus in args.corpora.split(","):
        for encoding in encodings:
            windows, ways, steps = rounds_windows(corpus, encoding)
            seconds = {n: statistics.median(batch[encoding, n]) / max(1, BATCH * CONTEXT // n) for n in LENGTHS}
            two = sum(windows[n][r] * ways[n][r] * seconds[n] for n in windows for r in ("selection", "test"))
            every = {n: windows[n]["selection"] + windows[n]["test"] for n in windows}
            one = sum(every[n] * ways[n]["selection"] * seconds[n] for n in windows)
            training = steps * statistics.median(step[encoding])
            print(f"| {encoding} | {corpus} | {training:.0f} | {two:.0f} | {two / training:.2f} | {one:.0f} | "
                  f"{one / training:.2f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
