"""The one interface every position encoding implements, and the registry.

A position encoding touches attention in at most three places:

1. ``begin``: it may add to the token embeddings (absolute encodings), and
   may compute per-forward state (e.g. learned positions) for the layers;
2. ``layer_positions`` and ``angles``: it may supply, per layer, real-valued
   per-token coordinates (token index, learned positions, paragraph/sentence/
   token indices), which ``angles`` turns into fp32 rotation angles of the
   queries and keys (the rotary family);
3. ``score_bias``: it may add a bias to the attention scores (ALiBi); an
   encoding with a bias also gives it as ``score_mod``, the same bias as a
   FlexAttention function of one score, for ``model.attention=flex``.

The model (``poslab/model.py``) calls these hooks and nothing else, so a new
encoding is one file here plus one YAML in ``conf/encoding/``.

Each registered encoding comes with a ``validate`` classmethod that checks its
settings against the model and task before anything is built, so a bad config
stops at start with one sentence naming the bad value and what is allowed
(the pattern of Hugging Face's RoPE registry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from poslab.errors import ConfigError


@dataclass
class ModelShape:
    """What an encoding needs to know about the model it is part of."""

    d_model: int
    n_heads: int
    n_layers: int
    head_dim: int

    @classmethod
    def of(cls, d_model: int, n_heads: int, n_layers: int) -> ModelShape:
        return cls(d_model, n_heads, n_layers, d_model // n_heads)


@dataclass
class PositionInputs:
    """Everything about a batch that an encoding may read, besides the hidden states.

    ``positions`` are real-valued token indices ``[B, T]``, or ``[1, T]`` when every sequence of the batch has
    the same ones (plain ``arange``, the default): broadcasting then computes angles and tables once per batch.
    ``coordinates`` holds optional per-token structural indices from the data
    (``document``, ``paragraph``, ``sentence``; each ``[B, T]``).
    """

    tokens: Tensor
    positions: Tensor
    coordinates: dict[str, Tensor] = field(default_factory=dict)

    @classmethod
    def from_tokens(cls, tokens: Tensor, coordinates: dict[str, Tensor] | None = None) -> PositionInputs:
        positions = torch.arange(tokens.shape[1], device=tokens.device, dtype=torch.float32)[None]
        return cls(tokens=tokens, positions=positions, coordinates=coordinates or {})


class PositionEncoding(nn.Module):
    """Base class: by default an encoding does nothing (that is NoPE)."""

    #: rotate (q, k) pairs as RoFormer does (2i, 2i+1) or as HF Llama does (i, i + d/2)
    pairing: str = "interleaved"
    #: parameter names (relative to the encoding) to exclude from weight decay
    no_weight_decay: ClassVar[tuple[str, ...]] = ()
    #: structural coordinates (``PositionInputs.coordinates`` keys) the encoding reads; data without
    #: structure (the synthetic tasks) supplies them as zeros: one paragraph, one sentence
    required_coordinates: ClassVar[tuple[str, ...]] = ()
    #: settings that, left null, are filled from the training data's statistics (``paragraph_density``)
    corpus_settings: ClassVar[tuple[str, ...]] = ()
    #: the encoding draws random numbers per training sequence (rand_axial): the training module then passes
    #: ``coordinates["row_seed"]`` ``[B, 1]``, a function of (run seed, step, global row), so a run's draws do not
    #: depend on the number of DDP processes, on a resume, or on anything else drawing from torch's RNG
    uses_row_seeds: ClassVar[bool] = False
    #: one sentence for a reader of ``poslab encodings``: what the encoding does (every encoding sets its own)
    summary: ClassVar[str] = ""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.shape = shape

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        """Raise ``ConfigError`` if ``settings`` cannot work with this model and the longest evaluation length."""

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        """Return the residual stream to start from and any state the layers need."""
        return token_embeddings, None

    def layer_positions(self, layer: int, hidden: Tensor, state: Any, inputs: PositionInputs) -> Tensor | None:
        """Per-token coordinates ``[B or 1, T]`` (or ``[B, T, axes]``) this layer rotates by; None: no rotation.

        ``hidden`` is the layer's input, the residual stream ``[B, T, D]``. Return the same tensor object for
        every layer when the coordinates do not depend on the layer: the model then rotates with one set of
        angles. Analyses read these coordinates (``Transformer.forward(..., return_positions=True)``).
        """
        return None

    def angles(self, positions: Tensor) -> Tensor:
        """Rotation angles ``[B or 1, T, n_pairs]`` in fp32 from what ``layer_positions`` returned."""
        raise NotImplementedError(f"{type(self).__name__} returns positions but does not define angles()")

    def score_bias(self, length: int, device: torch.device) -> Tensor | None:
        """Additive bias ``[H, T, T]`` on the attention scores (before the causal mask), or None."""
        return None

    def score_mod(self) -> Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor] | None:
        """``score_bias`` as a FlexAttention ``score_mod``: ``(score, b, h, q_idx, kv_idx) -> score`` plus the
        bias of head ``h``, query ``q_idx`` and key ``kv_idx`` (the causal mask is applied separately, so keys
        after the query need no care), or None: no bias. ``model.attention=flex`` needs one when the encoding
        has a ``score_bias``; it is called once per forward pass."""
        return None

    def label(self) -> str:
        """Short name used in reports, e.g. ``rope:1000000`` or ``alibi:0.5``."""
        return self.name  # type: ignore[attr-defined]


ENCODINGS: dict[str, type[PositionEncoding]] = {}


def register(name: str):
    """Class decorator adding an encoding to the registry under ``name``."""

    def add(cls: type[PositionEncoding]) -> type[PositionEncoding]:
        if name in ENCODINGS:
            raise RuntimeError(f"encoding {name!r} is registered twice")
        cls.name = name  # type: ignore[attr-defined]
        ENCODINGS[name] = cls
        return cls

    return add


def encoding_class(name: str) -> type[PositionEncoding]:
    if name not in ENCODINGS:
        allowed = ", ".join(sorted(ENCODINGS))
        raise ConfigError(f"unknown encoding {name!r}; the registered encodings are: {allowed}.")
    return ENCODINGS[name]


def accepted_settings(cls: type[PositionEncoding]) -> list[str]:
    """The keyword settings an encoding's constructor takes, its own and those it passes on to its bases."""
    import inspect

    names: list[str] = []
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and issubclass(klass, PositionEncoding):
            for name, parameter in inspect.signature(klass.__init__).parameters.items():
                if (
                    name not in ("self", "shape")
                    and parameter.kind is parameter.POSITIONAL_OR_KEYWORD
                    and name not in names
                ):
                    names.append(name)
    return names


