"""Callbacks: throughput (tokens/s) and model FLOPs utilisation, computed explicitly; the run's config in its
checkpoints; a checkpoint at Ctrl-C."""

from __future__ import annotations

import logging
import re
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

#: dense peak FLOP/s (no sparsity) of the devices we know, by the number format of the matrix products: ``bf16`` (and
#: ``fp16``, the same rate on these tensor cores), ``tf32`` (fp32 inputs on the tensor cores: a ``32-true`` run with
#: torch's float32 matmul precision below ``highest``), ``fp32`` (``32-true`` at ``highest``). From NVIDIA's data
#: sheets and architecture white papers (the GeForce cards: fp32 accumulation). A format a device lacks (V100: no bf16,
#: no tf32) has no entry; another device, or a MIG slice of one: unknown (set ``peak_flops``).
PEAK_FLOPS: dict[str, dict[str, float]] = {
    "H200 SXM": {"bf16": 989e12, "fp16": 989e12, "tf32": 494.5e12, "fp32": 67e12},
    "H200 NVL": {"bf16": 835.5e12, "fp16": 835.5e12, "tf32": 417.5e12, "fp32": 60e12},
    "H100 SXM": {"bf16": 989e12, "fp16": 989e12, "tf32": 494.5e12, "fp32": 67e12},
    "H100 NVL": {"bf16": 835.5e12, "fp16": 835.5e12, "tf32": 417.5e12, "fp32": 60e12},
    "H100 PCIe": {"bf16": 756.5e12, "fp16": 756.5e12, "tf32": 378e12, "fp32": 51.2e12},
    "A100": {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12},
    "L40S": {"bf16": 362e12, "fp16": 362e12, "tf32": 183e12, "fp32": 91.6e12},
    "RTX 4090": {"bf16": 165.2e12, "fp16": 165.2e12, "tf32": 82.6e12, "fp32": 82.6e12},
    "RTX 3090": {"bf16": 71e12, "fp16": 71e12, "tf32": 35.6e12, "fp32": 35.6e12},
    "V100 SXM2": {"fp16": 125e12, "fp32": 15.7e12},
    "V100 PCIe": {"fp16": 112e12, "fp32": 14e12},
}

#: the device names ``torch.cuda.get_device_name`` gives, matched in order, and the ``PEAK_FLOPS`` entry each is; an
#: H100 whose name says none of its forms (SXM or HBM3, PCIe, NVL) matches nothing: its peak is unknown
DEVICE_NAMES: tuple[tuple[str, str], ...] = (
    (r"\bMIG\b", ""),  # a slice of a device: a fraction of its peak, which the name does not give
    (r"\bH200 NVL\b", "H200 NVL"),
    (r"\bH200\b(?!.*\b(PCIe|NVL)\b)", "H200 SXM"),  # "NVIDIA H200": the SXM form (the NVL says NVL)
    (r"\bH100 NVL\b", "H100 NVL"),
    (r"\bH100 PCIe\b", "H100 PCIe"),
    (r"\bH100\b.*\b(SXM\w*|HBM3)\b", "H100 SXM"),  # "NVIDIA H100 80GB HBM3"
    (r"\bA100\b", "A100"),  # SXM and PCIe: the same peaks
    (r"\bL40S\b", "L40S"),
    (r"\bRTX 4090\b", "RTX 4090"),
    (r"\bRTX 3090\b", "RTX 3090"),
    (r"\bV100-SXM2\b", "V100 SXM2"),
    (r"\bV100-PCIE\b", "V100 PCIe"),
)


def matmul_weights(model: Any) -> int:
    """The weights of the matrix products every token goes through: each block's query/key/value and output
    projections and its MLP, and the output head (a ``d_model x outputs`` product on every token, tied to the
    embeddings or not). Not counted: embeddings and position tables (lookups), norms and biases."""
    layers = (m for block in model.blocks for m in (block.attn.qkv, block.attn.out, block.mlp.up, block.mlp.down))
    return sum(m.weight.numel() for m in layers) + model.head.weight.numel()


def flops_per_token(model: Any, length: int, batch: int = 1) -> float:
    """Training FLOPs per token of ``model`` (a ``poslab.model.Transformer``) on a batch of ``batch`` sequences of
    ``length`` tokens: 6 per matrix weight (forward 2, backward 4; ``matmul_weights``), plus attention's scores and
    weighted sums, ``6 * 2 * n_layers * length * d_model`` (PaLM's appendix B, counting the full T x T product as
    the explicit path and a bias mask compute it), plus the encoding's own matrix products
    (``PositionEncoding.extra_flops_per_token``: CoPE's gates, FIRE's and DAPE's MLPs, ...). Elementwise work
    (rotations, softmax, norms) is not counted, for any encoding."""
    cfg = model.cfg
    attention = 12.0 * cfg.n_layers * length * cfg.d_model
    return 6.0 * matmul_weights(model) + attention + float(model.encoding.extra_flops_per_token(length, batch))


def number_format(precision: str) -> str | None:
    """The format a run's matrix products take at Lightning's ``precision`` (``bf16-mixed``, ``16-mixed``,
    ``32-true``, ...): bf16, fp16, tf32 (fp32 with torch's float32 matmul precision below ``highest``) or fp32;
    None for another (64-true, transformer-engine): no peak to hold it against."""
    kind = str(precision).split("-")[0]
    if kind in ("bf16", "16"):
        return "bf16" if kind == "bf16" else "fp16"
    if kind == "32":
        return "fp32" if torch.get_float32_matmul_precision() == "highest" else "tf32"
    return None


