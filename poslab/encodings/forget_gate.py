"""The Forgetting Transformer's forget gate (Lin et al., 2025, "Forgetting Transformer: Softmax Attention with a
Forget Gate", ICLR 2025): attention down-weighted by the product of the gates of the tokens in between.

Per layer and head ``h``, from the layer's input ``x_j`` (its RMS norm, below)::

    f_j = sigmoid(w_h . rmsnorm(x_j) + b_h)                  the forget gate of token j, in (0, 1)
    c_t = sum_{j <= t} log f_j                                a cumulative sum of logsigmoid
    term[t, s] = sum_{s < j <= t} log f_j = c_t - c_s         <= 0, 0 on the diagonal, falling further back

so a key's weight is multiplied by ``prod_{s < j <= t} f_j`` (FoX's ``D`` matrix, added to the logits as
``log D``). FoX computes the gate from the attention layer's input, the block's RMS-normed residual stream
(``fgate_proj(hidden_states)`` after ``attn_norm``); ``context.hidden`` is the stream before the block's norm,
so the gate here normalises it itself, RMS norm without a gain (whatever ``model.norm``; FoX's blocks use
RMSNorm): ``w . (g * rmsnorm(x))`` is ``(w * g) . rmsnorm(x)``, the same functions, and at the start (``g = 1``)
the same numbers as FoX's. Each layer has its own ``w``, ``b``.

Initialisation as FoX's code for its data-dependent ("full") gate: ``w ~ N(0, 0.02)`` (its
``initializer_range``) and ``b = 0``, so ``f`` starts near 1/2 (FoX's special bias init, decay times
``T_min .. T_max``, is only for its data-independent gates). x-transformers' ``DataDependentAlibi`` starts at
``b = 5`` (``f ~ 0.993``, weak forgetting): ``bias_init: 5`` gives that start. ``inner: none`` is NoPE, FoX's
default; ``inner: rope`` adds RoPE at the token index (FoX's ``use_rope`` option).

Compared with x-transformers' ``DataDependentAlibi(dim, heads)`` (causal, ``post_log_scale = 1``) given the RMS-normed
input and these weights: the same term for every ``t >= s`` (``tests/encodings/test_content_positions.py``). The
gates and their cumulative sum are computed in fp32 with autocast off: a bf16 sum over 256 tokens moves in steps of
0.5 or more.

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``), with ``inner:
rope``: the rotation's frequencies only, as ``rope``'s; the gates read the hidden state and are as without a rule.
With ``inner: none``: no rule.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poslab.config.settings import check_number
from poslab.encodings.base import LayerContext, ModelShape, register
from poslab.encodings.cope import ContentTermEncoding

GATE_INIT_STD = 0.02  # FoX's initializer_range for the gate's weights


def forget_gates(shape: ModelShape, bias_init: float) -> nn.ModuleList:
    """One gate projection ``d_model -> heads`` per layer, initialised as FoX's data-dependent gate (the module
    docstring); PaTH-FoX's gates are these too (``poslab/encodings/path.py``)."""
    gates = nn.ModuleList(nn.Linear(shape.d_model, shape.n_heads) for _ in range(shape.n_layers))
    for gate in gates:
        nn.init.normal_(gate.weight, std=GATE_INIT_STD)
        nn.init.constant_(gate.bias, float(bias_init))
    return gates


def log_forget(gate: nn.Linear, hidden: Tensor) -> Tensor:
    """``log f [B, H, T]`` (fp32) of one layer's gate from its input ``hidden [B, T, D]`` (RMS-normed here)."""
    with torch.autocast(hidden.device.type, enabled=False):
        x = F.rms_norm(hidden.float(), (hidden.shape[-1],))
        return F.logsigmoid(F.linear(x, gate.weight.float(), gate.bias.float())).transpose(1, 2)


@register("forget_gate")
class ForgetGateEncoding(ContentTermEncoding):
    """FoX's forget gate (the module docstring): each layer's own gate projection; over NoPE or RoPE (``inner``)."""

    summary = (
        "Forgetting Transformer: each layer's forget gates sigmoid(w.x + b), per head and token, down-weight a key "
        "by the product of the gates after it up to the query; over NoPE or RoPE (inner)."
    )

    def __init__(self, shape: ModelShape, bias_init: float, **inner_and_rotary: Any) -> None:
        super().__init__(shape, **inner_and_rotary)  # inner; base, pairing, rotary_dim
        self.bias_init = float(bias_init)
        self.gates = forget_gates(shape, self.bias_init)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        meaning = "the gates' starting bias; 0: FoX, f near 1/2; 5: x-transformers, f near 0.993"
        check_number("encoding.bias_init", settings["bias_init"], meaning=meaning)

    def log_forget(self, layer: int, hidden: Tensor) -> Tensor:
        """``log f [B, H, T]`` (fp32) of layer ``layer`` from its input ``hidden [B, T, D]``."""
        return log_forget(self.gates[layer], hidden)

    def extra_flops_per_token(self, length: int, batch: int) -> float:
        """Per layer and token, the gate projection ``d_model -> H``; times 3 for training."""
        return 6.0 * self.shape.n_layers * self.shape.d_model * self.shape.n_heads

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor:
        total = self.log_forget(context.layer, context.hidden).cumsum(dim=-1)  # c_t, [B, H, T]
        return total[..., :, None] - total[..., None, :]  # c_t - c_s; above the diagonal finite, then masked
