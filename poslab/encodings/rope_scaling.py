"""RoPE scaling rules: how a rotary encoding's inverse frequencies (and an attention factor) change to reach
``factor`` times the length it was trained at. One registry, ``RULES``, in the style of Hugging Face's
``ROPE_INIT_FUNCTIONS`` plus its validation: each rule is a function

    (theta, rotary_dim, base, factor, original_length, length, settings) -> (inverse frequencies, attention factor)

of the frequencies ``theta`` an encoding rotates by (fp64, any shape; RoPE's ladder for ``rope``), returning as
many (fp64), and a ``validate`` that names a bad setting and lists the allowed values. ``theta_i = base^(-2i/d)``
below, with ``d = rotary_dim``, ``s = factor``, ``L = original_length`` (the training length) and wavelength
``lambda_i = 2 pi / theta_i``. The attention factor ``m`` multiplies queries and keys alike (the scores by
``m^2``), as ``transformers`` multiplies cos and sin; it is 1 except for YaRN.

Every rule acts on each frequency alone, so it applies to whatever frequencies an encoding rotates by (a band of
the ladder per hRoPE axis, one ladder per layer, learned positions times the ladder). The rules defined on the
ladder's pair index ``i`` (NTK's ``theta_i s^(-2i/(d-2))``, YaRN's ramp) read it from the frequency itself,
``i = d ln(1/theta) / (2 ln base)`` (``pair_index``): exactly ``i`` on the ladder, fractional between its rungs
(hRoPE's ``full`` blocks). A frequency 0 (a pair p-RoPE leaves unrotated) stays 0 under every rule, so p-RoPE
before a rule is p-RoPE after it.

``tests/encodings/test_rope_scaling.py`` checks every rule against ``transformers.modeling_rope_utils`` to 1e-6. Where
``transformers`` and a paper could be read differently, the rule's docstring says which poslab follows.

At test time (``TEST_RULES``, the rotary encodings' ``test_scaling`` and ``test_time_variants``) a rule runs at each
evaluation length ``n > L`` with factor ``s = n / L``. ``dynamic`` is not among them: at test time it is ``ntk``
under another name (``dynamic_rule`` says why), so a ``test_dynamic`` column would repeat ``test_ntk``.

p-RoPE (Barbero et al., 2024) is not a rule here but ``keep_fraction`` (the ``rope`` encoding's
``partial_fraction``): it removes frequencies rather than rescaling them, so it composes with each rule (Gemma 3's
"proportional" RoPE is p-RoPE after linear scaling).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from poslab.config.settings import check_choice, check_number, yaml_defaults
from poslab.errors import ConfigError

#: (theta, rotary_dim, base, factor, original_length, length, settings) -> (inverse frequencies, attention factor)
RuleFunction = Callable[[Tensor, int, float, float, "int | None", "int | None", dict[str, Any]], tuple[Tensor, float]]

#: the rules' own settings (yarn: beta_fast, beta_slow; llama3: low_freq_factor, high_freq_factor); their defaults
#: live in ``conf/encoding/shared/rotary.yaml`` (which every rotary encoding's YAML includes): ``rule_defaults``
RULE_SETTINGS = ("beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor")


def rule_defaults() -> dict[str, float]:
    """Each rule setting's value in ``conf/encoding/shared/rotary.yaml``, its one home: what a rule called with
    settings left out (a test, ``scaled_frequencies`` from Python) takes. A built encoding has them all."""
    shared = yaml_defaults("encoding", "shared/rotary")
    return {key: float(shared[key]) for key in RULE_SETTINGS}


def rule_setting(settings: dict[str, Any], key: str) -> float:
    """A rule's setting as given, else its YAML value (``rule_defaults``)."""
    value = settings.get(key)
    return rule_defaults()[key] if value is None else float(value)


def plain(rotary_dim: int, base: float) -> Tensor:
    """``theta_i = base^(-2i/d)`` in fp64 (the rules compute in fp64; ``scaled_frequencies`` returns fp32)."""
    return base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim)


def pair_index(theta: Tensor, rotary_dim: int, base: float) -> Tensor:
    """Where each frequency sits on the ladder ``theta_i = base^(-2i/d)``: ``i = d ln(1/theta) / (2 ln base)``,
    the pair index of a rung (0 for ``theta = 1``), fractional between rungs (inf for ``theta = 0``)."""
    return rotary_dim * torch.log(1 / theta) / (2 * math.log(base))


