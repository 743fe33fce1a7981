"""The encoding interface (``poslab/encodings/base.py``): the existing encodings give exactly what the attention
of before gave (a frozen copy of its math, written plainly here), their state_dict keys are those of before,
and the widened hooks (q/k transforms that differ with per-position scales, per-layer choices, a score term
reading q, k and the hidden state, a learned distance bias computed once per forward, declared attention paths)
each do what the equation says, proved with test-only encodings that are never registered for other tests."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poslab.encodings import ENCODINGS, PositionEncoding, PositionInputs, register
from poslab.encodings.base import LayerContext, QueryKeyTransform, Scaled, per_layer, validate_encoding
from poslab.encodings.rope import RopeEncoding
from poslab.encodings.rotary import RotaryEncoding, Rotation, inverse_frequencies, rotation_angles
from poslab.errors import ConfigError
from poslab.model import Transformer
from poslab.running.precheck import check_command_line
from tests.conftest import tiny_model

EXISTING = {  # every encoding of before, with settings that fit the tiny model
    "none": {},
    "sinusoid": {},
    "learned": {"max_positions": 64},
    "rope": {},
    "alibi": {},
    "increments_shared": {},
    "increments_layer": {},
    "hrope_axial": {},
    "rand_axial": {"paragraph_density": 0.1},
    "period_axial": {"paragraph_density": 0.1},
}
VARIANTS = [  # (name, settings): the defaults, and the settings that take other branches of the math
    *((name, settings) for name, settings in EXISTING.items()),
    ("rope", {"pairing": "half", "rotary_dim": 8}),
    ("alibi", {"slopes": [0.5, 0.25]}),
    ("hrope_axial", {"frequencies": "interleaved", "pairing": "half"}),
]
N_LAYERS, N_HEADS, D_MODEL, T = 3, 2, 32, 12


def tiny(name: str, attention: str = "sdpa", **settings: Any) -> Transformer:
    return tiny_model(name, attention, n_layers=N_LAYERS, n_heads=N_HEADS, d_model=D_MODEL, **settings)


def batch(length: int = T) -> tuple[Tensor, dict[str, Tensor]]:
    """Tokens and structural coordinates (paragraphs and sentences not starting at 0; per-row seeds)."""
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 16, (2, length), generator=g)
    paragraph = (torch.rand(2, length, generator=g) < 0.2).long().cumsum(-1) + 3
    sentence = (torch.rand(2, length, generator=g) < 0.4).long().cumsum(-1)
    return tokens, {"paragraph": paragraph, "sentence": sentence, "row_seed": torch.tensor([[11], [12]])}


@contextmanager
def registered(name: str, cls: type[PositionEncoding]) -> Iterator[type[PositionEncoding]]:
    """``cls`` in the registry under ``name`` for one test only (the registry is the process's)."""
    assert name not in ENCODINGS
    register(name)(cls)
    try:
        yield cls
    finally:
        del ENCODINGS[name]


# ---- the attention of before, frozen: written plainly from the code this interface replaced ------------------
class FrozenRotation:
    """The rotation of before: the turn (complex for interleaved pairs ``(2i, 2i+1)``, cos and sin for half pairs
    ``(i, i+P)``) computed once from fp32 angles and shared by q and k (so gradients meet where they did); the product
    in fp32, rounded once; features past ``2P`` pass unrotated."""

    def __init__(self, angles: Tensor, pairing: str) -> None:
        theta = angles.float()[:, None]
        self.pairing, self.n_rot = pairing, 2 * theta.shape[-1]
        interleaved = pairing == "interleaved"
        self.turn = torch.polar(torch.ones_like(theta), theta) if interleaved else (theta.cos(), theta.sin())

    def __call__(self, x: Tensor) -> Tensor:
        head = x[..., : self.n_rot].float()
        if self.pairing == "interleaved":
            turned = torch.view_as_real(torch.view_as_complex(head.unflatten(-1, (-1, 2))) * self.turn).flatten(-2)
        else:
            (cos, sin), (first, second) = self.turn, head.chunk(2, dim=-1)
            turned = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
        return torch.cat((turned.to(x.dtype), x[..., self.n_rot :]), dim=-1)


def frozen_rotate(x: Tensor, angles: Tensor, pairing: str) -> Tensor:
    return FrozenRotation(angles, pairing)(x)


def frozen_positions(model: Transformer, layer: int, x: Tensor, state: Any, inputs: PositionInputs) -> Any:
    encoding = model.encoding
    return encoding.layer_positions(layer, x, state, inputs) if isinstance(encoding, RotaryEncoding) else None


def frozen_forward(
    model: Transformer,
    tokens: Tensor,
    coordinates: dict[str, Tensor] | None = None,
    score_scale: float = 1.0,
    explicit: bool = False,
    transform: Callable[[int, Tensor, Tensor], tuple[Tensor, Tensor]] | None = None,
    term: Callable[[int, Tensor, Tensor, Tensor], Tensor] | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """Logits and (explicit) weights as the model of before computed them: the encoding's begin, its one bias,
    each layer's rotation by ``angles(layer_positions(...))``. ``transform(layer, q, k)`` and ``term(layer,
    hidden, q, k)`` stand in for them in the plain equations of the new hooks."""
    encoding = model.encoding
    length = tokens.shape[1]
    inputs = PositionInputs.from_tokens(tokens, coordinates)
    x, state = encoding.begin(model.embed(tokens), inputs)
    causal = torch.full((length, length), float("-inf")).triu(1)
    bias = encoding.score_bias(length, tokens.device)
    mask = None if bias is None else (bias + causal).unsqueeze(0).to(x.dtype)
    all_weights = []
    rotation, last_positions = None, None
    for layer, block in enumerate(model.blocks):
        positions = frozen_positions(model, layer, x, state, inputs)
        if positions is None:
            rotation = None
        elif positions is not last_positions:  # the same coordinates in every layer: one rotation
            rotation = FrozenRotation(encoding.angles(positions), encoding.pairing)
        last_positions = positions
        h = block.norm1(x)
        B, _, D = h.shape
        hd = D // N_HEADS
        q, k, v = block.attn.qkv(h).view(B, length, 3, N_HEADS, hd).permute(2, 0, 3, 1, 4)
        if transform is not None:
            q, k = transform(layer, q, k)
        elif rotation is not None:
            q, k = rotation(q), rotation(k)
        layer_mask = mask if term is None else (mask if mask is not None else causal) + term(layer, x, q, k)
        scale = score_scale / math.sqrt(hd)
        if explicit:
            scores = (q @ k.transpose(-2, -1)) * scale
            scores = scores + (layer_mask if layer_mask is not None else causal.to(scores.dtype))
            weights = scores.softmax(dim=-1, dtype=torch.float32)
            all_weights.append(weights)
            y = weights.to(v.dtype) @ v
        elif layer_mask is not None and torch.is_autocast_enabled("cpu"):  # the fp32 mask under CPU autocast
            dtype = torch.get_autocast_dtype("cpu")
            with torch.autocast("cpu", enabled=False):
                y = F.scaled_dot_product_attention(
                    q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=layer_mask.float(), scale=scale
                )
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=layer_mask, is_causal=layer_mask is None, scale=scale)
        x = x + block.attn.out(y.transpose(1, 2).reshape(B, length, D))
        x = x + block.mlp(block.norm2(x))
    return model.head(model.final_norm(x)), all_weights


def test_the_existing_encodings_are_all_here():
    assert set(EXISTING) <= set(ENCODINGS)


@pytest.mark.parametrize(("name", "settings"), VARIANTS, ids=[f"{n}{s or ''}" for n, s in VARIANTS])
@pytest.mark.parametrize("training", [False, True])
def test_every_existing_encoding_computes_exactly_the_attention_of_before(name, settings, training):
    """Bit for bit on fp32 CPU: sdpa and explicit logits, the weights, a score scale, and the gradients."""
    tokens, coordinates = batch()
    for attention in ("sdpa", "explicit"):
        model = tiny(name, attention, **settings).train(training)
        explicit = attention == "explicit"
        got = model(tokens, coordinates)
        expected, _ = frozen_forward(model, tokens, coordinates, explicit=explicit)
        assert torch.equal(got.logits, expected), (name, attention)
        got_grads = torch.autograd.grad(got.logits.square().sum(), list(model.parameters()))
        expected_grads = torch.autograd.grad(expected.square().sum(), list(model.parameters()))
        assert all(torch.equal(a, b) for a, b in zip(got_grads, expected_grads, strict=True)), (name, attention)
        with torch.no_grad():
            got = model(tokens, coordinates, score_scale=1.3, return_attention=True)
            expected, weights = frozen_forward(model, tokens, coordinates, score_scale=1.3, explicit=True)
            assert torch.equal(got.logits, expected), (name, attention)
            assert len(got.attention) == N_LAYERS
            assert all(torch.equal(a, b) for a, b in zip(got.attention, weights, strict=True)), (name, attention)


@pytest.mark.parametrize("name", ["rope", "alibi", "hrope_axial", "increments_layer"])
def test_the_bf16_autocast_forward_is_that_of_before(name):
    tokens, coordinates = batch()
    for attention in ("sdpa", "explicit"):
        model = tiny(name, attention, **EXISTING[name]).eval()
        with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
            got = model(tokens, coordinates).logits
            expected, _ = frozen_forward(model, tokens, coordinates, explicit=attention == "explicit")
        assert torch.equal(got, expected), (name, attention)


@pytest.mark.parametrize("name", list(EXISTING))
def test_a_flex_model_asked_for_weights_gives_those_of_before(name):
    """The analyses' path (return_attention=True) on a flex model: explicit, with no FlexAttention compiled."""
    tokens, coordinates = batch()
    model = tiny(name, "flex", **EXISTING[name]).eval()
    with torch.no_grad():
        got = model(tokens, coordinates, return_attention=True)
        expected, weights = frozen_forward(model, tokens, coordinates, explicit=True)
    assert torch.equal(got.logits, expected)
    assert all(torch.equal(a, b) for a, b in zip(got.attention, weights, strict=True))


def block_keys(layer: int) -> list[str]:
    parts = ["norm1", "attn.qkv", "attn.out", "norm2", "mlp.up", "mlp.down"]
    return [f"blocks.{layer}.{part}.{p}" for part in parts for p in ("weight", "bias")]


def delta_keys(prefix: str, norm: bool) -> list[str]:
    return [f"{prefix}.norm.weight"] * norm + [f"{prefix}.{m}.{p}" for m in ("up", "out") for p in ("weight", "bias")]


#: the state_dict keys of every encoding as the code of before wrote them (checkpoints of before must load)
ENCODING_KEYS = {
    "learned": ["encoding.table.weight"],
    "increments_shared": delta_keys("encoding.delta", norm=False),
    "increments_layer": [key for i in range(N_LAYERS) for key in delta_keys(f"encoding.deltas.{i}", norm=True)],
}


@pytest.mark.parametrize("name", list(EXISTING))
def test_state_dict_keys_are_those_of_before(name):
    blocks = [key for layer in range(N_LAYERS) for key in block_keys(layer)]
    before = ["embed.weight", *ENCODING_KEYS.get(name, []), *blocks, "head.weight", "head.bias"]
    for attention in ("sdpa", "explicit", "flex"):
        assert list(tiny(name, attention, **EXISTING[name]).state_dict()) == before


def test_rope_builds_one_rotation_per_forward_and_every_layer_uses_it(monkeypatch):
    built: list[Rotation] = []
    original = RopeEncoding.query_key_transform

    def recording(self: RopeEncoding, context: LayerContext, previous: QueryKeyTransform | None) -> Any:
        transform = original(self, context, previous)
        built.append(transform)
        return transform

    monkeypatch.setattr(RopeEncoding, "query_key_transform", recording)
    tiny("rope")(batch()[0])
    assert len(built) == N_LAYERS and all(t is built[0] for t in built) and isinstance(built[0], Rotation)


# ---- attention paths: declared by the encoding, checked at start ---------------------------------------------
def test_the_existing_encodings_declare_every_path():
    for name in EXISTING:
        assert ENCODINGS[name].attention_paths == ("sdpa", "explicit", "flex"), name


class ExplicitOnly(PositionEncoding):
    """Says once, in its declaration, that it needs the materialised scores."""

    attention_paths = ("explicit",)


def test_an_encoding_that_needs_the_explicit_path_stops_any_other_at_start():
    with registered("test_explicit_only", ExplicitOnly):
        for path in ("sdpa", "flex"):
            message = rf"model.attention={path} .* 'test_explicit_only' .* takes explicit: set model.attention=explicit"
            with pytest.raises(ConfigError, match=message):
                tiny("test_explicit_only", path)
            with pytest.raises(ConfigError, match=message):  # train.py's check, before anything is built
                validate_encoding({"name": "test_explicit_only"}, tiny("none").cfg.shape, 64, attention=path)
        out = tiny("test_explicit_only", "explicit")(batch()[0], return_attention=True)
        assert len(out.attention) == N_LAYERS


def test_train_pys_check_refuses_a_path_the_encoding_does_not_declare(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("POSLAB_LOG_DIR", str(tmp_path))
    monkeypatch.setattr(RopeEncoding, "attention_paths", ("sdpa", "explicit"))
    with pytest.raises(SystemExit) as stopped:
        check_command_line(["encoding=rope", "model.attention=flex"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "model.attention=flex" in err and "'rope'" in err and "sdpa, explicit" in err, err
    check_command_line(["encoding=rope", "model.attention=explicit"])


def test_an_encoding_must_declare_known_paths_and_the_explicit_one():
    for paths in (("sdpa",), ("sdpa", "explicit", "fast")):
        cls = type("Bad", (PositionEncoding,), {"attention_paths": paths})
        with pytest.raises(RuntimeError, match="'explicit' must be among them"):
            register("test_bad_paths")(cls)
        assert "test_bad_paths" not in ENCODINGS


# ---- per layer: a choice of encoding or setting --------------------------------------------------------------
class RopeOnEvenLayers(RotaryEncoding):
    """RoPE on layers 0, 2, ...; NoPE on the others: no transform there."""

    def layer_positions(self, layer: int, hidden: Tensor, state: Any, inputs: PositionInputs) -> Tensor | None:
        return state if layer % 2 == 0 else None


def rope_angles(base: float = 10_000.0) -> Tensor:
    """RoPE's angles ``[1, T, head_dim / 2]`` at the token indices."""
    return rotation_angles(torch.arange(float(T))[None], inverse_frequencies(D_MODEL // N_HEADS, base))


def rope_rotated(q: Tensor, k: Tensor, base: float = 10_000.0) -> tuple[Tensor, Tensor]:
    angles = rope_angles(base)
    return frozen_rotate(q, angles, "interleaved"), frozen_rotate(k, angles, "interleaved")


def rotated_on_even_layers(layer: int, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
    return (q, k) if layer % 2 else rope_rotated(q, k)


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_nope_on_every_second_layer(attention):
    tokens, _ = batch()
    with registered("test_rope_even_layers", RopeOnEvenLayers):
        model = tiny("test_rope_even_layers", attention)
        out = model(tokens, return_positions=True)
    expected, _ = frozen_forward(model, tokens, explicit=attention == "explicit", transform=rotated_on_even_layers)
    assert torch.equal(out.logits, expected)
    assert out.positions[1] is None and out.positions[0] is out.positions[2] is not None
    rope = tiny("rope", attention)
    assert not torch.allclose(rope(tokens).logits, out.logits)  # the same weights, layer 1 not rotated


class PerLayerBase(RotaryEncoding):
    """RoPE whose base is given once or once per layer (``per_layer``)."""

    def __init__(self, shape: Any, base: float | list[float] = 10_000.0, **rotary: Any) -> None:
        bases = per_layer("encoding.base", base, shape.n_layers)
        super().__init__(shape, base=bases[0], **rotary)
        ladders = [inverse_frequencies(self.rotary_dim, float(b)) for b in bases]
        self.register_buffer("layer_inv_freq", torch.stack(ladders), persistent=False)

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: Any, max_length: int) -> None:
        for base in per_layer("encoding.base", settings.get("base", 10_000.0), shape.n_layers):
            super().validate({**settings, "base": base}, shape, max_length)

    def query_key_transform(self, context: LayerContext, previous: QueryKeyTransform | None) -> Rotation:
        positions = self.layer_positions(context.layer, context.hidden, context.state, context.inputs)
        return Rotation(rotation_angles(positions, self.layer_inv_freq[context.layer]), self.pairing, positions)


def test_a_setting_per_layer():
    tokens, _ = batch()
    bases = [10_000.0, 100.0, 1_000_000.0]
    with registered("test_per_layer_base", PerLayerBase):
        model = tiny("test_per_layer_base", "explicit", base=bases)
        out = model(tokens, return_attention=True)

        def rotated(layer: int, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
            return rope_rotated(q, k, bases[layer])

        expected, weights = frozen_forward(model, tokens, explicit=True, transform=rotated)
        assert torch.equal(out.logits, expected)
        assert all(torch.equal(a, b) for a, b in zip(out.attention, weights, strict=True))
        one_base = tiny("test_per_layer_base", "explicit", base=10_000.0)(tokens).logits
        assert torch.equal(one_base, tiny("rope", "explicit")(tokens).logits)  # one value: the same in every layer
        with pytest.raises(ConfigError, match=r"encoding.base=\[10000.0, 100.0\] has 2 values but the model has 3"):
            tiny("test_per_layer_base", base=bases[:2])
        with pytest.raises(ConfigError, match="encoding.base=0.5 must be a number greater than 1"):
            tiny("test_per_layer_base", base=[10_000.0, 0.5, 100.0])


# ---- q and k transformed differently, with per-position scales -----------------------------------------------
ZETA_SHIFT, GAMMA = 0.4, 8.0


def xpos_zeta(head_dim: int) -> Tensor:
    """xPos's per-pair ``zeta_i = (i / (d/2) + shift) / (1 + shift)``, per feature (both of a pair: interleaved)."""
    pairs = head_dim // 2
    return ((torch.arange(pairs) / pairs + ZETA_SHIFT) / (1 + ZETA_SHIFT)).repeat_interleave(2)


class XposLike(RotaryEncoding):
    """RoPE, then queries times ``zeta ** (n / gamma)`` and keys times ``zeta ** (-n / gamma)``."""

    def query_key_transform(self, context: LayerContext, previous: QueryKeyTransform | None) -> QueryKeyTransform:
        rotation = super().query_key_transform(context, None)
        assert rotation is not None
        power = context.inputs.positions[0][:, None] / GAMMA  # [T, 1]
        zeta = xpos_zeta(self.shape.head_dim).to(power.device)
        return Scaled(rotation, zeta**power, zeta ** (-power))  # [T, head_dim], broadcast over batch and heads


def layer_qk(model: Transformer, tokens: Tensor) -> tuple[Tensor, Tensor]:
    """The first layer's queries and keys ``[B, H, T, hd]`` before any transform."""
    x, _ = model.encoding.begin(model.embed(tokens), PositionInputs.from_tokens(tokens))
    h = model.blocks[0].norm1(x)
    B, length, D = h.shape
    q, k, _ = model.blocks[0].attn.qkv(h).view(B, length, 3, N_HEADS, D // N_HEADS).permute(2, 0, 3, 1, 4)
    return q, k


def test_an_xpos_like_transform_gives_the_plain_equation():
    """score[t, s] = sum_f rot(q)_t,f rot(k)_s,f zeta_f ** ((t - s) / gamma) / sqrt(hd): the relative decay."""
    tokens, _ = batch()
    with registered("test_xpos_like", XposLike):
        model, sdpa = tiny("test_xpos_like", "explicit"), tiny("test_xpos_like", "sdpa")
    out = model(tokens, return_attention=True, return_positions=True)
    assert out.positions[0] is not None  # Scaled hands on the rotation's coordinates
    q, k = layer_qk(model, tokens)
    rq, rk = rope_rotated(q, k)
    distance = torch.arange(float(T))[:, None] - torch.arange(float(T))[None, :]  # t - s
    decay = xpos_zeta(D_MODEL // N_HEADS)[:, None, None] ** (distance / GAMMA)  # [hd, T, T]
    scores = torch.einsum("bhtf,bhsf,fts->bhts", rq, rk, decay) / math.sqrt(D_MODEL // N_HEADS)
    scores = scores + torch.full((T, T), float("-inf")).triu(1)
    assert torch.allclose(out.attention[0], scores.softmax(-1), atol=1e-6)
    plain_rope = tiny("rope", "explicit")(tokens, return_attention=True).attention[0]
    assert not torch.allclose(out.attention[0], plain_rope, atol=1e-3)
    assert torch.allclose(sdpa(tokens).logits, out.logits, atol=1e-5)  # the fused path transforms alike


def test_scaled_scales_queries_and_keys_apart_in_fp32():
    q, k = torch.randn(2, 2, 5, 4), torch.randn(2, 2, 5, 4)
    per_position = torch.arange(1.0, 6.0)[None, None, :, None]
    query_only = Scaled(QueryKeyTransform(), per_position, None)  # as scalable softmax: s * log(n) on the queries
    assert torch.equal(query_only.queries(q), q * per_position) and torch.equal(query_only.keys(k), k)
    assert query_only.positions is None
    half = Scaled(QueryKeyTransform(), per_position, per_position).queries(q.bfloat16())
    assert half.dtype == torch.bfloat16 and torch.equal(half, (q.bfloat16().float() * per_position).bfloat16())


# ---- a score term per layer, reading q, k and the hidden state -----------------------------------------------
class ForgetGateLike(PositionEncoding):
    """``term[t, s] = sum over s < j <= t of log f_j``, ``f = sigmoid(W_layer h)`` per head from the layer's input."""

    attention_paths = ("sdpa", "explicit")  # a [B, H, T, T] term: a mask, not a score_mod

    def __init__(self, shape: Any) -> None:
        super().__init__(shape)
        self.gates = nn.ModuleList(nn.Linear(shape.d_model, shape.n_heads) for _ in range(shape.n_layers))
        self.seen: list[Tensor] = []  # the hidden states the hook was given

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor:
        self.seen.append(context.hidden)
        log_f = F.logsigmoid(self.gates[context.layer](context.hidden)).transpose(1, 2)  # [B, H, T]
        total = log_f.cumsum(dim=-1)
        return total[..., :, None] - total[..., None, :]


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_a_forget_gate_term_reads_the_hidden_state_and_gives_the_plain_equation(attention):
    tokens, _ = batch()
    with registered("test_forget_gate", ForgetGateLike):
        model = tiny("test_forget_gate", attention)
        with pytest.raises(ConfigError, match="model.attention=flex .* 'test_forget_gate' .* takes sdpa, explicit"):
            tiny("test_forget_gate", "flex")
    inputs_seen: list[Tensor] = []
    for block in model.blocks:
        block.register_forward_pre_hook(lambda module, args: inputs_seen.append(args[0]))
    out = model(tokens)
    assert all(a is b for a, b in zip(model.encoding.seen, inputs_seen, strict=True))  # each block's input

    def plain_term(layer: int, hidden: Tensor, q: Tensor, k: Tensor) -> Tensor:
        log_f = F.logsigmoid(model.encoding.gates[layer](hidden)).transpose(1, 2)  # [B, H, T]
        term = torch.zeros(2, N_HEADS, T, T)
        for t in range(T):
            for s in range(t + 1):
                term[:, :, t, s] = log_f[..., s + 1 : t + 1].sum(-1)
        return term

    expected, _ = frozen_forward(model, tokens, explicit=attention == "explicit", term=plain_term)
    assert torch.allclose(out.logits, expected, atol=1e-5)
    out.logits.square().sum().backward()
    assert all(g.weight.grad is not None and g.weight.grad.abs().sum() > 0 for g in model.encoding.gates)


class RopeWithQKTerm(RopeEncoding):
    """RoPE plus ``0.5 * <q, k>`` of the rotated queries and keys: the term sees them after the transform."""

    attention_paths = ("sdpa", "explicit")

    def score_term(self, context: LayerContext, q: Tensor, k: Tensor) -> Tensor:
        return 0.5 * (q @ k.transpose(-2, -1))


class RopeWithQKTermOnFlex(RopeWithQKTerm):
    attention_paths = ("sdpa", "explicit", "flex")  # a wrong declaration: flex cannot add the term


def test_a_score_term_reads_the_transformed_queries_and_keys():
    tokens, _ = batch()
    with registered("test_qk_term", RopeWithQKTerm), registered("test_qk_term_flex", RopeWithQKTermOnFlex):
        model = tiny("test_qk_term", "explicit")
        out = model(tokens, return_attention=True)
        q, k = layer_qk(model, tokens)
        rq, rk = rope_rotated(q, k)
        scores = (1 / math.sqrt(D_MODEL // N_HEADS) + 0.5) * (rq @ rk.transpose(-2, -1))
        scores = scores + torch.full((T, T), float("-inf")).triu(1)
        assert torch.allclose(out.attention[0], scores.softmax(-1), atol=1e-6)
        sdpa = tiny("test_qk_term", "sdpa")
        assert torch.allclose(sdpa(tokens).logits, out.logits, atol=1e-5)  # the term in the mask: the same function
        flex = tiny("test_qk_term_flex", "flex").eval()
        with torch.no_grad(), pytest.raises(ConfigError, match="flex cannot add the encoding's score_term"):
            flex(tokens)
        assert torch.allclose(flex(tokens, return_attention=True).logits, out.logits, atol=1e-6)  # explicit: fine


# ---- a learned function of distance, once per forward --------------------------------------------------------
class LearnedDistanceBias(PositionEncoding):
    """A T5-like learned bias per head and clipped distance, computed once per forward and shared by the layers."""

    attention_paths = ("sdpa", "explicit")

    def __init__(self, shape: Any, max_distance: int = 6) -> None:
        super().__init__(shape)
        self.max_distance = max_distance
        self.table = nn.Parameter(torch.linspace(-1.0, 1.0, shape.n_heads * max_distance).view(shape.n_heads, -1))
        self.calls = 0

    def distance(self, length: int, device: torch.device) -> Tensor:
        position = torch.arange(length, device=device)
        return (position[:, None] - position[None, :]).clamp(0, self.max_distance - 1)

    def score_bias(self, length: int, device: torch.device) -> Tensor:
        self.calls += 1
        return self.table[:, self.distance(length, device)]  # [H, T, T]


class LearnedDistanceBiasOnFlex(LearnedDistanceBias):
    attention_paths = ("sdpa", "explicit", "flex")

    def score_mod(self) -> Callable[..., Tensor]:
        table, top = self.table, self.max_distance - 1

        def learned(score: Tensor, b: Tensor, h: Tensor, q_idx: Tensor, kv_idx: Tensor) -> Tensor:
            return score + table[h, (q_idx - kv_idx).clamp(0, top)]

        return learned


class LearnedDistanceBiasNoScoreMod(LearnedDistanceBias):
    attention_paths = ("sdpa", "explicit", "flex")  # declares flex, but gives no score_mod


def test_a_learned_distance_bias_is_computed_once_per_forward_and_trained():
    tokens, _ = batch()
    with registered("test_distance_bias", LearnedDistanceBias):
        for attention in ("sdpa", "explicit"):
            model = tiny("test_distance_bias", attention)
            out = model(tokens, return_attention=True)
            assert model.encoding.calls == 1  # three layers, one bias
            q, k = layer_qk(model, tokens)
            bias = model.encoding.table.detach()[:, model.encoding.distance(T, tokens.device)]
            scores = q @ k.transpose(-2, -1) / math.sqrt(D_MODEL // N_HEADS) + bias
            scores = scores + torch.full((T, T), float("-inf")).triu(1)
            assert torch.allclose(out.attention[0], scores.softmax(-1), atol=1e-6)
            model(tokens).logits.square().sum().backward()
            assert model.encoding.table.grad is not None and model.encoding.table.grad.abs().sum() > 0
        with pytest.raises(ConfigError, match="model.attention=flex .* 'test_distance_bias' .* takes sdpa, explicit"):
            tiny("test_distance_bias", "flex")


def test_a_distance_bias_on_flex_needs_its_score_mod():
    with (
        registered("test_bias_flex", LearnedDistanceBiasOnFlex),
        registered("test_bias_no_mod", LearnedDistanceBiasNoScoreMod),
    ):
        model = tiny("test_bias_flex", "flex")  # builds: the score_mod is there
        score_mod = model.encoding.score_mod()
        h, q_idx, kv_idx = torch.tensor(1), torch.tensor(7), torch.tensor(2)
        assert score_mod(torch.tensor(0.0), torch.tensor(0), h, q_idx, kv_idx) == model.encoding.table[1, 5]
        with pytest.raises(ConfigError, match="needs the score bias of encoding 'test_bias_no_mod' as a score_mod"):
            tiny("test_bias_no_mod", "flex")


def test_a_setting_per_layer_refuses_a_list_of_the_wrong_length():
    assert per_layer("encoding.base", 500.0, 3) == [500.0, 500.0, 500.0]
    assert per_layer("encoding.base", [1.0, 2.0], 2) == [1.0, 2.0]
    with pytest.raises(ConfigError, match=r"encoding.base=\[1.0\] has 1 values but the model has 2 layers"):
        per_layer("encoding.base", [1.0], 2)
