"""A decoder-only transformer, readable top to bottom.

tokens -> embedding -> [encoding.begin] -> n x Block -> (final norm) -> output layer

Block:  x = x + Attention(norm1(x))
        x = x + MLP(norm2(x))

Attention of layer l, per head, for a query at t and a key at s <= t:
    score[t, s] = score_scale * <queries(q)_t, keys(k)_s> / sqrt(head_dim) + bias[t, s] + term[t, s]
(or, for an encoding whose positions live in the attention itself, PaTH's and stick-breaking's, the encoding's
own ``attention`` of the layer's q, k and v) where everything positional comes from the encoding
(``poslab/encodings/base.py``):
queries() and keys() are layer l's transform of the queries and keys (a
rotation for the rotary family, identity otherwise), bias is the score bias
shared by every layer, computed once per forward (ALiBi), and term is layer
l's own score term, which may read its q, k and hidden state. ``score_scale``
is 1 in training; at test time it may be one number or one per query
position, ``[T]`` (log-length scaling: max(1, log(t + 1) / log(L_train)),
Chiang & Cholak, 2022; ``poslab.lightning_modules.base.log_length_scale``).

The attention path (``model.attention``, one of the encoding's
``attention_paths``, checked when the model is built): ``sdpa`` hands all of
this to ``F.scaled_dot_product_attention`` (a fused kernel, bias and term as
an additive mask); ``explicit`` materialises the weights so analyses can read
them; ``flex`` uses FlexAttention: the causal mask as a block mask (blocks
above the diagonal are skipped) and the bias as the encoding's ``score_mod``,
computed inside the kernel (compiled; on CPU PyTorch has no FlexAttention
backward, so there it evaluates only). All three compute the same function;
asking for the weights (``return_attention``) always takes the explicit path.

``ModelConfig.compile`` asks the training module to compile the model
(``torch.compile``) when training starts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poslab.config.settings import (
    ModelSettings,
    check_dataclass,
    check_heads,
    default_option,
    with_yaml_defaults,
    yaml_defaults,
)
from poslab.encodings import ModelShape, PositionEncoding, PositionInputs, build_encoding
from poslab.encodings.base import LayerContext, QueryKeyTransform, ScoreMod, scaled
from poslab.errors import ConfigError

#: ``ModelSettings`` with each field's value in the YAML a run takes by default (``conf/model/tiny.yaml``)
ModelSettingsFromYaml = with_yaml_defaults(ModelSettings, yaml_defaults("model", default_option("model")))


@dataclass(kw_only=True)
class ModelConfig(ModelSettingsFromYaml):  # type: ignore[misc,valid-type]
    """The model group's settings (``poslab.config.settings.ModelSettings``: their types and allowed values) plus
    what the data and the encoding give. A setting left out takes its value in the YAML a run takes by default
    (``conf/model/tiny.yaml``, the one home of those values): a model built in Python (a test, a benchmark) need
    give only what differs."""

    vocab_size: int
    n_outputs: int
    encoding: dict[str, Any] = field(default_factory=lambda: {"name": default_option("encoding")})  # conf/train.yaml

    def __post_init__(self) -> None:
        check_dataclass("model", self, ModelSettings)
        check_heads(self.d_model, self.n_heads)
        if self.tie_embeddings and self.vocab_size != self.n_outputs:
            raise ConfigError(
                f"model.tie_embeddings needs as many outputs as input symbols ({self.n_outputs} != {self.vocab_size})."
            )

    @property
    def shape(self) -> ModelShape:
        return ModelShape.of(self.d_model, self.n_heads, self.n_layers, self.init_std)

    @property
    def hidden(self) -> int:
        return self.mlp_hidden or 4 * self.d_model


def make_norm(kind: str, dim: int) -> nn.Module:
    return nn.LayerNorm(dim) if kind == "layernorm" else nn.RMSNorm(dim)


class MLP(nn.Module):
    """GELU: W2 gelu(W1 x).  SwiGLU: W2 (silu(W1 x) * W3 x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.gated = cfg.mlp == "swiglu"
        self.up = nn.Linear(cfg.d_model, cfg.hidden * (2 if self.gated else 1), bias=cfg.bias)
        self.down = nn.Linear(cfg.hidden, cfg.d_model, bias=cfg.bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            return self.down(F.silu(gate) * value)
        return self.down(F.gelu(h))


#: ``(q, k) -> term``: a layer's additive score term from its transformed queries and keys (the encoding's
#: ``score_term`` with the layer's context bound), or None
ScoreTerm = Callable[[Tensor, Tensor], Tensor | None]

#: ``(q, k, v, scale) -> (output, weights) | None``: a layer's attention computed by the encoding itself (its
#: ``attention`` hook with the layer's context bound), or None: the model's own
Attend = Callable[[Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor] | None]

_compiled_flex_attention: Callable[..., Tensor] | None = None


def flex_attention(
    q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod | None, block_mask: Any, scale: float
) -> Tensor:
    """``torch.nn.attention.flex_attention`` compiled (the fused kernel; eager FlexAttention materialises the
    scores). Compiled once per process; on CPU it has no backward, which is said here rather than deep inside."""
    global _compiled_flex_attention
    if q.device.type == "cpu" and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad):
        raise ConfigError(
            "model.attention=flex cannot train on CPU: PyTorch's FlexAttention has no backward pass there; "
            "use model.attention=sdpa on CPU (flex works on CPU for evaluation only)."
        )
    if torch.compiler.is_compiling():
        from torch.nn.attention.flex_attention import flex_attention as flex

        # inside model.compile: dynamo traces flex into the model's own graph. A separately compiled flex called
        # from a compiled model crashed on an H200 (torch 2.11: a segfault, or an output view with garbage sizes)
        return flex(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)
    if _compiled_flex_attention is None:  # imported once, not on every attention call
        from torch.nn.attention.flex_attention import flex_attention as flex

        _compiled_flex_attention = torch.compile(flex)
    return _compiled_flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask, scale=scale)


