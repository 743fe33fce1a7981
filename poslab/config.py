"""Checks on a composed config that Hydra cannot make: combinations of groups.

Each check raises ``ConfigError`` with one sentence naming the bad value and
what is allowed, before anything is built or written.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, open_dict

from poslab.encodings.base import ConfigError

SYNTHETIC_TASKS = ("lag", "seen")
CONF_DIR = Path(__file__).resolve().parents[1] / "conf"


def compose_config(overrides: list[str], output_dir: str | Path | None = None) -> DictConfig:
    """The config ``train.py`` would run with ``overrides`` (for tests, benchmarks and notebooks), its outputs
    (run directory and logs) redirected to ``output_dir`` when given."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    if output_dir is not None:
        with open_dict(cfg):
            cfg.paths.output_dir = str(output_dir)
            cfg.paths.log_dir = str(output_dir)
    return cfg


def check_config(cfg: DictConfig) -> None:
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
    lengths = list(cfg.task.get("eval_lengths", []))
    train_length = cfg.task.get("train_length")
    if train_length is not None and (train_length < 2 or any(n < 2 for n in lengths)):
        raise ConfigError(
            f"task.train_length={train_length} and task.eval_lengths={lengths} must all be at least 2 "
            f"(log-length scaling divides by log(train_length))."
        )
    if cfg.trainer.get("max_steps", -1) is None or cfg.trainer.get("max_steps", -1) < 1:
        raise ConfigError(f"trainer.max_steps={cfg.trainer.get('max_steps')} must be a positive number of steps.")
