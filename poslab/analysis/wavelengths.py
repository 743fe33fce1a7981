"""RoPE wavelengths: how many positions each pair of features takes for one full turn.

Pair i of a head of dimension H rotates by theta_i = base^(-2i/H) per position,
so one turn takes 2*pi/theta_i positions. Pairs whose wavelength exceeds the
context never complete a turn within it.
"""

from __future__ import annotations

import math

from poslab.errors import UsageError


def wavelengths(head_dim: int, base: float) -> list[float]:
    pairs = head_dim // 2
    return [2 * math.pi * base ** (i / pairs) for i in range(pairs)]


def sample_pairs(pairs: int) -> list[int]:
    """The rows the write-up prints for 64 pairs (0, 8, 16, 32, 48, 63), scaled to any number of pairs."""
    return sorted({0, pairs // 8, pairs // 4, pairs // 2, 3 * pairs // 4, pairs - 1})


def _numbers(option: str, text: str, allowed: str, convert, valid) -> list:
    """``text`` (comma-separated) as numbers, each ``valid``; else ``UsageError`` naming the option and value."""
    items = [item.strip() for item in str(text).split(",")]
    try:
        values = [convert(item) for item in items]
    except ValueError:
        values = []
    if not values or not all(valid(v) for v in values):
        raise UsageError(f"{option} {text}: allowed are {allowed}, separated by commas.")
    return values


def parse_bases(text: str) -> list[float]:
    """``--bases 10000,500000``: RoPE bases, each a finite number above 1 (a base of 1 or less never turns)."""
    return _numbers("--bases", text, "numbers greater than 1 (e.g. 10000,500000)", float, _is_base)


def parse_contexts(text: str) -> list[int]:
    """``--context 8192,131072``: context lengths, each a positive whole number of positions."""
    return _numbers("--context", text, "positive whole numbers (e.g. 8192,131072)", int, lambda n: n > 0)


def _is_base(value: float) -> bool:
    return math.isfinite(value) and value > 1


def check_head_dim(head_dim: int) -> int:
    if head_dim < 2 or head_dim % 2:
        raise UsageError(f"--head-dim {head_dim}: allowed is a positive even number (RoPE rotates pairs).")
    return head_dim


def wavelength_table(head_dim: int, bases: list[float], contexts: list[int]) -> str:
    check_head_dim(head_dim)
    bad_bases = [b for b in bases if not _is_base(b)]
    bad_contexts = [c for c in contexts if c <= 0]
    if bad_bases or bad_contexts or not bases or not contexts:
        raise UsageError(
            f"bases {bases} and contexts {contexts}: allowed are one or more bases greater than 1 and one or "
            f"more positive context lengths."
        )
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
