"""The cost of each position encoding: one training step of the byte model per encoding, relative to RoPE's in
the same run, and the attention path each took.

    python benchmarks/encoding_cost.py [--context 256] [--batch 4] [--steps 3] [--warmup 1] [--rounds 3]
                                       [--threads 2] [--precision bf16|fp32] [--device cpu] [--only rope,alibi]
                                       [--quick]

The byte model of the increments write-up (experiment=increments_rope: 6 layers, 8 heads of 32, SwiGLU) with
each registered encoding at its YAML defaults, and RoPE under each scaling rule (factor 2 over the context) and
p-RoPE. A step is forward, loss, backward and a fused AdamW step on random bytes, under bf16 autocast by
default (this CPU's fast path; ``--precision fp32`` for the plain one). The encodings are timed in turn within
each round (median of ``--steps`` steps after ``--warmup``), and each round's time is divided by RoPE's of
the same round, so a machine whose speed drifts between rounds still gives comparable ratios; the table shows
the median ratio over rounds and its range. Targets (issue 13): static biases and scaling rules <= 1.15x RoPE;
content-dependent terms reported, with the reason where they exceed 2x. ``--quick``: context 128, batch 2, one
round of 2 steps after 1, RoPE, alibi and forget_gate only (a smoke check; the ratios are then noise).

Paths: ``fused causal`` (SDPA's causal kernel, nothing added), ``sdpa + bias mask`` (SDPA with the per-forward
bias as an additive [1, H, T, T] mask, built once and shared by the layers), ``sdpa + term mask`` (SDPA with a
per-layer additive mask: the term computed in each layer from its q, k or hidden state).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile import (  # noqa: E402
    BYTES,
    byte_model,
    describe_device,
    measurement_parser,
    parse_measurement,
    training_step,
)

#: RoPE's scaling rules and p-RoPE as extra entries (the rules read the training length: the context here)
RULES = {
    "rope scaling=linear": ["encoding.scaling=linear", "encoding.scaling_factor=2"],
    "rope scaling=ntk": ["encoding.scaling=ntk", "encoding.scaling_factor=2"],
    "rope scaling=dynamic": ["encoding.scaling=dynamic", "encoding.scaling_factor=2"],
    "rope scaling=yarn": ["encoding.scaling=yarn", "encoding.scaling_factor=2"],
    "rope scaling=llama3": ["encoding.scaling=llama3", "encoding.scaling_factor=2"],
    "rope partial_fraction=0.5": ["encoding.partial_fraction=0.5"],
}


#: ``--quick``'s entries besides RoPE: a bias mask (alibi) and a per-layer term (forget_gate)
QUICK_ONLY = "alibi,forget_gate"


def entries(only: list[str] | None) -> dict[str, tuple[str, list[str]]]:
    """name -> (encoding, overrides): every registered encoding, then the RoPE rules; RoPE first (the baseline)."""
    from poslab.encodings import ENCODINGS

    found = {name: (name, []) for name in ["rope", *sorted(set(ENCODINGS) - {"rope"})]}
    found |= {name: ("rope", overrides) for name, overrides in RULES.items()}
    if only:
        unknown = [name for name in only if name not in found]
        if unknown:
            raise SystemExit(f"--only: unknown {unknown}; allowed: {', '.join(found)}")
        found = {name: found[name] for name in ["rope", *only] if name in found}
    return found


def attention_path(model: torch.nn.Module, coordinates: dict[str, torch.Tensor] | None) -> str:
    """How the model's attention ran, seen on one short forward pass: SDPA's causal kernel alone, or with the
    encoding's once-per-forward bias or its per-layer term as an additive mask."""
    encoding = model.encoding
    seen = {"bias": False, "term": False}
    score_bias, score_term = encoding.score_bias, encoding.score_term

    def bias(*args: object) -> object:
        out = score_bias(*args)
        seen["bias"] |= out is not None
        return out

    def term(*args: object) -> object:
        out = score_term(*args)
        seen["term"] |= out is not None
        return out

    encoding.score_bias, encoding.score_term = bias, term
    try:
        with torch.no_grad():
            short = {k: v[:1, :8] for k, v in coordinates.items()} if coordinates else None
            model(torch.zeros(1, 8, dtype=torch.long), short)
    finally:
        del encoding.score_bias, encoding.score_term  # the class's methods again
    path = model.cfg.attention
    if path != "sdpa":
        return path
    return "sdpa + term mask" if seen["term"] else "sdpa + bias mask" if seen["bias"] else "fused causal"


