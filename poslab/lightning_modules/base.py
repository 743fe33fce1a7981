"""What every poslab LightningModule shares: the model, the optimizer and its schedule, and the RNG states
a checkpoint needs for an exact resume."""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from torch import Tensor

from poslab.config.settings import check_precision, default_option, yaml_defaults
from poslab.errors import DivergedError
from poslab.lightning_modules.rng import rng_states, set_rng_states
from poslab.model import ModelConfig, Transformer


def clip_gradient_norm(optimizer: torch.optim.Optimizer, max_norm: float, scaler: Any = None) -> Tensor:
    """Clip the gradients of every parameter ``optimizer`` updates to a total 2-norm of ``max_norm``; return
    the (true) norm before clipping.

    ``torch.nn.utils.clip_grad_norm_`` on the optimizer's parameters, which is what Lightning does in fp32; done
    here because Lightning's mixed-precision plugin refuses to clip for fused optimizers (they can unscale fp16
    gradients inside their step). bf16 has no loss scale: this is clip_grad_norm_ exactly. Under 16-mixed the
    gradients are still multiplied by the GradScaler's scale S, a power of two that the step removes (the fused
    step itself, or Lightning's ``unscale_`` just before a plain one); clipping them at ``S * max_norm`` clips the
    true gradients at ``max_norm`` (exactly, but for clip_grad_norm_'s 1e-6 in the denominator) and leaves the
    scaler's state alone, so either optimizer works. Overflowed gradients give an infinite norm; the scaler then
    skips the step as it would anyway.
    """
    inner = optimizer.optimizer if isinstance(optimizer, LightningOptimizer) else optimizer
    parameters = [p for group in inner.param_groups for p in group["params"]]
    scale = scaler.get_scale() if scaler is not None else 1.0
    return torch.nn.utils.clip_grad_norm_(parameters, max_norm * scale) / scale


#: the way of evaluating that multiplies every attention score by ``log_length_scale`` (every encoding)
LOG_SCALED = "log_scaled"


def log_length_scale(length: int, train_length: int) -> Tensor:
    """``[length]`` fp32: the factor on the attention scores of the query at each position ``t``,
    ``max(1, log(t + 1) / log(L_train))``.

    Chiang & Cholak (2022) multiply the scores of a query by ``log n``, ``n`` the number of positions it attends
    to; a causal query at ``t`` attends to ``n = t + 1`` (SSMax's ``log n`` too). poslab trains without the factor
    and applies it at test time only, so it is taken relative to the training length, ``log(t + 1) /
    log(L_train)``, and floored at 1: a query that sees no more keys than training showed one (``t + 1 <=
    L_train``, ``t = 0`` included) is computed exactly as in training; only the queries past the training length
    are sharpened, each by its own count of keys (not the window's length, which would scale every query alike)."""
    keys = torch.arange(1, length + 1, dtype=torch.float64)  # t + 1
    return (keys.log() / math.log(train_length)).clamp(min=1.0).float()


def logits_in_way(model: Transformer, inputs: Tensor, coordinates: Any, way: str | None, train_length: int) -> Tensor:
    """The model's logits evaluated in ``way``: None plain, ``LOG_SCALED``, or one of its encoding's
    ``test_time_variants()`` (the same weights each time)."""
    if way is None:
        return model(inputs, coordinates).logits
    if way == LOG_SCALED:
        return model(inputs, coordinates, score_scale=log_length_scale(inputs.shape[1], train_length)).logits
    with model.encoding.evaluated_as(way):
        return model(inputs, coordinates).logits


