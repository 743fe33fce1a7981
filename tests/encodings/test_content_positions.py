"""The content-dependent position terms: CoPE (``cope``) and the Forgetting Transformer's forget gate
(``forget_gate``), each against x-transformers' implementation, the papers' properties, the attention paths
(fp32 and bf16 autocast) and their inner encoding (NoPE or RoPE)."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from x_transformers.x_transformers import CoPE, DataDependentAlibi

from poslab.encodings import ModelShape, PositionInputs, build_encoding
from poslab.encodings.base import LayerContext
from poslab.encodings.cope import ContextualPositions
from poslab.errors import ConfigError
from poslab.model import Transformer
from tests.conftest import tiny_model

B, H, T, HEAD_DIM = 2, 2, 24, 16
SHAPE = ModelShape.of(d_model=H * HEAD_DIM, n_heads=H, n_layers=2)
SEEN = torch.ones(T, T, dtype=torch.bool).tril()  # (t, s <= t): where a term is read


def tiny(encoding: str, attention: str = "sdpa", **settings: Any) -> Transformer:
    return tiny_model(encoding, attention, n_heads=H, d_model=H * HEAD_DIM, **settings)


def tokens(length: int = T) -> Tensor:
    return torch.randint(0, 16, (3, length), generator=torch.Generator().manual_seed(1))


def same_weights(source: Transformer, target: Transformer) -> Transformer:
    """``target`` with ``source``'s weights outside the encoding (embeddings, blocks, head)."""
    state = {key: value for key, value in source.state_dict().items() if not key.startswith("encoding.")}
    missing, unexpected = target.load_state_dict(state, strict=False)
    assert not unexpected and all(key.startswith("encoding.") for key in missing)
    return target


def context(layer: int, hidden: Tensor) -> LayerContext:
    return LayerContext(layer, hidden, None, PositionInputs.from_tokens(torch.zeros(B, T, dtype=torch.long)))


# ---- CoPE ------------------------------------------------------------------------------------------------------
def random_cope(max_pos: int | None, position_logits: str = "after_scale", train_length: int | None = None) -> Any:
    settings = {"name": "cope", "max_pos": max_pos, "position_logits": position_logits}
    cope = build_encoding(settings, SHAPE, 64, train_length=train_length)
    with torch.no_grad():
        for layer in cope.layers:
            nn.init.normal_(layer.table)
    return cope


@pytest.mark.parametrize("max_pos", [4, 32])  # most positions clamped; none clamped (T = 24 < 31)
def test_cope_term_is_x_transformers_cope_for_every_key_up_to_the_query(max_pos):
    g = torch.Generator().manual_seed(0)
    q, k = 2 * torch.randn(B, H, T, HEAD_DIM, generator=g), 2 * torch.randn(B, H, T, HEAD_DIM, generator=g)
    cope = random_cope(max_pos)  # x-transformers adds the term to the scaled logits: after_scale
    for layer in range(SHAPE.n_layers):
        reference = CoPE(dim=HEAD_DIM, heads=H, max_pos=max_pos)
        with torch.no_grad():
            reference.pos_emb.copy_(cope.layers[layer].table)
        # what x-transformers' Attend hands it: the scaled logits, keys after the query filled with -finfo.max
        logits = (q @ k.transpose(-2, -1)) * HEAD_DIM**-0.5
        logits = logits.masked_fill(~SEEN, -torch.finfo(logits.dtype).max)
        expected = reference(q, logits)
        term = cope.score_term(context(layer, torch.zeros(B, T, SHAPE.d_model)), q, k)
        assert term.shape == (B, H, T, T) and term.dtype == torch.float32
        assert torch.allclose(term[..., SEEN], expected[..., SEEN], atol=1e-5)
        assert torch.isfinite(term).all()  # keys after the query too: -inf (causal mask) + finite, never NaN
    assert not torch.allclose(cope.layers[0].table, cope.layers[1].table)  # each layer its own table


