"""Passkey retrieval for the language models: how far each encoding lets a small byte model copy.

Beside the language module because it is part of what that module does after training (it runs the model), yet
it needs no Lightning: it scores any ``nn.Module`` with the Transformer's forward signature,
``model(tokens, coordinates, **way_arguments).logits``, so a planted model can test it.

**The trial.** A random key of ``key_length`` digits (each digit uniform over 0-9, leading zeros allowed, so the
keys are uniform over all 10^k strings) is written twice into held-out text, in the same phrase
``" The pass key is 12345. "`` (``m`` = 24 bytes for 5 digits)::

    filler ... [phrase at p] filler ... [phrase at p + d]
               |<------------- d ------------->|

- ``d``, the *distance*, is measured between the starts of the two phrases (so the second occurrence's digit i is
  exactly d tokens after the first's), ``round(multiple x context_length)`` tokens, at least ``m`` (no overlap).
- ``q``, the *depth*, places the first phrase after ``p = round(q x S)`` tokens of filler, ``S = depth_span x
  context_length`` (default one context), the same ``S`` at every distance: depth means the same number of tokens
  at every distance. In a window of ``S + d + m`` tokens, q = 0 puts the first phrase at the start and q = 1 the
  second at the end; at small distances the depth moves the pair from inside the positions a model was trained on
  (q = 0) to past them (q = 1), which separates "can it copy across d" from "can it work at positions past L".
- The sequence ends with the second phrase: ``T = p + d + m``. A causal model's prediction reads nothing after it,
  and the test-time rules that follow the sequence length (dynamic NTK, the factor L / L_train of RoPE's test-time
  rules, log-length scaling) see the length the prediction is made at, give or take the phrase's tail.
- The phrases *overwrite* the filler bytes they land on (they are not inserted): every trial is a window of real
  held-out text, so the paragraph and sentence indices of that window (the hierarchical encodings read them)
  stay aligned; each phrase takes the indices of the byte it starts on, so no boundary cuts it. A phrase may cut a
  word or a multi-byte character, as a window's edge does. Windows may cross document separators, as training
  windows do.
- Filler: every cell (distance, depth) of a trial index reads the same window start and the same key, so cells
  differ only in where the pair sits (a paired design, as every evaluation length scores the same bytes). Window
  starts are uniform over the held-out stream; one holding the phrase's opening (" The pass key is ") is drawn
  again, so the phrase occurs exactly twice.

**The score.** One teacher-forced forward pass per batch; at each digit of the second occurrence, the argmax over
the whole vocabulary of the logits one position before it, given every true token before it. ``exact``: all k
digits right; ``digits``: the share of digits right. Exact match under teacher forcing *is* greedy decoding's exact
match: greedy decoding's first digit is the same argmax, and while its digits are right it follows the
teacher-forced path, so all k are right in one exactly when they are in the other. Per-digit accuracy is the
teacher-forced one (each digit given the true digits before it), which after a first error is kinder than
greedy decoding's.

**Chance.** A model that knows a digit comes but not which: 1/10 per digit and 10^-k exact (1e-5 for 5 digits),
stated in the results as ``chance_digit`` and ``chance_exact``. A byte model guessing uniformly over its 257
symbols is lower: ``chance_digit_uniform`` = 1/257.

References: Mohtashami & Jaggi's landmark-attention passkey and YaRN's ``eval/passkey.py`` (repeated filler
sentences, "The pass key is K. Remember it.", an instruction to recall; scored by greedy decoding), FoX's
``eval/niah`` (needle at a depth of real essays). A small base byte model follows no instruction, so the prompt is
the phrase itself again, and copying it is induction: this measures how far each encoding lets the model copy.
Real held-out text rather than a repeated sentence, whose period would let induction copy anything.

Only the byte tokenizer is supported: a BPE may merge digits into one token, and then "the key's digits at the
second occurrence" has no per-token meaning. The settings (``task.passkey``) and their checks are in
``poslab.config.passkey_settings``, which imports no torch, so the command line checks them before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from poslab.config.passkey_settings import PREFIX, SUFFIX, PasskeySettings, check_filler
from poslab.datamodules.codec import BYTE_VOCAB, encode_bytes
from poslab.datamodules.passkey_phrases import phrase_tokens
from poslab.errors import ConfigError
from poslab.lightning_modules.base import log_length_scale

DEFAULT_MAX_TOKENS = 2**15  # tokens per forward pass (rows x length); the caller sizes it to its memory
REDRAWS = 100  # window starts tried per trial before the filler is declared full of the phrase

#: a way of evaluating the same weights: given the sequence length, a context manager around the forward pass that
#: yields the forward's extra keyword arguments (``{"score_scale": s}``) or None (``evaluation_ways`` makes them)
Way = Callable[[int], AbstractContextManager[Mapping[str, Any] | None]]
#: ``(window starts [n], length) -> {"paragraph": [n, length], "sentence": ...}``: the coordinates of the windows of
#: the filler stream, e.g. ``functools.partial(poslab.datamodules.language.windows, split)``
CoordinateSource = Callable[[np.ndarray, int], Mapping[str, Tensor]]


# ---- trials ------------------------------------------------------------------------------------------------------
@dataclass
class PasskeyTrials:
    """The trials of one evaluation: per trial index a window start in ``filler`` and a key, shared by every cell;
    per cell (distance ``i``, depth ``j``) the first phrase at ``offsets[j]``, the second ``distances[i]`` later."""

    filler: np.ndarray | Tensor  # the held-out token stream (a memory map is fine: windows are cut, not copied)
    settings: PasskeySettings
    context_length: int
    starts: np.ndarray  # [trials] window starts in filler
    keys: np.ndarray  # [trials, key_length] digits 0-9
    distances: list[int] = field(init=False)
    offsets: list[int] = field(init=False)

    def __post_init__(self) -> None:
        self.distances = self.settings.distance_tokens(self.context_length)
        self.offsets = self.settings.depth_offsets(self.context_length)

    def cells(self) -> Iterator[tuple[int, int]]:
        return ((i, j) for i in range(len(self.distances)) for j in range(len(self.offsets)))

    def length(self, i: int, j: int) -> int:
        """``T = p + d + m``: the sequence ends with the second phrase."""
        return self.offsets[j] + self.distances[i] + self.settings.phrase_length

    def digit_positions(self, i: int, j: int) -> np.ndarray:
        """Where the second occurrence's digits are: ``p + d + len(PREFIX) + 0 .. k-1``."""
        return self.offsets[j] + self.distances[i] + len(PREFIX) + np.arange(self.settings.key_length)

    def tokens(self, i: int, j: int, rows: slice | np.ndarray = slice(None)) -> Tensor:
        """``[n, T]`` int64: each row's filler window with the phrase written at ``p`` and at ``p + d``."""
        length, p, d, m = self.length(i, j), self.offsets[j], self.distances[i], self.settings.phrase_length
        starts = self.starts[rows]
        windows = np.stack([np.asarray(self.filler[s : s + length], dtype=np.int64) for s in starts.tolist()])
        phrases = phrase_tokens(self.keys[rows])
        windows[:, p : p + m] = phrases
        windows[:, p + d : p + d + m] = phrases
        return torch.from_numpy(windows)


