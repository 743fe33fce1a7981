"""RoPE wavelengths: how many positions each pair of features takes for one full turn.

Pair i of a head of dimension H rotates by theta_i = base^(-2i/H) per position,
so one turn takes 2*pi/theta_i positions. Pairs whose wavelength exceeds the
context never complete a turn within it.
"""

from __future__ import annotations

import math


def wavelengths(head_dim: int, base: float) -> list[float]:
    pairs = head_dim // 2
    return [2 * math.pi * base ** (i / pairs) for i in range(pairs)]


def sample_pairs(pairs: int) -> list[int]:
    """The rows the write-up prints for 64 pairs (0, 8, 16, 32, 48, 63), scaled to any number of pairs."""
    return sorted({0, pairs // 8, pairs // 4, pairs // 2, 3 * pairs // 4, pairs - 1})


def wavelength_table(head_dim: int, bases: list[float], contexts: list[int]) -> str:
    pairs = head_dim // 2
    names = [f"base {int(b) if float(b).is_integer() else b:,}" for b in bases]
    lines = [f"{'pair':>5s} " + "".join(f"{name:>18s}" for name in names)]
    table = {b: wavelengths(head_dim, b) for b in bases}
    for p in sample_pairs(pairs):
        lines.append(f"{p:5d} " + "".join(f"{table[b][p]:>18,.1f}" for b in bases))
    for b, name in zip(bases, names):
        counts = [sum(w > c for w in table[b]) for c in contexts]
        first = f"{counts[0]:2d} of {pairs} pairs never finish one turn within {contexts[0]:,} positions"
        rest = "".join(f", {n:2d} within {c:,}" for n, c in zip(counts[1:], contexts[1:]))
        lines.append(f"{name}: {first}{rest}")
    return "\n".join(lines)