def none_rule(theta, rotary_dim, base, factor, original_length, length, settings):
    """No scaling: ``theta`` as it is (RoPE's ``theta_i = base^(-2i/d)``, Su et al., 2021)."""
    return theta, 1.0


def linear_rule(theta, rotary_dim, base, factor, original_length, length, settings):
    """Position interpolation (Chen et al., 2023, "Extending context window of large language models via
    positional interpolation"): positions divided by ``s``, i.e. ``theta_i' = theta_i / s``."""
    return theta / factor, 1.0


def ntk_frequencies(theta: Tensor, rotary_dim: int, base: float, ratio: float) -> Tensor:
    """The NTK-aware base ``base' = base * ratio^(d / (d - 2))`` per frequency: ``theta_i' = base'^(-2i/d) =
    theta_i * ratio^(-2i/(d-2))`` with ``i = pair_index(theta)``, so the lowest rung (``i = d/2 - 1``) is divided by
    ``ratio`` and the highest (``i = 0``) kept. With ``d = 2`` the one pair is the highest: kept."""
    if rotary_dim <= 2:
        return theta
    return theta * ratio ** (-2 * pair_index(theta, rotary_dim, base) / (rotary_dim - 2))


def ntk_rule(theta, rotary_dim, base, factor, original_length, length, settings):
    """NTK-aware scaling (bloc97, 2023; Peng et al., 2023, section 3.1): ``base' = base * s^(d/(d-2))``,
    ``theta_i' = base'^(-2i/d)`` (``ntk_frequencies``). ``transformers`` has no static rule of this name: it equals
    its dynamic rule with factor 1 at length ``s * L`` (what the test compares)."""
    return ntk_frequencies(theta, rotary_dim, base, factor), 1.0


def dynamic_ratio(factor: float, original_length: int, length: int | None) -> float:
    """Dynamic NTK's ratio at the current length ``n``: ``s * n' / L - (s - 1)``, ``n' = max(n, L)`` (``n = L``
    when no length is known): 1 up to ``L``."""
    n = max(length or original_length, original_length)
    return factor * n / original_length - (factor - 1)


def dynamic_rule(theta, rotary_dim, base, factor, original_length, length, settings):
    """Dynamic NTK (emozilla, 2023; as in ``transformers``): the NTK base from the current length ``n``:
    ``base' = base * (s * n' / L - (s - 1))^(d/(d-2))`` with ``n' = max(n, L)``: no change up to ``L``. With
    ``length`` None (no current length), ``n = L``. The YaRN paper's "dynamic scaling" (section 3.3) instead sets
    ``s = max(1, n / L)`` at each length and applies a rule with it; poslab follows ``transformers`` here (the
    formula of the models that ship ``rope_type: dynamic``), and the paper's variant is ``test_scaling`` (any
    rule) of a rotary encoding: factor ``n / L`` at each evaluation length.

    Not a test-time rule (``TEST_RULES``): a model trained without scaling and evaluated under dynamic NTK (factor
    1, as ``transformers`` loads one) has the ratio ``n / L`` at length ``n``, which is ``ntk`` with factor
    ``n / L``: ``test_ntk`` exactly (``tests/encodings/test_test_time_variants.py``). With the test-time factor
    ``s = n / L`` in the formula instead, the ratio would be ``s^2 - s + 1``: the length counted twice."""
    return ntk_frequencies(theta, rotary_dim, base, dynamic_ratio(factor, original_length, length)), 1.0