def holds_prefix(window: np.ndarray) -> bool:
    """Whether a filler window holds the phrase's opening (the separator, 256, is no byte of it)."""
    return encode_bytes(PREFIX).astype(np.uint8).tobytes() in np.minimum(window, 255).astype(np.uint8).tobytes()


def build_trials(filler: np.ndarray | Tensor, settings: PasskeySettings, context_length: int) -> PasskeyTrials:
    """Draw the trials from ``settings.seed``: the same settings and stream give the same trials, token for token.
    ``filler`` is a 1-D token stream (a validation split's tokens); ``check_filler`` refuses one too short."""
    if isinstance(filler, Tensor):
        filler = filler.cpu().numpy()
    check_filler(settings, context_length, len(filler))
    rng = np.random.default_rng(settings.seed)
    longest = settings.max_length(context_length)  # every cell's window is a prefix of this one
    starts = np.empty(settings.trials, dtype=np.int64)
    for trial in range(settings.trials):
        for _ in range(REDRAWS):
            start = int(rng.integers(0, len(filler) - longest + 1))
            if not holds_prefix(np.asarray(filler[start : start + longest])):
                break
        else:
            raise ConfigError(
                f"the held-out text holds the passkey phrase's opening {PREFIX!r} in every one of {REDRAWS} windows "
                f"of {longest} tokens drawn; passkey retrieval needs filler without it."
            )
        starts[trial] = start
    keys = rng.integers(0, 10, size=(settings.trials, settings.key_length))
    return PasskeyTrials(filler, settings, context_length, starts, keys)


