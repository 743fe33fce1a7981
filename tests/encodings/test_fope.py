"""FoPE (issue 38) against the authors' code (TsinghuaC3I/Fourier-Position-Embedding, olmo/model.py:
``RotaryEmbedding.get_inv_freq`` / ``get_rotary_embedding`` / ``rotate_half`` and ``FourierEmbedding``'s
``apply_rotary_pos_emb`` / ``get_step_eye``), transcribed verbatim for their configs' settings (exponential
frequencies, rope_clamp_floor_freq + _to_zero, fourier_ignore_zero, separate basis and heads, prefix "attn", no
cache): same coefficients, random q and k, forward and gradients."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from poslab.encodings import build_encoding
from poslab.encodings.base import LayerContext, ModelShape, PositionInputs
from poslab.encodings.fope import step_eye
from poslab.errors import ConfigError
from poslab.model import ModelConfig, Transformer


class AuthorsFourier:
    """The authors' FourierEmbedding at their configs' settings (the branches those settings take)."""

    def __init__(self, config, sin_coef, cos_coef):
        self.config = config
        self.head_dim = config.d_model // config.n_heads
        self.dim = self.head_dim
        self.floor_freq = 2 * torch.pi / self.config.max_sequence_length * 1.0  # rope_floor_freq_ratio
        self.clamp_floor_value = 0.0  # rope_clamp_floor_to_zero
        self.inv_freq = self.get_inv_freq(self.dim, torch.device("cpu"))
        self.input_dim = self.inv_freq.size(-1)
        self.output_dim = min(self.input_dim, self.head_dim // 4)
        self.input_shape, self.output_shape, self.coef_shape = "bhtD", "bhtd", "hDd"
        self.sin_coef, self.cos_coef = sin_coef, cos_coef

    def get_inv_freq(self, dim, device):
        inv_freq = 1.0 / (self.config.rope_theta ** (torch.arange(0, dim, 2, device=device, dtype=torch.float) / dim))
        inv_freq = 0.0 + inv_freq * (1.0 - 0.0)  # init_floor_freq, init_upper_freq
        inv_freq[inv_freq < self.floor_freq] = self.clamp_floor_value
        inv_freq = inv_freq[inv_freq != 0.0]  # fourier and fourier_ignore_zero
        return inv_freq[None, :]  # prefix "attn"

    def get_rotary_embedding(self, seq_len, device):
        with torch.autocast(device.type, enabled=False):
            seq = torch.arange(seq_len, device=device, dtype=torch.float)
            freqs = torch.einsum("t, hd -> htd", seq, self.inv_freq)
            positions = freqs.unsqueeze(0)  # suffix "fourier"
            pos_sin, pos_cos = positions.sin(), positions.cos()
        return pos_sin, pos_cos

    def rotate_half(self, x):
        B, nh, T, hs = x.size()
        x = x.view(B, nh, T, 2, hs // 2)
        x1, x2 = x.unbind(dim=-2)
        return torch.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(self, pos_sin, pos_cos, t):
        fourier_sin = torch.einsum(
            f"{self.input_shape}, {self.coef_shape} -> {self.output_shape}", pos_sin, self.sin_coef
        )
        fourier_cos = torch.einsum(
            f"{self.input_shape}, {self.coef_shape} -> {self.output_shape}", pos_cos, self.cos_coef
        )
        fourier_sin = F.pad(
            input=fourier_sin, pad=(0, self.head_dim // 2 - fourier_sin.size(-1)), mode="constant", value=1
        )
        fourier_cos = F.pad(
            input=fourier_cos, pad=(0, self.head_dim // 2 - fourier_cos.size(-1)), mode="constant", value=1
        )
        fourier_sin = torch.cat((fourier_sin, fourier_sin), dim=-1)
        fourier_cos = torch.cat((fourier_cos, fourier_cos), dim=-1)
        return ((t * fourier_cos) + (self.rotate_half(t) * fourier_sin)).to(t.dtype)

    def get_step_eye(self, _param):
        _param = torch.zeros_like(_param)
        step = math.ceil(self.input_dim / self.output_dim)
        for i in range(self.output_dim):
            if i * step < self.input_dim:
                _param[..., i * step, i] = 1.0
        return _param

    def __call__(self, x, all_len):
        x_ = x.float()
        with torch.autocast(x.device.type, enabled=False):
            x_len = x_.shape[-2]
            pos_sin, pos_cos = self.get_rotary_embedding(all_len, x_.device)
            pos_sin = pos_sin.type_as(x_)
            pos_cos = pos_cos.type_as(x_)
            x_ = self.apply_rotary_pos_emb(
                pos_sin[:, :, all_len - x_len : all_len, :], pos_cos[:, :, all_len - x_len : all_len, :], x_
            )
        return x_.type_as(x)


@pytest.mark.parametrize(("d_model", "heads", "length"), [(128, 2, 64), (96, 3, 512)])
def test_fope_is_the_authors_forward_and_gradient(d_model, heads, length):
    torch.manual_seed(0)
    shape = ModelShape.of(d_model, heads, 2)
    encoding = build_encoding({"name": "fope", "learnable": True}, shape, max_length=length)
    coefficients = encoding.layers[1]
    config = SimpleNamespace(d_model=d_model, n_heads=heads, rope_theta=10000, max_sequence_length=length)
    theirs = AuthorsFourier(config, coefficients.sin_coef, coefficients.cos_coef)
    assert theirs.input_dim == len(encoding.theta) < shape.head_dim // 2  # some frequencies were clipped
    torch.testing.assert_close(
        theirs.get_step_eye(coefficients.sin_coef.detach()[0]), step_eye(*theirs.sin_coef.shape[1:])
    )
    T = 24
    q, k = (torch.randn(2, heads, T, shape.head_dim, requires_grad=True) for _ in range(2))
    inputs = PositionInputs.from_tokens(torch.zeros(2, T, dtype=torch.long))
    transform = encoding.query_key_transform(LayerContext(1, torch.zeros(2, T, d_model), None, inputs), None)
    mine = transform.queries(q) @ transform.keys(k).transpose(-2, -1)
    reference = theirs(q, T) @ theirs(k, T).transpose(-2, -1)
    torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-4)
    weights = torch.randn_like(mine)
    grads = torch.autograd.grad((mine * weights).sum(), (q, k, coefficients.sin_coef, coefficients.cos_coef))
    ref_grads = torch.autograd.grad((reference * weights).sum(), (q, k, coefficients.sin_coef, coefficients.cos_coef))
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)


def test_the_default_coefficients_are_fixed_eye_plus_noise_per_layer_and_head():
    torch.manual_seed(0)
    shape = ModelShape.of(256, 4, 2)  # head_dim 64: 32 frequencies, those of wavelength > 512 clipped
    encoding = build_encoding({"name": "fope"}, shape, max_length=512)
    assert not any(p.requires_grad for p in encoding.parameters()) and len(list(encoding.parameters())) == 0
    D = len(encoding.theta)
    assert torch.all(encoding.theta >= 2 * math.pi / 512) and D < 32 and encoding.n_out == 16
    noise = encoding.layers[0].sin_coef - step_eye(D, 16)
    expected_std = 0.3 * math.sqrt(2.0 / (D * 16 + 4 * 16))  # xavier_normal fans of [H, D, d]
    assert abs(noise.std().item() / expected_std - 1) < 0.15
    assert not torch.allclose(encoding.layers[0].sin_coef, encoding.layers[1].sin_coef)
    assert "layers.0.sin_coef" in encoding.state_dict()  # the fixed draw is saved with the model


def test_bad_settings_stop_clearly():
    shape = ModelShape.of(64, 2, 1)
    with pytest.raises(ConfigError, match="clip_length=4"):
        build_encoding({"name": "fope", "clip_length": 4}, shape, max_length=8)
    with pytest.raises(ConfigError, match="divisible by 4"):
        build_encoding({"name": "fope"}, ModelShape.of(36, 6, 1), max_length=8)
    with pytest.raises(ConfigError, match="base=0.5"):
        build_encoding({"name": "fope", "base": 0.5}, shape, max_length=8)


@pytest.mark.parametrize("learnable", [False, True])
def test_the_encoding_trains_and_is_causal(learnable):
    torch.manual_seed(0)
    encoding = {"name": "fope", "learnable": learnable}
    cfg = ModelConfig(vocab_size=16, n_outputs=16, d_model=32, n_heads=2, n_layers=2, encoding=encoding)
    model = Transformer(cfg, max_length=20)
    tokens = torch.randint(0, 16, (3, 20))
    logits = model(tokens).logits
    changed = tokens.clone()
    changed[:, 12:] = (changed[:, 12:] + 1) % 16
    torch.testing.assert_close(model(changed).logits[:, :12], logits[:, :12])
    F.cross_entropy(logits[:, :-1].reshape(-1, 16), tokens[:, 1:].reshape(-1)).backward()
    assert model.blocks[1].attn.qkv.weight.grad.abs().sum() > 0
    if learnable:
        assert model.encoding.layers[1].cos_coef.grad.abs().sum() > 0
