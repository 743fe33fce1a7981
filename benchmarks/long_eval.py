"""One language-model evaluation pass at 1x to 16x the context, per attention path: time and peak memory.

    python benchmarks/long_eval.py [--quick] [--threads 1] [--repeats 3] [--max-gb 4]

``--quick``: the lm_zoo model only, lengths 1x and 16x, the fused causal and term mask paths (no T x T tensor, and
one a layer), one repeat: a smoke check (each measurement is a fresh process: 5 paths x 3 lengths took 6 minutes on
2 busy cores).

A pass is what ``LanguageModelModule`` does with one evaluation batch: a forward without gradients under bf16
autocast (as ``trainer.precision=bf16-mixed`` evaluates) and the per-token cross-entropy, on a batch of
``task.eval_batch_size x context_length`` tokens, i.e. ``eval_batch_size x context / L`` windows of L (at least 1).
Attention paths (poslab/model.py picks them from the encoding and ``model.attention``):

- fused causal: ``rope``; SDPA with ``is_causal`` (PyTorch's flash kernel), no T x T tensor;
- bias mask: ``alibi``; SDPA with an additive ``[1, H, T, T]`` float mask built once per forward;
- term mask: ``forget_gate`` and ``cope``; each layer adds its own ``[B, H, T, T]`` term to the mask;
- flex: ``alibi`` with ``model.attention=flex`` (compiled FlexAttention, a block mask; forward runs on CPU).

Models: ``lm_zoo`` (experiment=lm_zoo: 4 x 128, context 128, batch 32 x 128 tokens) and ``byte`` (model/byte:
6 x 256, 8 heads, context 512, batch 32 x 512). Every (model, path, length) runs in a fresh subprocess, so its
peak RSS (``ru_maxrss``) is its own: reported as the process's peak and as the growth over the RSS just before
the pass. A measurement whose estimated T x T tensors exceed ``--max-gb`` is skipped, saying so.

Printed: a table per model, each path's log-log slope of time and memory growth per window against length (1:
linear, 2: quadratic; a pass holds a fixed number of tokens, L / context times fewer windows at L, so the slope per
window is the pass's slope + 1), and the issue's targets: a 16x evaluation's peak <= 2 GB at the lm_zoo size, and
evaluation <= an lm_zoo run's training time (issue 37, item 5; before it: <= 20% of the run, on the 16,384-token
sample), estimated from these pass times x the passes of a run (every length's batches over the whole held-out
split, ``HELD_OUT_TOKENS``, in every way of evaluating RoPE's test, the way with the most, plus passkey retrieval's
forward tokens) against a training step timed in the same run x ``trainer.max_steps``.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BYTES = 257  # 256 byte values and the document separator
PATHS = {  # label: (encoding, model.attention)
    "fused causal": ("rope", "sdpa"),
    "bias mask": ("alibi", "sdpa"),
    "term mask": ("forget_gate", "sdpa"),
    "term mask (cope)": ("cope", "sdpa"),
    "flex": ("alibi", "flex"),
}
MODELS = {  # label: overrides (the lm_zoo experiment's settings; the byte model at context 512, task/lm)
    "lm_zoo": ["experiment=lm_zoo"],
    "byte": ["model=byte", "task.context_length=512"],  # task/lm's eval_batch_size (32): 16,384 tokens a batch
}
MULTIPLES = (1, 2, 4, 8, 16)
QUICK_MULTIPLES = (1, 16)
QUICK_PATHS = ("fused causal", "term mask")
QUICK_TEXT = "the lm_zoo model only, lengths 1x and 16x, the fused causal and term mask paths, 1 repeat"
TEST_WAYS_PAST_CONTEXT = 6  # RoPE at the test: plain, log-scaled, and the rules linear, ntk, yarn, llama3


def compose(model: str, path: str, extra: list[str] | None = None):
    from poslab.running.compose import compose_config

    encoding, attention = PATHS[path]
    return compose_config(
        ["corpus=wikitext2", *MODELS[model], f"encoding={encoding}", f"model.attention={attention}", *(extra or [])]
    )


def current_rss_kb() -> int:
    """Resident memory now (``/proc/self/statm``), in KB: the baseline a pass's peak is compared with."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() // 1024


