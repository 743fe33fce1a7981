"""PaTH (Yang et al., 2025, "PaTH Attention: Position Encoding via Accumulating Householder Transformations"): the
position between a key and a query is the product of data-dependent Householder-like transforms of the tokens in
between, inside the dot product. No other position encoding.

Per layer and head, from the layer's input ``x_t``::

    w_t    = l2norm(silu(conv3(W_up W_down x_t)))       a unit vector per token (low-rank projection, rank 32,
                                                        then a causal depthwise convolution of width 3)
    beta_t = 2 sigmoid(W_beta x_t + b)                 in (0, 2): an eigenvalue 1 - beta in (-1, 1)
    H_t    = I - beta_t w_t w_t^T
    score[i, j] = q_i^T H_i H_{i-1} ... H_{j+1} k_j    (j < i; the diagonal is q_i^T k_i)

then softmax(score * scale) @ v. PaTH-FoX (``path_fox``) adds FoX's forget gate, ``sum_{j < l <= i} log f_l``,
to the scores *before* the scale, as fla's kernel and its naive reference do.

**How it is computed here** (``path_scores``): the paper's UT-transform form in blocks of 64, as fla's
``naive_path_attn``, with the block's triangular inverse as one solve (fla's naive reference builds it row by
row), padded at the end with identity transforms so any length is exact: ``O(T^2 D)`` in all, a loop over pairs
of blocks only. fla's ``naive_path_attn`` is the reference (``tests/encodings/test_path.py``, at T = 100, H = 3,
D = 24, with and without the gate, forward and gradient), and the paper's product of transforms written out.

**The layer** as fla's ``PaTHAttention`` (flash-linear-attention ``fla/layers/path_attn.py``): ``w`` from a rank-32
projection, ``ShortConvolution(kernel 3, silu)`` and an L2 norm per head; ``beta`` from a linear map with a bias,
``2 sigmoid``; the forget gate (``path_fox``) from a linear map with a bias, ``logsigmoid``. Those read the attention
layer's input, the block's normed stream; ``context.hidden`` is the stream before the block's norm, so the maps read
its RMS norm without a gain (as ``forget_gate`` does: the same functions, the gain folded into the weights).
Initialisation: PyTorch's for the maps (fla's ``ParameterizedLinear`` draws N(0, initializer_range); named here
as a deviation), FoX's for the gates (``forget_gate.forget_gates``). fla's optional q/k RMS norm
(``use_qk_norm``) is off, its default.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poslab.config.settings import check_number, check_whole
from poslab.encodings.base import LayerContext, ModelShape, PositionEncoding, register
from poslab.encodings.forget_gate import forget_gates, log_forget
from poslab.errors import ConfigError

W_RANK = 32  # fla's low-rank w projection (multi-head attention)
CONV_WIDTH = 3  # fla's ShortConvolution for w


CHUNK = 64  # the UT transform's block (fla's default); any length is padded up to a multiple of it


def path_scores(q: Tensor, k: Tensor, w: Tensor, beta: Tensor, chunk: int = CHUNK) -> Tensor:
    """``score[b, h, i, j] = q_i^T H_i ... H_{j+1} k_j`` for ``j <= i``, ``-inf`` above the diagonal (fp32, or fp64
    for fp64 inputs). ``q``, ``k``, ``w`` ``[B, H, T, D]`` (``w`` unit vectors), ``beta`` ``[B, H, T]``.

    The UT-transform form of the paper and fla (``naive_path_attn``), in blocks of ``chunk`` tokens: inside a block,
    the product of its transforms is ``I - W^T T (beta W)`` with ``T = (I + strictly_lower(beta_s w_s . w_j))^-1``
    (one triangular solve); a query then crosses each earlier block by its ``D x D`` transform. The length is padded
    at the end with identity transforms (``beta = 0``) up to a multiple of ``chunk`` and cut back: exact for any
    length, and what a token reads comes only from tokens before it."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    length = q.shape[-2]
    pad = -length % chunk
    q, k, w = (F.pad(x.to(dtype), (0, 0, 0, pad)) for x in (q, k, w))
    beta = F.pad(beta.to(dtype), (0, pad))
    blocks = (length + pad) // chunk
    q, k, w = (x.unflatten(-2, (blocks, chunk)) for x in (q, k, w))  # [B, H, N, C, D]
    w_beta = w * beta.unflatten(-1, (blocks, chunk))[..., None]
    eye = torch.eye(chunk, dtype=dtype, device=q.device)
    strictly_lower = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril(-1)
    inverse = torch.linalg.solve_triangular(eye + (w_beta @ w.transpose(-1, -2)) * strictly_lower, eye, upper=False)
    carried_k = inverse @ ((w_beta @ k.transpose(-1, -2)) * strictly_lower)  # [s, j]: key j carried past s > j
    q_w = (q @ w.transpose(-1, -2)).tril()  # [i, s], s <= i
    t_w_beta = inverse @ w_beta
    local = (q @ k.transpose(-1, -2)).tril() - q_w @ carried_k  # scores inside a block
    q_start = q - q_w @ t_w_beta  # each query carried back to its block's start
    k_end = k - carried_k.transpose(-1, -2) @ w  # each key carried forward to its block's end
    block_transform = w.transpose(-1, -2) @ t_w_beta  # a whole block: I - this, [B, H, N, D, D]
    rows = []
    for i in range(blocks):
        row = [None] * blocks
        row[i] = local[..., i, :, :]
        running = q_start[..., i, :, :]
        for j in range(i - 1, -1, -1):
            row[j] = running @ k_end[..., j, :, :].transpose(-1, -2)
            running = running - running @ block_transform[..., j, :, :]
        zeros = torch.zeros_like(local[..., i, :, :])
        rows.append(torch.cat([r if r is not None else zeros for r in row], dim=-1))
    scores = torch.cat(rows, dim=-2)[..., :length, :length]
    causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()
    return scores.masked_fill(~causal, float("-inf"))


