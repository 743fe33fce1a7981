"""``task.passkey``: the settings of passkey retrieval (``poslab.lightning_modules.passkey`` runs it) and their checks,
one sentence each. Light (no torch), like ``poslab.config.settings``: the command line checks them before anything runs.
Their defaults live in ``conf/task/lm.yaml`` (``passkey:``), their one home; a ``task.passkey`` built by hand (or
null) takes the values it leaves out from there.

- ``enabled``: run it after training.
- ``distances``: tokens between the starts of the two phrases, as multiples of ``task.context_length`` (null: the
  powers of two 1/8 .. 8, ``DEFAULT_DISTANCES``, less those shorter than the phrase at a small context); each at
  least one phrase long (24 tokens for 5 digits), no two equal in tokens.
- ``depths``: fractions in [0, 1]: the first phrase starts after ``round(depth x depth_span x context)`` tokens
  (null: 0, 1/4, 1/2, 3/4 and 1, ``DEFAULT_DEPTHS``).
- ``depth_span``: the filler before the first phrase at depth 1, in contexts (greater than 0).
- ``trials``: per distance and depth; ``key_length``: digits (1 to 20); ``seed``.
- ``train_fraction``: the share of training windows that hold a pair of phrases with one random key inside the
  window (``poslab.datamodules.passkey_phrases.plant_pairs``; 0 to 1, 0: off): the model is taught the
  phrase within its context, and retrieval past it is zero-shot. Needs a context holding two phrases.
- ``warmup_steps``: the first training batches (global batch index below it) hold a pair in *every* window, a
  copying warm-up; ``train_fraction`` holds after them (default 0: none). A byte model of the lm_zoo's width learns
  to copy within a few hundred steps of it, where a small fraction over the whole run teaches nothing
  (docs/lm_extrapolation.md, "Passkey at 1x"); after it, text has the windows back.
- ``at_validation``: also at every validation, the plain model at the distances up to one context with the first
  key opening the text (``within_context``): ``val/passkey_exact`` and results.json's ``passkey_by_step``, the step
  at which copying appears.

The held-out stream must hold the longest trial, ``depth_span x context + longest distance + phrase``
(``PasskeySettings.max_length``: 17 contexts + 24 tokens with the YAML's values), checked once the data is read
(``check_filler``); that length is also the longest sequence the model must take (a learned table's rows, a memory
estimate: ``passkey_max_length``). Only the byte tokenizer: a BPE may merge the key's digits into one token.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from poslab.config.yaml_values import yaml_defaults
from poslab.errors import ConfigError

PREFIX = " The pass key is "  # the phrase before the key; the filler may not hold it (it would be a third copy)
SUFFIX = ". "
#: what ``distances: null`` means: multiples of the context, 1/8 to 8, powers of 2 (issue 39: passkey's longest
#: trials cost the most; the passkey recipe, experiment=lm_passkey, names 16x itself)
DEFAULT_DISTANCES = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)  # what ``depths: null`` means
MAX_KEY_LENGTH = 20
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class PasskeySettings:
    """``task.passkey``: ``distances`` (multiples of the context), ``depths`` (0: the first phrase opens the text, 1:
    it is preceded by ``depth_span`` contexts of filler), ``trials`` per cell, ``key_length`` digits, ``seed``."""

    enabled: bool
    distances: tuple[float, ...]
    depths: tuple[float, ...]
    depth_span: float
    trials: int
    key_length: int
    seed: int
    at_validation: bool
    train_fraction: float
    warmup_steps: int

    @property
    def phrase_length(self) -> int:
        """``m``: bytes (tokens) of the phrase with its key."""
        return len(PREFIX) + self.key_length + len(SUFFIX)

    def distance_tokens(self, context_length: int) -> list[int]:
        return [round(multiple * context_length) for multiple in self.distances]

    def depth_offsets(self, context_length: int) -> list[int]:
        """``p`` per depth: tokens of filler before the first phrase, ``round(q x depth_span x context)``."""
        span = self.span_tokens(context_length)
        return [round(depth * span) for depth in self.depths]

    def span_tokens(self, context_length: int) -> int:
        return round(self.depth_span * context_length)

    def max_length(self, context_length: int) -> int:
        """The longest sequence the evaluation runs: ``S + d_max + m`` (what a learned table, a memory estimate and
        the held-out stream must cover)."""
        return max(self.depth_offsets(context_length)) + max(self.distance_tokens(context_length)) + self.phrase_length

    def forward_tokens(self, context_length: int) -> int:
        """Tokens through the model per way of evaluating (and per random draw): every cell's ``trials`` sequences of
        ``p + d + m`` tokens; the attention's work grows with the squares of those lengths."""
        m, offsets = self.phrase_length, self.depth_offsets(context_length)
        return self.trials * sum(p + d + m for d in self.distance_tokens(context_length) for p in offsets)

    def within_context(self) -> PasskeySettings:
        """What ``at_validation`` scores: the distances up to one context (all of them when none is), depth 0."""
        inside = tuple(d for d in self.distances if d <= 1.0) or self.distances
        return replace(self, distances=inside, depths=(0.0,))

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        return {**values, "distances": list(self.distances), "depths": list(self.depths)}


