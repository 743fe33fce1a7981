"""The frontier methods' cost at the lm_zoo size, as ratios to RoPE measured in the same run (issue 38, item 3).

    python benchmarks/frontier_cost.py [--quick] [--threads 2] [--rounds 5] [--encodings path,path_fox,...]

**Training step**: the lm_zoo model (model/lm_zoo: 4 x 128, 4 heads; 16 windows of 128 bytes), one forward,
backward and AdamW step under bf16 autocast, as ``trainer.precision=bf16-mixed`` trains. The methods run in
alternating rounds (RoPE, then each method, then RoPE again, ...), so a machine that slows down slows every one;
the median over rounds is reported with its ratio to RoPE's median. Nothing is evaluated inside a step.

**16x evaluation**: one evaluation forward at 16 x 128 = 2,048 tokens (one window: the lm_zoo's evaluation batch at
16x) without gradients under bf16 autocast, in a fresh process per method: the growth of its peak RSS (``VmHWM``,
reset just before the forward) over the RSS before it, against the issue's bound of 2 GB (and the ratio to RoPE).

Prints a line per method as it goes, then the table. ``--quick``: one round of 2 steps (a smoke check: about 3
minutes on 2 busy cores; 2 rounds of 3 took 6).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BYTES = 257  # 256 byte values and the document separator
CONTEXT, BATCH, LONGEST = 128, 16, 16
DEFAULT = "rope,path,path_fox,stick_breaking"


def build(encoding: str, length: int):
    import torch

    from poslab.config.settings import yaml_defaults
    from poslab.model import ModelConfig, Transformer

    torch.manual_seed(0)
    shape = {key: value for key, value in yaml_defaults("model", "lm_zoo").items() if key != "defaults"}
    config = ModelConfig(vocab_size=BYTES, n_outputs=BYTES, **{**shape, "encoding": {"name": encoding}})
    return Transformer(config, max_length=length)


def step_seconds(encoding: str, steps: int) -> float:
    """The median seconds of ``steps`` training steps (after one warm-up step)."""
    import torch
    import torch.nn.functional as F

    model = build(encoding, CONTEXT)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    tokens = torch.randint(0, BYTES, (BATCH, CONTEXT + 1), generator=torch.Generator().manual_seed(1))
    times = []
    for step in range(steps + 1):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1]).logits
        F.cross_entropy(logits.float().reshape(-1, BYTES), tokens[:, 1:].reshape(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step:  # the first step allocates
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def evaluation_peak(encoding: str) -> dict[str, float]:
    """In this (fresh) process: one 16x evaluation forward's seconds and the peak RSS growth in MB."""
    import torch

    model = build(encoding, CONTEXT * LONGEST).eval()
    tokens = torch.randint(0, BYTES, (1, CONTEXT * LONGEST), generator=torch.Generator().manual_seed(2))
    before = rss_mb("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the RSS now: the pass's own peak
    start = time.perf_counter()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(tokens)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mb": rss_mb("VmHWM") - before}


def rss_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (the peak since the last reset) of this process, in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 2 steps")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="steps per method and round")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--encodings", default=DEFAULT, help=f"comma-separated, RoPE first (default {DEFAULT})")
    parser.add_argument("--evaluation-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    if args.evaluation_child:
        print(json.dumps(evaluation_peak(args.evaluation_child)))
        return
    rounds, steps = (1, 2) if args.quick else (args.rounds, args.steps)
    encodings = args.encodings.split(",")
    times: dict[str, list[float]] = {e: [] for e in encodings}
    for round_ in range(rounds):
        for encoding in encodings:
            times[encoding].append(step_seconds(encoding, steps))
            print(f"round {round_ + 1}/{rounds} {encoding}: {times[encoding][-1] * 1000:.0f} ms a step", flush=True)
    peaks = {}
    for encoding in encodings:
        child = [sys.executable, __file__, "--evaluation-child", encoding, "--threads", str(args.threads)]
        peaks[encoding] = json.loads(subprocess.run(child, capture_output=True, text=True, check=True).stdout)
        print(
            f"{encoding}: 16x evaluation {peaks[encoding]['peak_mb']:.0f} MB, {peaks[encoding]['seconds']:.2f} s",
            flush=True,
        )
    rope_step, rope_peak = statistics.median(times[encodings[0]]), max(peaks[encodings[0]]["peak_mb"], 1.0)
    base = encodings[0]
    print(f"\n| encoding | step (ms, median of {rounds}) | x {base} | 16x eval peak (MB) | x {base} | <= 2 GB |")
    print("|---|---|---|---|---|---|")
    for encoding in encodings:
        step, peak = statistics.median(times[encoding]), peaks[encoding]["peak_mb"]
        within = "yes" if peak <= 2048 else "NO"
        cells = [f"{step * 1000:.0f}", f"{step / rope_step:.2f}", f"{peak:.0f}", f"{peak / rope_peak:.1f}", within]
        print(f"| {encoding} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
