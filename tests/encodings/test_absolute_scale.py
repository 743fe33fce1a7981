"""Absolute encodings sized against the token embeddings (docs/absolute_scale.md): the learned table starts as the
token embeddings do, and the sinusoid multiplies them by sqrt(d_model) as Vaswani et al. (capped at unit scale)."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encodings import PositionInputs
from poslab.encodings.sinusoid import paper_embedding_scale, sinusoids
from poslab.model import ModelConfig, Transformer
from poslab.running.compose import compose_config


def model(encoding: dict, init_std: float | None, d_model: int = 128) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=16, n_outputs=16, d_model=d_model, n_heads=4, init_std=init_std, encoding=encoding)
    return Transformer(cfg, max_length=512)


@pytest.mark.parametrize(("init_std", "expected"), [(0.02, 0.02), (None, 1.0)])
def test_a_learned_table_left_null_starts_as_the_token_embeddings(init_std: float | None, expected: float) -> None:
    transformer = model({"name": "learned", "init_std": None}, init_std)
    table_std = transformer.encoding.table.weight.std().item()
    token_std = transformer.embed.weight.std().item()
    assert table_std == pytest.approx(expected, rel=0.05)  # 512 x 128 draws: the std within 1%
    assert table_std == pytest.approx(token_std, rel=0.2)  # 16 x 128 token draws: within a few percent
    assert transformer.encoding.resolved_settings["init_std"] == (init_std if init_std is not None else None)


def test_a_learned_table_keeps_an_init_std_given() -> None:
    transformer = model({"name": "learned", "init_std": 0.5}, 0.02)
    assert transformer.encoding.table.weight.std().item() == pytest.approx(0.5, rel=0.05)
    assert "init_std" not in transformer.encoding.filled_settings


@pytest.mark.parametrize(
    ("init_std", "d_model", "scale"), [(0.02, 128, math.sqrt(128)), (None, 64, 1.0), (0.2, 64, 5.0)]
)
def test_the_sinusoid_scales_tokens_as_the_paper_up_to_unit_scale(init_std, d_model: int, scale: float) -> None:
    transformer = model({"name": "sinusoid", "embedding_scale": None}, init_std, d_model)
    encoding = transformer.encoding
    assert encoding.embedding_scale == pytest.approx(scale, rel=1e-12)
    assert encoding.resolved_settings["embedding_scale"] == pytest.approx(scale, rel=1e-12)
    tokens = torch.randn(2, 10, d_model, generator=torch.Generator().manual_seed(1))
    inputs = PositionInputs.from_tokens(torch.zeros(2, 10, dtype=torch.long))
    added, _ = encoding.begin(tokens, inputs)
    expected = tokens * scale + sinusoids(inputs.positions, d_model)
    torch.testing.assert_close(added, expected, rtol=1e-6, atol=1e-6)
    assert scale * (init_std or 1.0) <= 1.0 + 1e-12  # never above the paper's unit-scale tokens


def test_the_paper_scale_is_sqrt_d_model_below_the_cap() -> None:
    assert paper_embedding_scale(512, 512**-0.5) == pytest.approx(math.sqrt(512))  # Vaswani's own init: unit tokens
    assert paper_embedding_scale(512, 0.02) == pytest.approx(math.sqrt(512))
    assert paper_embedding_scale(64, None) == 1.0


def test_an_older_record_without_the_setting_rebuilds_as_it_ran() -> None:
    """A run recorded before ``embedding_scale`` existed added its embeddings as they were: its checkpoint must
    rebuild so, not with the newer default."""
    encoding = model({"name": "sinusoid", "base": 10000}, 0.02).encoding
    assert encoding.embedding_scale == 1.0
    assert "embedding_scale" not in encoding.filled_settings


def test_the_composed_configs_leave_both_to_the_model(tmp_path) -> None:
    for name, key in (("learned", "init_std"), ("sinusoid", "embedding_scale")):
        assert compose_config([f"encoding={name}", "corpus=synthetic"], tmp_path).encoding[key] is None


def recorded(name: str, config_value: object, filled: object, *, with_key: bool = True) -> dict:
    """A results.json's config and ``encoding_settings`` for one encoding setting (the sinusoid's
    ``embedding_scale`` or the table's ``init_std``), as a run of an older or newer poslab writes them."""
    key = "embedding_scale" if name == "sinusoid" else "init_std"
    encoding = {"name": name, **({key: config_value} if with_key else {})}
    settings = {"name": name, **({key: filled} if with_key else {})}
    return {"config": {"encoding": encoding, "model": {"init_std": 0.02}, "seed": 0}, "encoding_settings": settings}


