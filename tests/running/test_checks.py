"""The checks run from one entry point (``poslab.running.checks``) in one fixed order: typed settings, combinations,
encodings, run directory. A config wrong in two stages is refused for the earlier stage's fault, and a multirun's
jobs go through the stages one stage at a time (a typo in any job is found before an encoding is built)."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from poslab.errors import ConfigError
from poslab.running.checks import STAGES, check_config, check_configs, check_run_directory_of, check_synthetic_task
from poslab.running.compose import compose_config

#: one fault per stage, each on its own refused with a message naming it
FAULTS = {
    "settings": (["model.n_layers=0"], "model.n_layers=0"),
    "combinations": (["task=lag", "corpus=wikitext2"], "corpus=wikitext2"),
    "encodings": (["encoding=rope", "model.d_model=66", "model.n_heads=2"], "rotated dimension 33"),
}


def holding_a_run(directory: Path) -> Path:
    """A run directory that already holds a finished run's results (stage 4 refuses to train into it afresh)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "results.json").write_text(json.dumps({"status": "success", "figures": {}}))
    return directory


def test_the_stages_are_named_in_their_order() -> None:
    assert STAGES == ("settings", "combinations", "encodings", "run directory")


@pytest.mark.parametrize("stage", list(FAULTS))
def test_each_stage_refuses_its_own_fault(stage: str, tmp_path: Path) -> None:
    overrides, named = FAULTS[stage]
    with pytest.raises(ConfigError, match=named):
        check_config(compose_config(overrides, tmp_path / "run"))


def test_the_run_directory_stage_refuses_a_directory_holding_a_run(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="already holds a run"):
        check_config(compose_config(["task=lag"], holding_a_run(tmp_path / "run")))


@pytest.mark.parametrize(
    ("earlier", "later"),
    [(STAGES[i], STAGES[j]) for i in range(len(STAGES)) for j in range(i + 1, len(STAGES))],
)
def test_a_config_wrong_in_two_stages_is_refused_for_the_earlier(earlier: str, later: str, tmp_path: Path) -> None:
    """Both faults in one config: the message names the earlier stage's (the later one never runs)."""
    run_dir = holding_a_run(tmp_path / "run") if later == "run directory" else tmp_path / "run"
    overrides = FAULTS[earlier][0] + (FAULTS[later][0] if later in FAULTS else [])
    if earlier == "settings" and later == "encodings":
        overrides = ["model.n_layers=0", "encoding=rope", "model.d_model=66", "model.n_heads=2"]
    with pytest.raises(ConfigError) as refused:
        check_config(compose_config(overrides, run_dir))
    assert FAULTS[earlier][1] in str(refused.value)
    if later in FAULTS:
        assert FAULTS[later][1] not in str(refused.value)


def test_a_multirun_is_checked_stage_by_stage_across_its_jobs(tmp_path: Path) -> None:
    """Job 1 has an encoding fault, job 2 a typed-settings fault: job 2's is found first, before any encoding
    is built; the directory stage never runs."""
    first = compose_config(FAULTS["encodings"][0], tmp_path / "a")
    second = compose_config(FAULTS["settings"][0], tmp_path / "b")
    reached: list[str] = []
    with pytest.raises(ConfigError, match="model.n_layers=0"):
        check_configs([first, second], lambda cfg: reached.append(str(cfg.paths.output_dir)))
    assert reached == []


def test_every_job_reaches_the_directory_stage_when_all_else_passes(tmp_path: Path) -> None:
    configs = [compose_config(["task=lag", f"seed={seed}"], tmp_path / str(seed)) for seed in (0, 1)]
    reached: list[str] = []
    check_configs(configs, lambda cfg: reached.append(Path(cfg.paths.output_dir).name))
    assert reached == ["0", "1"]
    check_run_directory_of(configs[0])  # an empty directory: nothing to refuse


def test_the_settings_a_datamodule_fills_in_are_known_without_importing_it() -> None:
    """``DATA_FILLED_SETTINGS`` (what lets the encodings' check import no datamodule, and so no Lightning) says of
    each of poslab's datamodules exactly the encoding settings it has a property for, and names every task's."""
    import hydra

    from poslab.config.settings import encoding_defaults, task_defaults
    from poslab.encodings import encoding_class
    from poslab.running.checks import DATA_FILLED_SETTINGS, data_fills

    settings = {key for name in encoding_defaults() for key in encoding_class(name).corpus_settings}
    assert settings == {"paragraph_density"}
    assert {str(task["_target_"]) for task in task_defaults().values()} == set(DATA_FILLED_SETTINGS)
    for target, filled in DATA_FILLED_SETTINGS.items():
        datamodule = hydra.utils.get_class(target)
        assert {key for key in settings if hasattr(datamodule, key)} == set(filled), target
        assert data_fills(target)("paragraph_density") and not data_fills(target)("base")
    assert data_fills("poslab.runs.folders.RecordedJob")("of")  # a datamodule of one's own: its class is asked


#: a synthetic task's settings refused only by the task itself (stage 3: each passes the typed settings), by what
#: the message names
TASK_FAULTS = {
    "probabilities": (["task=flip_flop", "task.p_ignore=0.5"], "sum to 1"),
    "training range": (["task=lag", "task.train_lengths=[8,16]"], "ends at 16"),
    "keys for the longest length": (["task=associative_recall", "task.vocab_size=9"], "distinct keys"),
}


@pytest.mark.parametrize("fault", list(TASK_FAULTS))
@pytest.mark.parametrize(
    "target", ["poslab.datamodules.SyntheticDataModule", "poslab.datamodules.synthetic.SyntheticDataModule"]
)
def test_the_task_check_refuses_what_the_datamodule_refuses(fault: str, target: str, tmp_path: Path) -> None:
    """poslab's own ``_target_`` is checked by ``validated_task`` without the datamodule, another (here the same
    class by its full path, as a datamodule of one's own is named) by building it: the same message either way,
    the one the datamodule itself gives when built."""
    from poslab.running.builders import build_datamodule

    overrides, named = TASK_FAULTS[fault]
    cfg = compose_config(overrides, tmp_path / "run")
    cfg.task._target_ = target
    with pytest.raises(ConfigError, match=named) as checked:
        check_synthetic_task(cfg)
    with pytest.raises(ConfigError) as built:
        build_datamodule(cfg)
    assert str(checked.value) == str(built.value)


def test_the_task_check_leaves_out_exactly_the_datamodules_other_arguments() -> None:
    """``SYNTHETIC_DATA_ARGUMENTS`` and ``validated_task``'s arguments are together ``SyntheticDataModule``'s: a new
    argument of the datamodule is either checked or named as not the task's."""
    import hydra

    from poslab.datamodules.synthetic import SyntheticDataModule
    from poslab.datamodules.tasks import validated_task
    from poslab.running.checks import SYNTHETIC_DATA_ARGUMENTS, SYNTHETIC_DATAMODULE

    assert hydra.utils.get_class(SYNTHETIC_DATAMODULE) is SyntheticDataModule
    datamodule = set(inspect.signature(SyntheticDataModule.__init__).parameters) - {"self"}
    checked = set(inspect.signature(validated_task).parameters)
    assert datamodule == checked | set(SYNTHETIC_DATA_ARGUMENTS)
    assert not checked & set(SYNTHETIC_DATA_ARGUMENTS)
