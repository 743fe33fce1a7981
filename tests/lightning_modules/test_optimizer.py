"""The optimizer a training module builds (poslab.lightning_modules.base): which parameters are decayed, the learning
rate schedule at a few steps; and the model it trains (poslab.model): tied embeddings, and which modules the
``init_std`` initialisation leaves to their own."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from poslab.encodings import ENCODINGS
from poslab.errors import ConfigError
from poslab.lightning_modules.base import TransformerModule, lr_factor
from poslab.model import ModelConfig, Transformer

WEIGHT_DECAY = 0.1


def module(encoding: dict, **model) -> TransformerModule:
    torch.manual_seed(0)
    settings = {"n_layers": 2, "n_heads": 2, "d_model": 32, **model}
    cfg = ModelConfig(vocab_size=16, n_outputs=16, encoding=encoding, **settings)
    optimizer = {"lr": 1e-3, "weight_decay": WEIGHT_DECAY, "schedule": "cosine", "warmup_steps": 10}
    return TransformerModule(cfg, {**optimizer, "min_lr_ratio": 0.1, "total_steps": 100}, max_length=64)


def decay_of(built: TransformerModule) -> dict[str, float]:
    """Each parameter's weight decay in the optimizer, by name."""
    groups = built.configure_optimizers()["optimizer"].param_groups
    decay = {id(p): group["weight_decay"] for group in groups for p in group["params"]}
    assert len(decay) == sum(len(group["params"]) for group in groups)  # a parameter in one group only
    return {name: decay[id(p)] for name, p in built.model.named_parameters()}


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_norms_biases_and_each_encodings_named_parameters_are_not_decayed(name):
    """Zero decay: every 0- or 1-dimensional parameter (norms' gains, biases, per-head scalars) and what the encoding
    names in ``no_weight_decay`` (each a parameter it has); every other one is decayed. Every position table (an
    ``nn.Embedding`` or a ``table`` of the encoding) is out of decay, as the YAML's settings build it."""
    cls = ENCODINGS[name]
    settings = {**cls.yaml_settings(), **{key: 0.15 for key in cls.corpus_settings}}
    built = module({"name": name, **settings})
    decay, encoding = decay_of(built), built.model.encoding
    own = {f"encoding.{n}" for n, _ in encoding.named_parameters()}
    named = {f"encoding.{n}" for n in encoding.no_weight_decay}
    assert named <= own, f"{name} names parameters it does not have: {sorted(named - own)}"
    for parameter_name, p in built.model.named_parameters():
        expected = 0.0 if p.ndim < 2 or parameter_name in named else WEIGHT_DECAY
        assert decay[parameter_name] == expected, parameter_name
    tables = {f"encoding.{n}.weight" for n, m in encoding.named_modules() if isinstance(m, nn.Embedding)}
    tables |= {n for n in own if n.rsplit(".", 1)[-1] in ("table", "table.weight")}
    assert all(decay[n] == 0.0 for n in tables), {n: decay[n] for n in tables}


def test_the_models_own_weights_are_decayed_and_its_norms_and_biases_not():
    decay = decay_of(module({"name": "rope"}, norm="layernorm", bias=True))
    for name in ("embed.weight", "blocks.0.attn.qkv.weight", "blocks.1.mlp.down.weight", "head.weight"):
        assert decay[name] == WEIGHT_DECAY, name
    for name in ("blocks.0.norm1.weight", "blocks.0.norm1.bias", "blocks.0.attn.qkv.bias", "head.bias"):
        assert decay[name] == 0.0, name


@pytest.mark.parametrize(("step", "factor"), [(0, 0.1), (9, 1.0), (10, 1.0), (55, 0.55), (100, 0.1), (150, 0.1)])
def test_warmup_then_cosine_to_the_floor(step, factor):
    """Warm-up 10, total 100, floor 0.1: (step + 1) / 10 up to step 9, then a cosine from 1 at step 10 (progress 0)
    to 0.1 at step 100 (progress (55 - 10) / 90 = 1/2 gives 0.1 + 0.9 / 2), held there after."""
    assert lr_factor(step, 10, 100, "cosine", 0.1) == pytest.approx(factor)