def yarn_attention_factor(factor: float) -> float:
    """YaRN's ``sqrt(1/t) = 0.1 ln(s) + 1`` (Peng et al., 2023, eq. 22), 1 for ``s <= 1``."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def yarn_rule(theta, rotary_dim, base, factor, original_length, length, settings):
    """YaRN (Peng et al., 2023, "YaRN: efficient context window extension of large language models"), "NTK-by-
    parts" plus the attention temperature. The ratio ``r_i = L / lambda_i`` (rotations over the training length)
    picks, per pair, between extrapolation (``r_i > beta_fast``: ``theta_i`` kept) and interpolation
    (``r_i < beta_slow``: ``theta_i / s``), linear in between:
    ``theta_i' = (1 - gamma_i) theta_i / s + gamma_i theta_i``, ``gamma_i = clamp((i - low) / (high - low), 0, 1)``
    reversed, with ``low, high`` the pair indices where ``r = beta_fast, beta_slow``:
    ``i(r) = d ln(L / (2 pi r)) / (2 ln base)``, floored/ceiled and clipped to ``[0, d - 1]`` as the paper's code
    and ``transformers`` do, and ``i = pair_index(theta)`` for each frequency. Attention factor ``m = 0.1 ln(s) + 1``
    on queries and keys: the scores times ``m^2`` = ``1/t`` (the paper's eq. 22 scales both sides by
    ``sqrt(1/t)``; ``transformers`` multiplies cos and sin by ``m``: the same); DeepSeek's
    ``mscale``/``mscale_all_dim`` variant is not offered.

    Where the reference and the paper differ, poslab follows the reference: the paper's eq. 18 ramps linearly in
    the ratio ``r`` itself, ``gamma(r) = (r - alpha) / (beta - alpha)``, while its released code (and
    ``transformers``, and every YaRN checkpoint) ramps linearly in the pair index between the rounded indices
    of ``r = beta_fast`` and ``r = beta_slow``. The code is what trained models use and what can be checked to
    1e-6; both keep and interpolate the same pairs outside the ramp."""
    beta_fast, beta_slow = rule_setting(settings, "beta_fast"), rule_setting(settings, "beta_slow")

    def index(rotations: float) -> float:
        return rotary_dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = max(math.floor(index(beta_fast)), 0), min(math.ceil(index(beta_slow)), rotary_dim - 1)
    if low == high:
        high += 0.001  # as the reference: no division by zero
    ramp = ((pair_index(theta, rotary_dim, base) - low) / (high - low)).clamp(0, 1)
    extrapolated = 1 - ramp  # 1: keep theta_i (high frequencies), 0: theta_i / s
    inv = theta / factor * (1 - extrapolated) + theta * extrapolated
    return inv, yarn_attention_factor(factor)


def llama3_rule(theta, rotary_dim, base, factor, original_length, length, settings):
    """Llama 3.1's rule (Meta, 2024; ``apply_scaling`` of the llama-models code): wavelengths shorter than
    ``L / high_freq_factor`` kept, longer than ``L / low_freq_factor`` divided by ``s``, and in between
    ``theta_i' = (1 - a) theta_i / s + a theta_i`` with ``a = (L / lambda_i - low_freq_factor) /
    (high_freq_factor - low_freq_factor)``. Llama 3.1 used ``s = 8, low = 1, high = 4, L = 8192``."""
    low_factor, high_factor = rule_setting(settings, "low_freq_factor"), rule_setting(settings, "high_freq_factor")
    wavelength = 2 * math.pi / theta
    smooth = (original_length / wavelength - low_factor) / (high_factor - low_factor)
    blended = (1 - smooth) * theta / factor + smooth * theta
    inv = torch.where(wavelength > original_length / low_factor, theta / factor, theta)
    medium = (wavelength >= original_length / high_factor) & (wavelength <= original_length / low_factor)
    return torch.where(medium, blended, inv), 1.0


def keep_fraction(inv_freq: Tensor, fraction: float) -> Tensor:
    """p-RoPE (Barbero et al., 2024, "Round and round we go! What makes rotary positional encodings useful?"):
    rotate only the highest ``fraction`` of the frequencies, ``int(fraction * d / 2)`` pairs; the lowest are set to
    0 (those pairs are not rotated: a semantic channel). As ``transformers``' ``proportional`` rule, which keeps
    the frequencies of the full dimension (``base^(-2i/d)``, not recomputed over the rotated part)."""
    kept = int(fraction * 2 * len(inv_freq) // 2)
    out = inv_freq.clone()
    out[kept:] = 0.0
    return out


#: the largest scaling factor taken: ``transformers`` (``_validate_*_rope_parameters``) asks only ``factor >= 1``;
#: published uses stay far below (Llama 3.1: 8, YaRN: up to 32, LongRoPE: 128), and past this the rules divide
#: frequencies below float32's resolution (a factor of 1e9 was accepted and silently trained on noise)
MAX_SCALING_FACTOR = 1024.0


def check_factor(settings: dict[str, Any], rule: str) -> None:
    value = settings["scaling_factor"]
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    if not (1.0 <= number <= MAX_SCALING_FACTOR):  # NaN fails both
        raise ConfigError(
            f"encoding.scaling_factor={value!r} for the {rule} rule must be a number of at least 1 and at most "
            f"{MAX_SCALING_FACTOR:g} (the target length over the training length; transformers asks factor >= 1, "
            f"and published uses stay below 128)."
        )


def check_original(settings: dict[str, Any], rule: str) -> None:
    """``original_length`` is the training length, a whole number of at least 2 (``rule``: which rule reads it, or
    ``any``: a value given whatever the rule)."""
    value = settings.get("original_length")
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        given = f"encoding.original_length={value!r}"
        head = f"{given} must be" if rule == "any" else f"{given}: the {rule} rule needs"
        raise ConfigError(
            f"{head} the training length, an integer of at least 2 (left null it is taken from task.train_length "
            f"or task.context_length)."
        )


def validate_none(settings: dict[str, Any], rule: str) -> None:
    pass


def validate_plain(settings: dict[str, Any], rule: str) -> None:
    check_factor(settings, rule)


def validate_with_length(settings: dict[str, Any], rule: str) -> None:
    check_factor(settings, rule)
    check_original(settings, rule)


def check_ordered(settings: dict[str, Any], low: str, high: str, why: str) -> None:
    """Two positive settings with ``low`` < ``high`` (a rule's pair of bounds; unset: ``rule_defaults``)."""
    given = {key: rule_defaults()[key] if settings.get(key) is None else settings[key] for key in (low, high)}
    first = check_number(f"encoding.{low}", given[low], 0)
    second = check_number(f"encoding.{high}", given[high], 0)
    if first >= second:
        raise ConfigError(f"encoding.{low}={given[low]!r} must be less than encoding.{high}={given[high]!r}{why}.")


def validate_yarn(settings: dict[str, Any], rule: str) -> None:
    validate_with_length(settings, rule)
    why = ": beta_fast bounds the pairs kept, beta_slow those interpolated (the paper: 32 and 1)"
    check_ordered(settings, "beta_slow", "beta_fast", why)


def validate_llama3(settings: dict[str, Any], rule: str) -> None:
    validate_with_length(settings, rule)
    check_ordered(settings, "low_freq_factor", "high_freq_factor", " (Llama 3.1: 1 and 4)")


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


#: the rules a trained model can be evaluated under at longer lengths, factor n / L (``dynamic_rule`` says why
#: dynamic is not one: at test time it is ntk)
TEST_RULES = ("none", "linear", "ntk", "yarn", "llama3")


def validate_scaling(settings: dict[str, Any]) -> None:
    """A rotary encoding's scaling settings: one rule in training (``scaling``, with ``scaling_factor``) or one at
    test time (``test_scaling``, which needs ``original_length``), each rule's own settings checked."""
    scaling, test = settings["scaling"], settings["test_scaling"]
    if settings.get("original_length") is not None:  # given or filled: the training length, whatever reads it
        check_original(settings, "any")
    validate_rule(scaling, settings, "encoding.scaling")
    if test == "dynamic":
        raise ConfigError(
            f"encoding.test_scaling='dynamic' is not a test-time rule: dynamic NTK at test time is ntk with factor "
            f"n / L; allowed: {', '.join(TEST_RULES)}."
        )
    check_choice("encoding.test_scaling", test, TEST_RULES)
    if test == "none":
        return
    if scaling != "none":
        raise ConfigError(
            f"encoding.test_scaling={test} and encoding.scaling={scaling}: give one scaling rule, in "
            f"training (scaling) or at test time (test_scaling); set the other to none."
        )
    validate_rule(test, {**settings, "scaling_factor": 1.0}, "encoding.test_scaling")
    check_original(settings, f"test-time {test}")  # the factor n / L needs L in every case


def scaled_frequencies(
    name: str,
    rotary_dim: int,
    base: float,
    factor: float = 1.0,
    original_length: int | None = None,
    length: int | None = None,
    theta: Tensor | None = None,
    **settings: Any,
) -> tuple[Tensor, float]:
    """Rule ``name``'s inverse frequencies (fp32) and attention factor, applied to ``theta`` (fp64, any shape; None:
    RoPE's ladder ``plain(rotary_dim, base)``, ``rotary_dim // 2`` pairs) read on the ladder of ``rotary_dim`` and
    ``base``. A frequency 0 stays 0 (an unrotated p-RoPE pair)."""
    theta = plain(rotary_dim, base) if theta is None else theta.double()
    inv, attention = RULES[name].compute(
        theta, rotary_dim, float(base), float(factor), original_length, length, settings
    )
    return torch.where(theta == 0, 0.0, inv).float(), attention