def authors_cope_logits(query: Tensor, key: Tensor, pos_emb: Tensor, npos: int) -> Tensor:
    """The attention logits of the CoPE authors' ``ContextPosSelfAttn.forward`` (facebookresearch/RAM,
    ``projects/cope/src/cope/context_position.py``, default flags: no ``cope_nodiv``, gates from the keys), restated
    for ``query, key [B*H, L, head_dim]``, ``pos_emb [1, head_dim, npos]`` and a causal ``attn_mask``, before their
    softmax (the masked logits -inf)."""
    head_dim = query.shape[-1]
    attn_mask = torch.ones(query.shape[1], query.shape[1]).tril()[None]
    gate_logits = torch.bmm(query, key.transpose(-1, -2))
    gates = torch.sigmoid(gate_logits / math.sqrt(head_dim)) * attn_mask
    positions = gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=npos - 1)
    pos_logits_fixed = torch.matmul(query, pos_emb)
    positions_ceil, positions_floor = positions.ceil().long(), positions.floor().long()
    pos_logits_ceil = pos_logits_fixed.gather(-1, positions_ceil)
    pos_logits_floor = pos_logits_fixed.gather(-1, positions_floor)
    pos_ceil_weight = positions - positions_floor
    pos_logits = pos_logits_ceil * pos_ceil_weight + pos_logits_floor * (1 - pos_ceil_weight)
    attn_logits = gate_logits + pos_logits
    attn_logits = attn_logits / math.sqrt(head_dim)
    return attn_logits + attn_mask.log()


@pytest.mark.parametrize("train_length", [8, 32])  # positions clamped to npos - 1 = 8 (T = 24); none clamped
def test_cope_scores_are_the_authors_code_on_the_same_weights(train_length):
    """The default CoPE (``position_logits: before_scale``, ``max_pos`` null = training length + 1, the authors'
    ``block_size + 1``): the layer's scores ``q.k / sqrt(d) + term`` equal the authors' attention logits."""
    g = torch.Generator().manual_seed(3)
    q, k = 2 * torch.randn(B, H, T, HEAD_DIM, generator=g), 2 * torch.randn(B, H, T, HEAD_DIM, generator=g)
    cope = random_cope(None, "before_scale", train_length=train_length)
    assert cope.max_pos == train_length + 1
    for layer in range(SHAPE.n_layers):
        table = cope.layers[layer].table.detach()
        expected = authors_cope_logits(q.flatten(0, 1), k.flatten(0, 1), table.T[None], train_length + 1)
        term = cope.score_term(context(layer, torch.zeros(B, T, SHAPE.d_model)), q, k).detach()
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(HEAD_DIM) + term
        assert torch.allclose(scores.flatten(0, 1)[:, SEEN], expected[:, SEEN], atol=1e-5)
    # the variant that adds the term after the scaling (x-transformers', the authors' --cope-nodiv) differs by sqrt(d)
    after = random_cope(None, "after_scale", train_length=train_length)
    after.load_state_dict(cope.state_dict())
    ctx = context(0, torch.zeros(B, T, SHAPE.d_model))
    assert torch.allclose(after.score_term(ctx, q, k), cope.score_term(ctx, q, k) * math.sqrt(HEAD_DIM), atol=1e-4)


def planted(on: Tensor, logit: float = 60.0) -> tuple[Tensor, Tensor]:
    """Queries and keys along one direction: ``q_t . k_s / sqrt(d) = +logit`` for keys ``on``, ``-logit`` off."""
    direction = torch.ones(HEAD_DIM) / math.sqrt(HEAD_DIM)
    size = math.sqrt(logit * math.sqrt(HEAD_DIM))
    q = (size * direction).expand(1, 1, T, HEAD_DIM)
    k = torch.where(on[:, None], 1.0, -1.0) * size * direction
    return q, k.expand(1, 1, T, HEAD_DIM)


def test_cope_counts_the_keys_whose_gates_open():
    cope = ContextualPositions(max_pos=T + 2, head_dim=HEAD_DIM, position_logits="after_scale")  # no clamp
    with torch.no_grad():
        nn.init.normal_(cope.table)
    # every gate 1: relative positions t - s + 1 (the paper's remark)
    q, k = planted(torch.ones(T, dtype=torch.bool))
    relative = (torch.arange(T)[:, None] - torch.arange(T)[None, :] + 1).float()
    assert torch.equal(cope.positions(q, k)[0, 0][SEEN], relative[SEEN])
    # gates 0 on every third key: those are not counted, from any query
    on = torch.arange(T) % 3 != 0
    q, k = planted(on)
    p, term = cope.positions(q, k)[0, 0], cope(q, k)[0, 0].detach()
    for t in range(T):
        for s in range(t + 1):
            count = int(on[s : t + 1].sum())
            assert p[t, s] == pytest.approx(count, abs=1e-6)
            # a whole position: the term is q_t . E[count], no interpolation
            assert term[t, s] == pytest.approx(float(q[0, 0, t] @ cope.table[count]), abs=1e-4)
    # half-open gates interpolate between neighbouring rows of E
    q, k = planted(torch.ones(T, dtype=torch.bool), logit=0.0)  # every gate 1/2: p = (t - s + 1) / 2
    term = cope(q, k)[0, 0].detach()
    z = (q[0, 0] @ cope.table.T).detach()
    t, s = 10, 6  # p = 2.5
    assert term[t, s] == pytest.approx(float(0.5 * z[t, 2] + 0.5 * z[t, 3]), abs=1e-5)


