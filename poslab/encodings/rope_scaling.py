"""RoPE scaling rules: how a rotary encoding's inverse frequencies (and an attention factor) change to reach
``factor`` times the length it was trained at. One registry, ``RULES``, in the style of Hugging Face's
``ROPE_INIT_FUNCTIONS`` plus its validation: each rule is a function

    (rotary_dim, base, factor, original_length, length, settings) -> (inverse frequencies, attention factor)

(``rotary_dim // 2`` inverse frequencies, fp32)

and a ``validate`` that names a bad setting and lists the allowed values. ``theta_i = base^(-2i/d)`` below, with
``d = rotary_dim``, ``s = factor``, ``L = original_length`` (the training length) and wavelength
``lambda_i = 2 pi / theta_i``. The attention factor ``m`` multiplies queries and keys alike (the scores by
``m^2``), as ``transformers`` multiplies cos and sin; it is 1 except for YaRN.

``tests/test_rope_scaling.py`` checks every rule against ``transformers.modeling_rope_utils`` to 1e-6. Where
``transformers`` and a paper could be read differently, the rule's docstring says which poslab follows.

p-RoPE (Barbero et al., 2024) is not a rule here but ``keep_fraction``, applied after any rule (the ``rope``
encoding's ``partial_fraction``): it removes frequencies rather than rescaling them, so it composes with each
rule (Gemma 3's "proportional" RoPE is p-RoPE after linear scaling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from poslab.errors import ConfigError
from poslab.settings import check_number

#: (rotary_dim, base, factor, original_length, length, settings) -> (inverse frequencies, attention factor)
RuleFunction = Callable[[int, float, float, "int | None", "int | None", dict[str, Any]], tuple[Tensor, float]]


def plain(rotary_dim: int, base: float) -> Tensor:
    """``theta_i = base^(-2i/d)`` in fp64 (the rules compute in fp64 and return fp32)."""
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def none_rule(rotary_dim, base, factor, original_length, length, settings):
    """No scaling: ``theta_i = base^(-2i/d)`` (Su et al., 2021)."""
    return plain(rotary_dim, base).float(), 1.0


def linear_rule(rotary_dim, base, factor, original_length, length, settings):
    """Position interpolation (Chen et al., 2023, "Extending context window of large language models via
    positional interpolation"): positions divided by ``s``, i.e. ``theta_i' = theta_i / s``."""
    return (plain(rotary_dim, base) / factor).float(), 1.0


def ntk_base(rotary_dim: int, base: float, ratio: float) -> float:
    """NTK-aware base: ``base' = base * ratio^(d / (d - 2))``, so the lowest frequency is divided by ``ratio``
    and the highest is kept."""
    return base * ratio ** (rotary_dim / (rotary_dim - 2))


def ntk_rule(rotary_dim, base, factor, original_length, length, settings):
    """NTK-aware scaling (bloc97, 2023; Peng et al., 2023, section 3.1): ``base' = base * s^(d/(d-2))``,
    ``theta_i' = base'^(-2i/d)``. ``transformers`` has no static rule of this name: it equals its dynamic rule
    with factor 1 at length ``s * L`` (what the test compares)."""
    return plain(rotary_dim, ntk_base(rotary_dim, base, factor)).float(), 1.0


def dynamic_rule(rotary_dim, base, factor, original_length, length, settings):
    """Dynamic NTK (emozilla, 2023; as in ``transformers``): the NTK base from the current length ``n``:
    ``base' = base * (s * n' / L - (s - 1))^(d/(d-2))`` with ``n' = max(n, L)``: no change up to ``L``. With
    ``length`` None (no current length), ``n = L``. The YaRN paper's "dynamic scaling" (section 3.3) instead sets
    ``s = max(1, n / L)`` at each length and applies a rule with it; poslab follows ``transformers`` here (the
    formula of the models that ship ``rope_type: dynamic``), and the paper's variant is ``test_scaling=ntk`` (or
    any other rule) of the ``rope`` encoding: factor ``n / L`` at each evaluation length."""
    n = max(length or original_length, original_length)
    return plain(rotary_dim, ntk_base(rotary_dim, base, factor * n / original_length - (factor - 1))).float(), 1.0


def yarn_attention_factor(factor: float) -> float:
    """YaRN's ``sqrt(1/t) = 0.1 ln(s) + 1`` (Peng et al., 2023, eq. 22), 1 for ``s <= 1``."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def yarn_rule(rotary_dim, base, factor, original_length, length, settings):
    """YaRN (Peng et al., 2023, "YaRN: efficient context window extension of large language models"), "NTK-by-
    parts" plus the attention temperature. The ratio ``r_i = L / lambda_i`` (rotations over the training length)
    picks, per pair, between extrapolation (``r_i > beta_fast``: ``theta_i`` kept) and interpolation
    (``r_i < beta_slow``: ``theta_i / s``), linear in between:
    ``theta_i' = (1 - gamma_i) theta_i / s + gamma_i theta_i``, ``gamma_i = clamp((i - low) / (high - low), 0, 1)``
    reversed, with ``low, high`` the pair indices where ``r = beta_fast, beta_slow``:
    ``i(r) = d ln(L / (2 pi r)) / (2 ln base)``, floored/ceiled and clipped to ``[0, d - 1]`` as the paper's code
    and ``transformers`` do. Attention factor ``m = 0.1 ln(s) + 1`` on queries and keys: the scores times ``m^2``
    = ``1/t`` (the paper's eq. 22 scales both sides by ``sqrt(1/t)``; ``transformers`` multiplies cos and sin by
    ``m``: the same); DeepSeek's ``mscale``/``mscale_all_dim`` variant is not offered.

    Where the reference and the paper differ, poslab follows the reference: the paper's eq. 18 ramps linearly in
    the ratio ``r`` itself, ``gamma(r) = (r - alpha) / (beta - alpha)``, while its released code (and
    ``transformers``, and every YaRN checkpoint) ramps linearly in the pair index between the rounded indices
    of ``r = beta_fast`` and ``r = beta_slow``. The code is what trained models use and what can be checked to
    1e-6; both keep and interpolate the same pairs outside the ramp."""
    beta_fast, beta_slow = float(settings.get("beta_fast", 32.0)), float(settings.get("beta_slow", 1.0))

    def index(rotations: float) -> float:
        return rotary_dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(index(beta_fast)), 0), min(math.ceil(index(beta_slow)), rotary_dim - 1)
    if low == high:
        high += 0.001  # as the reference: no division by zero
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    theta = plain(rotary_dim, base)
    extrapolated = 1 - ramp  # 1: keep theta_i (high frequencies), 0: theta_i / s
    inv = theta / factor * (1 - extrapolated) + theta * extrapolated
    return inv.float(), yarn_attention_factor(factor)


def llama3_rule(rotary_dim, base, factor, original_length, length, settings):
    """Llama 3.1's rule (Meta, 2024; ``apply_scaling`` of the llama-models code): wavelengths shorter than
    ``L / high_freq_factor`` kept, longer than ``L / low_freq_factor`` divided by ``s``, and in between
    ``theta_i' = (1 - a) theta_i / s + a theta_i`` with ``a = (L / lambda_i - low_freq_factor) /
    (high_freq_factor - low_freq_factor)``. Llama 3.1 used ``s = 8, low = 1, high = 4, L = 8192``."""
    low_factor, high_factor = float(settings.get("low_freq_factor", 1.0)), float(settings.get("high_freq_factor", 4.0))
    theta = plain(rotary_dim, base)
    wavelength = 2 * math.pi / theta
    smooth = (original_length / wavelength - low_factor) / (high_factor - low_factor)
    blended = (1 - smooth) * theta / factor + smooth * theta
    inv = torch.where(wavelength > original_length / low_factor, theta / factor, theta)
    medium = (wavelength >= original_length / high_factor) & (wavelength <= original_length / low_factor)
    return torch.where(medium, blended, inv).float(), 1.0


def keep_fraction(inv_freq: Tensor, fraction: float) -> Tensor:
    """p-RoPE (Barbero et al., 2024, "Round and round we go! What makes rotary positional encodings useful?"):
    rotate only the highest ``fraction`` of the frequencies, ``int(fraction * d / 2)`` pairs; the lowest are set to
    0 (those pairs are not rotated: a semantic channel). As ``transformers``' ``proportional`` rule, which keeps
    the frequencies of the full dimension (``base^(-2i/d)``, not recomputed over the rotated part)."""
    kept = int(fraction * 2 * len(inv_freq) // 2)
    out = inv_freq.clone()
    out[kept:] = 0.0
    return out


def check_factor(settings: dict[str, Any], rule: str) -> None:
    check_number("encoding.scaling_factor", settings.get("scaling_factor", 1.0), at_least=1.0)


def check_original(settings: dict[str, Any], rule: str) -> None:
    value = settings.get("original_length")
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise ConfigError(
            f"encoding.original_length={value!r}: the {rule} rule needs the training length, an integer of at "
            f"least 2 (left null it is taken from task.train_length or task.context_length)."
        )


def validate_none(settings: dict[str, Any], rule: str) -> None:
    pass


def validate_plain(settings: dict[str, Any], rule: str) -> None:
    check_factor(settings, rule)


def validate_with_length(settings: dict[str, Any], rule: str) -> None:
    check_factor(settings, rule)
    check_original(settings, rule)


def check_ordered(settings: dict[str, Any], low: str, high: str, defaults: tuple[float, float], why: str) -> None:
    """Two positive settings with ``low`` < ``high`` (a rule's pair of bounds)."""
    first = check_number(f"encoding.{low}", settings.get(low, defaults[0]), 0)
    second = check_number(f"encoding.{high}", settings.get(high, defaults[1]), 0)
    if first >= second:
        raise ConfigError(
            f"encoding.{low}={settings.get(low)!r} must be less than encoding.{high}={settings.get(high)!r}{why}."
        )


def validate_yarn(settings: dict[str, Any], rule: str) -> None:
    validate_with_length(settings, rule)
    check_ordered(
        settings,
        "beta_slow",
        "beta_fast",
        (1.0, 32.0),
        ": beta_fast bounds the pairs kept, beta_slow those interpolated (the paper: 32 and 1)",
    )


def validate_llama3(settings: dict[str, Any], rule: str) -> None:
    validate_with_length(settings, rule)
    check_ordered(settings, "low_freq_factor", "high_freq_factor", (1.0, 4.0), " (Llama 3.1: 1 and 4)")


@dataclass(frozen=True)
class Rule:
    compute: RuleFunction
    validate: Callable[[dict[str, Any], str], None]
    needs_length: bool  # reads original_length
    summary: str


RULES: dict[str, Rule] = {
    "none": Rule(none_rule, validate_none, False, "no scaling"),
    "linear": Rule(linear_rule, validate_plain, False, "position interpolation: theta / s (Chen et al., 2023)"),
    "ntk": Rule(ntk_rule, validate_plain, False, "NTK-aware: base * s^(d/(d-2))"),
    "dynamic": Rule(dynamic_rule, validate_with_length, True, "dynamic NTK: the NTK base from the current length"),
    "yarn": Rule(yarn_rule, validate_yarn, True, "YaRN: ramp by wavelength + attention factor 0.1 ln s + 1"),
    "llama3": Rule(llama3_rule, validate_llama3, True, "Llama 3.1: low/high frequency factors, smoothed"),
}


def check_rule(key: str, name: Any) -> Rule:
    if name not in RULES:
        raise ConfigError(f"{key}={name!r} is not a RoPE scaling rule; allowed: {', '.join(RULES)}.")
    return RULES[name]


def validate_rule(name: Any, settings: dict[str, Any], key: str = "encoding.scaling") -> None:
    """Stop on an unknown rule or a bad setting of it, with one sentence naming the value and what is allowed."""
    check_rule(key, name).validate(settings, str(name))


def scaled_frequencies(
    name: str,
    rotary_dim: int,
    base: float,
    factor: float = 1.0,
    original_length: int | None = None,
    length: int | None = None,
    **settings: Any,
) -> tuple[Tensor, float]:
    """Rule ``name``'s inverse frequencies (fp32, ``rotary_dim // 2``) and attention factor."""
    return RULES[name].compute(rotary_dim, float(base), float(factor), original_length, length, settings)
