"""Analyses report to the run's own loggers (the ``logger`` group of its config), when it has any.

An analysis runs after training, in another process: it rebuilds the run's loggers from the saved
config, in the same save directory, under the version name ``analysis`` (so the training log is never
rewritten), and logs its scalars; loggers that take images (W&B, TensorBoard through Lightning's
``log_image`` where available) also get the PNGs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from poslab.config.targets import LOGGER_METHODS, LOGGER_PREFIXES, allowed_class, refuse, targets

log = logging.getLogger("poslab")


Table = tuple[list[str], list[list[Any]]]  # columns, rows


def log_analysis(
    cfg: DictConfig,
    run_dir: str | Path,
    scalars: dict[str, float],
    images: dict[str, Path],
    tables: dict[str, Table] | None = None,
) -> list[str]:
    """Log ``scalars`` (and ``images``, and ``tables`` where the logger takes them: W&B) to every logger of the
    run's config; returns the loggers' names. The config was loaded from disk: a logger must be one of
    poslab's or Lightning's logger classes, and nothing nested in its settings is built (``poslab.config.targets``);
    anything else raises ``ConfigError`` naming it, before any logger is built."""
    from lightning.pytorch.loggers import Logger

    loggers = cfg.get("logger") or {}
    source = f"the config of {run_dir}"
    checked = {}
    for name, settings in loggers.items():
        if not settings or "_target_" not in settings:
            continue
        settings = OmegaConf.to_container(settings, resolve=False)
        allowed_class(settings["_target_"], f"logger.{name}._target_", LOGGER_PREFIXES, source, Logger, LOGGER_METHODS)
        for key, value in targets(settings, f"logger.{name}"):
            if key != f"logger.{name}._target_":  # Hydra would build it first: a logger's settings build nothing
                raise refuse(key, value, LOGGER_PREFIXES, source, " (a logger's settings may not build objects)")
        checked[name] = settings
    used = []
    for name, settings in checked.items():
        if "save_dir" in settings:
            settings["save_dir"] = str(run_dir)
        if "version" in settings:
            settings["version"] = "analysis"
        try:
            logger: Any = hydra.utils.instantiate(settings)
            logger.log_metrics({k: float(v) for k, v in scalars.items()})
            if images and hasattr(logger, "log_image"):
                for key, path in images.items():
                    logger.log_image(key=key, images=[str(path)])
            if tables and hasattr(logger, "log_table"):
                for key, (columns, rows) in tables.items():
                    logger.log_table(key=key, columns=columns, data=rows)
            logger.finalize("success")
            used.append(name)
        except Exception as error:  # an analysis must not fail because a logger cannot be reached
            log.warning("could not log the analysis to %s: %s", name, error)
    return used
