"""Every W&B sweep file names real config groups and keys: each of its combinations composes, and docs/sweeps.md
gives its offline (Hydra multirun) form and its number of runs."""

from __future__ import annotations

import itertools
import math
import re
from types import SimpleNamespace

import pytest
import yaml
from omegaconf import OmegaConf

from poslab.model import Transformer
from poslab.running import compose
from poslab.running.builders import build_datamodule, build_model_config, build_module
from poslab.running.checks import check_config
from tests.conftest import CONF, ROOT, compose_config

SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))
SWEEPS_DOC = ROOT / "docs" / "sweeps.md"
MISSING = object()


def sweep_parameters(sweep) -> tuple[dict, dict[str, list]]:
    spec = yaml.safe_load(sweep.read_text())
    choices = {
        name: list(parameter["values"]) if "values" in parameter else [parameter["value"]]
        for name, parameter in spec["parameters"].items()
    }
    return spec, choices


@pytest.mark.parametrize("sweep", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_sweep_parameters_name_real_groups_and_keys(sweep, tmp_path):
    spec, choices = sweep_parameters(sweep)
    assert spec["program"] == "train.py" and spec["method"] == "grid"
    assert spec["command"] == ["${env}", "${interpreter}", "${program}", "${args_no_hyphens}"]  # key=value args
    keys = []
    for name, values in choices.items():
        key = name.lstrip("+~")
        if (CONF / key).is_dir():  # a config group: every value is one of its options
            missing = [v for v in values if not (CONF / key / f"{v}.yaml").is_file()]
            assert not missing, f"{sweep.name}: {name} values {missing} are not configs in conf/{key}/"
        else:
            keys.append(key)
    cfg = compose_config([f"{name}={values[0]}" for name, values in choices.items()], tmp_path)
    for key in keys:
        assert OmegaConf.select(cfg, key, default=MISSING) is not MISSING, f"{sweep.name}: no config key {key}"


@pytest.mark.slow
@pytest.mark.parametrize("sweep", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_sweep_combinations_compose_and_build(sweep, tmp_path, monkeypatch):
    """A spread of the combinations (the first included) composes, passes the config checks and builds its
    model. Synthetic tasks build the whole module; a corpus would need its data (and a BPE tokenizer trained
    on it) to build the module, so the model is built with a placeholder vocabulary and paragraph density.
    The device check is told the machine has the GPUs the sweep is meant for."""
    monkeypatch.setattr(compose, "available_devices", lambda accelerator: 8)
    _, choices = sweep_parameters(sweep)
    names = list(choices)
    combinations = list(itertools.product(*choices.values()))
    for combination in combinations[:: max(1, len(combinations) // 8)]:
        cfg = compose_config([f"{n}={v}" for n, v in zip(names, combination)], tmp_path)
        OmegaConf.to_container(cfg, resolve=True)
        check_config(cfg)
        if cfg.corpus.name == "synthetic":
            build_module(cfg, build_datamodule(cfg))
        else:
            placeholder = SimpleNamespace(paragraph_density=0.05)
            Transformer(build_model_config(cfg, 512, 512, placeholder), int(cfg.task.context_length))


def test_ablation_sweeps_cover_their_grids():
    _, seeds = sweep_parameters(ROOT / "sweeps" / "seed_ablation.yaml")
    assert seeds == {
        "experiment": ["hrope_axial", "rand_axial", "period_axial", "hrope_rope"],
        "corpus": ["python_code", "wikitext2", "openwebtext"],
        "seed": [0, 1, 2],
    }
    _, shuffle = sweep_parameters(ROOT / "sweeps" / "shuffle_ablation.yaml")
    assert shuffle == {**seeds, "experiment": ["hrope_axial", "rand_axial"]}


@pytest.mark.parametrize("sweep", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_the_sweeps_doc_gives_each_sweep_and_its_multirun_form(sweep):
    """``wandb sweep sweeps/X.yaml``, and a ``train.py -m`` line with the sweep's values (an experiment that
    is a multirun itself, as extrapolation_grid with its hydra.sweeper.params, is named by that line)."""
    lines = SWEEPS_DOC.read_text().splitlines()
    assert any(f"wandb sweep sweeps/{sweep.name}" in line for line in lines)
    _, choices = sweep_parameters(sweep)
    arguments = [f"{name}={','.join(str(v) for v in values)}" for name, values in choices.items()]
    multiruns = [line for line in lines if "train.py -m" in line]
    assert any(f"experiment={sweep.stem}" in line for line in multiruns) or any(
        all(argument in line for argument in arguments) for line in multiruns
    ), f"docs/sweeps.md has no `python train.py -m` line with {' '.join(arguments)}"


@pytest.mark.parametrize("sweep", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_the_sweeps_doc_gives_each_sweeps_number_of_runs(sweep):
    """The table's row for the file ends its runs column with ``= N``, N the product of the file's values."""
    rows = [line for line in SWEEPS_DOC.read_text().splitlines() if line.startswith(f"| `{sweep.name}` |")]
    assert len(rows) == 1, f"docs/sweeps.md has {len(rows)} table rows for {sweep.name}"
    _, choices = sweep_parameters(sweep)
    runs = math.prod(len(values) for values in choices.values())
    stated = re.search(r"= (\d[\d,]*)", rows[0].split(" | ")[1])
    assert stated and int(stated.group(1).replace(",", "")) == runs, f"{sweep.name} is {runs} runs: {rows[0]}"
