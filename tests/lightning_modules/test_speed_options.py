"""Speed options: ``model.compile`` (one compiled run under bf16-mixed, whose weights load into an uncompiled model;
the ``_orig_mod.`` prefix on save/load), and ``model.attention=flex`` (FlexAttention)
computing what the bias-mask path computes."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encodings.alibi import AlibiEncoding
from poslab.errors import ConfigError
from poslab.lightning_modules.base import log_length_scale
from poslab.model import ModelConfig, Transformer
from poslab.running.builders import build_datamodule, build_module, load_run
from poslab.running.training import run
from poslab.runs.checkpoints import save_model, uncompiled_state_dict
from poslab.runs.files import MODEL_FILE
from tests.conftest import compose_config, tiny_model

# the compiler's start-up in a process (inductor, FlexAttention) is paid once: the module's tests on one worker
pytestmark = pytest.mark.xdist_group("test_speed_options")

FLEX_SETTINGS = {"alibi": {"slopes": None}, "rope": {"base": 10_000}}


def tiny(encoding: str, attention: str, **settings) -> Transformer:
    return tiny_model(encoding, attention, n_heads=4, max_length=512, **{**FLEX_SETTINGS[encoding], **settings})


@pytest.mark.slow
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
def test_a_compiled_model_trains_under_bf16_mixed_and_its_weights_load_into_an_uncompiled_model(tmp_path, monkeypatch):
    """model.compile with autocast: the rotation (complex fp32), the fp32 DeltaMLP block and the clipping; then the
    run's model.pt (no ``_orig_mod.`` prefix) loads into an uncompiled model. One compiled run for both: a cold
    inductor compiling C++ kernels is this test's time (an fp32 compiled run was a second one)."""
    compiled: list[torch.nn.Module] = []
    original = torch.nn.Module.compile

    def compile_and_record(self, *args, **kwargs):
        compiled.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "compile", compile_and_record)
    overrides = ["debug=small", "encoding=increments_layer", "task.batch_size=8", "trainer.precision=bf16-mixed"]
    overrides.append("optimizer.grad_clip=1.0")
    # one layer and one evaluation length: compiling (each new shape again) is this test's time
    settings = ["model.compile=true", "model.n_layers=1", "trainer.max_steps=3", "task.eval_lengths=[32]", "~logger"]
    results = run(compose_config([*overrides, *settings], tmp_path))
    assert results["steps"] == 3 and all(v == v for row in results["figures"].values() for v in row.values())
    assert len(compiled) == 1 and compiled[0]._compiled_call_impl is not None  # trained through the compiled forward

    saved = torch.load(tmp_path / MODEL_FILE, weights_only=True)["state_dict"]
    assert saved and not any("_orig_mod" in key for key in saved)
    _, module = load_run(tmp_path)  # into an uncompiled model, in fp32
    assert module.model._compiled_call_impl is None
    assert all(p.dtype == torch.float32 for p in module.parameters())
    trained = compiled[0].state_dict()
    assert all(torch.equal(v.float(), trained[k].float()) for k, v in module.model.state_dict().items())
    tokens = torch.randint(0, 16, (4, 32), generator=torch.Generator().manual_seed(0))
    compiled[0].eval(), module.model.eval()
    with torch.no_grad():  # the compiled model's own (uncompiled) forward on its weights: the loaded model computes it
        assert torch.equal(module.model(tokens).logits, compiled[0].forward(tokens).logits)


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
            # one factor for every score, and one per query (log-length scaling, per position)
            for score_scale in (1.0, math.log(length) / math.log(64), log_length_scale(length, 64)):
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