def test_cope_clamps_positions_to_the_last_row():
    cope = ContextualPositions(max_pos=5, head_dim=HEAD_DIM, position_logits="before_scale")
    q, k = planted(torch.ones(T, dtype=torch.bool))
    p = cope.positions(q, k)[0, 0]
    assert p.max() == 4 and p[T - 1, 0] == 4 and p[T - 1, T - 4] == 4 and p[T - 1, T - 3] == 3


# ---- the forget gate ---------------------------------------------------------------------------------------------
def forget_gate(**settings: Any) -> Any:
    return build_encoding({"name": "forget_gate", **settings}, SHAPE, 64)


def test_forget_gate_term_is_x_transformers_data_dependent_alibi_on_the_normed_input():
    gate = forget_gate()
    hidden = 3 * torch.randn(B, T, SHAPE.d_model, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # weights large enough that the gates differ from token to token and head to head
        for layer in gate.gates:
            nn.init.normal_(layer.weight)
            nn.init.normal_(layer.bias)
    for layer in range(SHAPE.n_layers):
        reference = DataDependentAlibi(dim=SHAPE.d_model, heads=H)  # causal, post_log_scale = 1
        with torch.no_grad():
            reference.to_forget_gates[0].weight.copy_(gate.gates[layer].weight)
            reference.to_forget_gates[0].bias.copy_(gate.gates[layer].bias)  # its own init is 5: replaced
        expected = reference(F.rms_norm(hidden, (SHAPE.d_model,)))
        term = gate.score_term(context(layer, hidden), torch.zeros(B, H, T, HEAD_DIM), torch.zeros(B, H, T, HEAD_DIM))
        assert term.shape == (B, H, T, T) and term.dtype == torch.float32 and torch.isfinite(term).all()
        assert torch.allclose(term[..., SEEN], expected[..., SEEN], atol=1e-5)
        # the gate reads the residual stream's direction, not its size (the RMS norm)
        assert torch.allclose(gate.score_term(context(layer, 5 * hidden), None, None), term, atol=1e-5)


def test_forget_gate_starts_as_fox():
    gate = forget_gate()
    weights = torch.stack([layer.weight for layer in gate.gates])
    assert weights.std().item() == pytest.approx(0.02, rel=0.15)  # N(0, 0.02), FoX's initializer_range
    assert all(torch.equal(layer.bias, torch.zeros(H)) for layer in gate.gates)  # f near 1/2
    assert all(torch.equal(layer.bias, torch.full((H,), 5.0)) for layer in forget_gate(bias_init=5).gates)


def test_forget_gate_term_is_nonpositive_and_falls_further_back():
    gate = forget_gate()
    with torch.no_grad():
        for layer in gate.gates:
            nn.init.normal_(layer.weight)
    hidden = torch.randn(B, T, SHAPE.d_model, generator=torch.Generator().manual_seed(2))
    term = gate.score_term(context(0, hidden), None, None)
    assert (term[..., SEEN] <= 0).all() and (term.diagonal(dim1=-2, dim2=-1) == 0).all()
    # moving the key one further back adds log f_s <= 0: non-increasing as s falls (below the diagonal)
    below = torch.ones(T, T - 1, dtype=torch.bool).tril(-1)
    steps = term[..., :, 1:] - term[..., :, :-1]  # term[t, s + 1] - term[t, s] = -log f_{s+1} >= 0
    assert (steps[..., below] >= 0).all() and (steps[..., below] > 1e-3).any()
    log_f = gate.log_forget(0, hidden)
    assert torch.allclose(term[..., T - 1, 3], log_f[..., 4:].sum(-1), atol=1e-5)  # sum over s < j <= t


@pytest.mark.parametrize("inner", ["none", "rope"])
def test_a_forget_gate_that_never_forgets_is_the_inner_encoding(inner):
    model = tiny("forget_gate", "explicit", inner=inner, bias_init=40.0)  # log f = logsigmoid(40) ~ -4e-18
    plain = same_weights(model, tiny({"none": "none", "rope": "rope"}[inner], "explicit"))
    assert torch.allclose(model(tokens()).logits, plain(tokens()).logits, atol=1e-6)
    forgetting = tiny("forget_gate", "explicit", inner=inner)  # b = 0: f near 1/2, another attention
    assert not torch.allclose(same_weights(model, forgetting)(tokens()).logits, plain(tokens()).logits, atol=1e-3)


# ---- both: the model, its paths, and the settings ----------------------------------------------------------------
@pytest.mark.parametrize("name", ["cope", "forget_gate"])
def test_the_term_is_computed_in_fp32_under_bf16_autocast(name):
    encoding = random_cope(8) if name == "cope" else forget_gate()
    with torch.no_grad():
        for parameter in encoding.parameters():
            parameter.normal_(generator=torch.Generator().manual_seed(4))
    g = torch.Generator().manual_seed(5)
    q, k = (torch.randn(B, H, T, HEAD_DIM, generator=g).bfloat16() for _ in range(2))  # autocast's bf16 q, k
    hidden = torch.randn(B, T, SHAPE.d_model, generator=g)  # the residual stream stays fp32
    exact = encoding.score_term(context(0, hidden), q.float(), k.float())
    with torch.autocast("cpu", torch.bfloat16):
        term = encoding.score_term(context(0, hidden), q, k)
    assert term.dtype == torch.float32 and torch.allclose(term, exact, atol=1e-5)  # bf16 math would be ~1e-2 off


def model_with_terms(name: str, attention: str, inner: str) -> Transformer:
    """A tiny model whose terms are not small: CoPE tables drawn N(0, 1) (they start at 0), gates' weights N(0, 1)."""
    model = tiny(name, attention, inner=inner)
    with torch.no_grad():
        for parameter in model.encoding.parameters():
            parameter.normal_(generator=torch.Generator().manual_seed(3))
    return model


@pytest.mark.parametrize("name", ["cope", "forget_gate"])
@pytest.mark.parametrize("inner", ["none", "rope"])
def test_sdpa_and_explicit_paths_agree_in_fp32_and_bf16_autocast(name, inner):
    sdpa, explicit = model_with_terms(name, "sdpa", inner), model_with_terms(name, "explicit", inner)
    x = tokens(40)
    logits = sdpa(x).logits
    assert torch.allclose(logits, explicit(x).logits, atol=1e-5)
    with torch.autocast("cpu", torch.bfloat16):
        low_sdpa, low_explicit = sdpa(x).logits.float(), explicit(x).logits.float()
    scale = logits.abs().max().item()
    assert torch.isfinite(low_sdpa).all() and torch.isfinite(low_explicit).all()
    assert (low_sdpa - low_explicit).abs().max().item() < 0.02 * scale
    assert (low_sdpa - logits).abs().max().item() < 0.02 * scale
    # the term matters: without it the logits move
    without = same_weights(sdpa, tiny("none" if inner == "none" else "rope", "sdpa"))
    assert (without(x).logits - logits).abs().max().item() > 0.01 * scale
    logits.square().sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in sdpa.encoding.parameters())


