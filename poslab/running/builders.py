"""Everything built from a composed config: the datamodule, the model config, the LightningModule, the
loggers and callbacks, and a finished run loaded back (its config, trained module and datamodule).

Training (``poslab.running.training``) and every analysis use these same builders, so an analysis rebuilds exactly
the model a run trained, whatever its encoding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.errors import InstantiationException
from omegaconf import DictConfig, OmegaConf

from poslab.config.targets import check_loaded_config, renamed_targets
from poslab.encodings import encoding_class, fill_length_settings
from poslab.errors import ConfigError, MissingRunError, PoslabError
from poslab.model import ModelConfig
from poslab.runs.checkpoints import uncompiled_state_dict
from poslab.runs.files import MODEL_FILE


def build_datamodule(cfg: DictConfig) -> L.LightningDataModule:
    task = OmegaConf.to_container(cfg.task, resolve=True)
    task.pop("module")
    try:
        return hydra.utils.instantiate(task, seed=cfg.seed)
    except InstantiationException as error:  # Hydra wraps what the constructor raised: keep poslab's own message
        cause = error.__cause__
        if isinstance(cause, PoslabError):
            raise cause from None
        raise


def build_model_config(
    cfg: DictConfig, vocab_size: int, n_outputs: int, datamodule: L.LightningDataModule | None = None
) -> ModelConfig:
    settings = OmegaConf.to_container(cfg.model, resolve=True)
    encoding = OmegaConf.to_container(cfg.encoding, resolve=True)
    cls = encoding_class(str(encoding.get("name")))
    # settings an encoding takes from the data when left null (e.g. rand_axial's paragraph density)
    for key in cls.corpus_settings:
        if encoding.get(key) is None and datamodule is not None and hasattr(datamodule, key):
            encoding[key] = getattr(datamodule, key)
    train_length = getattr(datamodule, "train_length", None)
    if train_length is not None:  # settings tied to the length trained on (FIRE's threshold, T5's max_distance)
        encoding = fill_length_settings(cls, encoding, datamodule.max_length, train_length)
    try:
        return ModelConfig(vocab_size=vocab_size, n_outputs=n_outputs, encoding=encoding, **settings)
    except TypeError as error:
        allowed = sorted(ModelConfig.__dataclass_fields__)
        raise ConfigError(
            f"the model config has a key ModelConfig does not know ({error}); allowed: {allowed}."
        ) from error


def build_module(cfg: DictConfig, datamodule: L.LightningDataModule) -> L.LightningModule:
    model = build_model_config(cfg, datamodule.vocab_size, datamodule.num_classes, datamodule)
    module_class = hydra.utils.get_class(cfg.task.module)
    return module_class(
        model=model,
        optimizer=OmegaConf.to_container(cfg.optimizer, resolve=True),
        max_length=datamodule.max_length,
        **datamodule.module_arguments(),
    )


def instantiate_all(section: DictConfig | None) -> list[Any]:
    """Instantiate every entry of a group like ``logger`` or ``callbacks`` that has a ``_target_``."""
    if not section:
        return []
    return [hydra.utils.instantiate(entry) for entry in section.values() if entry and "_target_" in entry]


def load_run(run_dir: str | Path, map_location: str = "cpu") -> tuple[DictConfig, Any]:
    """(config, LightningModule with the trained weights, in eval mode) of a finished run directory."""
    cfg, module, _ = load_run_and_data(run_dir, map_location)
    return cfg, module


def load_saved_config(saved: Any, path: Path) -> DictConfig:
    """The config stored in a loaded ``model.pt``, checked before anything is built from it: its ``_target_``s
    must name poslab's own classes (``poslab.config.targets``), its datamodule a LightningDataModule and its
    ``task.module`` a LightningModule. A file without a config is not a model poslab wrote."""
    config = saved.get("config") if isinstance(saved, dict) else None
    if not isinstance(config, dict) or not isinstance(config.get("task"), dict):
        raise MissingRunError(f"{path} holds no run config (config.task): is it a model.pt written by train.py?")
    config = renamed_targets(config)
    check_loaded_config(config, str(path))
    task = config["task"]
    if "context_length" in task and "eval_lengths" not in task:
        # a language model saved before evaluation lengths existed: it was built (a learned table) for its context
        task["eval_lengths"] = [task["context_length"]]
    return OmegaConf.create(config)


def load_run_and_data(run_dir: str | Path, map_location: str = "cpu") -> tuple[DictConfig, Any, Any]:
    """``load_run`` plus the run's datamodule, the one the model was built with (analyses read its held-out
    data; building a second one would prepare or map the corpus again)."""
    path = Path(run_dir) / MODEL_FILE
    if not path.is_file():
        raise MissingRunError(f"{path} does not exist: is {run_dir} the directory of a finished train.py run?")
    saved = torch.load(path, map_location=map_location, weights_only=True)
    cfg = load_saved_config(saved, path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    module.model.load_state_dict(uncompiled_state_dict(saved["state_dict"]))
    module.eval()
    return cfg, module, datamodule