@torch.compiler.disable
def causal_block_mask(length: int, device: torch.device, cache: dict[tuple[int, str], Any]) -> Any:
    """FlexAttention's causal ``BlockMask`` for ``length`` queries and keys, built once per length and device."""
    key = (length, str(device))
    if key not in cache:
        from torch.nn.attention.flex_attention import create_block_mask

        def causal(b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return q_idx >= kv_idx

        cache[key] = create_block_mask(causal, None, None, length, length, device=device)
    return cache[key]


def sdpa(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: float) -> Tensor:
    """``F.scaled_dot_product_attention`` with the additive mask (bias + causal) kept in fp32 under CPU autocast.

    Autocast casts every input of SDPA to bf16, the bias too: an ALiBi bias of -100 then moves in steps of 0.5,
    coarser than the differences it encodes. On the CPU the fused kernel takes bf16 q, k, v with an fp32 mask
    (same speed), so it is called outside autocast with exactly that. CUDA's kernels that take a mask
    (memory-efficient, cuDNN) want it in q's dtype, so there autocast's bf16 mask stays: for keys that carry
    weight (bias within a few units of the row's largest) its rounding is no coarser than that of bf16 scores;
    ``model.attention=flex`` computes the bias in fp32 inside the kernel.
    """
    device = q.device.type
    if mask is not None and device == "cpu" and torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        with torch.autocast(device, enabled=False):
            return F.scaled_dot_product_attention(
                q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=mask.float(), scale=scale
            )
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None, scale=scale)