@pytest.mark.parametrize("inner", ["none", "rope"])
def test_cope_starts_as_its_inner_encoding(inner):
    model = tiny("cope", "sdpa", inner=inner)  # zero tables, as the paper's code: no term at start
    plain = same_weights(model, tiny({"none": "none", "rope": "rope"}[inner], "sdpa"))
    assert torch.allclose(model(tokens()).logits, plain(tokens()).logits, atol=1e-6)
    (model(tokens()).logits.square().sum()).backward()
    assert all(layer.table.grad.abs().sum() > 0 for layer in model.encoding.layers)  # and it learns one


def optimizer_decay(model: Transformer) -> dict[str, float]:
    """Each parameter's weight decay in the optimizer the training module builds for ``model``."""
    from poslab.lightning_modules.base import TransformerModule

    module = TransformerModule(model.cfg, {"lr": 1e-3, "weight_decay": 0.1}, 64)
    module.model = model
    groups = module.configure_optimizers()["optimizer"].param_groups
    decay = {id(p): group["weight_decay"] for group in groups for p in group["params"]}
    return {name: decay[id(p)] for name, p in model.named_parameters()}


def test_cope_tables_are_out_of_weight_decay_as_the_authors_adam():
    """RAM's CoPE trains with its trainer's default ``--optimizer adam``: no weight decay on the tables (nor on
    any other position table here). ``table_weight_decay: true``, the named deviation, decays them."""
    assert type(tiny("cope").encoding).yaml_settings()["table_weight_decay"] is False  # the authors'
    tables = [f"encoding.layers.{layer}.table" for layer in range(2)]
    authors = optimizer_decay(tiny("cope", table_weight_decay=False))
    assert [authors[name] for name in tables] == [0.0, 0.0]
    assert authors["blocks.0.attn.qkv.weight"] == 0.1  # the model's weights still decayed
    decayed = optimizer_decay(tiny("cope", table_weight_decay=True))
    assert [decayed[name] for name in tables] == [0.1, 0.1]
    # the same label: told apart by the setting's column, as randomized RoPE's layer_draws
    assert tiny("cope", table_weight_decay=True).encoding.label() == tiny("cope").encoding.label()


