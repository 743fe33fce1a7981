"""bf16 on this CPU: the training step in bf16-mixed against fp32, poslab against a plain bf16 loop, and both
against the bf16 matrix-product rate measured in the same run (the limit).

    python benchmarks/bf16_speed.py [--steps 20] [--warmup 3] [--threads 2] [--compile] [--quick]

For each model (``byte``: the increments write-up's 6 x 256 byte model, batch 8 x 512, 257 bytes; ``hrope_cpu``:
4 x 128, batch 16 x 256, its recipe's (hrope_rope_cpu) 2048-symbol BPE) and each precision: poslab's tokens/s
(``train.py``'s own loop: Lightning, fused AdamW, clipping, cosine schedule) and a minimal plain-PyTorch loop's
on the same model, optimizer and batches. The limit: GEMM GFLOP/s in fp32 and bf16 at the model's own shape
(``[batch x context, d] @ [d, 4d]``), 2 threads. Achieved model FLOP/s = tokens/s x training FLOPs per token (6
per matrix weight, the head's included, plus attention: ``poslab.running.callbacks.flops_per_token``); its fraction
of the bf16 GEMM rate is how close the step is to the machine's limit. ``--compile`` adds bf16 + ``model.compile``.
Targets (issue 10): bf16 >= 2x fp32 for the byte model; poslab >= 1.0x the plain bf16 loop. poslab's step is timed
over ``trainer.fit`` alone (``byte_model.poslab_steps``): the evaluation a run does after training is no part of it
and is not run. A line is printed per measurement as it ends. ``--quick``: the hrope_cpu model only, batch 2 x 128,
one round of 2 steps after 1 (a smoke check, in about a minute). Each model is built at its recipe's tokenizer and
vocabulary (``byte_model.recipe_vocabulary``, as gpu_check does) on a generated corpus rich enough for a BPE to
reach it (``byte_model.vocabulary_corpus``); a BPE that stops short stops the script
(``byte_model.check_vocabulary``): its figures would describe another model.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from omegaconf import open_dict

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from poslab.model import Transformer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from byte_model import (  # noqa: E402
    check_vocabulary,
    measurement_config,
    plain_loop,
    poslab_steps,
    recipe_vocabulary,
    vocabulary_corpus,
)

MODELS = {  # model config, the recipe whose tokenizer and vocabulary it is built at, batch, context
    "byte": ("byte", "increments_rope", 8, 512),
    "hrope_cpu": ("hrope_cpu", "hrope_rope_cpu", 16, 256),
}


def gemm_gflops(m: int, k: int, n: int, dtype: torch.dtype, repeats: int = 20) -> float:
    """Median GFLOP/s of ``[m, k] @ [k, n]`` in ``dtype`` on this process's threads."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(3):
        a @ b
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - start)
    return 2 * m * k * n / statistics.median(times) / 1e9


def attention_ms(batch: int, heads: int, context: int, head_dim: int, dtype: torch.dtype, repeats: int = 8) -> float:
    """Median milliseconds of one causal SDPA forward + backward at a layer's shape, in ``dtype``."""
    q, k, v = (torch.randn(batch, heads, context, head_dim, dtype=dtype, requires_grad=True) for _ in range(3))
    times = []
    for i in range(repeats + 2):
        start = time.perf_counter()
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        if i >= 2:
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def interleaved(measure: dict[str, Callable[[], float]], rounds: int, what: str = "") -> dict[str, float]:
    """Each measurement ``rounds`` times, in turns (A B, B A, A B, ...) so that a drift of the machine's speed
    over the run (other tenants, clocks) falls on both alike; the median of each one's rounds. A line per
    measurement as it ends (``what``: the model and precision it is of)."""
    names, seconds = list(measure), {name: [] for name in measure}
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            seconds[name].append(measure[name]())
            print(f"  {what} round {r + 1}/{rounds}: {name} {seconds[name][-1] * 1000:.0f} ms a step", flush=True)
    return {name: statistics.median(values) for name, values in seconds.items()}


def step_config(
    name: str, precision: str, args: argparse.Namespace, data: Path, compile_model: bool = False
) -> DictConfig:
    """The training config of a measurement of ``name`` (a ``MODELS`` entry): the byte-model recipe's optimizer and
    schedule for every model (the plain loop's), at the tokenizer and vocabulary of the model's own recipe."""
    model, recipe = MODELS[name][:2]
    overrides = [
        "experiment=increments_rope",  # the byte-model recipe: AdamW, cosine, clipping 1.0, bf16 on its GPU
        f"model={model}",
        "encoding=rope",
        "trainer=cpu",
        f"trainer.precision={precision}",
        f"threads={args.threads}",
        f"++model.compile={str(compile_model).lower()}",
    ]
    cfg = measurement_config(overrides, args, data, Path(tempfile.mkdtemp()))
    with open_dict(cfg):
        cfg.callbacks.pop("progress_bar", None)
        cfg.callbacks.pop("checkpoint", None)
    return recipe_vocabulary(cfg, recipe)