@dataclass
class AttentionSettings:
    """What every layer's attention takes besides its input and the encoding's per-layer transform and term; the
    same for one forward pass."""

    mask: Tensor | None = None  # the encoding's score bias plus the causal mask [1, H, T, T]; None: causal only
    score_scale: float | Tensor = 1.0  # scores x this: one number, or one per query [1, 1, T, 1] (fp32)
    path: str = "explicit"  # sdpa | explicit (the weights are materialised and returned) | flex
    flex: tuple[ScoreMod | None, Any] | None = None  # (score_mod, block_mask) on the flex path


@dataclass
class LayerEncoding:
    """The encoding's part in one layer's attention: the transform of its queries and keys, and the term added to
    its scores (a hook the attention calls with the layer's q and k); None where the encoding has none."""

    transform: QueryKeyTransform | None = None
    score_term: ScoreTerm | None = None
    attention: Attend | None = None  # the encoding's own attention (data-dependent: PaTH, stick-breaking)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.head_dim = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.bias)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.bias)

    def forward(self, x: Tensor, settings: AttentionSettings, layer: LayerEncoding) -> tuple[Tensor, Tensor | None]:
        """Attention of ``x`` ``[B, T, D]``, its queries and keys transformed by ``layer.transform`` and its scores
        plus ``layer.score_term(q, k)``; the weights on the explicit path."""
        B, T, D = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4)  # 3 x [B, H, T, hd]
        if layer.transform is not None:
            q, k = layer.transform.queries(q), layer.transform.keys(k)
        term = None if layer.score_term is None else layer.score_term(q, k)
        mask = settings.mask if term is None else (with_causal(settings.mask, T, x.device) + term)
        score_scale = settings.score_scale
        if isinstance(score_scale, Tensor):  # one per query: it scales the queries, after the term read them
            q, score_scale = scaled(q, score_scale), 1.0
        scale = score_scale / math.sqrt(self.head_dim)
        weights = None
        own = None if layer.attention is None else layer.attention(q, k, v, scale)
        if own is not None:  # the encoding computes this layer's attention (its weights materialised)
            y, weights = own
            weights = weights if settings.path == "explicit" else None
        elif settings.path == "flex":
            if term is not None:  # the encoding lists flex in its attention_paths, yet gives a per-layer term
                raise ConfigError(
                    "model.attention=flex cannot add the encoding's score_term (flex should not be among its "
                    "attention_paths); use model.attention=sdpa or explicit."
                )
            # a score scale other than 1 scales the queries: the compiled kernel's own scale stays one constant
            # (a float argument would compile the kernel again for every value)
            q = q if score_scale == 1.0 else q * score_scale
            y = flex_attention(q, k, v, settings.flex[0], settings.flex[1], 1.0 / math.sqrt(self.head_dim))
        elif settings.path == "sdpa":
            y = sdpa(q, k, v, mask, scale)
        else:
            scores = (q @ k.transpose(-2, -1)) * scale
            scores = scores + (mask if mask is not None else causal_mask(T, x.device, scores.dtype))
            weights = scores.softmax(dim=-1, dtype=torch.float32)  # bf16 scores (autocast): normalise in fp32
            y = weights.to(v.dtype) @ v
        return self.out(y.transpose(1, 2).reshape(B, T, D)), weights


class Block(nn.Module):
    """Pre-norm residual block: x + Attention(norm1(x)), then + MLP(norm2(.))."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.norm1, self.attn = make_norm(cfg.norm, cfg.d_model), Attention(cfg)
        self.norm2, self.mlp = make_norm(cfg.norm, cfg.d_model), MLP(cfg)

    def forward(self, x: Tensor, settings: AttentionSettings, layer: LayerEncoding) -> tuple[Tensor, Tensor | None]:
        """The residual stream after this block, and the attention weights on the explicit path."""
        y, weights = self.attn(self.norm1(x), settings, layer)
        x = x + y
        x = x + self.mlp(self.norm2(x))
        return x, weights


def causal_mask(length: int, device: torch.device, dtype: torch.dtype = torch.float32) -> Tensor:
    """0 on and below the diagonal, -inf above: a key after the query is never seen."""
    return torch.full((length, length), float("-inf"), device=device, dtype=dtype).triu(1)


def with_causal(mask: Tensor | None, length: int, device: torch.device) -> Tensor:
    """The forward pass's mask (score bias plus causal mask), or the causal mask alone when it has none."""
    return mask if mask is not None else causal_mask(length, device)