def test_the_optimizer_steps_through_the_schedule():
    optimizer_and_schedule = module({"name": "rope"}).configure_optimizers()
    optimizer, schedule = optimizer_and_schedule["optimizer"], optimizer_and_schedule["lr_scheduler"]["scheduler"]
    rates = []
    for _ in range(101):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    assert [rates[s] / 1e-3 for s in (0, 9, 10, 55, 100)] == pytest.approx([0.1, 1.0, 1.0, 0.55, 0.1])
    assert lr_factor(3, 10, 100, "constant", 0.1) == pytest.approx(0.4)  # constant: the same warm-up
    assert lr_factor(50, 10, 100, "constant", 0.1) == 1.0


def model(**settings) -> Transformer:
    torch.manual_seed(0)
    base = {"n_layers": 2, "n_heads": 2, "d_model": 64, "norm": "layernorm", "bias": True}
    cfg = ModelConfig(vocab_size=16, n_outputs=16, **{**base, **settings})
    return Transformer(cfg, max_length=64)


def test_tied_embeddings_are_one_tensor_and_the_head_has_no_bias():
    tied, untied = model(tie_embeddings=True), model(tie_embeddings=False)
    assert tied.head.weight is tied.embed.weight and tied.head.bias is None  # bias: true, but not with tying
    names = [name for name, _ in tied.named_parameters()]
    assert "head.weight" not in names and "embed.weight" in names  # one parameter, decayed and updated once
    assert untied.num_parameters() - tied.num_parameters() == 16 * 64 + 16  # the head's own weight and bias
    tokens = torch.randint(0, 16, (2, 8))
    tied(tokens).logits.sum().backward()
    assert tied.embed.weight.grad is not None and tied.embed.weight.grad.abs().sum() > 0
    with pytest.raises(ConfigError, match="tie_embeddings needs as many outputs as input symbols"):
        ModelConfig(vocab_size=16, n_outputs=4, tie_embeddings=True)


def test_init_std_draws_the_models_own_matrices_and_leaves_the_encodings_alone():
    """``init_std``: every ``nn.Linear`` and ``nn.Embedding`` of the model N(0, init_std), their biases 0; norms and
    every module of the encoding keep their own initialisation (the increments' zero output layer and the bias
    that gives δ = 1, the forget gates' N(0, 0.02) and bias)."""
    from poslab.encodings.increments import DeltaMLP

    net = model(init_std=0.5, encoding={"name": "increments_shared", "delta_hidden": 64})
    for name in ("embed", "blocks.0.attn.qkv", "blocks.1.mlp.up", "head"):
        layer = net.get_submodule(name)
        assert layer.weight.std().item() == pytest.approx(0.5, rel=0.15), name
        assert getattr(layer, "bias", None) is None or torch.all(layer.bias == 0), name
    assert torch.all(net.blocks[0].norm1.weight == 1) and torch.all(net.blocks[0].norm1.bias == 0)
    delta = net.encoding.delta
    assert torch.all(delta.out.weight == 0) and delta.out.bias.item() == pytest.approx(DeltaMLP.initial_bias(None))
    assert delta.up.weight.std().item() < 0.3  # PyTorch's own (uniform, 1 / sqrt(64) wide), not N(0, 0.5)
    gates = model(init_std=0.5, encoding={"name": "forget_gate", "bias_init": 5.0}).encoding.gates
    assert gates[0].weight.std().item() == pytest.approx(0.02, rel=0.3) and torch.all(gates[0].bias == 5.0)
    default = model(init_std=None)  # null: PyTorch's own, N(0, 1) for the embeddings
    assert default.embed.weight.std().item() == pytest.approx(1.0, rel=0.2)
    tied = model(init_std=0.5, tie_embeddings=True)
    assert tied.head.weight is tied.embed.weight and tied.embed.weight.std().item() == pytest.approx(0.5, rel=0.15)
    assert not math.isclose(tied.embed.weight.std().item(), 1.0, rel_tol=0.2)
