"""Shared fixtures: compose the real configs with Hydra, in a temporary directory."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
torch.set_num_threads(1)


def compose_config(overrides: list[str], output_dir: Path | None = None) -> DictConfig:
    """The config train.py would run with ``overrides``, its outputs redirected to ``output_dir``."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.paths.output_dir = str(output_dir)
            cfg.paths.log_dir = str(output_dir)
    return cfg


def run_train(args: list[str], cwd: Path, timeout: int = 300):
    """Run ``python train.py args`` in a subprocess (as a user would); returns the CompletedProcess."""
    import subprocess

    env = {**os.environ, "POSLAB_LOG_DIR": str(cwd / "logs"), "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def compose_cfg(tmp_path):
    def make(*overrides: str) -> DictConfig:
        return compose_config(list(overrides), tmp_path)

    return make