def known_device(name: str) -> str | None:
    """The ``PEAK_FLOPS`` entry of a CUDA device's name, or None (unknown, or a MIG slice)."""
    entry = next((entry for pattern, entry in DEVICE_NAMES if re.search(pattern, name)), None)
    return entry or None


def device_peak_flops(device: torch.device, precision: str, override: float | None = None) -> float | None:
    """One device's dense peak FLOP/s for a run at Lightning's ``precision``: ``override`` where given (whatever the
    precision), else the known device's peak for the run's number format (tf32 falls back to fp32 on a device
    without it); None on a CPU, an unknown device or a format it has no figure for (no MFU)."""
    if override:
        return float(override)
    if device.type != "cuda":
        return None
    entry, kind = known_device(torch.cuda.get_device_name(device)), number_format(precision)
    if entry is None or kind is None:
        return None
    peaks = PEAK_FLOPS[entry]
    return peaks.get(kind, peaks.get("fp32") if kind == "tf32" else None)


class Throughput(L.Callback):
    """Times every training step after ``warmup`` steps; logs tokens/s (and MFU where the peak is known).

    A step's FLOPs are counted at its own batch's length (``flops_per_token``), so a task that draws its training
    length per batch (``task.train_lengths``) is counted at the lengths it trained. Tokens and FLOPs are every
    rank's; MFU divides them by ``world_size`` devices' peak: the utilisation of each device, not of one.

    ``summary()`` gives the median step time, the median of the steps' tokens/s and MFU, and the FLOPs per token
    over the timed steps, for benchmarks and results.
    """

    def __init__(self, warmup: int = 5, peak_flops: float | None = None) -> None:
        self.warmup, self.peak_override = warmup, peak_flops
        self.step_seconds: list[float] = []
        self.step_tokens: list[int] = []  # every rank's tokens of each timed step
        self.step_flops: list[float] = []  # every rank's training FLOPs of each timed step
        self.tokens_per_step = 0  # the last step's, every rank's
        self.flops_per_step = 0.0
        self.flops_per_token = 0.0  # the last step's; summary(): over the timed steps
        self.world_size = 1
        self.peak: float | None = None
        self.model: Any = None
        self._flops_at: dict[tuple[int, int], float] = {}  # (length, rows) -> FLOPs per token: once, not every step
        self._start = 0.0

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.model, self.world_size = module.model, max(1, int(trainer.world_size))
        self.peak = device_peak_flops(module.device, str(trainer.precision), self.peak_override)

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        # synthetic tasks: (tokens, targets); language modelling: windows of context + 1 (inputs are all but the last)
        tokens = batch[0] if isinstance(batch, (tuple, list)) else batch["tokens"][:, :-1]
        rows, length = tokens.shape[0], tokens.shape[-1]
        self.world_size = max(1, int(trainer.world_size))  # the ranks whose tokens the step counts
        self.tokens_per_step = int(tokens.numel()) * self.world_size
        if self.model is not None:
            if (length, rows) not in self._flops_at:
                self._flops_at[length, rows] = flops_per_token(self.model, length, rows)
            self.flops_per_token = self._flops_at[length, rows]
        self.flops_per_step = self.tokens_per_step * self.flops_per_token
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        self._start = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if module.device.type == "cuda":
            torch.cuda.synchronize()
        if trainer.global_step > self.warmup:
            seconds = time.perf_counter() - self._start
            self.step_seconds.append(seconds)
            self.step_tokens.append(self.tokens_per_step)
            self.step_flops.append(self.flops_per_step)
            if trainer.global_step % max(1, trainer.log_every_n_steps) == 0:
                module.log("throughput/tokens_per_s", self.tokens_per_step / seconds)
                if self.peak:
                    module.log("throughput/mfu", self.mfu(self.flops_per_step / seconds))

    def mfu(self, flops_per_s: float) -> float:
        """Every rank's FLOP/s over every rank's peak: each device's share of its peak."""
        return flops_per_s / (self.world_size * self.peak) if self.peak else float("nan")

    def summary(self) -> dict[str, float]:
        if not self.step_seconds:
            return {}
        steps = list(zip(self.step_seconds, self.step_tokens, self.step_flops))
        out = {
            "step_seconds": statistics.median(self.step_seconds),
            "tokens_per_s": statistics.median(tokens / seconds for seconds, tokens, _ in steps),
            "flops_per_token": sum(self.step_flops) / max(1, sum(self.step_tokens)),
        }
        if self.peak:
            out["mfu"] = statistics.median(self.mfu(flops / seconds) for seconds, _, flops in steps)
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
        # Between steps the KeyboardInterrupt is raised at once, wherever the main thread is; code there that
        # swallows it (a finalizer, a handler catching BaseException) would lose the Ctrl-C: held, the next step's
        # start raises it again
        self.held = True
        raise KeyboardInterrupt

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch: Any, batch_idx: int) -> None:
        if self.held:  # a Ctrl-C between steps whose KeyboardInterrupt did not stop the run: before this step
            raise KeyboardInterrupt
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
