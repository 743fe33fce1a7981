"""Non-finite training steps and the DDP gradient: a NaN loss on one rank is skipped (or stops the run) on every
rank alike; a finite loss with non-finite gradients is not applied; a flip_flop gradient under DDP is the global
batch's token mean, as one process computes it."""

from __future__ import annotations

import json
import os
import textwrap
from types import SimpleNamespace

import pytest
import torch

from poslab.datamodules import SyntheticDataModule
from poslab.errors import DivergedError
from poslab.lightning_modules import SyntheticTaskModule
from poslab.model import ModelConfig
from tests.conftest import ROOT, fit_quietly

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
TWO_CORES = pytest.mark.skipif(CORES < 2, reason="2 DDP processes: needs 2 CPU cores")
MODEL = ModelConfig(vocab_size=16, n_outputs=16)


class NaNGradient(torch.autograd.Function):
    """The identity forward, a NaN gradient backward: a finite loss whose gradients are not."""

    @staticmethod
    def forward(ctx, value: torch.Tensor) -> torch.Tensor:
        return value.view_as(value)

    @staticmethod
    def backward(ctx, gradient: torch.Tensor) -> torch.Tensor:
        return torch.full_like(gradient, float("nan"))


class GradientsTurnNaN(SyntheticTaskModule):
    """The third batch drawn has a finite loss and NaN gradients."""

    def loss(self, batch):
        loss = super().loss(batch)
        return NaNGradient.apply(loss) if self.batches_drawn == 2 else loss


def lag(**optimizer) -> tuple[GradientsTurnNaN, SyntheticDataModule]:
    dm = SyntheticDataModule("lag", 16, 16, [16], batch_size=4, eval_size=4, k=3)
    settings = {"lr": 1e-3, "grad_clip": 1.0, "total_steps": 4, **optimizer}
    return GradientsTurnNaN(model=MODEL, optimizer=settings, max_length=16, **dm.module_arguments()), dm


def test_a_finite_loss_with_nonfinite_gradients_is_skipped_not_written_into_the_weights():
    """With clipping on (the gradient norm computed anyway) the step is gated on the norm too: before, the NaN
    gradients went into AdamW and every weight became NaN while the loss looked finite."""
    module, dm = lag(skip_nonfinite_steps=1)
    trainer = fit_quietly(module, dm, 4)
    assert trainer.global_step == 4 and module.batches_drawn == 5  # one batch drawn without a step
    assert all(torch.isfinite(p).all() for p in module.parameters())
    module, dm = lag(skip_nonfinite_steps=0)
    with pytest.raises(DivergedError, match=r"the gradient norm is nan \(the training loss [0-9.]+\) at step 2"):
        fit_quietly(module, dm, 4)


def test_the_flip_flop_gradient_of_two_ranks_is_the_global_token_mean(monkeypatch):
    """flip_flop scores its reads only, a different number per row: DDP's mean of the two ranks' own token means
    weighted a token of the rank with fewer reads more; each rank's loss is now its summed loss over the global
    count (times the world size), and the ranks' mean gradient is one process's."""
    import poslab.lightning_modules.synthetic as synthetic

    dm = SyntheticDataModule("flip_flop", 6, 32, [32], batch_size=8, eval_size=8)
    tokens, targets = next(iter(dm.train_batches))
    module = SyntheticTaskModule(model=ModelConfig(vocab_size=dm.vocab_size, n_outputs=dm.num_classes),
                                 optimizer={"lr": 1e-3}, max_length=32, **dm.module_arguments())  # fmt: skip

    def gradient(batch) -> torch.Tensor:
        module.zero_grad(set_to_none=True)
        module.loss(batch).backward()
        return torch.cat([p.grad.flatten() for p in module.parameters() if p.grad is not None])

    one_process = gradient((tokens, targets))
    halves = [(tokens[:4], targets[:4]), (tokens[4:], targets[4:])]
    counts = [int((t != synthetic.IGNORE).sum()) for _, t in halves]
    assert counts[0] != counts[1]  # the ranks score different numbers of positions
    monkeypatch.setattr(synthetic, "summed_over_ranks", lambda value, trainer: torch.tensor(sum(counts)), raising=False)
    ranks = []
    for rank, half in enumerate(halves):
        module._trainer = SimpleNamespace(world_size=2, global_rank=rank)
        ranks.append(gradient(half))
    module._trainer = None
    assert torch.allclose((ranks[0] + ranks[1]) / 2, one_process, rtol=1e-5, atol=1e-7)  # DDP averages them


