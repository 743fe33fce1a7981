"""poslab's training step against x-transformers' (the peer) at equal shape, per position encoding.

    python benchmarks/peer_step.py [--quick] [--steps 4] [--warmup 1] [--rounds 5] [--threads 2]
    python benchmarks/peer_step.py --profile rope        # torch.profiler's operators of both steps, side by side
    python benchmarks/peer_step.py --profile plain,rope  # poslab's step under two encodings, side by side

The model is the byte model (``conf/model/byte.yaml``: 6 layers, width 256, 8 heads of 32, RMSNorm, SwiGLU with
hidden 1024, no biases, untied embeddings, 257 symbols) at batch 8 x context 512; x-transformers'
``TransformerWrapper(Decoder(...))`` is built to the same shape (``peer_model``: its q, k, v as three matrices,
its RMSNorm with a learned gain as poslab's, ``attn_flash=True``: PyTorch's SDPA as poslab's
``model.attention=sdpa``, except with T5's bias, which x-transformers computes only in its explicit attention).
x-transformers' SwiGLU input projection has a bias (2,048 numbers a layer; no setting removes it): its model has
12,288 parameters more than poslab's 6.43M. Encodings: plain (poslab ``none``; x-transformers without a positional
embedding), rope (``rotary_pos_emb=True``, ``rotary_emb_dim`` the head dimension: poslab rotates every feature),
alibi (``alibi_pos_bias=True``) and t5 (poslab ``t5_bias``; ``rel_pos_bias=True`` with poslab's defaults at this
length: 32 buckets, max distance 511).

Both run one loop (``train_step``): the forward under ``torch.autocast("cpu", bfloat16)``, cross-entropy in fp32,
backward, clipping to 1.0, ``torch.optim.AdamW(fused=True)``; the same batches (random bytes, seeded). A step is
timed from the batch in hand to the optimizer step done. The two models of an encoding are measured in alternating
rounds (poslab, peer, peer, poslab, ...: ``bf16_speed.interleaved``), ``--warmup`` steps then the median of
``--steps`` per round, the median of the rounds, so that a drift of a busy machine's speed falls on both. The
ratio is the peer's step time / poslab's: above 1, poslab's step is faster. One line is printed per round as it
goes, then the table. ``--quick`` (1 step after 1, 3 rounds: 48 steps of about 1 s on an idle 2-core machine)
finishes in 1-3 minutes; a step slows 10-50x when several other jobs share the 2 cores.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor, nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bf16_speed import interleaved  # noqa: E402

VOCAB = 257  # the byte model's symbols: 256 bytes and the document separator
BATCH, CONTEXT = 8, 512
#: poslab's encoding name and the x-transformers ``Decoder`` settings of the same position encoding
ENCODINGS: dict[str, tuple[str, dict]] = {
    "plain": ("none", {}),
    "rope": ("rope", {"rotary_pos_emb": True}),  # every feature rotated, as poslab's rotary_dim null (peer_model)
    "alibi": ("alibi", {"alibi_pos_bias": True}),
    # x-transformers refuses flash attention with T5's bias: its own explicit attention (softmax of q kᵀ + bias)
    "t5": ("t5_bias", {"rel_pos_bias": True, "rel_pos_num_buckets": 32}),  # max distance: peer_model
}


def byte_shape() -> dict:
    """The byte model's settings (``conf/model/byte.yaml``, its one home)."""
    from poslab.config.settings import yaml_defaults

    return dict(yaml_defaults("model", "byte"))


def poslab_model(encoding: str, context: int = CONTEXT) -> nn.Module:
    from poslab.model import ModelConfig, Transformer

    shape = {key: value for key, value in byte_shape().items() if key != "compile"}
    cfg = ModelConfig(vocab_size=VOCAB, n_outputs=VOCAB, encoding={"name": ENCODINGS[encoding][0]}, **shape)
    return Transformer(cfg, max_length=context)


def peer_model(encoding: str, context: int = CONTEXT) -> nn.Module:
    """x-transformers' decoder at the byte model's shape, with ``encoding``'s position method."""
    from x_transformers import Decoder, TransformerWrapper

    shape = byte_shape()
    assert shape["norm"] == "rmsnorm" and shape["mlp"] == "swiglu" and not shape["bias"], shape
    width, heads = int(shape["d_model"]), int(shape["n_heads"])
    layers = Decoder(
        dim=width,
        depth=int(shape["n_layers"]),
        heads=heads,
        attn_dim_head=width // heads,
        attn_flash=encoding != "t5",  # F.scaled_dot_product_attention, as poslab's sdpa path
        rotary_emb_dim=width // heads,  # its default rotates half the head's features
        ff_mult=int(shape["mlp_hidden"]) // width,  # SwiGLU's hidden: width x ff_mult
        ff_glu=True,
        ff_swish=True,
        ff_no_bias=True,
        use_rmsnorm=True,
        **ENCODINGS[encoding][1],
        **({"rel_pos_max_distance": context - 1} if encoding == "t5" else {}),  # poslab's default: L - 1
    )
    return TransformerWrapper(
        num_tokens=VOCAB,
        max_seq_len=context,
        attn_layers=layers,
        use_abs_pos_emb=False,
        tie_embedding=bool(shape["tie_embeddings"]),
    )


def logits_of(model: nn.Module, tokens: Tensor) -> Tensor:
    out = model(tokens)
    return out.logits if hasattr(out, "logits") else out


