"""Every W&B sweep file names real config groups and keys: each of its combinations composes."""

from __future__ import annotations

import itertools

import pytest
import yaml

from poslab.training import build_datamodule, build_module

from .conftest import ROOT, compose_config

SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))


@pytest.mark.parametrize("sweep", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_sweep_parameters_compose(sweep, tmp_path):
    spec = yaml.safe_load(sweep.read_text())
    assert spec["program"] == "train.py" and "${args_no_hyphens}" in spec["command"]
    names, choices = [], []
    for name, parameter in spec["parameters"].items():
        names.append(name)
        choices.append(parameter["values"] if "values" in parameter else [parameter["value"]])
    combinations = list(itertools.product(*choices))
    for combination in combinations[:: max(1, len(combinations) // 8)]:  # a spread of them, first included
        cfg = compose_config([f"{n}={v}" for n, v in zip(names, combination)], tmp_path)
        build_module(cfg, build_datamodule(cfg))
