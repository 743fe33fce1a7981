"""ALiBi's two attention paths: the bias mask (SDPA with an additive [H, T, T] bias) against FlexAttention
(``model.attention=flex``: causal block mask, the bias as a compiled ``score_mod``), in one process.

    python benchmarks/alibi_flex.py [--lengths 256 512] [--batch 2] [--steps 5] [--warmup 2] [--threads 2]
                                    [--device cpu] [--quick]

For each length: the attention operation alone (byte-model shapes: 8 heads of 32, one layer, mask and
block mask built beforehand) and the whole byte model (encoding=alibi; the model builds its bias mask
every forward), tokens/s of each path, flex / bias mask, and the largest logit difference between the two
paths. On CUDA: forward + backward in bf16 (autocast for the model). On CPU: forward only, in fp32,
without gradients: PyTorch has no FlexAttention backward on CPU. ``--quick``: length 128, batch 2, 2 calls
after 1 (a smoke check).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile import (  # noqa: E402
    BYTES,
    autocast,
    byte_model,
    describe_device,
    median_seconds,
    parse_measurement_arguments,
)


def attention_op(path: str, batch: int, length: int, device: torch.device, backward: bool):
    """One call of the attention operation of a byte-model layer (bias mask or flex), as a step function."""
    from poslab.encodings.alibi import AlibiEncoding, paper_slopes
    from poslab.encodings.base import ModelShape
    from poslab.model import causal_block_mask, causal_mask, flex_attention

    heads, head_dim = 8, 32
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    alibi = AlibiEncoding(ModelShape(heads * head_dim, heads, 1, head_dim), paper_slopes(heads)).to(device)
    generator = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (
        torch.randn(batch, heads, length, head_dim, generator=generator).to(device, dtype).requires_grad_(backward)
        for _ in range(3)
    )
    scale = head_dim**-0.5
    mask = (alibi.score_bias(length, device) + causal_mask(length, device)).unsqueeze(0).to(dtype)
    block_mask = causal_block_mask(length, device, {})

    def step() -> None:
        with torch.set_grad_enabled(backward):
            if path == "bias_mask":
                y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
            else:
                y = flex_attention(q, k, v, alibi.score_mod(), block_mask, scale)
            if backward:
                y.float().sum().backward()

    return step


def model_step(model: torch.nn.Module, tokens: torch.Tensor, device: torch.device, backward: bool):
    def step() -> None:
        with torch.set_grad_enabled(backward), autocast(device):
            logits = model(tokens).logits
        if backward:
            logits.float().sum().backward()

    return step


def compare(args: argparse.Namespace, device: torch.device) -> dict[str, dict[str, float]]:
    """Per length and kind (attention, model): tokens/s of each path, their ratio and the logits' difference."""
    backward = device.type == "cuda"
    results: dict[str, dict[str, float]] = {}
    for length in args.lengths:
        batch = args.batch
        tokens_per_call = batch * length
        # the attention operation alone
        row = {}
        for path in ("bias_mask", "flex"):
            seconds, _ = median_seconds(
                attention_op(path, batch, length, device, backward), args.steps, args.warmup, device
            )
            row[path] = tokens_per_call / seconds
        results[f"attention T={length}"] = {**row, "flex/bias_mask": row["flex"] / row["bias_mask"]}
        # the whole byte model with encoding=alibi
        models = {}
        for path, attention in (("bias_mask", "sdpa"), ("flex", "flex")):
            torch.manual_seed(0)
            models[path] = byte_model("alibi", [f"model.attention={attention}", *args.overrides]).to(device)
        models["flex"].load_state_dict(models["bias_mask"].state_dict())
        tokens = torch.randint(0, BYTES, (batch, length), generator=torch.Generator().manual_seed(0)).to(device)
        row = {}
        for path, model in models.items():
            seconds, _ = median_seconds(model_step(model, tokens, device, backward), args.steps, args.warmup, device)
            row[path] = tokens_per_call / seconds
        with torch.no_grad(), autocast(device):
            difference = (models["flex"](tokens).logits.float() - models["bias_mask"](tokens).logits.float()).abs()
        results[f"model T={length}"] = {
            **row,
            "flex/bias_mask": row["flex"] / row["bias_mask"],
            "max_logit_difference": difference.max().item(),
        }
        for kind in ("attention", "model"):
            r = results[f"{kind} T={length}"]
            extra = f"   max |logit difference| {r['max_logit_difference']:.2e}" if kind == "model" else ""
            print(
                f"{kind:9s} T={length:5d}  bias mask {r['bias_mask']:9.0f} tokens/s   flex {r['flex']:9.0f} tokens/s   "
                f"flex/bias mask {r['flex/bias_mask']:.3f}{extra}",
                flush=True,
            )
    return results


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--lengths", type=int, nargs="+", default=[256, 512])

    args, device = parse_measurement_arguments(__doc__, steps=5, warmup=2, batch=2, extra=options)
    compare(args, device)
    what = "forward + backward" if device.type == "cuda" else "forward only (no FlexAttention backward on CPU)"
    print(
        f"device: {describe_device(device, args.threads)}; {what}; batch {args.batch}; byte model (6.4M) with "
        f"encoding=alibi; median of {args.steps} calls after {args.warmup}"
    )


if __name__ == "__main__":
    main()
