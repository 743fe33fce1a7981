"""What poslab plugs into Hydra as callbacks (``hydra.callbacks`` in conf/train.yaml and conf/hydra/default.yaml).
Hydra instantiates them for every command, even one that fails to compose: light at import (no torch), and each
imports what it calls when it is called.

* ``Resolvers`` registers the resolvers (``poslab.running.resolvers``) before Hydra names the run directory, in a
  launcher's own process too (train.py registers them at import; a launcher's job process may not import it).
* ``RunGuard`` runs poslab's config checks before Hydra creates the run directory. Hydra makes the run
  directory, writes ``.hydra/`` and opens ``train.log`` before poslab runs; so a bad ``name``
  (``name=../../../x``), a directory that already holds a run, or a resume with other model settings would
  otherwise leave a directory outside the runs directory, or rewrite a finished run's ``.hydra/config.yaml``.
  Each check is also made again by ``poslab.running.training.run`` (``check_config``), so a config composed without
  Hydra is checked the same way. It then takes the run directory's lock (``poslab.runs.guard``).
* ``MultirunSummary`` names a multirun's sweep directory first and sums up its jobs at the end.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from poslab.errors import PoslabError
from poslab.runs.guard import RunDirectoryInUse, check_run_directory_free, release_all, stop, take_run_directory


class Resolvers(Callback):
    """Registers the resolvers when Hydra builds its callbacks, before it resolves the run directory's name."""

    def __init__(self) -> None:
        from poslab.running.resolvers import register_resolvers

        register_resolvers()


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

        from poslab.running.checks import check_config
        from poslab.running.compose import smoke_config
        from poslab.running.extension import extended_config

        try:
            HydraConfig.instance().set_config(config)  # ${hydra:...} resolves, as Hydra's run_job sets it next
            run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir")))
            cfg = job_config(config, run_dir)
        except Exception:  # noqa: BLE001  (a config this guard cannot read: the job's own checks report it)
            return
        try:
            check_run_directory_free(run_dir)  # first: another run's files would otherwise be what is refused
            cfg = smoke_config(extended_config(cfg))  # an extension: the config its parent makes; debug=fast's cut
            check_config(cfg)
        except PoslabError as error:
            stop(error)
        except Exception:  # noqa: BLE001  (not a config error: the run itself reports it, with its traceback)
            return
        try:  # before Hydra writes anything into the run directory; held until the run ends
            take_run_directory(run_dir)
        except RunDirectoryInUse as error:
            stop(error)
        except OSError:  # a directory that cannot be made: Hydra, then the run, say why
            pass

    def on_run_end(self, config: DictConfig, **kwargs: Any) -> None:
        release_all()

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from poslab.running.compose import check_name, check_sweep_directory

        try:
            name = config.get("name")
            sweep_dir = Path(str(OmegaConf.select(config, "hydra.sweep.dir")))
            ckpt_path = config.get("ckpt_path")
        except Exception:  # noqa: BLE001  (left to the jobs' own checks)
            return
        try:
            check_name(name)
            check_run_directory_free(sweep_dir)
            check_sweep_directory(sweep_dir, ckpt_path)
        except PoslabError as error:
            stop(error)
        try:  # one multirun per sweep directory (each job also holds its own job directory)
            take_run_directory(sweep_dir)
        except RunDirectoryInUse as error:
            stop(error)
        except OSError:  # left to Hydra's launcher, which makes the directory
            pass

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        release_all()


class MultirunSummary(Callback):
    """A multirun (any launcher) names its sweep directory first (``multirun into DIR``, the line ``make run`` reads
    to report on the grid it ran); at the end it prints one line of outcomes and one per job, and ends the command
    with exit status 1 when any job failed, diverged, left no result or a damaged results.json."""

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        print(f"multirun into {config.hydra.sweep.dir}", flush=True)

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        from poslab.runs.launching import summary_lines

        lines, ok = summary_lines(Path(str(config.hydra.sweep.dir)))
        print("\n".join(lines), file=sys.stdout if ok else sys.stderr, flush=True)
        if not ok:
            raise SystemExit(1)