# ---- checks: one sentence each -----------------------------------------------------------------------------------
def check_passkey_settings(
    settings: Mapping[str, Any] | None, context_length: int, tokenizer: str | None = None
) -> PasskeySettings:
    """``task.passkey`` as ``PasskeySettings``, or a ``ConfigError`` naming the bad value and what is allowed. A
    setting left out (None: all of them) takes its value in ``conf/task/lm.yaml`` (``passkey_defaults``).
    ``tokenizer``: ``corpus.tokenizer``, checked against what passkey retrieval needs (None: not known here, as in
    ``passkey_max_length``, which reads the task alone). Checked before any data is read; ``check_filler`` checks
    the held-out stream once it is."""
    unknown = sorted(set(settings or {}) - set(PasskeySettings.__dataclass_fields__))
    if unknown:
        allowed = ", ".join(PasskeySettings.__dataclass_fields__)
        raise ConfigError(f"task.passkey.{unknown[0]} is not a passkey setting; allowed: {allowed}.")
    given = {**passkey_defaults(), **(settings or {})}
    enabled, at_validation = given["enabled"], given["at_validation"]
    for key, value in (("enabled", enabled), ("at_validation", at_validation)):
        if not isinstance(value, bool):
            raise ConfigError(f"task.passkey.{key}={value!r} must be true or false.")
    if enabled and tokenizer not in (None, "bytes"):
        raise ConfigError(
            f"passkey retrieval scores the key one digit per token, which only the byte tokenizer guarantees "
            f"(corpus.tokenizer={tokenizer!r} may merge digits); set corpus.tokenizer=bytes or "
            f"task.passkey.enabled=false."
        )
    key_length = _whole(given, "key_length", 1, MAX_KEY_LENGTH, "digits of the key")
    values = PasskeySettings(
        enabled=enabled,
        distances=_distances(given["distances"], context_length, len(PREFIX) + key_length + len(SUFFIX)),
        depths=_depths(given["depths"]),
        depth_span=_depth_span(given["depth_span"], context_length),
        trials=_whole(given, "trials", 1, None, "trials per distance and depth"),
        key_length=key_length,
        seed=_whole(given, "seed", 0, MAX_SEED, "the trials' random seed"),
        at_validation=at_validation,
        train_fraction=_train_fraction(given["train_fraction"]),
        warmup_steps=_whole(given, "warmup_steps", 0, None, "training batches with a pair in every window"),
    )
    _check_planting(values, context_length, tokenizer)
    return values


def _check_planting(values: PasskeySettings, context_length: int, tokenizer: str | None) -> None:
    """Phrases planted in training windows (``train_fraction``, ``warmup_steps``) need windows that hold two of
    them, and bytes read as written."""
    planting = {"train_fraction": values.train_fraction, "warmup_steps": values.warmup_steps}
    key = next((key for key, value in planting.items() if value > 0), None)
    if key is None:
        return
    setting = f"task.passkey.{key}={planting[key]:g}"
    if context_length + 1 < 2 * values.phrase_length:
        raise ConfigError(
            f"{setting} plants two {values.phrase_length}-token phrases in a training window, which "
            f"task.context_length={context_length} cannot hold; allowed: a context of at least "
            f"{2 * values.phrase_length - 1}, or {key}=0."
        )
    if tokenizer not in (None, "bytes"):
        raise ConfigError(
            f"{setting} plants byte phrases in training windows, which only the byte tokenizer reads as written "
            f"(corpus.tokenizer={tokenizer!r}); set corpus.tokenizer=bytes or {key}=0."
        )


def _train_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ConfigError(
            f"task.passkey.train_fraction={value!r} must be a number from 0 (off) to 1 (the share of training "
            f"windows holding a pair of passkey phrases)."
        )
    return float(value)


def passkey_defaults() -> dict[str, Any]:
    """The passkey settings ``conf/task/lm.yaml`` gives (their one home), a fresh copy."""
    return yaml_defaults("task", "lm")["passkey"]


def _whole(given: Mapping[str, Any], key: str, low: int, high: int | None, meaning: str) -> int:
    value = given[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        allowed = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise ConfigError(f"task.passkey.{key}={value!r} must be a whole number {allowed} ({meaning}).")
    return value


def _numbers(key: str, value: Any) -> list[float]:
    """A non-empty list of finite numbers, or one sentence."""
    items = list(value) if isinstance(value, Sequence) and not isinstance(value, str) else None
    if not items or any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) for v in items):
        raise ConfigError(f"task.passkey.{key}={value!r} must be a non-empty list of numbers.")
    return [float(v) for v in items]