def test_cope_runs_recorded_before_table_weight_decay_read_as_decayed():
    """A results.json or checkpoint from before the setting decayed the tables: read so, not as the new default,
    so that reports set it apart and a resume keeps what it trained."""
    from poslab.config.targets import with_added_settings

    assert build_encoding({"name": "cope"}, SHAPE, 64).table_weight_decay is True  # recorded before the setting
    assert tiny("cope").encoding.no_weight_decay == ()
    recorded = {"encoding": {"name": "cope", "max_pos": 33, "position_logits": "before_scale"}}
    assert with_added_settings(recorded)["encoding"]["table_weight_decay"] is True
    given = {"encoding": {"name": "cope", "table_weight_decay": False}}
    assert with_added_settings(given)["encoding"]["table_weight_decay"] is False


def test_labels():
    assert tiny("cope", max_pos=16).encoding.label() == "cope:16"
    assert tiny("cope", max_pos=16, position_logits="after_scale").encoding.label() == "cope:16:after_scale"
    assert tiny("cope", max_pos=8, inner="rope", base=500_000).encoding.label() == "cope:8:rope:500000"
    assert tiny("forget_gate").encoding.label() == "forget_gate"
    assert tiny("forget_gate", inner="rope").encoding.label() == "forget_gate:rope"


@pytest.mark.parametrize(
    ("name", "settings", "message"),
    [
        ("cope", {"max_pos": 0}, r"encoding.max_pos=0 must be a whole number of at least 1"),
        ("cope", {"max_pos": 2.5}, r"encoding.max_pos=2.5 must be a whole number"),
        ("cope", {"max_pos": True}, r"encoding.max_pos=True must be a whole number"),
        ("cope", {"inner": "alibi"}, r"encoding.inner='alibi' is not allowed;.* allowed: none, rope"),
        ("cope", {"table_weight_decay": "no"}, r"encoding.table_weight_decay='no' must be false .* or true"),
        ("forget_gate", {"inner": "ropes"}, r"encoding.inner='ropes' is not allowed;.* allowed: none, rope"),
        ("forget_gate", {"bias_init": "weak"}, r"encoding.bias_init='weak' must be a finite number"),
        ("forget_gate", {"bias_init": math.inf}, r"encoding.bias_init=inf must be a finite number"),
        ("cope", {"inner": "rope", "base": 0.5}, r"encoding.base=0.5 must be a number greater than 1"),
    ],
)
def test_bad_settings_stop_naming_the_value(name, settings, message):
    with pytest.raises(ConfigError, match=message):
        tiny(name, **settings)


@pytest.mark.parametrize("name", ["cope", "forget_gate"])
def test_flex_is_refused_at_start(name):
    with pytest.raises(ConfigError, match=rf"model.attention=flex .* {name!r} .* takes sdpa, explicit"):
        tiny(name, "flex")
