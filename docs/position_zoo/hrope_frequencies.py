"""Which rotary pairs of the zoo's hierarchical encodings rotate by what, on the synthetic tasks.

    .venv/bin/python docs/position_zoo/hrope_frequencies.py > docs/position_zoo/hrope_frequencies.md

The zoo's model: d_model 64, 4 heads, head_dim 16 (8 pairs), base 10,000, interleaved pairing. On a synthetic
task every sequence is one paragraph and one sentence: the module passes zero paragraph and sentence coordinates
(SyntheticModule.coordinates). Angles are read from the encodings' own ``positions`` and ``angles``.
"""

from __future__ import annotations

import math

import torch

from poslab.encodings import ModelShape, build_encoding
from poslab.encodings.base import PositionInputs

SHAPE = ModelShape.of(64, 4, 2)
AXES = ("paragraph", "sentence", "token")
TRAIN, LONGEST = 32, 256


def inputs(length: int) -> PositionInputs:
    tokens = torch.zeros(1, length, dtype=torch.long)
    zeros = torch.zeros_like(tokens)
    return PositionInputs.from_tokens(tokens, {"paragraph": zeros, "sentence": zeros})


def max_angles(encoding, length: int) -> torch.Tensor:
    """Per pair, the largest |angle difference| between a query and an earlier key over a sequence of ``length``."""
    encoding.eval()
    with torch.no_grad():
        angles = encoding.angles(encoding.positions(None, inputs(length)))[0]  # [T, P]
    return (angles[:, None, :] - angles[None, :, :]).abs().amax(dim=(0, 1))


def table(title: str, encoding, extra: str = "") -> None:
    inv = encoding.inv_freq.float()
    axis = getattr(encoding, "pair_axis", None)
    print(f"\n## {title}{extra}\n")
    print("| pair | inverse frequency | wavelength (tokens) | rotates by | max angle at 32 (rad) | at 256 (rad) |")
    print("|---|---|---|---|---|---|")
    at_train, at_test = max_angles(encoding, TRAIN), max_angles(encoding, LONGEST)
    for p in range(len(inv)):
        w = inv[p].item()
        wave = f"{2 * math.pi / w:,.0f}" if w > 0 else "none (not rotated)"
        by = AXES[int(axis[p])] if axis is not None else ("token" if w > 0 else "nothing")
        print(f"| {p} | {w:.6f} | {wave} | {by} | {at_train[p]:.3f} | {at_test[p]:.3f} |")


def main() -> None:
    print("# Which pairs rotate by what: the zoo's rotary encodings on the synthetic tasks\n")
    print("Written by `docs/position_zoo/hrope_frequencies.py` from the encodings' own classes (d_model 64, 4 heads,")
    print("head_dim 16: 8 pairs; base 10,000). Paragraph and sentence coordinates are zero, as the synthetic module")
    print("passes them. Max angle: the largest angle difference of the pair between a query and an earlier key.")
    rope = build_encoding({"name": "rope"}, SHAPE, LONGEST, train_length=TRAIN)
    table("rope (RoPE's ladder, base 10,000, head_dim 16)", rope)
    prope = build_encoding({"name": "rope", "partial_fraction": 0.5}, SHAPE, LONGEST, train_length=TRAIN)
    table("rope partial_fraction=0.5 (p-RoPE)", prope)
    kept = {round(w, 6) for w in prope.inv_freq.tolist() if w > 0}
    summary = []
    for frequencies in ("split", "interleaved", "token_first"):
        hrope = build_encoding({"name": "hrope_axial", "frequencies": frequencies}, SHAPE, LONGEST, train_length=TRAIN)
        table(f"hrope_axial frequencies={frequencies}", hrope, f" (blocks {hrope.blocks})")
        token = {round(w, 6) for w, a in zip(hrope.inv_freq.tolist(), hrope.pair_axis.tolist()) if a == 2}
        verdict = "p-RoPE's kept set" if token == kept else f"{len(token & kept)} of p-RoPE's {len(kept)} kept"
        summary.append(f"- `{frequencies}`: the token axis rotates at {sorted(token, reverse=True)}: {verdict}")
    # period_axial's paragraph coordinate does not come from the data: floor(token / period), period 1/density
    period = build_encoding(
        {"name": "period_axial", "paragraph_density": 1 / TRAIN}, SHAPE, LONGEST, train_length=TRAIN
    )
    paragraph = period.positions(None, inputs(LONGEST))[0, :, 0]
    print(
        f"\nperiod_axial (density 1/{TRAIN}): period {period.period}; paragraph index at tokens 0-31: "
        f"{sorted(set(paragraph[:TRAIN].long().tolist()))}; at tokens 0-255: {sorted(set(paragraph.long().tolist()))}"
    )
    table("period_axial frequencies=split", period)
    # rand_axial: random boundaries in training (1/32 per token), the real (zero) coordinate in evaluation
    rand = build_encoding({"name": "rand_axial", "paragraph_density": 1 / TRAIN}, SHAPE, LONGEST, train_length=TRAIN)
    rand.train()
    torch.manual_seed(0)
    draws = torch.stack([rand.positions(None, inputs(TRAIN))[0, -1, 0] for _ in range(10_000)])
    print(
        f"\nrand_axial in training (density 1/{TRAIN}, 10,000 draws): paragraph index of token 31: "
        f"mean {draws.mean():.2f}, max {int(draws.max())}, P(> 0) {(draws > 0).float().mean():.2f}; "
        f"in evaluation (eval_paragraphs: real): 0 everywhere"
    )
    table("rand_axial in evaluation", rand)
    print(f"\n## Summary\n\n- p-RoPE (partial_fraction 0.5) rotates at {sorted(kept, reverse=True)}")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