# ---- ways of evaluating the same weights -------------------------------------------------------------------------
def plain_way(length: int) -> AbstractContextManager[Mapping[str, Any] | None]:
    return nullcontext(None)


def log_scaled_way(train_length: int) -> Way:
    """Each query's scores times max(1, log(t + 1) / log(L_train)) (Chiang & Cholak, 2022; ``log_length_scale``),
    as the synthetic tasks' ``accuracy_log_scaled``."""
    return lambda length: nullcontext({"score_scale": log_length_scale(length, train_length)})


def variant_way(encoding: Any, variant: str) -> Way:
    """The encoding computes as ``variant`` (``encoding.evaluated_as``; RoPE's rules take the factor
    T / L_train from the sequence length themselves)."""

    @contextmanager
    def way(length: int) -> Iterator[None]:
        with encoding.evaluated_as(variant):
            yield None

    return way


def evaluation_ways(model: nn.Module, train_length: int) -> dict[str, Way]:
    """The ways the synthetic tasks report besides the plain model: ``log_scaled`` and each of the encoding's
    test-time variants (``test_linear``, ``test_ntk``, ...), by name."""
    ways: dict[str, Way] = {"log_scaled": log_scaled_way(train_length)}
    encoding = getattr(model, "encoding", None)
    for variant in encoding.test_time_variants() if encoding is not None else ():
        ways[variant] = variant_way(encoding, variant)
    return ways


# ---- scoring -----------------------------------------------------------------------------------------------------
def cell_hits(
    model: nn.Module, tokens: Tensor, positions: np.ndarray, coordinates: Mapping[str, Tensor] | None, extra: Any
) -> Tensor:
    """``[n, k]`` bool: the argmax of the logits one position before each digit equals the digit (teacher forced)."""
    logits = model(tokens, coordinates, **dict(extra or {})).logits
    before = torch.as_tensor(positions - 1, device=tokens.device)
    predicted = logits[:, before].argmax(-1)  # [n, k] over the whole vocabulary: greedy
    return predicted == tokens[:, torch.as_tensor(positions, device=tokens.device)]


def trial_coordinates(
    model: nn.Module, trials: PasskeyTrials, i: int, j: int, rows: np.ndarray, source: CoordinateSource | None
) -> dict[str, Tensor] | None:
    """The coordinates an encoding reads (``required_coordinates``): the windows' own from ``source``, or zeros (one
    paragraph, one sentence, as the synthetic tasks give); each phrase takes those of the byte it starts on."""
    needed = getattr(getattr(model, "encoding", None), "required_coordinates", ())
    if not needed:
        return None
    length, p, d, m = trials.length(i, j), trials.offsets[j], trials.distances[i], trials.settings.phrase_length
    cut = source(trials.starts[rows], length) if source is not None else {}
    coordinates = {}
    for name in needed:
        values = cut[name].clone() if name in cut else torch.zeros(len(rows), length, dtype=torch.int64)
        for start in (p, p + d):  # non-decreasing stays non-decreasing: the text after the phrase resumes
            values[:, start : start + m] = values[:, start : start + 1]
        coordinates[name] = values
    return coordinates


def model_device(model: nn.Module) -> torch.device:
    tensor = next(iter(model.parameters()), None)
    tensor = tensor if tensor is not None else next(iter(model.buffers()), torch.empty(0))
    return tensor.device


def evaluation_draws(model: nn.Module) -> list[AbstractContextManager[Any]]:
    """One context per random draw the encoding evaluates under (randomized positions); one plain one otherwise."""
    encoding = getattr(model, "encoding", None)
    if encoding is None or not hasattr(encoding, "evaluation_draws"):
        return [nullcontext()]
    return [encoding.evaluation_draw(draw) for draw in range(encoding.evaluation_draws())]