def measured_model(name: str, args: argparse.Namespace, data: Path) -> Transformer:
    """``name``'s model as the measurements build it (fp32), checked to have its recipe's vocabulary: before any
    step is timed, so that a BPE short of it stops the script at once."""
    from poslab.running.builders import build_datamodule, build_module

    cfg = step_config(name, "32-true", args, data)
    net = build_module(cfg, build_datamodule(cfg)).model
    check_vocabulary(MODELS[name][1], cfg.corpus, net.cfg.vocab_size)
    return net


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--compile", action="store_true", help="also bf16 + model.compile")
    parser.add_argument("--models", default="byte,hrope_cpu")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each loop, taken in turns")
    parser.add_argument("--quick", action="store_true", help="hrope_cpu, batch 2 x 128, 1 round of 2 steps after 1")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.models = min(args.steps, 2), min(args.warmup, 1), 1, "hrope_cpu"
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    torch.set_num_threads(args.threads)
    from poslab.running.callbacks import flops_per_token
    from poslab.running.compose import compose_config
    from poslab.running.runtime import keep_freed_memory

    keep_freed_memory()
    data = Path(tempfile.mkdtemp())
    vocabulary_corpus(data, 300_000 if args.quick else 3_000_000)
    print(
        f"cpu, {args.threads} threads, torch {torch.__version__}; median of {args.steps} steps after {args.warmup}, "
        f"plain and poslab in {args.rounds} alternating rounds"
    )
    for name in args.models.split(","):
        model, _, args.batch, args.context = MODELS[name] if not args.quick else (*MODELS[name][:2], 2, 128)
        net = measured_model(name, args, data)
        shape = compose_config([f"model={model}"]).model
        m, d = args.batch * args.context, int(shape.d_model)
        limit = {dt: gemm_gflops(m, d, 4 * d, dt) for dt in (torch.float32, torch.bfloat16)}
        square = {dt: gemm_gflops(1024, 1024, 1024, dt, repeats=10) for dt in (torch.float32, torch.bfloat16)}
        heads = int(shape.n_heads)
        attention = {
            dt: attention_ms(args.batch, heads, args.context, d // heads, dt) * int(shape.n_layers)
            for dt in (torch.float32, torch.bfloat16)
        }
        rows = {}
        for precision in ("32-true", "bf16-mixed"):
            config = partial(step_config, name, precision, args, data)
            plain = partial(plain_loop, steps=args.steps, warmup=args.warmup, bf16=precision == "bf16-mixed")
            times = interleaved(
                {"plain": lambda: plain(config()), "poslab": lambda: poslab_steps(config())},  # noqa: B023 (called now)
                args.rounds,
                f"{name} {precision}",
            )
            rows[precision] = (times["plain"], times["poslab"])
        if args.compile:
            rows["bf16-mixed + compile"] = (
                float("nan"),
                poslab_steps(step_config(name, "bf16-mixed", args, data, True)),
            )
        fpt = flops_per_token(net, args.context, args.batch)
        tokens = args.batch * args.context
        print(
            f"\n{name}: {net.num_parameters():,} parameters, vocabulary {net.cfg.vocab_size:,}, batch {args.batch} x "
            f"{args.context}; GEMM [{m}, {d}] @ [{d}, {4 * d}]: fp32 {limit[torch.float32]:.0f} GFLOP/s, bf16 "
            f"{limit[torch.bfloat16]:.0f} GFLOP/s (bf16/fp32 {limit[torch.bfloat16] / limit[torch.float32]:.2f}); "
            f"1024^3 GEMM: fp32 {square[torch.float32]:.0f}, bf16 {square[torch.bfloat16]:.0f} GFLOP/s"
        )
        print("| precision | plain tokens/s | poslab tokens/s | poslab/plain | model GFLOP/s | of bf16 GEMM rate |")
        print("|---|---|---|---|---|---|")
        for precision, (plain, ours) in rows.items():
            plain_rate = f"{tokens / plain:,.0f}" if plain == plain else "n/a"
            ratio = f"{plain / ours:.2f}" if plain == plain else "n/a"
            achieved = tokens / ours * fpt / 1e9
            print(
                f"| {precision} | {plain_rate} | {tokens / ours:,.0f} | {ratio} | {achieved:.1f} | "
                f"{achieved / limit[torch.bfloat16]:.1%} |"
            )
        for dt, label, row in ((torch.float32, "fp32", "32-true"), (torch.bfloat16, "bf16", "bf16-mixed")):
            print(
                f"attention (causal SDPA forward + backward, {heads} heads of {d // heads}, all layers) in {label}: "
                f"{attention[dt]:.0f} ms a step, {attention[dt] / 1e3 / rows[row][1]:.0%} of poslab's {label} step"
            )
        print(
            f"bf16-mixed / fp32 (poslab): {rows['32-true'][1] / rows['bf16-mixed'][1]:.2f}x; "
            f"(plain): {rows['32-true'][0] / rows['bf16-mixed'][0]:.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
