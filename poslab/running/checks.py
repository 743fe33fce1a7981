"""Every check of a job's config, from one entry point and in one fixed order.

A config is checked in four stages, each finding what the next would otherwise trip over:

1. **settings**: every setting against its declared type and bounds (``poslab.config.settings.check_settings``);
2. **combinations**: the groups together (a task with a corpus, devices, precision, batches: ``poslab.running.compose``)
   and the evaluation settings against the training length;
3. **encodings**: the encoding's own ``validate`` against the model and the task, and a synthetic task's own
   settings (the only stage that imports torch);
4. **run directory**: where the job writes.

``check_configs`` runs the stages one at a time over a command's jobs, so a typo in any job of a multirun is
found before torch loads. Before Hydra runs (``poslab.running.precheck``, train.py's pre-check) a run's directory is not
named yet: its stage 4 is the directories the command will write and the sources it reads. ``check_config`` is
the same four stages for one job with its run directory known: whether it already holds a run, and a resume's
checkpoint. Hydra's ``RunGuard`` calls it before Hydra makes the directory, and ``poslab.running.training.run`` again,
so
a config composed without Hydra (tests, notebooks) is checked the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from poslab.config.settings import (
    SYNTHETIC_TASKS,
    check_eval_lengths,
    check_settings,
    max_length,
    readable,
    train_length,
)
from poslab.running.compose import check_combinations, check_resume, check_run_directory, optional_encoding_settings
from poslab.runs.files import AUTO
from poslab.runs.results import finished_results


def check_configs(
    configs: Sequence[DictConfig], run_directory: Callable[[DictConfig], None], directories_first: bool = False
) -> None:
    """The four stages over ``configs``, stage by stage; ``run_directory`` is stage 4 (``check_run_directory_of``
    for a job whose directory is known; the pre-check's writable directories otherwise). ``directories_first``
    (the pre-check, whose stage 4 needs no torch) runs it before stage 3, so a bad path or data directory is said
    in under a second instead of after torch and Lightning load (seconds)."""
    stages = list(COMMON_STAGES.values())
    stages.insert(stages.index(check_encodings) if directories_first else len(stages), run_directory)
    for stage in stages:
        for cfg in configs:
            stage(cfg)


def check_config(cfg: DictConfig) -> None:
    """Every check of one job's composed config, its run directory and a resume's checkpoint included."""
    check_configs([cfg], check_run_directory_of)


def check_typed_settings(cfg: DictConfig) -> None:
    """Stage 1: each setting against its declared type and bounds."""
    check_settings(cfg, optional_encoding_settings)


def check_combined_settings(cfg: DictConfig) -> None:
    """Stage 2: the groups together, then the evaluation settings against the training length."""
    check_combinations(cfg)
    check_eval_lengths(cfg)


def check_encodings(cfg: DictConfig) -> None:
    """Stage 3: the encoding's own checks, and a synthetic task's."""
    check_encoding(cfg)
    check_synthetic_task(cfg)


#: stages 1 to 3 by name, in the order they run; stage 4 is the caller's (``check_configs``' ``run_directory``)
COMMON_STAGES: dict[str, Callable[[DictConfig], None]] = {
    "settings": check_typed_settings,
    "combinations": check_combined_settings,
    "encodings": check_encodings,
}
STAGES = (*COMMON_STAGES, "run directory")


def check_run_directory_of(cfg: DictConfig) -> None:
    """Stage 4 for a job whose directory is known: a directory that already holds a run is continued only from
    its own checkpoint, and a resume only with the checkpoint's model settings."""
    checkpoint = None
    output_dir, auto = Path(cfg.paths.output_dir), cfg.get("ckpt_path") == AUTO
    if auto and finished_results(output_dir) is not None:
        return  # a finished run that ckpt_path=auto skips: nothing will be written
    if cfg.get("ckpt_path") is not None:
        # imported here: poslab.runs.checkpoints loads torch, which a config refused above never needs
        from poslab.runs.checkpoints import resolve_checkpoint

        checkpoint = resolve_checkpoint(cfg.get("ckpt_path"), cfg.paths.output_dir)
    # under auto, a damaged results.json is an unfinished run's: resumed from its last.ckpt, else run again
    check_run_directory(output_dir, checkpoint, rerun_damaged=auto)
    if checkpoint is not None:
        check_resume(cfg, checkpoint)


#: poslab's synthetic datamodule, and its arguments that are not the task's (batches, evaluation sizes, seeds):
#: what ``check_synthetic_task`` leaves out of ``validated_task``'s. tests/running/test_checks.py holds them to the
#: class.
SYNTHETIC_DATAMODULE = "poslab.datamodules.SyntheticDataModule"
SYNTHETIC_DATA_ARGUMENTS = ("batch_size", "eval_size", "eval_batch_size", "eval_seed", "seed")


def check_synthetic_task(cfg: DictConfig) -> None:
    """A synthetic task's own settings against every length it will see (flip_flop's probabilities, a vocabulary
    too small for associative_recall's longest evaluation length). For poslab's datamodule, the function its
    ``__init__`` checks them with (``validated_task``), called here without importing the datamodule (Lightning:
    seconds before the message); a datamodule of one's own is built, which is cheap (the evaluation sets are drawn
    later, in ``setup``)."""
    if cfg.task.name not in SYNTHETIC_TASKS:
        return
    task = OmegaConf.to_container(cfg.task, resolve=True)
    assert isinstance(task, dict)
    target = str(task.pop("_target_"))
    task.pop("module", None)
    if target == SYNTHETIC_DATAMODULE:
        from poslab.datamodules.tasks import validated_task

        validated_task(**{key: value for key, value in task.items() if key not in SYNTHETIC_DATA_ARGUMENTS})
        return
    import hydra

    hydra.utils.get_class(target)(**task, seed=int(cfg.seed))


def check_encoding(cfg: DictConfig) -> None:
    """The encoding's own ``validate`` (ranges, sizes against the model) and its attention paths against
    ``model.attention``: imports torch, so it runs last. A setting the task's data fills in (rand_axial's
    ``paragraph_density`` on a text corpus) may still be null."""
    from poslab.encodings.base import ModelShape, validate_encoding

    model = cfg.model
    shape = ModelShape.from_config(model)
    task = OmegaConf.to_container(cfg.task, resolve=False)
    assert isinstance(task, dict)
    for key in ("context_length", "train_length", "eval_lengths"):  # lengths may follow the context: resolved
        present, value = readable(cfg.task, key)
        if present and key in task:
            task[key] = value
    settings = OmegaConf.to_container(cfg.encoding, resolve=True)
    assert isinstance(settings, dict)
    validate_encoding(
        settings,
        shape,
        max_length(task),
        filled_by_data=data_fills(str(cfg.task._target_)),
        attention=str(model.attention),
        train_length=train_length(task),
    )


#: the encoding settings (``corpus_settings``) each of poslab's datamodules fills in from its data (a property of the
#: same name), by ``task._target_``: known here so that a refused encoding imports no datamodule (each imports
#: Lightning: seconds before the message). tests/running/test_checks.py holds it to the classes.
DATA_FILLED_SETTINGS: dict[str, tuple[str, ...]] = {
    SYNTHETIC_DATAMODULE: ("paragraph_density",),
    "poslab.datamodules.LanguageModelDataModule": ("paragraph_density",),
}


def data_fills(target: str) -> Callable[[str], bool]:
    """Whether the datamodule ``target`` fills in an encoding setting from its data: from ``DATA_FILLED_SETTINGS``,
    or, for a datamodule of one's own, its class asked (imported)."""
    if target in DATA_FILLED_SETTINGS:
        return DATA_FILLED_SETTINGS[target].__contains__
    import hydra

    datamodule = hydra.utils.get_class(target)
    return lambda key: hasattr(datamodule, key)