def _distances(value: Any, context_length: int, phrase_length: int) -> tuple[float, ...]:
    """Multiples of the context, each at least one phrase long in tokens (the two phrases may not overlap), no two
    the same number of tokens; sorted (the heatmap's x axis)."""
    if value is None:  # the defaults a small context cannot hold (1/8 of 24 tokens) are left out, not refused
        value = [m for m in DEFAULT_DISTANCES if round(m * context_length) >= phrase_length]
    multiples = _numbers("distances", value)
    tokens = [round(m * context_length) for m in multiples]
    for multiple, count in zip(multiples, tokens):
        if count < phrase_length:
            raise ConfigError(
                f"task.passkey.distances has {multiple:g} (x task.context_length={context_length} = {count} tokens), "
                f"shorter than the {phrase_length}-token phrase, so the two occurrences would overlap; allowed: "
                f"multiples of at least {phrase_length / context_length:.4g}."
            )
    if len(set(tokens)) < len(tokens):
        raise ConfigError(
            f"task.passkey.distances={multiples} gives the same distance in tokens twice ({tokens} at "
            f"task.context_length={context_length}); give each distance once."
        )
    return tuple(sorted(multiples))


def _depths(value: Any) -> tuple[float, ...]:
    depths = _numbers("depths", DEFAULT_DEPTHS if value is None else value)
    for depth in depths:
        if not 0.0 <= depth <= 1.0:
            raise ConfigError(
                f"task.passkey.depths has {depth:g}, outside [0, 1]; allowed: fractions from 0 (the first key opens "
                f"the text) to 1 (it follows depth_span contexts of filler)."
            )
    if len(set(depths)) < len(depths):
        raise ConfigError(f"task.passkey.depths={depths} has a depth twice; give each depth once.")
    return tuple(sorted(depths))


def _depth_span(value: Any, context_length: int) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ConfigError(
            f"task.passkey.depth_span={value!r} must be a finite number greater than 0 (the filler before the first "
            f"key at depth 1, in multiples of task.context_length={context_length})."
        )
    return float(value)


def check_filler(settings: PasskeySettings, context_length: int, filler_tokens: int, what: str = "") -> None:
    """The held-out stream must hold the longest trial: the filler before the deepest first phrase, the longest
    distance and the phrase (``PasskeySettings.max_length``); ``what`` names the stream (a source group)."""
    longest = settings.max_length(context_length)
    if filler_tokens < longest:
        where = f" ({what})" if what else ""
        before, distance = max(settings.depth_offsets(context_length)), max(settings.distance_tokens(context_length))
        raise ConfigError(
            f"the held-out text{where} has {filler_tokens} tokens, fewer than the longest passkey trial of {longest} "
            f"({before} tokens before the first key at depth {max(settings.depths):g}, distance {distance} = "
            f"{max(settings.distances):g} x task.context_length={context_length}, and the "
            f"{settings.phrase_length}-token phrase); lower task.passkey.distances or task.passkey.depth_span, or "
            f"hold out more text (corpus.validation_fraction)."
        )


def passkey_max_length(task: Mapping[str, Any]) -> int:
    """The longest passkey sequence of a language-model task config (``task.passkey`` checked), 0 when it has no
    passkey evaluation: what ``max_length`` (a learned table's rows) and a memory estimate must cover."""
    if "passkey" not in task or "context_length" not in task:
        return 0
    context = int(task["context_length"])
    settings = check_passkey_settings(task["passkey"], context)
    return settings.max_length(context) if settings.enabled else 0


def fit_filler(
    settings: PasskeySettings, given: Mapping[str, Any] | None, context_length: int, filler_tokens: int, what: str
) -> tuple[PasskeySettings, str | None]:
    """The settings a held-out stream of ``filler_tokens`` can run, and a note when they differ from ``settings``:
    default distances (``given`` has none) too long for the stream are left out, as the default evaluation lengths
    are; distances the config names are refused (``check_filler``), as named evaluation lengths are."""
    if not settings.enabled or filler_tokens >= settings.max_length(context_length):
        return settings, None
    if (given or {}).get("distances") is not None:
        check_filler(settings, context_length, filler_tokens, what)
    room = filler_tokens - max(settings.depth_offsets(context_length)) - settings.phrase_length
    kept = tuple(m for m in settings.distances if round(m * context_length) <= room)
    dropped = ", ".join(f"{m:g}" for m in settings.distances if m not in kept)
    if not kept:
        note = f"passkey retrieval left out: the held-out text ({what}, {filler_tokens} tokens) holds no trial"
        return replace(settings, enabled=False), note
    note = (
        f"passkey retrieval at distances up to {max(kept):g} x the context only: the default's {dropped} need more "
        f"held-out tokens than {what} holds ({filler_tokens}); raise corpus.validation_fraction or give "
        f"task.passkey.distances."
    )
    return replace(settings, distances=kept), note
