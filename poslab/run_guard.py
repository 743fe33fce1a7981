"""A Hydra callback that runs poslab's config checks before Hydra creates the run directory.

Hydra makes the run directory, writes ``.hydra/`` and opens ``train.log`` before poslab runs; so a bad
``name`` (``name=../../../x``), a directory that already holds a run, or a resume with other model
settings would otherwise leave a directory outside the runs directory, or rewrite a finished run's
``.hydra/config.yaml``. Listed in ``conf/train.yaml`` (``hydra.callbacks``); each check is also made again by
``poslab.training.run`` (``check_config``), so a config composed without Hydra is checked the same way.
Light at import (no torch): Hydra instantiates callbacks for every command, even one that fails to compose.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from poslab.errors import PoslabError


def stop(error: PoslabError) -> None:
    """train.py's one message for a bad setting, and exit status 2 (here, and in ``poslab.training.main``)."""
    print(f"poslab: configuration error: {error}", file=sys.stderr)
    sys.exit(2)


def job_config(config: DictConfig, output_dir: Path) -> DictConfig:
    """The config the job will see (no ``hydra`` node), with its ``paths.output_dir`` known in advance."""
    cfg = copy.deepcopy(config)
    with read_write(cfg), open_dict(cfg):
        del cfg["hydra"]
        cfg.paths.output_dir = str(output_dir)
    return cfg


class RunGuard(Callback):
    """``check_config`` before a single run's directory exists; the name and the sweep directory before a
    multirun starts (each job's config is checked by the job itself)."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra.core.hydra_config import HydraConfig

        from poslab.config import check_config

        try:
            HydraConfig.instance().set_config(config)  # ${hydra:...} resolves, as Hydra's run_job sets it next
            run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir")))
            cfg = job_config(config, run_dir)
        except Exception:  # noqa: BLE001  (a config this guard cannot read: the job's own checks report it)
            return
        try:
            check_config(cfg)
        except PoslabError as error:
            stop(error)
        except Exception:  # noqa: BLE001  (not a config error: the run itself reports it, with its traceback)
            return

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from poslab.config import check_name, check_sweep_directory

        try:
            name = config.get("name")
            sweep_dir = Path(str(OmegaConf.select(config, "hydra.sweep.dir")))
            ckpt_path = config.get("ckpt_path")
        except Exception:  # noqa: BLE001  (left to the jobs' own checks)
            return
        try:
            check_name(name)
            check_sweep_directory(sweep_dir, ckpt_path)
        except PoslabError as error:
            stop(error)