def path_flops(length: int, head_dim: int, chunk: int = CHUNK) -> float:
    """Forward FLOPs of ``path_scores`` for one sequence and head, beyond its ``q . k`` products (the scores inside
    a block, ``running @ k_end``: the model's ``q k^T`` counts those): per block of ``C = chunk`` (the length padded
    to ``T'``, ``N = T' / C`` blocks), six ``[C, C] x [C, D]`` products (``w_beta w^T``, ``w_beta k^T``, ``q w^T``,
    ``T w_beta``, ``q_w T w_beta``, ``carried_k^T w``), the triangular solve (``C^3``), two ``[C, C] x [C, C]``
    (``T (w_beta k^T)``, ``q_w carried_k``) and ``w^T (T w_beta)`` (``2 C D^2``); and for each pair of blocks the
    query's carry across the earlier one (``running @ block_transform``, ``2 C D^2``)."""
    blocks = -(-length // chunk)
    padded = blocks * chunk
    per_block = 12.0 * chunk * head_dim + 5.0 * chunk * chunk + 2.0 * head_dim * head_dim
    return padded * per_block + blocks * (blocks - 1) * chunk * head_dim * head_dim


def path_attention(
    q: Tensor, k: Tensor, v: Tensor, w: Tensor, beta: Tensor, g: Tensor | None = None, scale: float | None = None
) -> Tensor:
    """PaTH attention in fla's layout: ``q, k, v, w`` ``[B, T, H, D]``, ``beta`` and ``g`` ``[B, T, H]`` (``g`` the
    log forget gate of each step, or None), ``scale`` default ``1 / sqrt(D)``; returns ``[B, T, H, D]`` in ``q``'s
    dtype. The gate's cumulative sum is added to the scores before the scale, as fla's."""
    output, _ = path_weights_and_output(*(x.transpose(1, 2) for x in (q, k, v, w)), beta.transpose(1, 2),
                                        None if g is None else g.transpose(1, 2), scale)  # fmt: skip
    return output.transpose(1, 2)


def path_weights_and_output(
    q: Tensor, k: Tensor, v: Tensor, w: Tensor, beta: Tensor, g: Tensor | None, scale: float | None
) -> tuple[Tensor, Tensor]:
    """``(output [B, H, T, D], weights [B, H, T, T])`` for ``[B, H, T, D]`` inputs and ``[B, H, T]`` beta and g."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = path_scores(q, k, w, beta)
    if g is not None:
        total = g.to(scores.dtype).cumsum(-1)
        scores = scores + (total[..., :, None] - total[..., None, :])
    weights = (scores * scale).softmax(dim=-1)
    return (weights.to(v.dtype) @ v).to(q.dtype), weights


class HouseholderVectors(nn.Module):
    """One layer's ``w`` and ``beta`` from its input (the module docstring)."""

    def __init__(self, shape: ModelShape) -> None:
        super().__init__()
        inner = shape.n_heads * shape.head_dim
        self.heads = shape.n_heads
        self.w_down = nn.Linear(shape.d_model, W_RANK, bias=False)
        self.w_up = nn.Linear(W_RANK, inner, bias=False)
        self.conv = nn.Conv1d(inner, inner, CONV_WIDTH, groups=inner, padding=CONV_WIDTH - 1, bias=False)
        self.beta = nn.Linear(shape.d_model, shape.n_heads)

    def forward(self, hidden: Tensor) -> tuple[Tensor, Tensor]:
        """``(w [B, H, T, head_dim], beta [B, H, T])``; the convolution is causal (its left padding only)."""
        B, T, _ = hidden.shape
        x = F.rms_norm(hidden, (hidden.shape[-1],))
        w = self.w_up(self.w_down(x)).transpose(1, 2)  # [B, inner, T]
        w = F.silu(self.conv(w)[..., :T]).transpose(1, 2).reshape(B, T, self.heads, -1).transpose(1, 2)
        beta = 2 * torch.sigmoid(self.beta(x)).transpose(1, 2)
        return F.normalize(w.float(), dim=-1, eps=1e-6), beta.float()


@register("path")
class PathEncoding(PositionEncoding):
    """PaTH (the module docstring): each layer its own Householder vectors; ``forget_gate`` adds FoX's gate."""

    summary = (
        "PaTH: key and query meet through the product of data-dependent Householder transforms I - beta w w^T of "
        "the tokens between them (no other position encoding)."
    )
    attention_paths = ("sdpa", "explicit")  # its own attention on either (the weights materialised)

    def __init__(self, shape: ModelShape, forget_gate: bool, gate_bias_init: float) -> None:
        super().__init__(shape)
        self.vectors = nn.ModuleList(HouseholderVectors(shape) for _ in range(shape.n_layers))
        self.forget_gate = bool(forget_gate)
        self.gates = forget_gates(shape, gate_bias_init) if self.forget_gate else None

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        if not isinstance(settings["forget_gate"], bool):
            raise ConfigError(
                f"encoding.forget_gate={settings['forget_gate']!r} must be true (PaTH-FoX) or false (PaTH)."
            )
        check_number("encoding.gate_bias_init", settings["gate_bias_init"], meaning="the forget gates' start")
        check_whole("model.head_dim", shape.head_dim, 1, "PaTH's w has one vector per head")

    def attention(self, context: LayerContext, q: Tensor, k: Tensor, v: Tensor, scale: float) -> tuple[Tensor, Tensor]:
        with torch.autocast(q.device.type, enabled=False):  # products of transforms in fp32
            w, beta = self.vectors[context.layer](context.hidden.float())
            g = None if self.gates is None else log_forget(self.gates[context.layer], context.hidden)
            return path_weights_and_output(q.float(), k.float(), v, w, beta, g, scale)

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Per layer and token: the Householder vectors (``w``'s rank-32 projection down and up, its convolution of
        width 3, ``beta``'s ``d_model -> H``), the forget gate's ``d_model -> H`` (PaTH-FoX), and ``path_flops``
        per head spread over the sequence's tokens; times 3 for training. The softmax's ``weights v`` and the
        ``q . k`` products are the model's attention count."""
        shape = self.shape
        vectors = 2.0 * shape.d_model * (2 * W_RANK + CONV_WIDTH + shape.n_heads)
        gate = 2.0 * shape.d_model * shape.n_heads if self.forget_gate else 0.0
        scores = shape.n_heads * path_flops(length, shape.head_dim) / length
        return 3.0 * shape.n_layers * (vectors + gate + scores)

    def label(self) -> str:
        return "path_fox" if self.forget_gate else "path"


@register("path_fox")
class PathFoxEncoding(PathEncoding):
    """PaTH-FoX: PaTH with the Forgetting Transformer's gate (``forget_gate: true`` in its YAML)."""

    summary = "PaTH-FoX: PaTH with the Forgetting Transformer's forget gate added to the scores before the scale."
