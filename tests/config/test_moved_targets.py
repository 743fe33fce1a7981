"""A run written before poslab/ was regrouped into layers names its callbacks, loggers and Hydra callbacks by their old
modules (``poslab.callbacks.Throughput``): it still loads, resumes and compares as a run written today."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from poslab.config.targets import MOVED_MODULES, current_target, flatten
from poslab.running.builders import load_saved_config

OLD_CONFIG = {
    "task": {
        "_target_": "poslab.datamodules.SyntheticDataModule",
        "module": "poslab.lightning_modules.SyntheticTaskModule",
        "name": "copy",
    },
    "callbacks": {
        "throughput": {"_target_": "poslab.callbacks.Throughput"},
        "progress_bar": {"_target_": "poslab.callbacks.StepProgressBar", "refresh": 1},
    },
    "logger": {"csv": {"_target_": "poslab.loggers.CSVLogger", "save_dir": "."}},
    "trainer": {"_target_": "lightning.pytorch.Trainer"},
}


@pytest.mark.parametrize("old", sorted(MOVED_MODULES))
def test_every_moved_module_is_where_the_table_says(old):
    new_module = MOVED_MODULES[old].rstrip(".")
    importlib.import_module(new_module)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old.rstrip("."))


def test_an_old_config_loads_with_its_targets_where_they_are_now():
    config = load_saved_config({"config": OLD_CONFIG}, Path("old/model.pt"))
    assert config.callbacks.throughput._target_ == "poslab.running.callbacks.Throughput"
    assert config.callbacks.progress_bar._target_ == "poslab.running.callbacks.StepProgressBar"
    assert config.callbacks.progress_bar.refresh == 1
    assert config.logger.csv._target_ == "poslab.running.loggers.CSVLogger"
    assert config.task._target_ == "poslab.datamodules.SyntheticDataModule"  # not moved: unchanged
    assert OLD_CONFIG["callbacks"]["throughput"]["_target_"] == "poslab.callbacks.Throughput"  # the input is kept


def test_an_old_and_a_new_config_compare_equal():
    new = {
        **OLD_CONFIG,
        "callbacks": {
            "throughput": {"_target_": "poslab.running.callbacks.Throughput"},
            "progress_bar": {"_target_": "poslab.running.callbacks.StepProgressBar", "refresh": 1},
        },
        "logger": {"csv": {"_target_": "poslab.running.loggers.CSVLogger", "save_dir": "."}},
    }
    assert flatten(OLD_CONFIG) == flatten(new)
    assert flatten({"a": {"_target_": "poslab.callbacks.X"}, "b": "poslab.callbacks.X"}) == {
        "a._target_": "poslab.running.callbacks.X",
        "b": "poslab.callbacks.X",  # only a _target_ is renamed, never a plain string setting
    }


def test_current_target_leaves_other_targets_and_values_alone():
    assert current_target("poslab.encodings.rope.RoPE") == "poslab.encodings.rope.RoPE"
    assert current_target("poslab.callbacksX.Y") == "poslab.callbacksX.Y"
    assert current_target(3) == 3
