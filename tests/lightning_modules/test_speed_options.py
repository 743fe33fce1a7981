"""Speed options: ``model.compile`` (and the ``_orig_mod.`` prefix on save/load; in fp32 and under bf16-mixed,
in one module: the compiler's start-up is paid once a worker), and ``model.attention=flex`` (FlexAttention)
computing what the bias-mask path computes."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.builders import build_datamodule, build_module, load_run
from poslab.encodings.alibi import AlibiEncoding
from poslab.errors import ConfigError
from poslab.model import ModelConfig, Transformer
from poslab.runs.checkpoints import save_model, uncompiled_state_dict
from poslab.runs.files import MODEL_FILE
from poslab.training import run
from tests.conftest import compose_config, fit_quietly, tiny_model

FLEX_SETTINGS = {"alibi": {"slopes": None}, "rope": {"base": 10_000}}


def tiny(encoding: str, attention: str, **settings) -> Transformer:
    return tiny_model(encoding, attention, n_heads=4, max_length=512, **{**FLEX_SETTINGS[encoding], **settings})


@pytest.mark.slow
def test_compiled_model_trains_and_its_weights_load_into_an_uncompiled_model(tmp_path):

    cfg = compose_config(["encoding=alibi", "model.compile=true", "task.batch_size=8", "trainer.max_steps=3"], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    before = {k: v.clone() for k, v in module.model.state_dict().items()}
    fit_quietly(module, datamodule, steps=3)
    assert module.trainer.global_step == 3
    assert module.model._compiled_call_impl is not None  # trained through the compiled forward
    assert not any(torch.equal(before[k], v) for k, v in module.model.state_dict().items() if v.ndim == 2)

    save_model(tmp_path / MODEL_FILE, module.model, {})
    saved = torch.load(tmp_path / MODEL_FILE, weights_only=True)["state_dict"]
    assert not any("_orig_mod" in key for key in saved)
    plain = build_module(cfg, datamodule).model
    plain.load_state_dict(saved)
    tokens = torch.randint(0, 16, (8, 32))
    with torch.no_grad():
        assert torch.equal(plain(tokens).logits, module.model.forward(tokens).logits)


def test_state_dicts_with_the_orig_mod_prefix_save_and_load(tmp_path):
    from omegaconf import OmegaConf

    cfg = compose_config(["encoding=rope"], tmp_path)
    module = build_module(cfg, build_datamodule(cfg))
    wrapped = torch.compile(module.model)  # the wrapper module: names get the `_orig_mod.` prefix
    prefixed = wrapped.state_dict()
    assert all(key.startswith("_orig_mod.") for key in prefixed)
    assert uncompiled_state_dict(prefixed).keys() == module.model.state_dict().keys()
    assert uncompiled_state_dict(module.model.state_dict()).keys() == module.model.state_dict().keys()

    # model.pt written from the wrapper, and one written with the prefix kept: both load back
    resolved = OmegaConf.to_container(cfg, resolve=True)
    save_model(tmp_path / MODEL_FILE, wrapped, resolved)
    _, loaded = load_run(tmp_path)
    assert all(torch.equal(loaded.model.state_dict()[k], v) for k, v in module.model.state_dict().items())
    torch.save({"state_dict": prefixed, "config": resolved}, tmp_path / MODEL_FILE)
    _, loaded = load_run(tmp_path)
    assert all(torch.equal(loaded.model.state_dict()[k], v) for k, v in module.model.state_dict().items())


@pytest.mark.slow
def test_a_compiled_model_trains_under_bf16_mixed(tmp_path):
    """model.compile with autocast: the rotation (complex fp32), the fp32 DeltaMLP block and the clipping."""
    overrides = ["debug=fast", "encoding=increments_layer", "task.batch_size=8", "trainer.precision=bf16-mixed"]
    overrides.append("optimizer.grad_clip=1.0")
    # one layer and one evaluation length: compiling (each new shape again) is this test's time
    settings = ["model.compile=true", "model.n_layers=1", "trainer.max_steps=3", "task.eval_lengths=[32]", "~logger"]
    results = run(compose_config([*overrides, *settings], tmp_path))
    assert results["steps"] == 3 and all(v == v for row in results["figures"].values() for v in row.values())
    _, module = load_run(tmp_path)  # the compiled run's model.pt loads into an uncompiled model
    assert all(p.dtype == torch.float32 for p in module.parameters())


@pytest.mark.parametrize(
    ("encoding", "settings"),
    [("alibi", {}), ("alibi", {"slopes": [0.5, 0.25, 1.0, 0.0625]}), ("rope", {})],
    ids=["alibi_geometric", "alibi_slopes", "rope"],
)
@pytest.mark.slow
def test_flex_attention_matches_the_bias_mask_path(encoding, settings):
    sdpa, flex = tiny(encoding, "sdpa", **settings), tiny(encoding, "flex", **settings)
    flex.load_state_dict(sdpa.state_dict())
    with torch.no_grad():  # FlexAttention has no backward on CPU
        for length in (200, 256):  # one length that ends inside a 128 block, one that fills its blocks
            tokens = torch.randint(0, 16, (2, length))
            for score_scale in (1.0, math.log(length) / math.log(64)):
                expected = sdpa(tokens, score_scale=score_scale).logits
                got = flex(tokens, score_scale=score_scale).logits
                assert (got - expected).abs().max() < 1e-5, (length, score_scale)


def test_flex_model_asked_for_weights_takes_the_explicit_path():
    sdpa, flex = tiny("alibi", "sdpa"), tiny("alibi", "flex")
    flex.load_state_dict(sdpa.state_dict())
    tokens = torch.randint(0, 16, (2, 40))
    out = flex(tokens, return_attention=True)  # with gradients: the explicit path needs no FlexAttention backward
    assert len(out.attention) == 2 and out.attention[0].shape == (2, 4, 40, 40)
    reference = sdpa(tokens, return_attention=True)
    assert torch.allclose(out.logits, reference.logits, atol=1e-6)
    assert torch.allclose(out.attention[1], reference.attention[1], atol=1e-6)


def test_flex_says_it_cannot_train_on_cpu():
    model = tiny("alibi", "flex")
    with pytest.raises(ConfigError, match="model.attention=flex cannot train on CPU"):
        model(torch.randint(0, 16, (1, 8)))


def test_attention_values_and_flex_without_a_score_mod_are_refused(monkeypatch):
    with pytest.raises(ConfigError, match="model.attention='fast' is not allowed;.* takes one of sdpa, explicit, flex"):
        ModelConfig(vocab_size=4, n_outputs=4, attention="fast")
    monkeypatch.setattr(AlibiEncoding, "score_mod", lambda self: None)
    with pytest.raises(ConfigError, match="needs the score bias of encoding 'alibi' as a score_mod"):
        tiny("alibi", "flex")
    tiny("rope", "flex")  # no bias, no score_mod needed