def measure_pass(model_name: str, path: str, multiple: int, repeats: int, threads: int) -> dict:
    """In this (fresh) process: one evaluation pass at ``multiple`` x the context, timed ``repeats`` times after
    one warm-up call (FlexAttention compiles there), and the peak RSS it reached."""
    import torch
    import torch.nn.functional as F

    from poslab.model import Transformer
    from poslab.running.builders import build_model_config
    from poslab.running.runtime import keep_freed_memory

    keep_freed_memory()  # as train.py runs (keep_freed_memory: true): freed activations stay in the heap
    torch.set_num_threads(threads)
    cfg = compose(model_name, path)
    context, length = int(cfg.task.context_length), multiple * int(cfg.task.context_length)
    model = Transformer(build_model_config(cfg, BYTES, BYTES), context).eval()
    windows = max(1, int(cfg.task.eval_batch_size) * context // length)
    tokens = torch.randint(0, BYTES, (windows, length + 1), generator=torch.Generator().manual_seed(0))

    def evaluation_pass() -> None:
        with torch.inference_mode(), torch.autocast("cpu", torch.bfloat16):
            logits = model(tokens[:, :-1]).logits
            F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="none")

    before = current_rss_kb()
    seconds = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        evaluation_pass()
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "seconds": statistics.median(seconds[1:]),
        "first_seconds": seconds[0],
        "windows": windows,
        "length": length,
        "peak_mb": peak / 1024,
        "growth_mb": max(0, peak - before) / 1024,
    }


def training_step_seconds(steps: int, threads: int) -> float:
    """Median seconds of an lm_zoo (rope) training step: bf16 autocast forward, backward, fused AdamW."""
    import torch

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from compile import training_step

    from poslab.model import Transformer
    from poslab.running.builders import build_model_config

    torch.set_num_threads(threads)
    cfg = compose("lm_zoo", "fused causal")
    model = Transformer(build_model_config(cfg, BYTES, BYTES), int(cfg.task.context_length))
    step = training_step(model, int(cfg.task.batch_size), int(cfg.task.context_length), torch.device("cpu"))
    seconds = []
    for _ in range(steps + 2):
        start = time.perf_counter()
        with torch.autocast("cpu", torch.bfloat16):
            step()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds[2:])