def train_step(model: nn.Module, opt: torch.optim.Optimizer, tokens: Tensor) -> None:
    """One training step, the same for both models (poslab's own loop adds only Lightning's hooks)."""
    with torch.autocast("cpu", torch.bfloat16):
        logits = logits_of(model, tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    opt.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def optimizer(model: nn.Module) -> torch.optim.Optimizer:
    """AdamW, fused where this PyTorch has the fused CPU kernel (2.4 on); the same for both models."""
    try:
        return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)


def stepper(model: nn.Module, steps: int, warmup: int, label: str) -> Callable[[], float]:
    """A round of ``warmup`` + ``steps`` steps on the seeded batches; returns the median step seconds."""
    opt = optimizer(model)
    batches = torch.randint(0, VOCAB, (steps + warmup, BATCH, CONTEXT + 1), generator=torch.Generator().manual_seed(0))

    def measure() -> float:
        times = []
        for i, tokens in enumerate(batches):
            start = time.perf_counter()
            train_step(model, opt, tokens)
            if i >= warmup:
                times.append(time.perf_counter() - start)
        median = statistics.median(times)
        print(f"  {label:14s} {median * 1e3:7.0f} ms/step ({BATCH * CONTEXT / median:,.0f} tokens/s)", flush=True)
        return median

    return measure


def operator_times(build: Callable[[], nn.Module], steps: int) -> dict[str, tuple[float, int]]:
    """torch.profiler's self CPU ms and calls per step, by operator, over ``steps`` steps after two untimed."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    tokens = torch.randint(0, VOCAB, (BATCH, CONTEXT + 1), generator=torch.Generator().manual_seed(0))
    torch.manual_seed(0)
    model = build()
    opt = optimizer(model)
    for _ in range(2):
        train_step(model, opt, tokens)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            train_step(model, opt, tokens)
    return {e.key: (e.self_cpu_time_total / 1e3 / steps, e.count // steps) for e in prof.key_averages()}


def profile(columns: dict[str, Callable[[], nn.Module]], rows: int, steps: int = 3) -> None:
    """Operators side by side, self CPU ms a step (calls), the largest first, and each column's total: where two
    steps differ (``--profile rope``: poslab against x-transformers; ``--profile plain,rope``: two of poslab's)."""
    times = {label: operator_times(build, steps) for label, build in columns.items()}
    largest = {op: max(t.get(op, (0.0, 0))[0] for t in times.values()) for t in times.values() for op in t}
    names = sorted(largest, key=lambda op: -largest[op])
    print("| operator | " + " | ".join(f"{label} ms (calls)" for label in times) + " |")
    print("|---|" + "---|" * len(times))
    for op in names[:rows]:
        cells = (f"{t.get(op, (0.0, 0))[0]:.1f} ({t.get(op, (0.0, 0))[1]})" for t in times.values())
        print(f"| {op[:50]} | " + " | ".join(cells) + " |")
    print("| **total** | " + " | ".join(f"**{sum(v[0] for v in t.values()):.0f}**" for t in times.values()) + " |")


def profile_columns(spec: str) -> dict[str, Callable[[], nn.Module]]:
    """``rope``: poslab's and x-transformers' model of one encoding; ``plain,rope``: poslab's under each."""
    encodings = spec.split(",")
    unknown = [e for e in encodings if e not in ENCODINGS]
    if unknown:
        raise SystemExit(f"--profile {spec!r}: unknown encoding {unknown[0]!r}; allowed: {', '.join(ENCODINGS)}")
    if len(encodings) == 1:
        return {f"poslab/{spec}": lambda: poslab_model(spec), f"x-transformers/{spec}": lambda: peer_model(spec)}
    return {f"poslab/{e}": (lambda e=e: poslab_model(e)) for e in encodings}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps at the start of each round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of each model, taken in turns")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--encodings", default=",".join(ENCODINGS))
    parser.add_argument("--quick", action="store_true", help="1 step after 1, 3 rounds (1-3 minutes)")
    parser.add_argument(
        "--profile", metavar="ENCODINGS", help="operators side by side instead: ENC (both models) or ENC,ENC (poslab)"
    )
    parser.add_argument("--rows", type=int, default=25, help="--profile: operators shown")
    parser.add_argument("--batch", type=int, default=8, help="sequences a step (the byte model's runs: 8)")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds = 1, 1, 3
    global BATCH
    BATCH = args.batch
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    if args.profile:
        profile(profile_columns(args.profile), args.rows)
        return
    from importlib.metadata import version

    print(
        f"cpu ({args.threads} threads), torch {torch.__version__}, x-transformers {version('x-transformers')}; "
        f"byte model, batch {BATCH} x {CONTEXT}, bf16 autocast, fused AdamW; per round the median of {args.steps} "
        f"steps after {args.warmup}, {args.rounds} rounds in turns",
        flush=True,
    )
    results = {}
    for encoding in args.encodings.split(","):
        print(f"{encoding}:", flush=True)
        torch.manual_seed(0)
        ours, peer = poslab_model(encoding), peer_model(encoding)
        times = interleaved(
            {
                "poslab": stepper(ours, args.steps, args.warmup, "poslab"),
                "x-transformers": stepper(peer, args.steps, args.warmup, "x-transformers"),
            },
            args.rounds,
        )
        results[encoding] = (times["poslab"], times["x-transformers"], ours.num_parameters())
    print("\n| encoding | poslab ms/step | x-transformers ms/step | x-transformers / poslab |")
    print("|---|---|---|---|")
    for encoding, (ours, peer, _) in results.items():
        print(f"| {encoding} | {ours * 1e3:.0f} | {peer * 1e3:.0f} | **{peer / ours:.2f}** |")


if __name__ == "__main__":
    main()