@dataclass
class ModelOutput:
    logits: Tensor
    attention: list[Tensor] | None = None  # per layer [B, H, T, T], only when asked for
    positions: list[Tensor | None] | None = None  # per layer, the coordinates transformed by (None: none)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, max_length: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        # the encoding is checked against the attention path asked for: one it does not declare stops here
        self.encoding: PositionEncoding = build_encoding(cfg.encoding, cfg.shape, max_length, cfg.attention)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.final_norm = make_norm(cfg.norm, cfg.d_model) if cfg.final_norm else nn.Identity()
        self.head = nn.Linear(cfg.d_model, cfg.n_outputs, bias=cfg.bias and not cfg.tie_embeddings)
        if cfg.init_std is not None:
            self.apply(self._init_weights)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.weight
        self._block_masks: dict[tuple[int, str], Any] = {}  # FlexAttention's causal block masks, per length
        # whether the encoding computes attention itself (PaTH, stick-breaking): decided once, so every other
        # encoding's layers bind and call no hook that returns None
        self._own_attention = type(self.encoding).attention is not PositionEncoding.attention

    def _init_weights(self, module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)) and module not in self.encoding.modules():
            nn.init.normal_(module.weight, std=self.cfg.init_std)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def no_weight_decay_parameters(self) -> set[str]:
        """Full names of parameters the optimizer must not decay (norms, biases, and what the encoding names)."""
        names = {f"encoding.{name}" for name in self.encoding.no_weight_decay}
        names |= {name for name, p in self.named_parameters() if p.ndim < 2}
        return names

    def forward(
        self,
        tokens: Tensor,
        coordinates: dict[str, Tensor] | None = None,
        score_scale: float | Tensor = 1.0,
        return_attention: bool = False,
        return_positions: bool = False,
    ) -> ModelOutput:
        T = tokens.shape[1]
        inputs = PositionInputs.from_tokens(tokens, coordinates)
        x, state = self.encoding.begin(self.embed(tokens), inputs)

        path = "explicit" if return_attention else self.cfg.attention  # only the explicit path has the weights
        flex, mask = None, None
        if path == "flex":
            # the score_mod is made per forward: it reads the encoding's tensors where they are now (device)
            flex = (self.encoding.score_mod(), causal_block_mask(T, tokens.device, self._block_masks))
        else:
            bias = self.encoding.score_bias(T, tokens.device)
            mask = None if bias is None else (bias + causal_mask(T, tokens.device)).unsqueeze(0).to(x.dtype)

        if isinstance(score_scale, Tensor):  # one per query position [T]: broadcast over batch, heads, features
            score_scale = score_scale.to(tokens.device, torch.float32).view(1, 1, T, 1)
        settings = AttentionSettings(mask, score_scale, path, flex)
        attention: list[Tensor] = []
        positions: list[Tensor | None] = []
        transform: QueryKeyTransform | None = None
        for layer, block in enumerate(self.blocks):
            context = LayerContext(layer, x, state, inputs)
            transform = self.encoding.query_key_transform(context, transform)
            positions.append(None if transform is None else transform.positions)
            # the score term needs the layer's q and k, which only the attention computes: it gets the hook
            own = partial(self.encoding.attention, context) if self._own_attention else None
            hooks = LayerEncoding(transform, partial(self.encoding.score_term, context), own)
            x, weights = block(x, settings, hooks)
            if weights is not None:
                attention.append(weights)
        logits = self.head(self.final_norm(x))
        return ModelOutput(logits, attention if return_attention else None, positions if return_positions else None)