def precision_context(precision: str, device: torch.device) -> contextlib.AbstractContextManager:
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def timed(step: Callable[[], object], steps: int, warmup: int) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = measurement_parser(__doc__, steps=3, warmup=1, batch=4)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", default=None, help="comma-separated entries to time besides rope (default: all)")
    args = parse_measurement(parser)
    device = torch.device(args.device)
    if args.quick and not args.only:  # one of each attention path besides RoPE's: the whole list takes minutes
        args.only = QUICK_ONLY

    context = [f"task.context_length={args.context}"]
    steps: dict[str, Callable[[], object]] = {}
    paths: dict[str, str] = {}
    for name, (encoding, overrides) in entries(args.only.split(",") if args.only else None).items():
        torch.manual_seed(0)
        model = byte_model(encoding, [*context, *overrides, *density(encoding)])
        extra = coordinates(model, args.batch, args.context)
        paths[name] = attention_path(model, extra)
        step = training_step(model, args.batch, args.context, device, extra)
        precision = args.precision

        def run(step: Callable[[], object] = step, precision: str = precision) -> object:
            with precision_context(precision, device):
                return step()

        steps[name] = run
    print(
        f"{machine(device, args.threads)}; byte model ({BYTES} symbols), batch {args.batch} x {args.context} "
        f"bytes, {args.precision}; {args.rounds} rounds of {args.steps} timed steps after {args.warmup}",
        flush=True,
    )
    seconds: dict[str, list[float]] = {name: [] for name in steps}
    for round_number in range(args.rounds):
        for name, step in steps.items():
            seconds[name].append(timed(step, args.steps, args.warmup if round_number == 0 else 0))
            print(
                f"round {round_number + 1}/{args.rounds}: {name} {seconds[name][-1] * 1000:.0f} ms a step", flush=True
            )
    print()
    print("| encoding | path | ms / step | x RoPE (median of rounds) | range over rounds |")
    print("|---|---|---|---|---|")
    for name, times in seconds.items():
        ratios = [t / r for t, r in zip(times, seconds["rope"])]
        print(
            f"| {name} | {paths[name]} | {statistics.median(times) * 1000:.0f} | {statistics.median(ratios):.2f} | "
            f"{min(ratios):.2f}-{max(ratios):.2f} |"
        )


def coordinates(model: torch.nn.Module, batch: int, context: int) -> dict[str, torch.Tensor] | None:
    """What an encoding reads besides the tokens: paragraphs of 64 bytes and sentences of 16 (the hierarchical
    encodings), and a seed per row (the encodings that draw per training sequence)."""
    encoding = model.encoding
    position = torch.arange(context)[None].expand(batch, context)
    spans = {"paragraph": 64, "sentence": 16, "document": context}
    found = {name: position // spans[name] for name in encoding.required_coordinates}
    if encoding.uses_row_seeds:
        found["row_seed"] = torch.arange(batch)[:, None]
    return found or None


def machine(device: torch.device, threads: int) -> str:
    """The device line of the other benchmarks, without its precision (given apart here)."""
    return describe_device(device, threads).split(", fp32")[0]


def density(encoding: str) -> list[str]:
    """A paragraph density for the encodings that take it from the corpus (no corpus is read here)."""
    from poslab.encodings import encoding_class

    needs = "paragraph_density" in encoding_class(encoding).corpus_settings
    return ["encoding.paragraph_density=0.05"] if needs else []


if __name__ == "__main__":
    main()
