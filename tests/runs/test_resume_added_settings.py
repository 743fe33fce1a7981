"""A checkpoint written before a setting existed still resumes when the setting is left at its default, and
is refused, naming it, when the setting is given another value."""

from __future__ import annotations

from omegaconf import OmegaConf

from poslab.running.compose import encoding_at_default
from poslab.runs.checkpoints import config_changes
from tests.conftest import compose_config


def saved_without(cfg, *keys: str) -> dict:
    """The resolved config as an older poslab would have recorded it: without ``keys`` of the encoding."""
    saved = OmegaConf.to_container(cfg, resolve=True)
    for key in keys:
        del saved["encoding"][key]
    return saved


def test_settings_added_since_the_checkpoint_at_their_defaults_are_no_change(tmp_path):
    cfg = compose_config(["encoding=rope", "task=lag"], tmp_path)
    defaults = encoding_at_default(cfg)
    assert {"encoding.scaling", "encoding.original_length", "encoding.base"} <= set(defaults)
    saved = saved_without(cfg, "scaling", "original_length")
    current = OmegaConf.to_container(cfg, resolve=True)
    assert config_changes(saved, current, (), defaults) == []
    # without the rule the same resume is refused for two settings the old run never had
    assert config_changes(saved, current) == [
        f"encoding.original_length: (not set) → {current['encoding']['original_length']}",
        "encoding.scaling: (not set) → none",
    ]


def test_a_setting_the_checkpoint_lacks_given_another_value_is_a_change(tmp_path):
    cfg = compose_config(
        ["encoding=rope", "task=lag", "encoding.scaling=linear", "encoding.scaling_factor=2"], tmp_path
    )
    defaults = encoding_at_default(cfg)
    assert "encoding.scaling" not in defaults and "encoding.scaling_factor" not in defaults
    saved = saved_without(cfg, "scaling")
    changes = config_changes(saved, OmegaConf.to_container(cfg, resolve=True), (), defaults)
    assert changes == ["encoding.scaling: (not set) → linear"]
    # a setting the checkpoint has keeps being compared, at its default or not
    saved["encoding"]["base"] = 500000
    assert "encoding.base: 500000 → 10000" in config_changes(
        saved, OmegaConf.to_container(cfg, resolve=True), (), defaults
    )


def test_task_settings_added_since_the_checkpoint_at_their_defaults_are_no_change(tmp_path):
    cfg = compose_config(["encoding=rope", "task=counting"], tmp_path)
    defaults = encoding_at_default(cfg)
    assert {"task.train_lengths", "task.program_length"} <= set(defaults)
    saved = OmegaConf.to_container(cfg, resolve=True)
    del saved["task"]["train_lengths"], saved["task"]["program_length"]
    assert config_changes(saved, OmegaConf.to_container(cfg, resolve=True), (), defaults) == []
    varied = compose_config(["encoding=rope", "task=counting", "task.train_lengths=[8,32]"], tmp_path)
    changes = config_changes(saved, OmegaConf.to_container(varied, resolve=True), (), encoding_at_default(varied))
    assert changes == ["task.train_lengths: (not set) → [8, 32]"]


def test_a_resume_under_another_seed_is_a_change():
    saved = {"seed": 0, "encoding": {"name": "rope"}, "optimizer": {"lr": 1e-3}}
    current = {"seed": 1, "encoding": {"name": "rope"}, "optimizer": {"lr": 5e-4}}  # the optimizer may change
    assert config_changes(saved, current) == ["seed: 0 → 1"]
    assert config_changes(saved, current, ["seed"]) == []  # resume_allow_changes=[seed]: on purpose
