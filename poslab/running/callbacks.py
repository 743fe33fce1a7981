"""Callbacks: throughput (tokens/s) and model FLOPs utilisation, computed explicitly; the run's config in its
checkpoints; a checkpoint at Ctrl-C."""

from __future__ import annotations

import logging
import signal
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm
from lightning.pytorch.trainer.states import TrainerFn

from poslab.errors import RunInterrupted
from poslab.lightning_modules.progress import duration_text
from poslab.runs.checkpoints import CONFIG_KEY

log = logging.getLogger("poslab")

# Dense bf16 peak FLOP/s of devices we know (no sparsity). MFU needs one; set ``peak_flops`` otherwise.
PEAK_FLOPS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10G": 125e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
    "V100": 125e12,
}


def flops_per_token(n_params: int, n_layers: int, d_model: int, context: int, embedding_params: int = 0) -> float:
    """Training FLOPs per token: 6 per weight (forward 2, backward 4) for the non-embedding weights, plus
    attention's scores and weighted sums, 6 * 2 * n_layers * context * d_model (PaLM's appendix B, counting
    the full T x T product as SDPA computes it)."""
    return 6.0 * (n_params - embedding_params) + 12.0 * n_layers * context * d_model


def device_peak_flops(device: torch.device, override: float | None = None) -> float | None:
    if override:
        return float(override)
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((peak for key, peak in PEAK_FLOPS.items() if key in name), None)


class Throughput(L.Callback):
    """Times every training step after ``warmup`` steps; logs tokens/s (and MFU where the peak is known).

    ``summary()`` gives the median tokens/s and step time over the timed steps, for benchmarks and results.
    """

    def __init__(self, warmup: int = 5, peak_flops: float | None = None) -> None:
        self.warmup, self.peak_override = warmup, peak_flops
        self.step_seconds: list[float] = []
        self.tokens_per_step = 0
        self.flops_per_token = 0.0
        self.peak: float | None = None
        self._start = 0.0

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        model = module.model
        cfg = model.cfg
        embedding = model.embed.weight.numel() + (0 if cfg.tie_embeddings else model.head.weight.numel())
        # the length trained at (a language model's context; not its longest evaluation length)
        context = getattr(trainer.datamodule, "train_length", 0) if trainer.datamodule is not None else 0
        self.flops_per_token = flops_per_token(model.num_parameters(), cfg.n_layers, cfg.d_model, context, embedding)
        self.peak = device_peak_flops(module.device, self.peak_override)

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        # synthetic tasks: (tokens, targets); language modelling: windows of context + 1 (inputs are all but the last)
        tokens = batch[0] if isinstance(batch, (tuple, list)) else batch["tokens"][:, :-1]
        self.tokens_per_step = int(tokens.numel()) * trainer.world_size
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        if trainer.global_step > self.warmup:
            self.step_seconds.append(time.perf_counter() - self._start)
            if trainer.global_step % max(1, trainer.log_every_n_steps) == 0:
                tokens_per_s = self.tokens_per_step / self.step_seconds[-1]
                module.log("throughput/tokens_per_s", tokens_per_s)
                if self.peak:
                    module.log("throughput/mfu", tokens_per_s * self.flops_per_token / self.peak)

    def summary(self) -> dict[str, float]:
        if not self.step_seconds:
            return {}
        seconds = statistics.median(self.step_seconds)
        tokens_per_s = self.tokens_per_step / seconds
        out = {"step_seconds": seconds, "tokens_per_s": tokens_per_s, "flops_per_token": self.flops_per_token}
        if self.peak:
            out["mfu"] = tokens_per_s * self.flops_per_token / self.peak
        return out


