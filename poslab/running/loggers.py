"""Lightning's CSV logger, made safe for resumed runs; its W&B logger, without a warning at every run.

Lightning's ``CSVLogger`` deletes an existing ``metrics.csv`` when its directory is not empty, so a run
resumed in its own directory (``ckpt_path=last``) would lose the log of everything before the
interruption. This one keeps the file and appends to it. Steps between the checkpoint a run resumed from
and the interruption appear twice (the later rows are the resumed run's).
"""

from __future__ import annotations

import csv
from typing import Any

from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger
from lightning.pytorch.loggers import WandbLogger as LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment


class AppendingExperimentWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        """Keep an existing metrics.csv and take its header, so appended rows line up with it."""
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = list(next(csv.reader(f), []))


class CSVLogger(LightningCSVLogger):
    """``lightning.pytorch.loggers.CSVLogger`` that appends to the metrics.csv of an earlier (interrupted)
    part of the run instead of deleting it."""

    @property
    @rank_zero_experiment
    def experiment(self) -> AppendingExperimentWriter:
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AppendingExperimentWriter(log_dir=self.log_dir)
        return self._experiment


class WandbLogger(LightningWandbLogger):
    """``lightning.pytorch.loggers.WandbLogger`` without the ``anonymous`` argument it always passes to
    ``wandb.init`` (W&B >= 0.19 warns at every run that the setting has no effect)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wandb_init.pop("anonymous", None)
