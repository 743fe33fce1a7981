"""Checks on a composed config that Hydra cannot make: combinations of groups.

Each check raises ``ConfigError`` with one sentence naming the bad value and
what is allowed, before anything is built or written.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

from poslab.config.overrides import expanded_overrides
from poslab.config.settings import (
    CONF_DIR,
    SYNTHETIC_TASKS,
    check_eval_lengths,
    check_precision,
    check_settings,
    encoding_defaults,
    expand_path_settings,
    task_defaults,
)
from poslab.config.targets import with_added_settings
from poslab.errors import ConfigError
from poslab.runs.files import CHECKPOINT_DIR, LAST_CHECKPOINT, MODEL_FILE, RESULTS_FILE, directories_holding
from poslab.runs.results import finished_results


def compose_config(overrides: list[str], output_dir: str | Path | None = None, hydra_node: bool = False) -> DictConfig:
    """The config ``train.py`` would run with ``overrides`` (for tests, benchmarks, notebooks and train.py's own
    check), its outputs (run directory and logs) redirected to ``output_dir`` when given; ``hydra_node``: with
    Hydra's own settings (``hydra.sweeper.params``, ...). With ``output_dir`` (a config to run), a context
    extension comes as its parent makes it (``poslab.running.extension``: only here are its overrides known outside
    Hydra)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from poslab.running.resolvers import register_resolvers

    register_resolvers()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=expanded_overrides(overrides), return_hydra_config=hydra_node)
    expand_path_settings(cfg)  # ~ and $VAR in every path setting, from whatever source (train.py: the same)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.paths.output_dir = str(output_dir)
            cfg.paths.log_dir = str(output_dir)
        from poslab.running.extension import extended_config

        cfg = smoke_config(extended_config(cfg, overrides))
    return cfg


#: ``smoke_eval`` (debug=fast): the windows of the context a language model's test scores per group, the windows a
#: validation scores, and the sequences a synthetic task's test scores at its one length
SMOKE_WINDOWS, SMOKE_SEQUENCES = 8, 16
#: a language model's tokens per training step under ``smoke_eval`` (2 windows of 512: a step of hrope_axial's model
#: under a second on 2 cores, against 5.7 s at its 32): its batch shrinks to this many tokens of its context, the
#: context itself kept (an extension's is what it tests; an encoding's settings may follow it)
SMOKE_STEP_TOKENS = 1024


def smoke_config(cfg: DictConfig) -> DictConfig:
    """``cfg`` with its evaluation cut to a smoke test's where ``smoke_eval`` asks (debug=fast), whatever the task:
    one length (the training length: the plain model's ways only, no test-time rule), a small sample, no passkey.
    A language model scores ``SMOKE_WINDOWS`` windows of its context per group (``task.eval_tokens``: a held-out
    split shorter than that is refused, naming it), no sliding windows, and trains on ``smoke_batch`` windows a
    step; a synthetic task scores ``SMOKE_SEQUENCES`` sequences, plain (``task.eval_ways``). The values given are
    checked first (``check_given_values``). ``cfg`` itself otherwise; what ran is what results.json records."""
    if not cfg.get("smoke_eval"):
        return cfg
    check_given_values(cfg)  # before the cut replaces them: debug=fast hides no bad value
    cut = copy.deepcopy(cfg)
    with read_write(cut), open_dict(cut):
        task = cut.task
        if "context_length" in task:  # a language model (an extension's: its own context, past its parent's)
            context = int(task.context_length)
            task.eval_lengths, task.eval_tokens, task.eval_stride = [context], SMOKE_WINDOWS * context, None
            task.val_windows = min(int(task.val_windows), SMOKE_WINDOWS)
            task.batch_size = smoke_batch(int(task.batch_size), context, world_size(cut))
            if "passkey" in task:
                task.passkey.enabled = False
        else:
            task.eval_lengths, task.eval_ways = [int(task.train_length)], "plain"
            task.eval_size = min(int(task.eval_size), SMOKE_SEQUENCES)
            task.eval_batch_size = min(int(task.eval_batch_size), SMOKE_SEQUENCES)
    return cut