def batches(trials: PasskeyTrials, max_tokens: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """(distance index, depth index, trial rows) per forward pass: ``max(1, max_tokens // T)`` rows of one cell."""
    for i, j in trials.cells():
        per_pass = max(1, max_tokens // trials.length(i, j))
        for first in range(0, trials.settings.trials, per_pass):
            yield i, j, np.arange(first, min(first + per_pass, trials.settings.trials))


@torch.no_grad()
def score_passkey(
    model: nn.Module,
    trials: PasskeyTrials,
    ways: Mapping[str, Way] | None = None,
    coordinates: CoordinateSource | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> dict[str, Any]:
    """Score ``model`` on every cell, plain and under each of ``ways`` (``evaluation_ways``), each batch of trials
    cut once and passed once per way; the plain figures at the top of the result, each other way's under
    ``result["ways"][name]`` (``passkey_result``). The model is scored in eval mode and left in its own."""
    all_ways: dict[str, Way] = {"plain": plain_way, **dict(ways or {})}
    shape = (len(trials.distances), len(trials.offsets))
    exact = {name: np.zeros(shape, dtype=np.int64) for name in all_ways}
    digits = {name: np.zeros(shape, dtype=np.int64) for name in all_ways}
    device, was_training = model_device(model), model.training
    model.eval()
    try:
        draws = evaluation_draws(model)
        for draw in draws:  # a randomized encoding: every trial under each of its draws, counted once per draw
            with draw:
                for i, j, rows in batches(trials, max_tokens):
                    tokens = trials.tokens(i, j, rows).to(device)
                    coords = trial_coordinates(model, trials, i, j, rows, coordinates)
                    coords = {name: values.to(device) for name, values in coords.items()} if coords else None
                    for name, way in all_ways.items():
                        with way(trials.length(i, j)) as extra:
                            hits = cell_hits(model, tokens, trials.digit_positions(i, j), coords, extra)
                        exact[name][i, j] += int(hits.all(-1).sum())
                        digits[name][i, j] += int(hits.sum())
    finally:
        model.train(was_training)
    return passkey_result(trials, exact, digits, len(draws))


def passkey_result(
    trials: PasskeyTrials, exact: Mapping[str, np.ndarray], digits: Mapping[str, np.ndarray], draws: int
) -> dict[str, Any]:
    """The plain dict results.json holds: matrices ``[distance][depth]`` (exact and per-digit accuracy, each trial
    counted once per draw), their axes, the chance levels and the settings."""
    settings, k = trials.settings, trials.settings.key_length
    scored = settings.trials * draws

    def figures(name: str) -> dict[str, list[list[float]]]:
        return {"exact": (exact[name] / scored).tolist(), "digits": (digits[name] / (scored * k)).tolist()}

    return {
        "context_length": trials.context_length,
        "distances": list(trials.distances),  # tokens between the starts of the two phrases
        "distance_multiples": list(settings.distances),  # the same, as multiples of the context
        "depths": list(settings.depths),
        "depth_offsets": list(trials.offsets),  # tokens of filler before the first phrase, per depth
        "sequence_lengths": [
            [trials.length(i, j) for j in range(len(trials.offsets))] for i in range(len(trials.distances))
        ],
        "trials": settings.trials,
        "draws": draws,
        "key_length": k,
        "phrase": PREFIX + "{key}" + SUFFIX,
        "chance_digit": 0.1,
        "chance_exact": 10.0**-k,
        "chance_digit_uniform": 1.0 / BYTE_VOCAB,
        "chance_note": (
            f"chance: 1/10 per digit and 1e-{k} exact for a model that knows a digit comes but not which; a byte "
            f"model guessing uniformly over its {BYTE_VOCAB} symbols: 1/{BYTE_VOCAB} per digit"
        ),
        "filler_tokens": len(trials.filler),
        "settings": settings.as_dict(),
        **figures("plain"),
        "ways": {name: figures(name) for name in exact if name != "plain"},
    }


def evaluate_passkey(
    model: nn.Module,
    filler: np.ndarray | Tensor,
    settings: PasskeySettings,
    context_length: int,
    ways: Mapping[str, Way] | None = None,
    coordinates: CoordinateSource | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> dict[str, Any]:
    """``build_trials`` then ``score_passkey``: the whole evaluation, as results.json's ``passkey``."""
    return score_passkey(model, build_trials(filler, settings, context_length), ways, coordinates, max_tokens)


def way_figures(result: Mapping[str, Any], way: str | None = None) -> dict[str, Any]:
    """``result`` with the ``exact`` and ``digits`` of ``way`` at the top (None or "plain": as it is)."""
    if way in (None, "plain"):
        return dict(result)
    if way not in result.get("ways", {}):
        raise KeyError(f"the passkey result has no way {way!r}; it has plain, {', '.join(result.get('ways', {}))}")
    return {**result, **result["ways"][way]}