def test_reports_compare_what_ran_not_the_null_the_config_holds() -> None:
    from poslab.runs.results import run_settings

    def scale(result: dict) -> object:
        settings = run_settings(result)
        return settings.get("encoding.embedding_scale", settings.get("encoding.init_std"))

    # a sinusoid recorded before the setting existed added its tokens as they were: 1, not the newer default
    assert scale(recorded("sinusoid", None, None, with_key=False)) == 1.0
    assert scale(recorded("sinusoid", None, math.sqrt(128))) == pytest.approx(math.sqrt(128))
    assert scale(recorded("sinusoid", None, 1.0)) == 1.0  # a PyTorch-initialised model: the same row as before
    # a learned table: null in both configs, but N(0, 1) before and N(0, 0.02) now in the language models
    assert scale(recorded("learned", None, None)) is None
    assert scale(recorded("learned", None, 0.02)) == 0.02


def test_an_older_sinusoid_checkpoint_resumes_only_as_it_ran(tmp_path) -> None:
    from omegaconf import OmegaConf

    from poslab.config.targets import with_added_settings
    from poslab.running.compose import encoding_at_default
    from poslab.runs.checkpoints import config_changes

    cfg = compose_config(["encoding=sinusoid", "corpus=synthetic"], tmp_path)
    saved = OmegaConf.to_container(cfg, resolve=True)
    del saved["encoding"]["embedding_scale"]  # as poslab wrote it before the setting existed
    now = OmegaConf.to_container(cfg, resolve=True)
    assert config_changes(with_added_settings(saved), now, (), encoding_at_default(cfg)) == [
        "encoding.embedding_scale: 1.0 → None"
    ]
    as_it_ran = compose_config(["encoding=sinusoid", "corpus=synthetic", "encoding.embedding_scale=1"], tmp_path)
    current = OmegaConf.to_container(as_it_ran, resolve=True)
    assert config_changes(with_added_settings(saved), current, (), encoding_at_default(as_it_ran)) == []


@pytest.mark.parametrize(("init_std", "expected"), [(0.02, 0.02), (None, 1.0)])
def test_bipes_intra_table_left_null_starts_as_the_token_embeddings(init_std: float | None, expected: float) -> None:
    encoding = model({"name": "bipe", "init_std": None}, init_std).encoding
    assert encoding.table.weight.std().item() == pytest.approx(expected, rel=0.1)  # 128 x 128 draws
    assert encoding.resolved_settings["init_std"] == init_std


def test_bipes_intra_sinusoids_scale_the_tokens_as_the_sinusoid_does() -> None:
    encoding = model({"name": "bipe", "intra": "sinusoid"}, 0.02).encoding
    tokens = torch.randn(1, 6, 128, generator=torch.Generator().manual_seed(2))
    inputs = PositionInputs.from_tokens(torch.zeros(1, 6, dtype=torch.long))
    inputs.coordinates["sentence"] = torch.zeros(1, 6)  # one segment: the intra index is the position
    added, _ = encoding.begin(tokens, inputs)
    expected = tokens * math.sqrt(128) + sinusoids(torch.arange(6.0)[None], 128)
    torch.testing.assert_close(added, expected, rtol=1e-5, atol=1e-5)
