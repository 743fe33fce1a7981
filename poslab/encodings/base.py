"""The one interface every position encoding implements, and the registry.

The model (``poslab/model.py``) calls the hooks below and nothing else; it has no case for any encoding. Each
hook's default does nothing, so an encoding overrides only what it changes, and a new encoding is one file here
plus one YAML in ``conf/encoding/``.

Attention of one layer, per head, for a query at ``t`` and a key at ``s <= t``::

    score[t, s] = score_scale * <queries(q)_t, keys(k)_s> / sqrt(head_dim) + bias[t, s] + term[t, s]

(``score_scale`` is the test-time log-length scaling, 1 in training; it does not multiply ``bias`` or ``term``.)

Once per forward pass:

``begin(token_embeddings, inputs) -> (x, state)``
    The residual stream to start from (absolute encodings add to the embeddings) and any ``state`` the layers
    need (positions computed once, e.g. learned ones).
``score_bias(length, device) -> [H, T, T] | None``
    ``bias``: a function of the query and key positions only, the same in every layer, fixed or learned
    (ALiBi). ``score_mod()`` is the same bias as a FlexAttention function of one score, for the flex path.

Per layer, with a ``LayerContext`` (the layer's index, its input hidden state, ``state`` and ``inputs``):

``query_key_transform(context, previous) -> QueryKeyTransform | None``
    What the layer does to its queries and keys before their dot product: ``queries(q)`` and ``keys(k)``, which
    may differ. ``rotary.Rotation`` rotates both alike; ``Scaled`` follows another transform with per-position
    scales, one for the queries and one for the keys. None: nothing (NoPE in that layer). ``previous`` is the
    layer before's transform: return it when nothing changed, so it is built once per forward pass.
``score_term(context, q, k) -> [B or 1, H or 1, T, T] | None``
    ``term``: an additive term on this layer's scores that may read its transformed ``q`` and ``k``
    ``[B, H, T, head_dim]`` and its hidden state (``context.hidden``): content-dependent positions.
``attention(context, q, k, v, scale) -> (output, weights) | None``
    The layer's whole attention, where positions are not a term on softmax scores: PaTH (the product of
    data-dependent Householder transforms between key and query inside the dot product) and stick-breaking (no
    softmax). The model then uses the output as it is, on any path (the weights are materialised).

At test time: ``test_time_variants()`` names other ways to evaluate the trained model at longer lengths (the RoPE
scaling rules of every rotary encoding, factor ``L_test / L_train``: ``test_linear``, ``test_ntk``, ``test_yarn``,
``test_llama3``), and ``evaluated_as(variant)`` computes as one of them within a ``with`` block; the synthetic
tasks report each as ``accuracy_<variant>`` beside the plain accuracy, at the lengths past training only.

Declared once, checked at start:

``attention_paths``
    The attention paths the encoding can be computed on, among ``sdpa`` (the fused kernel; ``bias`` and
    ``term`` go in as an additive mask), ``flex`` (FlexAttention: ``bias`` as ``score_mod``; no ``term``) and
    ``explicit`` (the scores materialised; every encoding has it, because the analyses read the weights:
    ``return_attention=True`` takes it). A config asking for another path stops at start with one message
    naming the encoding, the path and the ones it has (``check_attention_path``): an encoding that needs the
    explicit path declares ``("explicit",)``. The default, ``("sdpa", "explicit")``, computes every hook; an
    encoding declares ``flex`` when its bias has a ``score_mod`` and it has no ``term`` (checked when the model
    is built, ``check_flex``, and by the flex path, which refuses a ``term``).
``validate(settings, shape, max_length)``
    Checks the encoding's settings against the model and task before anything is built, so a bad config stops
    at start with one sentence naming the bad value and what is allowed (the pattern of Hugging Face's RoPE
    registry). Plus ``no_weight_decay``, ``required_coordinates``, ``corpus_settings``, ``length_settings``,
    ``uses_row_seeds``, and ``extra_flops_per_token`` (the FLOPs of the encoding's own matrix products, for MFU).

Per-layer choices: every per-layer hook gets ``context.layer``, so an encoding may differ by layer: no
transform on every k-th layer (NoPE there), its own module per layer (``nn.ModuleList``, as
``increments_layer``), or a setting given once or once per layer (``per_layer``: ``base: [10000, 500000]``).

The encodings here, on these hooks:

- ``none``: no hook. ``sinusoid``, ``learned``: ``begin`` adds a table to the embeddings.
- the rotary family (``rotary.RotaryEncoding``: ``rope``, ``increments_*``, ``hrope_axial``, ``rand_axial``,
  ``period_axial``): ``query_key_transform`` is a ``Rotation`` by fp32 angles of per-token coordinates
  (``layer_positions``, ``angles``), the same object for every layer when the coordinates are.
- ``alibi``: ``score_bias`` and its ``score_mod``.

Built on them: the RoPE scaling rules (``rope_scaling.py``; settings of every rotary encoding: position
interpolation, NTK-aware, dynamic NTK, YaRN, Llama 3.1; and ``rope``'s p-RoPE): the encoding's ``inv_freq`` follows
the rule (recomputed per forward pass from its length for dynamic NTK and the test-time rules); YaRN's temperature
folded into both sides: ``Scaled(rotation, query_scale=m, key_scale=m)`` with ``m = 0.1 ln(s) + 1``.

How the other methods of the literature would map (each one file and one YAML; none is built here):

- xPos: ``Scaled(rotation, query_scale=zeta ** (n / gamma), key_scale=zeta ** (-n / gamma))``, the scales
  ``[1, 1, T, head_dim]`` per pair and position, so ``score`` carries ``zeta ** ((t - s) / gamma)``.
- randomized positions: a ``RotaryEncoding`` (or table) whose ``positions`` are a sorted random subset of a
  longer range in training (``uses_row_seeds`` for per-row draws), ``arange`` in evaluation.
- T5 relative buckets, KERPLE, FIRE, Sandwich: ``score_bias`` from a (learned) function of ``t - s``, computed
  once per forward and trained through the mask; ``score_mod`` where it has a closed form (KERPLE, Sandwich;
  T5's table lookup) for ``flex``. A per-layer variant (FIRE's MLP per layer) is a ``score_term`` reading
  ``context.layer`` (paths ``sdpa``, ``explicit``).
- scalable softmax (SSMax): scores times ``s * log(n)`` for a query with ``n = t + 1`` keys: a query-only
  scale, ``Scaled(inner, query_scale=s * log(t + 1), key_scale=None)``, on any inner transform (the identity,
  ``QueryKeyTransform()``, over NoPE).
- CoPE: ``score_term`` from the gates ``sigmoid(q_t . k_s)``, their reverse cumulative sum (the contextual
  position ``p[t, s]``) and ``q_t . e(p[t, s])`` with interpolated position embeddings (``sdpa``, ``explicit``).
- Forgetting Transformer's forget gate: ``score_term`` from ``log f_j = logsigmoid(w . h_j + b)`` of
  ``context.hidden``: ``term[t, s] = sum over s < j <= t of log f_j`` (a cumulative sum; ``sdpa``,
  ``explicit``).
- NoPE/RoPE layer mixes: a ``RotaryEncoding`` whose ``layer_positions`` is None on the NoPE layers, or whose
  frequencies are ``per_layer``; a mix of whole encodings is a wrapper holding them (``nn.ModuleList``) that
  hands each hook to the encoding of ``context.layer`` (its ``begin`` runs theirs, ``state`` keeps theirs,
  ``attention_paths`` is what they share).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from poslab.config.settings import BACKENDS, encoding_defaults, encoding_values, yaml_defaults
from poslab.config.targets import ADDED_ENCODING_SETTINGS
from poslab.errors import ConfigError


@dataclass
class ModelShape:
    """What an encoding needs to know about the model it is part of."""

    d_model: int
    n_heads: int
    n_layers: int
    head_dim: int
    #: the standard deviation of the token embeddings at initialisation (``model.init_std``); None: PyTorch's
    #: N(0, 1). An encoding that adds vectors to the embeddings sizes them against it (docs/absolute_scale.md).
    embedding_std: float | None = None

    @classmethod
    def of(cls, d_model: int, n_heads: int, n_layers: int, embedding_std: float | None = None) -> ModelShape:
        return cls(d_model, n_heads, n_layers, d_model // n_heads, embedding_std)

    @classmethod
    def from_config(cls, model: Any) -> ModelShape:
        """The shape of a ``model`` config section (d_model, n_heads, n_layers, init_std)."""
        return cls.of(int(model.d_model), int(model.n_heads), int(model.n_layers), model.get("init_std"))


#: ``model_setting_kinds`` of an encoding whose position table starts as the token embeddings (``table_like_tokens``)
TABLE_LIKE_TOKENS = {"init_std": "as the token embeddings: model.init_std, or PyTorch's N(0, 1) where that is null"}


def table_like_tokens(rows: int, shape: ModelShape, init_std: float | None) -> tuple[nn.Embedding, float | None]:
    """A table of position vectors added to the token embeddings, drawn N(0, init_std); a null ``init_std`` starts
    it as the tokens (N(0, model.init_std), PyTorch's N(0, 1) where that is null too), so positions and tokens
    start at one scale (docs/absolute_scale.md). Returns the table and the std a null was filled with (else None)."""
    table = nn.Embedding(rows, shape.d_model)  # PyTorch's N(0, 1)
    std = shape.embedding_std if init_std is None else init_std
    if std is not None:
        nn.init.normal_(table.weight, std=float(std))
    return table, std if init_std is None else None


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


#: ``(score, b, h, q_idx, kv_idx) -> score``: a FlexAttention score modification
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class TrainLengthRule:
    """A setting tied to the training length ``L`` by a rule that is not ``scale * L + offset``: ``value(L,
    settings)`` (``settings``: those filled so far), and ``text``, what a null means, for ``poslab encodings``."""

    value: Callable[[int, dict[str, Any]], int]
    text: str


@dataclass
class LayerContext:
    """What a per-layer hook may read: which layer, its input, and this forward pass's encoding state."""

    layer: int  # 0 for the first block
    hidden: Tensor  # the layer's input, the residual stream [B, T, D] before the block's norm
    state: Any  # what ``begin`` returned
    inputs: PositionInputs


class QueryKeyTransform:
    """One layer's map of its queries and keys ``[B, H, T, head_dim]`` before their dot product; the identity here.

    ``queries`` and ``keys`` may differ (``Scaled``); ``positions`` are the per-token coordinates the transform
    follows, for analyses (``Transformer.forward(..., return_positions=True)``), None when it follows none.
    """

    positions: Tensor | None = None

    def queries(self, q: Tensor) -> Tensor:
        return q

    def keys(self, k: Tensor) -> Tensor:
        return k


def scaled(x: Tensor, scale: Tensor | None) -> Tensor:
    """``x`` times ``scale`` (broadcast to ``x``), computed in fp32 and rounded to ``x``'s dtype once."""
    return x if scale is None else (x.float() * scale.float()).to(x.dtype)


class Scaled(QueryKeyTransform):
    """Another transform, then per-position scales: ``queries(q) = inner.queries(q) * query_scale`` and
    ``keys(k) = inner.keys(k) * key_scale``, each broadcast to ``[B, H, T, head_dim]`` (``[1, 1, T, 1]`` per
    position, ``[1, 1, T, head_dim]`` per position and feature, ``[1, H, T, 1]`` per head); None: no scale."""

    def __init__(self, inner: QueryKeyTransform, query_scale: Tensor | None, key_scale: Tensor | None) -> None:
        self.inner, self.query_scale, self.key_scale = inner, query_scale, key_scale
        self.positions = inner.positions

    def queries(self, q: Tensor) -> Tensor:
        return scaled(self.inner.queries(q), self.query_scale)

    def keys(self, k: Tensor) -> Tensor:
        return scaled(self.inner.keys(k), self.key_scale)


class PositionEncoding(nn.Module):
    """Base class: by default an encoding does nothing (that is NoPE). The module docstring describes the hooks."""

    #: the attention paths (``model.attention``) the encoding can be computed on; ``explicit`` is required
    attention_paths: ClassVar[tuple[str, ...]] = ("sdpa", "explicit")
    #: parameter names (relative to the encoding) to exclude from weight decay
    no_weight_decay: ClassVar[tuple[str, ...]] = ()
    #: structural coordinates (``PositionInputs.coordinates`` keys) the encoding reads; data without
    #: structure (the synthetic tasks) supplies them as zeros: one paragraph, one sentence
    required_coordinates: ClassVar[tuple[str, ...]] = ()
    #: settings that, left null, are filled from the training data's statistics (``paragraph_density``)
    corpus_settings: ClassVar[tuple[str, ...]] = ()
    #: settings that, left null, are the longest sequence the run uses (``max_length``: the context, or the longest
    #: evaluation length), filled in when the encoding is built: a learned table as long as the run needs
    length_settings: ClassVar[tuple[str, ...]] = ()
    #: a floor under a null length setting: ``max(floor, longest length)`` (randomized RoPE's ``max_position``: the
    #: paper's 2048 unless the run is longer)
    length_floors: ClassVar[dict[str, int]] = {}
    #: settings that, left null, are tied to the *training* length ``L`` (the context, or the longest training
    #: length of a synthetic task), as their papers tie them: ``(scale, offset)`` gives ``int(scale * L) + offset``
    #: (CoPE's ``max_pos``: ``L + 1``, the authors' ``block_size + 1``; FIRE's threshold: ``L / 2``), or a
    #: ``TrainLengthRule``, a function of ``L`` and the settings filled before it (T5's buckets, and its
    #: ``max_distance``: ``max(L - 1, buckets // 2 + 1)``). Filled in order before ``validate``
    #: (``fill_length_settings``); a model built with no training length (a test, a benchmark) takes the longest
    #: length as its training length.
    train_length_settings: ClassVar[dict[str, tuple[float, int] | TrainLengthRule]] = {}
    #: how a context extension (``poslab.running.extension``) treats the settings filled above, beside its default
    #: (a training-length setting keeps the parent's value, the weights mean what they meant; a length setting grows
    #: with the new run): ``refilled`` at the extension's own context (an attention mask sized by the training
    #: length, no weights: xPos's blockwise length), or ``kept`` from the parent although a length setting (a
    #: distribution the weights were trained on, not a table's size: randomized positions' ``max_position``)
    extension_settings: ClassVar[dict[str, str]] = {}
    #: settings with a value in the YAML that may also be null, which means something of its own (increments_layer's
    #: ``max_delta: null``: no bound); any other setting takes its YAML default's type
    optional_settings: ClassVar[tuple[str, ...]] = ()
    #: settings that, left null, are filled from the model (``settings_from_model``), and what with, for
    #: ``poslab encodings``
    model_setting_kinds: ClassVar[dict[str, str]] = {}
    #: the encoding draws random numbers per training sequence (rand_axial): the training module then passes
    #: ``coordinates["row_seed"]`` ``[B, 1]``, a function of (run seed, step, global row), so a run's draws do not
    #: depend on the number of DDP processes, on a resume, or on anything else drawing from torch's RNG
    uses_row_seeds: ClassVar[bool] = False
    #: one sentence for a reader of ``poslab encodings``: what the encoding does (every encoding sets its own)
    summary: ClassVar[str] = ""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        self.shape = shape
        self.resolved_settings: dict[str, Any] = {}  # filled by build_encoding: the settings it ran with
        self.filled_settings: tuple[str, ...] = ()  # set by build_encoding: the settings a null filled in
        self.model_filled: dict[str, Any] = {}  # set by the encoding: what its nulls took from the model

    def table_like_tokens(self, rows: int, init_std: float | None) -> nn.Embedding:
        """``table_like_tokens`` for this encoding, recording a filled ``init_std`` in ``model_filled``."""
        table, filled = table_like_tokens(rows, self.shape, init_std)
        if filled is not None:
            self.model_filled["init_std"] = filled
        return table

    def settings_from_model(self) -> dict[str, Any]:
        """Settings a null filled from the model rather than the lengths (the learned table's ``init_std``, the
        sinusoid's ``embedding_scale``: from the token embeddings' scale; ``model_filled``), so that
        ``resolved_settings`` says what ran; ``model_setting_kinds`` says what such a null means."""
        return dict(self.model_filled)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        """Raise ``ConfigError`` if ``settings`` cannot work with this model and the longest evaluation length.
        ``settings`` has every setting the encoding's YAML declares (``own_settings`` fills those left out)."""

    #: for an encoding class with no YAML of its own (a base like ``RotaryEncoding``): the file under
    #: ``conf/encoding/`` whose settings its subclasses share (``shared/rotary``)
    shared_settings: ClassVar[str | None] = None

    @classmethod
    def yaml_settings(cls) -> dict[str, Any]:
        """The values the encoding's YAML gives (``conf/encoding/<name>.yaml``, the one home of its defaults), a
        fresh copy without ``name``: what a config that leaves settings out takes. An encoding with no YAML (one a
        test registers) takes its nearest base's (a rotary one: ``conf/encoding/shared/rotary.yaml``)."""
        for klass in cls.__mro__:
            name, shared = vars(klass).get("name"), vars(klass).get("shared_settings")
            if isinstance(name, str) and name in encoding_defaults():
                values = encoding_values(name)
            elif shared is not None:
                values = yaml_defaults("encoding", shared)
            else:
                continue
            values.pop("name", None)
            return values
        return {}

    def untrained_at_test(self, train_length: int, max_length: int) -> list[str]:
        """One sentence per part of the encoding's trained parameters (or learned function) that evaluation at
        ``max_length`` reaches but training at ``train_length`` never did (a learned row, a T5 bucket, a CoPE
        position, FIRE inputs past the trained range); empty when training covers it all. Read from the current
        values, so after training it describes what was trained. train.py logs each at start and records them in
        ``results.json`` (``untrained_at_test``)."""
        return []

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Training FLOPs per token (forward and backward: 3 x the forward's 2 per multiply-add) of the encoding's
        own matrix products, on a batch of ``batch`` sequences of ``length`` tokens; 0 by default. Beyond what
        ``poslab.running.callbacks.flops_per_token`` counts for every model: its matrix weights and attention's
        ``q k^T`` and ``weights v`` over the full ``T x T``. An encoding's elementwise work (rotations, gates,
        cumulative sums) is not counted, as the model's is not; work done once per forward pass and shared by the
        batch (a bias ``[H, T, T]``) is divided among its ``batch * length`` tokens. For MFU (docs/speed.md)."""
        return 0.0

    # ---- once per forward pass ----------------------------------------------------------------------------------
    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        """Return the residual stream to start from and any state the layers need."""
        return token_embeddings, None

    def score_bias(self, length: int, device: torch.device) -> Tensor | None:
        """Additive bias ``[H, T, T]`` on every layer's attention scores (before the causal mask), or None."""
        return None

    def score_mod(self) -> ScoreMod | None:
        """``score_bias`` as a FlexAttention ``score_mod``: ``(score, b, h, q_idx, kv_idx) -> score`` plus the
        bias of head ``h``, query ``q_idx`` and key ``kv_idx`` (the causal mask is applied separately, so keys
        after the query need no care), or None: no bias. The flex path needs one when the encoding has a
        ``score_bias`` (``check_flex``); it is called once per forward pass."""
        return None

    # ---- per layer ----------------------------------------------------------------------------------------------
    def query_key_transform(
        self, context: LayerContext, previous: QueryKeyTransform | None
    ) -> QueryKeyTransform | None:
        """What layer ``context.layer`` does to its queries and keys; None: nothing. ``previous`` is the layer
        before's (None for the first): return it when this layer's is the same, so it is built once."""
        return None

    def attention(
        self, context: LayerContext, q: Tensor, k: Tensor, v: Tensor, scale: float
    ) -> tuple[Tensor, Tensor] | None:
        """Layer ``context.layer``'s whole attention, for an encoding whose positions are in the attention itself
        and no additive term (PaTH's accumulated Householder products, stick-breaking's weights): ``(output [B, H,
        T, head_dim], weights [B, H, T, T])`` from the transformed ``q``, ``k`` and the values ``v`` ``[B, H, T,
        head_dim]``, ``scale`` the score scale (``score_scale / sqrt(head_dim)``); the weights are what
        ``return_attention`` returns. None (the default): the model's own attention on its path."""
        return None

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor | None:
        """An additive term ``[B or 1, H or 1, T, T]`` on layer ``context.layer``'s scores (added after the score
        scale, before the causal mask), which may read its transformed queries and keys ``[B, H, T, head_dim]``
        and ``context.hidden``; None: none. The flex path cannot add one: do not declare ``flex`` with it."""
        return None

    # ---- test time ------------------------------------------------------------------------------------------------
    def test_time_variants(self) -> tuple[str, ...]:
        """Other ways to evaluate this trained model at longer lengths without training it again (RoPE's test-time
        scaling rules: ``test_yarn``, ...); the evaluation reports each beside the plain one. None by default."""
        return ()

    @contextmanager
    def evaluated_as(self, variant: str) -> Iterator[None]:
        """Within the block the encoding computes as ``variant`` (one of ``test_time_variants()``)."""
        raise ValueError(f"encoding {self.name!r} has no test-time variant {variant!r}")  # type: ignore[attr-defined]
        yield

    def evaluation_draws(self) -> int:
        """How many random draws the encoding's evaluation averages over (randomized positions: ``eval_draws``); 1
        for an encoding that evaluates deterministically. The evaluation runs each draw inside ``evaluation_draw``
        and reports the mean over draws, with their spread."""
        return 1

    @contextmanager
    def evaluation_draw(self, draw: int) -> Iterator[None]:
        """Within the block the encoding evaluates with its ``draw``-th random draw (0 ..
        ``evaluation_draws() - 1``); nothing to do for a deterministic encoding."""
        yield

    def label(self) -> str:
        """Short name used in reports, e.g. ``rope:1000000`` or ``alibi:0.5``."""
        return self.name  # type: ignore[attr-defined]

    def check_flex(self) -> None:
        """The flex path adds the per-forward bias through ``score_mod``: an encoding with a ``score_bias`` must
        give one, or flex would drop the bias without a word (checked on a 2-token bias when the model is built)."""
        if self.score_bias(2, torch.device("cpu")) is not None and self.score_mod() is None:
            raise ConfigError(
                f"model.attention=flex needs the score bias of encoding {self.name!r} as a score_mod, "  # type: ignore[attr-defined]
                f"which it does not define; use model.attention=sdpa."
            )


def causal_distance(length: int, device: torch.device) -> Tensor:
    """``d[t, s] = t - s`` for keys at or before the query, 0 after it (those are masked), fp32 ``[T, T]``."""
    position = torch.arange(length, device=device)
    return (position[:, None] - position[None, :]).clamp(min=0).float()


def per_layer(key: str, value: Any, n_layers: int) -> list[Any]:
    """A setting given once or once per layer (``base: 10000`` or ``base: [10000, 500000]`` for two layers), as
    one value per layer; a list of another length stops naming the setting. Its YAML default must admit both: null
    (a number's default types the setting as a number, a list's as a list)."""
    if not isinstance(value, (list, tuple)):
        return [value] * n_layers
    if len(value) != n_layers:
        raise ConfigError(
            f"{key}={list(value)!r} has {len(value)} values but the model has {n_layers} layers; give one value "
            f"(the same in every layer) or {n_layers}."
        )
    return list(value)


def check_attention_path(cls: type[PositionEncoding], path: str) -> None:
    """Stop when ``model.attention`` asks for a path the encoding does not declare (``attention_paths``)."""
    if path not in cls.attention_paths:
        allowed = ", ".join(cls.attention_paths)
        raise ConfigError(
            f"model.attention={path} is not a path encoding {cls.name!r} can be computed on; it takes "  # type: ignore[attr-defined]
            f"{allowed}: set model.attention={cls.attention_paths[0]}."
        )


ENCODINGS: dict[str, type[PositionEncoding]] = {}


def register(name: str):
    """Class decorator adding an encoding to the registry under ``name``."""

    def add(cls: type[PositionEncoding]) -> type[PositionEncoding]:
        if name in ENCODINGS:
            raise RuntimeError(f"encoding {name!r} is registered twice")
        check_declared_paths(name, cls.attention_paths)
        cls.name = name  # type: ignore[attr-defined]
        ENCODINGS[name] = cls
        return cls

    return add


def check_declared_paths(name: str, paths: tuple[str, ...]) -> None:
    """An encoding's ``attention_paths`` are paths the model has, and include ``explicit`` (the analyses')."""
    unknown = [path for path in paths if path not in BACKENDS]
    if unknown or "explicit" not in paths:
        raise RuntimeError(
            f"encoding {name!r} declares attention_paths {paths}: each must be one of {BACKENDS}, and "
            f"'explicit' must be among them (return_attention=True, which the analyses use, takes it)."
        )


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
    """(the encoding's name, its constructor's settings) from an ``encoding`` config; a setting it leaves out (a
    config built by hand, an older run's record) takes its YAML value (``PositionEncoding.yaml_settings``), or,
    for a setting added after runs were recorded without it, the value they ran with
    (``poslab.config.targets.ADDED_ENCODING_SETTINGS``), so an older checkpoint rebuilds as it was trained."""
    settings = dict(settings)
    settings.pop("_target_", None)
    name = str(settings.pop("name", None))
    added = ADDED_ENCODING_SETTINGS.get(name, {})
    return name, {**encoding_class(name).yaml_settings(), **added, **settings}


def fill_length_settings(
    cls: type[PositionEncoding], settings: dict[str, Any], max_length: int, train_length: int | None = None
) -> dict[str, Any]:
    """``settings`` with the encoding's null length settings filled in: ``length_settings`` with the longest
    sequence the run uses, ``train_length_settings`` with the training length plus their offset (``train_length``
    None: the longest length, a model built outside a run). Explicit values are kept."""
    filled = dict(settings)
    trained = max_length if train_length is None else int(train_length)
    for key in cls.length_settings:
        if filled.get(key) is None:
            filled[key] = max(max_length, cls.length_floors.get(key, 0))
    for key, rule in cls.train_length_settings.items():
        if filled.get(key) is None:
            filled[key] = (
                rule.value(trained, filled) if isinstance(rule, TrainLengthRule) else int(rule[0] * trained) + rule[1]
            )
    return filled


def length_setting_kinds(cls: type[PositionEncoding]) -> dict[str, str]:
    """Each length setting of ``cls`` and what a null fills it with, for ``poslab encodings``."""
    kinds = {key: "null = the longest length the run uses" for key in cls.length_settings}
    kinds.update({key: f"null = {text}" for key, text in cls.model_setting_kinds.items()})
    for key, floor in cls.length_floors.items():
        kinds[key] = f"null = {floor}, or the longest length the run uses where that is longer"
    for key, rule in cls.train_length_settings.items():
        if isinstance(rule, TrainLengthRule):
            kinds[key] = f"null = {rule.text}"
            continue
        scale, offset = rule
        times = "" if scale == 1 else f" x {scale:g}"
        kinds[key] = f"null = the training length{times}" + (f" {offset:+d}" if offset else "")
    return kinds


def validate_encoding(
    settings: dict[str, Any],
    shape: ModelShape,
    max_length: int,
    filled_by_data: Callable[[str], bool] = lambda key: False,
    attention: str | None = None,
    train_length: int | None = None,
) -> type[PositionEncoding]:
    """Check an ``encoding`` config (``name`` picks the class) against the model and the longest sequence,
    before anything is built: the encoding's ``validate`` (which checks the values given), that it can be
    computed on the ``attention`` path asked for (``model.attention``, when given), then that each of its
    ``corpus_settings`` is given or ``filled_by_data`` (the task's data will fill it in: train.py checks a
    command before any data is read)."""
    name, own = own_settings(settings)
    cls = encoding_class(name)
    cls.validate(fill_length_settings(cls, own, max_length, train_length), shape, max_length)
    if attention is not None:
        check_attention_path(cls, attention)
    for key in cls.corpus_settings:
        if own.get(key) is None and not filled_by_data(key):
            raise ConfigError(
                f"encoding {name!r} needs encoding.{key}: set encoding.{key} or let the corpus fill it in (null "
                f"takes it from a text corpus's training data, and this task has none)."
            )
    return cls


def build_encoding(
    settings: dict[str, Any],
    shape: ModelShape,
    max_length: int,
    attention: str | None = None,
    train_length: int | None = None,
) -> PositionEncoding:
    """Validate ``settings`` (the ``encoding`` config; ``name`` picks the class) for the ``attention`` path (when
    given) and build the encoding, its null length settings filled in (``fill_length_settings``). The settings
    it was built with are ``encoding.resolved_settings``: what ran, where the config says null."""
    cls = validate_encoding(settings, shape, max_length, attention=attention, train_length=train_length)
    name, given = own_settings(settings)
    settings = fill_length_settings(cls, given, max_length, train_length)
    try:
        encoding = cls(shape, **settings)
    except TypeError as error:  # an unexpected key: say which ones are allowed
        allowed = accepted_settings(cls)
        raise ConfigError(
            f"encoding {name!r} got settings {sorted(settings)}, but it accepts only {allowed} ({error})."
        ) from error
    if attention == "flex":
        encoding.check_flex()
    settings = {**settings, **encoding.settings_from_model()}
    encoding.resolved_settings = {"name": name, **settings}
    encoding.filled_settings = tuple(key for key in settings if given.get(key) is None and settings[key] is not None)
    return encoding