def own_settings(settings: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(the encoding's name, its constructor's settings) from an ``encoding`` config."""
    settings = dict(settings)
    settings.pop("_target_", None)
    return str(settings.pop("name", None)), settings


def validate_encoding(
    settings: dict[str, Any],
    shape: ModelShape,
    max_length: int,
    filled_by_data: Callable[[str], bool] = lambda key: False,
) -> type[PositionEncoding]:
    """Check an ``encoding`` config (``name`` picks the class) against the model and the longest sequence,
    before anything is built: the encoding's ``validate`` (which checks the values given), then that each of
    its ``corpus_settings`` is given or ``filled_by_data`` (the task's data will fill it in: train.py checks a
    command before any data is read)."""
    name, own = own_settings(settings)
    cls = encoding_class(name)
    cls.validate(own, shape, max_length)
    for key in cls.corpus_settings:
        if own.get(key) is None and not filled_by_data(key):
            raise ConfigError(
                f"encoding {name!r} needs encoding.{key}: set encoding.{key} or let the corpus fill it in (null "
                f"takes it from a text corpus's training data, and this task has none)."
            )
    return cls


def build_encoding(settings: dict[str, Any], shape: ModelShape, max_length: int) -> PositionEncoding:
    """Validate ``settings`` (the ``encoding`` config; ``name`` picks the class) and build the encoding."""
    cls = validate_encoding(settings, shape, max_length)
    name, settings = own_settings(settings)
    try:
        return cls(shape, **settings)
    except TypeError as error:  # an unexpected key: say which ones are allowed
        allowed = accepted_settings(cls)
        raise ConfigError(
            f"encoding {name!r} got settings {sorted(settings)}, but it accepts only {allowed} ({error})."
        ) from error