# ---- two DDP processes (gloo, CPU) ------------------------------------------------------------------------------

SKIP_SCRIPT = """
import datetime, json, os, sys
import torch, lightning as L
from lightning.pytorch.strategies import DDPStrategy
from poslab.datamodules import SyntheticDataModule
from poslab.lightning_modules import SyntheticTaskModule
from poslab.model import ModelConfig

torch.set_num_threads(1)


class Module(SyntheticTaskModule):
    def loss(self, batch):  # rank 1's loss is NaN on the fourth batch drawn only
        loss = super().loss(batch)
        return loss * float("nan") if self.trainer.global_rank == 1 and self.batches_drawn == 3 else loss


dm = SyntheticDataModule("lag", 16, 16, [16], batch_size=4, eval_size=4, k=3)
optimizer = {"lr": 1e-3, "skip_nonfinite_steps": 2, "total_steps": 5}
module = Module(model=ModelConfig(vocab_size=16, n_outputs=16), optimizer=optimizer, max_length=16,
                **dm.module_arguments())
trainer = L.Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=datetime.timedelta(seconds=30)),
                    max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, num_sanity_val_steps=0, **dm.trainer_arguments())
trainer.fit(module, datamodule=dm)
weights = sum(float(p.double().sum()) for p in module.parameters())
line = {"rank": trainer.global_rank, "steps": trainer.global_step, "drawn": module.batches_drawn, "weights": weights}
print("RESULT " + json.dumps(line), flush=True)
"""


def two_ranks(script: str, tmp_path, *args: str, timeout: int = 240):
    """``script`` run as ``python script args`` in ``tmp_path``, which starts a second rank itself (Lightning's
    ddp strategy); the CompletedProcess (both ranks' output)."""
    from tests.script_runs import run_script

    path = tmp_path / "two_ranks.py"
    path.write_text(textwrap.dedent(script))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT), "POSLAB_LOG_DIR": str(tmp_path)}
    return run_script(path, list(args), tmp_path, env, timeout)


@pytest.mark.slow
@TWO_CORES
def test_a_nan_loss_on_one_rank_is_skipped_on_every_rank(tmp_path):
    """Before, rank 1 skipped its backward alone and rank 0 waited in the gradient all-reduce until the timeout."""
    result = two_ranks(SKIP_SCRIPT, tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    lines = [json.loads(line.split("RESULT ", 1)[1]) for line in (result.stdout + result.stderr).splitlines()
             if "RESULT " in line]  # fmt: skip
    assert sorted(line["rank"] for line in lines) == [0, 1], result.stdout[-2000:]
    assert all(line["steps"] == 5 and line["drawn"] == 6 for line in lines), lines  # one skipped, on both
    assert lines[0]["weights"] == lines[1]["weights"]  # the same updates on both ranks


DIVERGE_SCRIPT = """
import sys
from poslab.errors import DivergedError
from poslab.lightning_modules.synthetic import SyntheticTaskModule
from poslab.running.compose import compose_config
from poslab.running.training import run

loss = SyntheticTaskModule.loss


def nan_on_rank_one(self, batch):  # rank 1's loss is NaN on the fourth batch drawn: the run diverges at step 3
    value = loss(self, batch)
    return value * float("nan") if self.trainer.global_rank == 1 and self.batches_drawn == 3 else value


SyntheticTaskModule.loss = nan_on_rank_one
overrides = ["debug=fast", "trainer=ddp_cpu", "~logger", "~callbacks.progress_bar", "threads=1"]
try:
    run(compose_config(overrides, sys.argv[1]))
except DivergedError as error:
    print(f"DIVERGED {error}", flush=True)
    sys.exit(1)
"""


@pytest.mark.slow
@TWO_CORES
def test_a_nan_loss_on_one_rank_stops_every_rank_and_results_say_diverged(tmp_path):
    """Before, rank 1 raised alone, rank 0 died in the next collective ("Connection closed by peer") and no
    results.json recorded the divergence."""
    run_dir = tmp_path / "run"
    result = two_ranks(DIVERGE_SCRIPT, tmp_path, str(run_dir))
    output = result.stdout + result.stderr
    assert output.count("DIVERGED the training loss is nan at step 3") == 1, output[-3000:]  # rank 1's own
    assert output.count("DIVERGED another DDP rank's training loss or gradient norm is not finite") == 1
    assert "Connection closed" not in output
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "diverged" and results["diverged_at_step"] == 3
    assert not (run_dir / "model.pt").exists()
