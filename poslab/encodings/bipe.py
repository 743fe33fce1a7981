"""BiPE, bilevel positional encoding (He et al., 2024, "Two Stones Hit One Bird: Bilevel Positional Encoding for
Better Length Extrapolation", ICML 2024): a token's position is two numbers, the segment it is in and its index
inside that segment. The intra-segment index goes in as an absolute position embedding added to the token
embedding; the segment index as a relative encoding between segments, RoPE or ALiBi (``inter``)::

    x_t = token_embedding_t + E[intra_t]                     intra_t: tokens since the segment's first (0 there)
    inter: rope     q, k rotated by the segment index (RoPE's frequencies at seg_t, seg_s)
    inter: alibi    term[t, s] = -(96 * slope_h) * (seg_t - seg_s)

As the authors' code (github.com/zhenyuhe00/BiPE, ``my_modeling_llama_bipe_rope.py`` and
``my_modeling_llama_bipe_alibi.py``: ``LlamaModel.get_bilevel_ids``, ``get_ape_embeddings``; ``LlamaAttention``
rotating by ``position_ids`` = the segment index, or adding ``_init_alibi_mul96``'s bias, ALiBi's slopes times 96):
a learned table ``nn.Embedding(train_scale, d_model)`` drawn N(0, 0.02), the intra index clamped to its last row;
segments end at the tokens "." and newline, the separator belonging to the segment it ends. Here the segments are
poslab's ``sentence`` coordinate (sentences end at ``.!?`` and every paragraph starts one: the authors' split), or
its ``paragraph`` coordinate (``segment``). The authors add ALiBi as ``+ slope * seg_s`` per key, the same after
the softmax as ``-slope * (seg_t - seg_s)`` (a constant per query row); poslab writes the distance form.

Causal: ``seg`` at token t is data-given and causal (poslab.datamodules.segmentation); ``intra_t = t - start_t``
with ``start_t`` the last segment change at or before t (a running max), read from tokens ``0..t`` only. Counted
within the window, as the authors' code counts within its input: the window's first token is index 0 of segment 0.

Deviations (named in conf/encoding/bipe.yaml): the authors' table has ``padding_idx = -1`` (its last row zero and
never trained, where clamped indices land); here every row trains. ``intra: sinusoid`` (fixed sinusoids of the
intra index) is poslab's option, not the authors' code.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from poslab.config.settings import check_choice, check_whole
from poslab.encodings.alibi import paper_slopes
from poslab.encodings.base import (
    TABLE_LIKE_TOKENS,
    LayerContext,
    ModelShape,
    PositionInputs,
    QueryKeyTransform,
    register,
)
from poslab.encodings.hrope import window_coordinate
from poslab.encodings.rotary import RotaryEncoding
from poslab.encodings.sinusoid import paper_embedding_scale, sinusoids
from poslab.errors import ConfigError

SEGMENTS = ("sentence", "paragraph")
INTERS = ("rope", "alibi")
INTRAS = ("learned", "sinusoid")


def bilevel_positions(segment: Tensor) -> tuple[Tensor, Tensor]:
    """``(intra, segment)`` ``[B, T]`` (int64) from a non-decreasing segment coordinate ``[B, T]``: the index since
    the segment's first token, and the segment index counted from the window's first token."""
    segment = segment - segment[:, :1]
    index = torch.arange(segment.shape[1], device=segment.device).expand_as(segment)
    starts = torch.ones_like(segment, dtype=torch.bool)
    starts[:, 1:] = segment[:, 1:] != segment[:, :-1]
    start = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values  # the last start so far
    return (index - start).long(), segment.long()


@register("bipe")
class BipeEncoding(RotaryEncoding):
    """BiPE (the module docstring): intra-segment absolute embedding, inter-segment RoPE or ALiBi."""

    summary = (
        "BiPE: a learned embedding of the token's index inside its sentence (or paragraph) plus RoPE or ALiBi on "
        "the segment index between segments."
    )
    attention_paths = ("sdpa", "explicit")  # ALiBi on per-batch segments is a term, not a function of positions
    required_coordinates = ("paragraph", "sentence")
    no_weight_decay = ("table.weight",)
    train_length_settings = {"max_intra": (1.0, 0)}  # null: the training length, the authors' train_scale
    model_setting_kinds: ClassVar[dict[str, str]] = TABLE_LIKE_TOKENS

    def __init__(
        self,
        shape: ModelShape,
        segment: str,
        inter: str,
        intra: str,
        max_intra: int,
        init_std: float | None,
        alibi_scale: float,
        **rotary: Any,
    ) -> None:
        super().__init__(shape, **rotary)
        self.segment, self.inter, self.intra = segment, inter, intra
        self.max_intra, self.alibi_scale = int(max_intra), float(alibi_scale)
        # null: as the token embeddings (the authors' one initializer_range for both; PyTorch's N(0, 1) in a model
        # that keeps PyTorch's initialisation), so the table starts at the tokens' scale (docs/absolute_scale.md)
        if intra == "learned":
            self.table = self.table_like_tokens(self.max_intra, init_std)
        # intra: sinusoid multiplies the tokens as the sinusoid encoding does (sqrt(d_model), capped at unit scale)
        self.token_scale = paper_embedding_scale(shape.d_model, shape.embedding_std) if intra == "sinusoid" else 1.0
        slopes = [self.alibi_scale * s for s in paper_slopes(shape.n_heads)]
        self.register_buffer("slopes", torch.tensor(slopes, dtype=torch.float32), persistent=False)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        check_choice("encoding.segment", settings["segment"], SEGMENTS)
        check_choice("encoding.inter", settings["inter"], INTERS)
        check_choice("encoding.intra", settings["intra"], INTRAS)
        if settings.get("max_intra") is not None:
            check_whole("encoding.max_intra", settings["max_intra"], 1, "rows of the intra-segment table")
        if not float(settings["alibi_scale"]) > 0:
            raise ConfigError(f"encoding.alibi_scale={settings['alibi_scale']!r} must be > 0 (the authors' 96).")
        rules = [f"encoding.{key}={settings[key]}" for key in ("scaling", "test_scaling") if settings[key] != "none"]
        if settings["inter"] == "alibi" and rules:
            raise ConfigError(
                f"{' and '.join(rules)} rescale RoPE's frequencies, but encoding.inter=alibi rotates nothing: set "
                f"encoding.inter=rope, or leave scaling and test_scaling at none."
            )

    def rotates(self) -> bool:
        return self.inter == "rope"

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        """Add the intra-segment embedding; the state is the segment index ``[B, T]`` (fp32)."""
        intra, segment = bilevel_positions(window_coordinate(inputs, self.segment, self.name))
        if self.intra == "learned":
            added = self.table(intra.clamp(max=self.max_intra - 1))  # the authors clamp to train_scale - 1
        else:
            added = sinusoids(intra, self.shape.d_model)
        if self.token_scale != 1.0:  # intra: sinusoid in a model initialised below unit scale only
            token_embeddings = token_embeddings * self.token_scale
        return token_embeddings + added.to(token_embeddings.dtype), segment.float()

    def query_key_transform(
        self, context: LayerContext, previous: QueryKeyTransform | None
    ) -> QueryKeyTransform | None:
        return super().query_key_transform(context, previous) if self.inter == "rope" else None

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor | None:
        if self.inter != "alibi":
            return None
        segment = context.state  # [B, T]
        distance = (segment[:, :, None] - segment[:, None, :]).clamp(min=0)  # keys after the query: masked
        return -self.slopes.to(q.device)[None, :, None, None] * distance[:, None]

    def untrained_at_test(self, train_length: int, max_length: int) -> list[str]:
        if self.intra != "learned" or min(max_length, self.max_intra) <= train_length:
            return []
        return [
            f"BiPE intra-segment rows {train_length}..{min(max_length, self.max_intra) - 1} can be read in "
            f"evaluation (a segment longer than the training length) but never in training: they keep their "
            f"initial values."
        ]

    def label(self) -> str:
        return f"bipe:{self.inter}:{self.segment}"