def estimated_gb(model_name: str, path: str, multiple: int) -> float:
    """The T x T tensors one layer call holds (fp32): none on the fused path and flex; the mask [H, T, T] for a
    bias; the mask plus a term per window [B, H, T, T] for a term (CoPE: also its gates, about 3 of them)."""
    cfg = compose(model_name, path)
    context, heads = int(cfg.task.context_length), int(cfg.model.n_heads)
    length = multiple * context
    windows = max(1, int(cfg.task.eval_batch_size) * context // length)
    per_window = {"bias mask": 0, "term mask": 2, "term mask (cope)": 4}.get(path)
    if per_window is None:
        return 0.0
    return heads * length * length * 4 * (1 + per_window * windows) / 1e9


def run_child(args: argparse.Namespace, model: str, path: str, multiple: int) -> dict:
    command = [
        sys.executable,
        __file__,
        "--child",
        model,
        path,
        str(multiple),
        "--repeats",
        str(args.repeats),
        "--threads",
        str(args.threads),
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(value) against log(length)."""
    xs, ys = [math.log(x) for x, _ in points], [math.log(max(y, 1e-9)) for _, y in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def per_token_seconds(points: list[tuple[int, float]], batch_tokens: int, length: float) -> float:
    """Seconds per scored token at ``length``, interpolated log-log between the measured lengths (clamped to
    the shortest and longest): a pass scores ``batch_tokens`` tokens at every length."""
    xs = [math.log(x) for x, _ in points]
    ys = [math.log(t / batch_tokens) for _, t in points]
    x = min(max(math.log(length), xs[0]), xs[-1])
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            return math.exp(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return math.exp(ys[0])


#: the test's tokens per corpus since issue 37 (the whole held-out split; benchmarks/held_out_sample.py): the largest
#: of the lm_zoo's corpora, python_code at 10% held out (openwebtext at 15%: 550,912)
HELD_OUT_TOKENS = 1_214_464


def evaluation_seconds(points: list[tuple[int, float]], cfg, held_out: int = HELD_OUT_TOKENS) -> tuple[float, float]:
    """(the test's seconds, passkey's seconds) for one lm_zoo run of RoPE: every length's batches in each way
    (1 at the context, ``TEST_WAYS_PAST_CONTEXT`` past it) over ``held_out`` tokens (the whole held-out split),
    and every passkey trial in as many ways (an upper bound: the trials' lengths interpolated between the measured
    ones)."""
    from poslab.config.passkey_settings import check_passkey_settings

    context = int(cfg.task.context_length)
    batch_tokens = int(cfg.task.eval_batch_size) * context
    eval_tokens = held_out
    test = 0.0
    for multiple in MULTIPLES:
        ways = 1 if multiple == 1 else TEST_WAYS_PAST_CONTEXT
        test += ways * eval_tokens * per_token_seconds(points, batch_tokens, multiple * context)
    settings = check_passkey_settings(cfg.task.passkey, context)  # what the run evaluates (conf/task/lm.yaml)
    passkey = 0.0
    for distance in settings.distance_tokens(context):
        for offset in settings.depth_offsets(context):
            n = offset + distance + settings.phrase_length
            ways = 1 if n <= context else TEST_WAYS_PAST_CONTEXT
            passkey += ways * settings.trials * n * per_token_seconds(points, batch_tokens, n)
    return test, passkey


def print_model(model: str, rows: dict[str, dict[int, dict]], multiples: tuple[int, ...]) -> None:
    print(f"\n{model}: seconds per pass / peak RSS MB (growth over the pre-pass RSS)")
    print(f"| path | {' | '.join(f'{m}x' for m in multiples)} | time slope | memory slope |  (log-log per window)")
    print(f"|---|{'---|' * len(multiples)}---|---|")
    for path, by_multiple in rows.items():
        cells, times, growth = [], [], []
        for m in multiples:
            r = by_multiple.get(m, {})
            if "seconds" in r:
                cells.append(f"{r['seconds']:.3f} s / {r['peak_mb']:.0f} ({r['growth_mb']:.0f})")
                times.append((r["length"], r["seconds"]))
                growth.append((r["length"], max(r["growth_mb"], 1.0)))
            else:
                cells.append(r.get("error", r.get("skipped", "-")))
        # per window: a pass holds eval_batch_size x context tokens, so windows ~ 1 / L: slope per pass + 1
        slopes = [f"{slope(p) + 1:.2f}" if len(p) >= 2 else "-" for p in (times, growth)]
        print(f"| {path} | {' | '.join(cells)} | {slopes[0]} | {slopes[1]} |")


def check_targets(rows: dict[str, dict[int, dict]], step: float, multiples: tuple[int, ...]) -> None:
    """The issue's two targets at the lm_zoo size."""
    cfg = compose("lm_zoo", "fused causal")
    peaks = {path: r[16]["peak_mb"] for path, r in rows.items() if "peak_mb" in r.get(16, {})}
    worst = max(peaks, key=peaks.get)
    print(
        f"\ntarget: 16x evaluation peak <= 2 GB at the lm_zoo size: worst {worst} {peaks[worst]:.0f} MB "
        f"({'met' if peaks[worst] <= 2048 else 'MISSED'}); per path: "
        + ", ".join(f"{p} {v:.0f} MB" for p, v in peaks.items())
    )
    points = [(rows["fused causal"][m]["length"], rows["fused causal"][m]["seconds"]) for m in multiples]
    test, passkey = evaluation_seconds(points, cfg)
    training = step * int(cfg.trainer.max_steps)
    ratio = (test + passkey) / training
    print(
        f"target: evaluation <= training of an lm_zoo run (rope, {cfg.trainer.max_steps} steps of {step:.3f} s = "
        f"{training:.0f} s training): test over {HELD_OUT_TOKENS:,} held-out tokens {test:.1f} s + passkey "
        f"{passkey:.1f} s (every way: an upper bound) = {ratio:.2f} x training ({'met' if ratio <= 1 else 'MISSED'})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=QUICK_TEXT)
    parser.add_argument("--threads", type=int, default=1, help="1: as a job of the lm_zoo multirun")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-gb", type=float, default=4.0, help="skip a measurement estimated above this")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "PATH", "MULTIPLE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model, path, multiple = args.child
        print(json.dumps(measure_pass(model, path, int(multiple), args.repeats, args.threads)))
        return
    multiples = QUICK_MULTIPLES if args.quick else MULTIPLES
    repeats = 1 if args.quick else args.repeats
    paths = list(QUICK_PATHS if args.quick else PATHS)
    if args.quick:
        args.models = ["lm_zoo"]
    args.repeats = repeats
    print(
        f"one evaluation pass (inference, bf16 autocast), {args.threads} thread(s), median of {repeats} after 1;"
        f" each measurement a fresh process"
    )
    results: dict[str, dict[str, dict[int, dict]]] = {}
    for model in args.models:
        results[model] = {}
        for path in paths:
            results[model][path] = {}
            for m in multiples:
                gb = estimated_gb(model, path, m)
                measured = (
                    {"skipped": f"skipped (~{gb:.1f} GB)"} if gb > args.max_gb else run_child(args, model, path, m)
                )
                results[model][path][m] = measured
                print(f"  {model} {path} {m}x: {measured}", file=sys.stderr, flush=True)  # progress: minutes each
        print_model(model, results[model], multiples)
    step = training_step_seconds(steps=8, threads=args.threads)
    print(f"\nlm_zoo training step (rope, bf16 autocast, batch 16 x 128, same run): {step:.3f} s")
    if "lm_zoo" in results:
        check_targets(results["lm_zoo"], step, multiples)


if __name__ == "__main__":
    main()
