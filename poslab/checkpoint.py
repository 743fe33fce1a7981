"""The trained model of a run, saved at its end and loaded back by the analyses.

``model.pt`` holds the model's weights and the run's resolved config, so an
analysis rebuilds exactly that model (any encoding) with the same builders
training used. It is written atomically and loaded with ``weights_only=True``.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from poslab.io import write_atomic

MODEL_FILE = "model.pt"


def save_model(path: str | Path, model: torch.nn.Module, config: dict[str, Any]) -> Path:
    state = {k.removeprefix("_orig_mod."): v.detach().cpu() for k, v in model.state_dict().items()}
    buffer = io.BytesIO()
    torch.save({"state_dict": state, "config": config}, buffer)
    return write_atomic(path, buffer.getvalue())


def load_run(run_dir: str | Path, map_location: str = "cpu") -> tuple[DictConfig, Any]:
    """(config, LightningModule with the trained weights, in eval mode) of a finished run directory."""
    from poslab.training import build_datamodule, build_module

    path = Path(run_dir) / MODEL_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} the directory of a finished train.py run?")
    saved = torch.load(path, map_location=map_location, weights_only=True)
    cfg = OmegaConf.create(saved["config"])
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    module.model.load_state_dict(saved["state_dict"])
    module.eval()
    return cfg, module