class RecordConfig(L.Callback):
    """Writes the run's resolved config into every training checkpoint (``poslab.runs.checkpoints.CONFIG_KEY``), so
    that a resume can check it continues the same model (``poslab.running.compose.check_resume``). Plain values only:
    the checkpoint still loads with ``weights_only=True``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint[CONFIG_KEY] = self.config


class StepProgressBar(TQDMProgressBar):
    """The training bar counts optimizer steps against ``trainer.max_steps`` (``step 1050/2000``, also after a
    resume, where Lightning's own bar restarts an epoch of unknown length: ``1050/?``); the validation and
    test bars are off (their figures are logged when each evaluation ends).

    With the bar off (``refresh_rate: 0``: parallel jobs, whose bars would interleave), a line goes to the log every
    ``log_every_seconds`` instead (``step 360/720 (50%), 0.58 s a step, about 3 min 29 s of training left``), so a
    job's train.log shows it is moving (conf/callbacks/default.yaml: 120); 0 or null: no lines. The evaluation after
    training, which has no bar, logs its cost and progress itself (``poslab.lightning_modules.progress``)."""

    def __init__(self, refresh_rate: int = 1, log_every_seconds: float | None = None, **kwargs: Any) -> None:
        super().__init__(refresh_rate=refresh_rate, **kwargs)
        self.log_every = float(log_every_seconds or 0)
        self.logged_at: tuple[float, int] | None = None  # (time, step) of the last line, or of training's start

    def due(self, since: float, now: float) -> bool:
        """Whether a progress line is due: lines are on and ``log_every_seconds`` have passed since ``since``."""
        return self.log_every > 0 and now - since >= self.log_every

    @staticmethod
    def total_steps(trainer: L.Trainer) -> int | None:
        """``trainer.max_steps``, or None where training is not bounded by steps (-1, None)."""
        return trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        super().on_train_start(trainer, module)
        self.logged_at = (time.monotonic(), trainer.global_step)

    def progress_line(self, step: int, total: int | None, seconds_a_step: float) -> str:
        if not total:
            return f"step {step}, {seconds_a_step:.2f} s a step"
        left = duration_text((total - step) * seconds_a_step)
        share = f"{100 * step / total:.0f}%"
        return f"step {step}/{total} ({share}), {seconds_a_step:.2f} s a step, about {left} of training left"

    def log_progress(self, trainer: L.Trainer) -> None:
        if not self.is_disabled or self.logged_at is None:
            return
        now, step = time.monotonic(), trainer.global_step
        since, at_step = self.logged_at
        if not self.due(since, now) or step <= at_step:
            return
        log.info("%s", self.progress_line(step, self.total_steps(trainer), (now - since) / (step - at_step)))
        self.logged_at = (now, step)

    def init_train_tqdm(self) -> Tqdm:
        trainer = self.trainer
        return Tqdm(
            desc="step",
            total=self.total_steps(trainer),
            initial=trainer.global_step,
            position=2 * self.process_position,
            disable=self.is_disabled,
            leave=True,
            dynamic_ncols=True,
            file=sys.stdout,
            smoothing=0,
            bar_format=self.BAR_FORMAT,
        )

    def on_train_epoch_start(self, trainer: L.Trainer, *_: Any) -> None:
        pass  # one bar for the whole run, made in on_train_start: the steps, not an epoch's batches

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *_: Any) -> None:
        self.log_progress(trainer)
        step = trainer.global_step
        if self.train_progress_bar is not None and self._should_update(step, self.train_progress_bar.total):
            self.train_progress_bar.n = step
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, module))

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if not self.train_progress_bar.disable:
            self.train_progress_bar.set_postfix(self.get_metrics(trainer, module))

    def get_metrics(self, trainer: L.Trainer, module: L.LightningModule) -> dict[str, Any]:
        metrics = super().get_metrics(trainer, module)
        metrics.pop("v_num", None)  # a logger's version id: says nothing about the run's progress
        return metrics

    def init_validation_tqdm(self) -> Tqdm:
        return Tqdm(disable=True)

    def init_test_tqdm(self) -> Tqdm:
        return Tqdm(disable=True)


class SaveOnInterrupt(L.Callback):
    """Ctrl-C (SIGINT) during training: the step in progress ends, ``last.ckpt`` is saved at it (atomically, through
    the Trainer's ``AtomicCheckpointIO``, where the checkpoint callback writes it) and the run stops;
    ``poslab.running.training`` then says how to resume and exits with status 130 (``docs/resume.md``).

    Lightning's own handling is kept: SIGINT raises KeyboardInterrupt, Lightning ignores further SIGINTs, calls each
    callback's ``on_exception`` (this one saves there, so a second Ctrl-C cannot interrupt the write) and exits.
    What it cannot choose is where the KeyboardInterrupt lands: between the optimizer step and the schedule's step,
    a checkpoint would hold no step's state, and its resume would not be exact. So while a step runs the first SIGINT
    is held and raised when the step ends; a second one stops at once, and then nothing is saved (the last periodic
    checkpoint is what a resume continues from). Checkpoints off (no ``ModelCheckpoint``): nothing is saved.
    ``interruption`` holds what happened, for ``poslab.running.training``."""

    def __init__(self) -> None:
        self.in_step = False  # between on_train_batch_start and on_train_batch_end: the state is not a step's
        self.held = False  # a SIGINT received during a step, raised when it ends
        self.steps = 0  # steps trained in this process (none: nothing new to save)
        self.first_step = 0  # the optimizer step training started from (a resume's checkpoint step)
        self.previous: Any = None  # the SIGINT handler before training, put back when it ends
        self.interruption: RunInterrupted | None = None

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.first_step = int(trainer.global_step)  # restored from the checkpoint by now
        if threading.current_thread() is threading.main_thread():  # only the main thread may set a handler
            self.previous = signal.signal(signal.SIGINT, self.on_sigint)

    def on_sigint(self, signum: int, frame: Any) -> None:
        if self.in_step and not self.held:
            self.held = True
            print("poslab: stopping after this step, to save it (Ctrl-C again stops at once)", file=sys.stderr)
            return
        raise KeyboardInterrupt

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        self.in_step = True

    def on_train_batch_end(self, trainer: L.Trainer, module: L.LightningModule, *args: Any) -> None:
        # A periodic checkpoint due at this step is written now, while a SIGINT is still held: Lightning runs the
        # checkpoint callbacks after all others, and a Ctrl-C between this hook and theirs (or during their write)
        # would stop the run without the checkpoint an uninterrupted run writes. Their own call then finds the
        # step saved and does nothing.
        if isinstance(trainer.checkpoint_callback, ModelCheckpoint):
            trainer.checkpoint_callback.on_train_batch_end(trainer, module, *args)
        self.in_step, self.steps = False, self.steps + 1
        if self.held:
            raise KeyboardInterrupt  # Lightning's on_exception then saves last.ckpt at this step

    def on_train_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.restore()  # evaluation after training: Lightning's own handling (nothing to save: last.ckpt is written)

    def on_exception(self, trainer: L.Trainer, module: L.LightningModule, exception: BaseException) -> None:
        if not isinstance(exception, KeyboardInterrupt):
            self.restore()
            return  # Lightning leaves SIGINT ignored after a KeyboardInterrupt: the run is ending
        fitting = trainer.state.fn == TrainerFn.FITTING
        saved = fitting and not self.in_step and self.steps > 0 and save_last_checkpoint(trainer)
        during = "training" if fitting else "the evaluation after training"
        self.interruption = RunInterrupted(int(trainer.global_step), bool(saved), during)

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.previous = None


def save_last_checkpoint(trainer: L.Trainer) -> bool:
    """Write the checkpoint callback's ``last.ckpt`` now (through the Trainer's checkpoint writer, atomic); False
    when checkpointing is off."""
    callback = trainer.checkpoint_callback
    if not isinstance(callback, ModelCheckpoint) or not callback.save_last or callback.dirpath is None:
        return False
    path = Path(callback.dirpath) / f"{callback.CHECKPOINT_NAME_LAST}{callback.FILE_EXTENSION}"
    # its state names this file as the last one, as the callback's own write does: a resumed run then rewrites
    # last.ckpt rather than adding last-v1.ckpt beside it
    callback.last_model_path = str(path)
    trainer.save_checkpoint(path, weights_only=False)  # the whole training state
    return True