def smoke_batch(batch_size: int, context: int, world: int) -> int:
    """A language model's training batch under ``smoke_eval``: ``SMOKE_STEP_TOKENS`` of its context (at least one
    window), never more than ``batch_size``, a multiple of the ``world`` processes that slice it (each a row)."""
    rows = min(batch_size, max(1, SMOKE_STEP_TOKENS // context))
    return -(-rows // world) * world


def check_given_values(cfg: DictConfig) -> None:
    """The checks of the values a smoke test's cut replaces (the evaluation settings), on the values given: each
    setting's type and bounds, and the evaluation against the training length, as a run without debug=fast has
    them checked (``poslab.running.checks``' stages 1 and 2)."""
    check_settings(cfg, optional_encoding_settings)
    check_eval_lengths(cfg)


def optional_encoding_settings(name: str) -> tuple[str, ...]:
    """The settings encoding ``name`` lets be null although its YAML gives them a value (``optional_settings``);
    asked by the typed check only when such a setting is null (the encodings import torch)."""
    from poslab.encodings import encoding_class

    return encoding_class(name).optional_settings


def check_combinations(cfg: DictConfig) -> None:
    """The checks that combine groups or need the machine (devices), none of which needs the run directory."""
    check_name(cfg.get("name"))
    task, corpus = cfg.task.name, cfg.corpus.name
    if task in SYNTHETIC_TASKS and corpus != "synthetic":
        raise ConfigError(
            f"task={task} generates its own sequences, but corpus={corpus} was also given; a corpus selects "
            f"language modelling (task=lm): drop task={task} or drop corpus={corpus}."
        )
    if task not in SYNTHETIC_TASKS and corpus == "synthetic":
        raise ConfigError(
            f"task={task} needs a text corpus, but corpus=synthetic only generates the tasks "
            f"{', '.join(SYNTHETIC_TASKS)}; name a corpus (e.g. corpus=wikitext2)."
        )
    check_devices(cfg.trainer)
    check_precision(cfg.trainer.precision, resolved_accelerator(cfg.trainer))  # one training cannot honour
    check_global_batches(cfg)


def check_name(name: Any) -> None:
    """A run's ``name`` is the last part of its directory (``logs/runs/<time>_<name>``): one that holds a path
    separator or ``..`` would put the run somewhere else (``name=../../../x``)."""
    text = str(name)
    separators = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    if not text.strip() or ".." in text or any(s in text for s in separators):
        raise ConfigError(
            f"name={text!r} is not allowed: the run directory is <paths.log_dir>/runs/<time>_<name>, so a name "
            f"must be one directory name; allowed: letters, digits and - _ . = , (no /, \\ or ..)."
        )


def previous_run_files(output_dir: Path, rerun_damaged: bool = False) -> list[str]:
    """What a run directory already holds of an earlier run: its results, model, or last checkpoint.
    ``rerun_damaged`` (``ckpt_path=auto``): a damaged results.json, and the model.pt beside it, are of a run taken
    as unfinished, which is run again over them; its last checkpoint still counts."""
    names = [RESULTS_FILE, MODEL_FILE, f"{CHECKPOINT_DIR}/{LAST_CHECKPOINT}"]
    if rerun_damaged and (output_dir / RESULTS_FILE).is_file() and finished_results(output_dir) is None:
        names = names[2:]
    return [name for name in names if (output_dir / name).is_file()]


def check_run_directory(output_dir: Path, checkpoint: Path | None, rerun_damaged: bool = False) -> None:
    """A directory that already holds a run is continued only by resuming from its own checkpoint: training
    into it afresh would replace its results.json and model.pt, append to its metrics.csv and leave its
    last.ckpt beside a new last-v1.ckpt (so a later ckpt_path=last would resume the wrong run). Under
    ``ckpt_path=auto`` (``rerun_damaged``) a run whose results.json is damaged is unfinished, and may run again."""
    found = previous_run_files(output_dir, rerun_damaged)
    if not found:
        return
    own = checkpoint is not None and output_dir.resolve() in checkpoint.resolve().parents
    if own:
        return
    given = f"ckpt_path={checkpoint} is another run's checkpoint" if checkpoint else "no ckpt_path was given"
    raise ConfigError(
        f"the run directory {output_dir} already holds a run ({', '.join(found)}) and {given}; nothing was "
        f"written: to continue that run give ckpt_path=last (with hydra.run.dir={output_dir}), to start a new "
        f"one give a new directory (drop hydra.run.dir, or name an empty one)."
    )


def check_sweep_directory(sweep_dir: Path, ckpt_path: Any) -> None:
    """A multirun into a directory that already holds runs (``hydra.sweep.dir`` given again) would write its
    jobs over them (each into the folder its overrides name): it stops before any job starts, unless the jobs
    resume (``ckpt_path=auto`` continues each job in its earlier folder: ``poslab.runs.folders``)."""
    if ckpt_path is not None or not sweep_dir.is_dir():
        return
    jobs = {job for name in (RESULTS_FILE, MODEL_FILE) for job in directories_holding(sweep_dir, name)}
    found = sorted(str(job.relative_to(sweep_dir)) for job in jobs)
    if found:
        raise ConfigError(
            f"hydra.sweep.dir={sweep_dir} already holds runs ({', '.join(found[:5])}{', ...' if len(found) > 5 else ''}"
            f"); a multirun there would overwrite them: give a new directory (drop hydra.sweep.dir, or name an "
            f"empty one), or continue that sweep with ckpt_path=auto (finished jobs are skipped)."
        )


def check_resume(cfg: DictConfig, checkpoint: Path) -> None:
    """A resume continues the model the checkpoint holds: a model-defining setting (``MODEL_DEFINING`` in
    poslab.runs.checkpoints: encoding, model, task, corpus) that differs from the checkpoint's config stops here,
    listing every difference, unless ``resume_allow_changes`` names it (or its section) on purpose."""
    allowed = cfg.get("resume_allow_changes") or []
    if isinstance(allowed, str) or not all(isinstance(k, str) for k in allowed):
        raise ConfigError(
            f"resume_allow_changes={allowed!r} must be a list of setting names or sections, e.g. "
            f"[optimizer, task.batch_size] or [encoding]."
        )
    from poslab.runs.checkpoints import checkpoint_config, config_changes  # torch: only for a resume

    saved = checkpoint_config(checkpoint)
    if saved is None:
        return  # a checkpoint from before poslab recorded its config: nothing to compare with
    saved = with_added_settings(saved)  # a setting added since, at the value the checkpoint's model ran with
    changes = config_changes(saved, OmegaConf.to_container(cfg, resolve=True), list(allowed), encoding_at_default(cfg))
    if changes:
        keys = ",".join(change.split(":", 1)[0] for change in changes)
        raise ConfigError(
            f"ckpt_path={cfg.ckpt_path} holds a model trained with other settings than these, and a resume "
            f"continues that model: {'; '.join(changes)} (saved → now); give the saved settings, or allow the "
            f"change on purpose with resume_allow_changes=[{keys}]."
        )


def encoding_at_default(cfg: DictConfig) -> list[str]:
    """The encoding's and the task's settings (``encoding.<key>``, ``task.<key>``) whose value is written as their
    YAML declares it (an interpolation compared as written, before it resolves): what a resume of a checkpoint
    written before the setting existed (``task.train_lengths``, a new encoding setting) may take as unchanged."""
    found = []
    for section, defaults in (("encoding", encoding_defaults()), ("task", task_defaults())):
        declared = defaults.get(str(cfg[section].get("name")), {})
        written = OmegaConf.to_container(cfg[section], resolve=False)
        assert isinstance(written, dict)
        found += [f"{section}.{k}" for k, v in written.items() if k in declared and declared[k] == v]
    return found


def available_devices(accelerator: str) -> int | None:
    """How many devices of a kind this machine has: CPU cores this process may use, or CUDA GPUs; ``None``
    for kinds not checked here (Lightning checks them)."""
    if accelerator == "cpu":
        return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if accelerator in ("gpu", "cuda"):
        import torch

        return torch.cuda.device_count()
    return None


def resolved_accelerator(trainer: DictConfig) -> str:
    """``trainer.accelerator``, with ``auto`` as Lightning resolves it here: cpu on a machine without a GPU."""
    accelerator = str(trainer.accelerator)
    if accelerator != "auto":
        return accelerator
    import torch

    mps = getattr(torch.backends, "mps", None)
    return "gpu" if torch.cuda.is_available() or (mps is not None and mps.is_available()) else "cpu"


def requested_devices(devices: Any) -> int | None:
    """The number of devices a Trainer's ``devices`` asks for; ``None`` for ``auto`` and -1 (all)."""
    if isinstance(devices, (list, tuple, ListConfig)):
        return len(devices)
    text = str(devices).strip()
    if text in ("auto", "-1", "None", ""):
        return None
    if "," in text:  # "0,1": device indices
        return len([d for d in text.split(",") if d.strip()])
    try:
        return int(text)
    except ValueError:
        raise ConfigError(
            f"trainer.devices={devices!r} is not a number of devices; allowed: a positive integer, a list of "
            f"device indices, or auto."
        ) from None


def world_size(cfg: DictConfig) -> int:
    """The processes a run trains in: its devices (1 where unknown, ``auto``) times its nodes."""
    return (requested_devices(cfg.trainer.devices) or 1) * int(cfg.trainer.num_nodes)


def check_devices(trainer: DictConfig) -> None:
    """More devices than the machine has stop here, with the count, rather than deep inside Lightning (GPUs)
    or as an oversubscribed machine (CPU processes: one per core at most)."""
    accelerator = str(trainer.accelerator)
    requested = requested_devices(trainer.devices)
    if requested is None:
        return
    if requested < 1:
        raise ConfigError(f"trainer.devices={trainer.devices} must be at least 1 (or auto).")
    available = available_devices(accelerator)
    if available is None or requested <= available:
        return
    if accelerator == "cpu":
        raise ConfigError(
            f"trainer.devices={trainer.devices} asks for {requested} CPU processes, but this machine has "
            f"{available} CPU cores for this process; allowed: 1 to {available}."
        )
    gpus = f"{requested} GPU" + ("s" if requested > 1 else "")
    if available == 0:
        raise ConfigError(
            f"trainer.devices={trainer.devices} asks for {gpus} (accelerator={accelerator}), but this machine "
            f"has none; allowed here: trainer=cpu or trainer=ddp_cpu."
        )
    raise ConfigError(
        f"trainer.devices={trainer.devices} asks for {gpus}, but this machine has {available}; "
        f"allowed: 1 to {available}."
    )


def check_global_batches(cfg: DictConfig) -> None:
    """Under DDP the synthetic tasks slice one global training batch across the processes: ``task.batch_size``
    must be a multiple of their number. The evaluation sets are sharded without padding (``RankShard``: right
    figures whatever the number), but ``task.eval_size`` is held to the same rule here, where the number is
    known before anything runs, so that the ranks score equal shares. ``trainer.devices=auto`` or -1 is
    counted only by the Trainer: the datamodule's ``setup`` checks the batch size against its world size."""
    world = world_size(cfg)
    if world < 2 or cfg.task.name not in SYNTHETIC_TASKS:
        return
    for key in ("batch_size", "eval_size"):
        value = cfg.task.get(key)
        if value is not None and int(value) % world:
            raise ConfigError(
                f"task.{key}={value} is not divisible by the {world} processes (trainer.devices x "
                f"trainer.num_nodes); allowed: a multiple of {world}."
            )