def lr_factor(step: int, warmup_steps: int, total_steps: int, schedule: str, min_ratio: float) -> float:
    """Linear warm-up, then constant or cosine decay to ``min_ratio`` of the peak at ``total_steps``."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    if schedule == "constant":
        return 1.0
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def optimizer_settings(given: dict[str, Any]) -> dict[str, Any]:
    """The ``optimizer`` config, the settings it leaves out (a module built by hand: ``{"lr": 1e-3}``) taken from
    the YAML a run takes by default (``conf/optimizer/adamw.yaml``, their one home); a composed config has them
    all. ``total_steps`` interpolates ``trainer.max_steps``: None here, when nothing gave it."""
    return {**yaml_defaults("optimizer", default_option("optimizer")), **given}


def summed_over_ranks(value: Tensor, trainer: L.Trainer | None) -> Tensor:
    """``value`` summed over the DDP ranks (one all-reduce; Lightning's ``strategy.reduce`` would add a barrier
    before it), or ``value`` itself in one process."""
    if trainer is None or trainer.world_size == 1 or not torch.distributed.is_initialized():
        return value
    total = value.clone()
    torch.distributed.all_reduce(total)
    return total


def nonfinite_what(loss: Tensor, norm: Tensor | None) -> str:
    """What made a step non-finite, for its message: this rank's loss, its gradient norm, or (DDP) another rank's
    loss or gradients."""
    if not torch.isfinite(loss):
        return f"the training loss is {float(loss)}"
    if norm is not None and not torch.isfinite(norm):
        return f"the gradient norm is {float(norm)} (the training loss {float(loss)})"
    return f"another DDP rank's training loss or gradient norm is not finite (this rank's loss: {float(loss)})"


class TransformerModule(L.LightningModule):
    def __init__(self, model: ModelConfig, optimizer: dict[str, Any], max_length: int) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.model_config, self.optimizer_config = model, optimizer_settings(optimizer)
        self.model = Transformer(model, max_length)
        self._rng_states_to_restore: dict[str, Any] | None = None

    def loss(self, batch: Any) -> Tensor:
        """The training loss of one batch; each task's module defines it."""
        raise NotImplementedError

    def setup(self, stage: str) -> None:
        # any Trainer (train.py checks before building one): a precision the training step cannot honour stops here
        if self._trainer is not None:
            check_precision(self.trainer.precision)

    def configure_model(self) -> None:
        """``model.compile``: compile the Transformer in place when training starts (``nn.Module.compile``:
        parameter names stay as they are, so checkpoints and model.pt load into uncompiled models)."""
        if self.model_config.compile and not getattr(self, "_compiled", False):
            self.model.compile()
            self._compiled = True

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        """One optimisation step, written out (manual optimisation): Lightning's automatic loop adds a
        closure and six hooks per step, a measurable share of a tiny model's step on a CPU."""
        optimizer, schedule = self.optimizers(), self.lr_schedulers()
        loss = self.loss(batch)
        optimizer.zero_grad(set_to_none=True)
        # the backward pass outside autocast (as PyTorch asks): Lightning runs training_step inside it, and the
        # backward of an op autocast left in fp32 (the increments' DeltaMLP) would then run its products in bf16
        with torch.autocast(self.device.type, enabled=False):
            self.manual_backward(loss)  # every rank, even on a non-finite loss: DDP's all-reduce waits for all
        clip = self.optimizer_config["grad_clip"]
        # not self.clip_gradients: Lightning refuses it under mixed precision with fused AdamW
        norm = clip_gradient_norm(optimizer, float(clip), self.trainer.scaler) if clip else None
        if not self.step_is_finite(loss, norm):
            return self.skip_or_stop(loss, norm)
        if self.is_log_step():  # the learning rate this step used, beside its loss
            self.log("train/lr", float(schedule.get_last_lr()[0]))
            if norm is not None:
                self.log("train/grad_norm", norm)  # before clipping
        optimizer.step()
        schedule.step()
        self.log_every_n_steps("train/loss", loss)
        return loss.detach()

    def step_is_finite(self, loss: Tensor, norm: Tensor | None) -> bool:
        """Whether this step may update the weights: every DDP rank's loss finite, and the gradient norm when
        clipping computed it (a finite loss can still give inf/NaN gradients, which the step would write into the
        weights; under 16-mixed the GradScaler skips an overflowed step and lowers its scale itself, as it should).
        One decision for all ranks (one scalar read and, under DDP, one all-reduce a step): a rank that skipped or
        stopped alone would leave the others waiting in the next all-reduce, or stop the run without its record."""
        finite = torch.isfinite(loss)
        if norm is not None and self.trainer.scaler is None:
            finite = finite & torch.isfinite(norm)
        return int(summed_over_ranks(finite.int(), self.trainer)) == self.trainer.world_size

    def skip_or_stop(self, loss: Tensor, norm: Tensor | None = None) -> Tensor:
        """A non-finite step (``step_is_finite``, the same on every rank): skip it (no update) while
        ``optimizer.skip_nonfinite_steps`` allows, else stop the run as diverged, naming the step, what was not
        finite and the usual causes."""
        self._nonfinite_steps = getattr(self, "_nonfinite_steps", 0) + 1
        allowed = int(self.optimizer_config["skip_nonfinite_steps"])
        step = int(self.global_step)
        if self._nonfinite_steps <= allowed:
            self.log("train/skipped_nonfinite_steps", float(self._nonfinite_steps))
            return loss.detach()
        lr = self.optimizer_config["lr"]
        raise DivergedError(
            f"{nonfinite_what(loss, norm)} at step {step}: the run diverged and stops here (skipped "
            f"non-finite steps so far: {self._nonfinite_steps - 1} of optimizer.skip_nonfinite_steps={allowed}); "
            f"likely causes: a learning rate too high (optimizer.lr={lr}), no or too little warm-up "
            f"(optimizer.warmup_steps), no gradient clipping (optimizer.grad_clip), or fp16 overflow "
            f"(trainer.precision=16-mixed; bf16-mixed has fp32's range).",
            step,
        )

    # Exact resume. Lightning's checkpoint holds the weights, the optimizer and schedule states and the loop
    # counters (global_step, hence the data position: batch i is a function of (seed, i)), with manual
    # optimisation too; not the global RNG states, which some encodings draw from every step (rand_axial).
    # They are saved with the checkpoint and put back just before the first training step after a resume:
    # restoring them on load would be too early, as Lightning creates the dataloader iterator after that,
    # and a DataLoader iterator draws its base seed from the global torch RNG.
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["rng_states"] = rng_states()
        checkpoint["nonfinite_steps"] = getattr(self, "_nonfinite_steps", 0)  # skipped: a batch drawn, no step

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._rng_states_to_restore = checkpoint.get("rng_states")
        self._nonfinite_steps = int(checkpoint.get("nonfinite_steps", 0))

    @property
    def batches_drawn(self) -> int:
        """The training batches drawn so far: one a step, and one for each non-finite step skipped (manual
        optimisation counts only the steps taken), where a resumed data stream goes on."""
        return int(self.global_step) + getattr(self, "_nonfinite_steps", 0)

    def on_train_start(self) -> None:
        """The config's optimizer settings over those a restored checkpoint brought back (Lightning restores each
        group's lr, weight decay, betas and eps and the schedule's base lrs), so a resume with another optimizer
        setting or schedule length (docs/resume.md: they may change) trains with it from its first step."""
        cfg, optimizer, scheduler = self.optimizer_config, self.optimizers(), self.lr_schedulers()
        optimizer = getattr(optimizer, "optimizer", optimizer)  # Lightning's wrapper
        if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
            return
        names = self.model.no_weight_decay_parameters()
        skip = {id(p) for n, p in self.model.named_parameters() if n in names}
        for group in optimizer.param_groups:
            group["weight_decay"] = 0.0 if all(id(p) in skip for p in group["params"]) else cfg["weight_decay"]
            group["eps"] = cfg["eps"]
            if cfg["betas"] is not None:
                group["betas"] = tuple(cfg["betas"])
        scheduler.base_lrs = [float(cfg["lr"])] * len(optimizer.param_groups)
        for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
            group["lr"] = base * factor(scheduler.last_epoch)  # the lr the schedule gives this step, as configured
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]  # what get_last_lr() reports

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
        if self._rng_states_to_restore is not None:
            set_rng_states(self._rng_states_to_restore)
            self._rng_states_to_restore = None

    def evaluation_results(self) -> dict[str, Any]:
        """What the evaluation reports beside ``figures``, as results.json's top-level keys (none by default)."""
        return {}

    def forward(self, tokens: Tensor, **kwargs: Any):
        return self.model(tokens, **kwargs)

    def log_every_n_steps(self, name: str, value: Tensor) -> None:
        """``self.log`` on the steps the loggers write, only: each call costs about a millisecond of
        bookkeeping in Lightning, as much as a tenth of a step of the tiny model."""
        if self.is_log_step():
            self.log(name, value.detach(), prog_bar=True)

    def with_row_seeds(self, coordinates: dict[str, Tensor] | None, batch_size: int) -> dict[str, Tensor] | None:
        """``coordinates`` plus ``row_seed`` for an encoding that draws per training sequence
        (``PositionEncoding.uses_row_seeds``): row i of this process's batch is row ``rank * batch_size + i`` of
        data batch ``batches_drawn`` (steps + skipped); its seed a function of the row, ``global_step`` and the seed."""
        if not (self.training and self.model.encoding.uses_row_seeds):
            return coordinates
        trainer = self._trainer
        seed = int(getattr(trainer.datamodule, "seed", 0) or 0) if trainer is not None else 0
        rank = trainer.global_rank if trainer is not None else 0
        rows = torch.arange(batch_size, device=self.device) + rank * batch_size
        step_seed = (seed * 1_000_003 + int(self.global_step)) * 1_048_573  # distinct for every (seed, step)
        return {**(coordinates or {}), "row_seed": (rows + step_seed)[:, None]}

    def is_log_step(self) -> bool:
        interval = self.trainer.log_every_n_steps if self._trainer is not None else 1
        return self.global_step % max(1, interval) == 0

    def configure_optimizers(self) -> dict[str, Any]:
        cfg = self.optimizer_config
        skip = self.model.no_weight_decay_parameters()
        named = [(f"{name}", p) for name, p in self.model.named_parameters() if p.requires_grad]
        groups = [
            {"params": [p for n, p in named if n not in skip], "weight_decay": cfg["weight_decay"]},
            {"params": [p for n, p in named if n in skip], "weight_decay": 0.0},
        ]
        betas = {} if cfg["betas"] is None else {"betas": tuple(cfg["betas"])}  # null: PyTorch's own
        # fused AdamW: one kernel for the whole update instead of a few per tensor (supported on CPU and CUDA)
        optimizer = torch.optim.AdamW(
            [g for g in groups if g["params"]], lr=cfg["lr"], eps=cfg["eps"], fused=cfg["fused"], **betas
        )
        # the schedule's length; the configs tie it to trainer.max_steps (None: a module built by hand, no trainer)
        total = int(cfg["total_steps"] or 1)
        warmup, schedule, min_ratio = cfg["warmup_steps"], cfg["schedule"], cfg["min_lr_ratio"]
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda step: lr_factor(step, warmup, total, schedule, min_ratio)
        )
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
