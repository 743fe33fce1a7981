"""Callbacks: throughput (tokens/s) and model FLOPs utilisation, computed explicitly; the run's config in its
checkpoints."""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

from poslab.checkpoint import CONFIG_KEY

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
    """Writes the run's resolved config into every training checkpoint (``poslab.checkpoint.CONFIG_KEY``), so
    that a resume can check it continues the same model (``poslab.config.check_resume``). Plain values only:
    the checkpoint still loads with ``weights_only=True``."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def on_save_checkpoint(self, trainer: L.Trainer, module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        checkpoint[CONFIG_KEY] = self.config


class StepProgressBar(TQDMProgressBar):
    """The training bar counts optimizer steps against ``trainer.max_steps`` (``step 1050/2000``, also after a
    resume, where Lightning's own bar restarts an epoch of unknown length: ``1050/?``); the validation and
    test bars are off (their figures are logged when each evaluation ends)."""

    def init_train_tqdm(self) -> Tqdm:
        trainer = self.trainer
        total = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 else None
        return Tqdm(
            desc="step",
            total=total,
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
