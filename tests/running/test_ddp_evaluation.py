"""Evaluation under DDP (2 gloo processes on the CPU): every sequence and window is scored once, whatever the
number of ranks, and a rank the evaluation batches do not reach still takes part."""

from __future__ import annotations

import json
import os
import textwrap

import lightning as L
import pytest
import torch

from poslab.datamodules import SyntheticDataModule
from poslab.lightning_modules import SyntheticTaskModule
from poslab.model import ModelConfig
from tests.conftest import ROOT, run_train

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
TWO_CORES = pytest.mark.skipif(CORES < 2, reason="2 DDP processes: needs 2 CPU cores")

#: 5 sequences, which 2 ranks do not divide (what trainer.devices=auto or -1 let through: 5 on 2 ranks, 250 on 3)
BUILD = """
L.seed_everything(0, verbose=False)
dm = SyntheticDataModule("lag", 16, 16, [16, 32], batch_size=8, eval_size=5, eval_batch_size=2, k=3)
module = SyntheticTaskModule(model=ModelConfig(vocab_size=16, n_outputs=16), optimizer={"lr": 1e-3}, max_length=32,
                             **dm.module_arguments())
"""

SCRIPT = (
    """
import datetime, json
import lightning as L, torch
from lightning.pytorch.strategies import DDPStrategy
from poslab.datamodules import SyntheticDataModule
from poslab.lightning_modules import SyntheticTaskModule
from poslab.model import ModelConfig

torch.set_num_threads(1)
"""
    + BUILD
    + """
trainer = L.Trainer(accelerator="cpu", devices=2, strategy=DDPStrategy(timeout=datetime.timedelta(seconds=60)),
                    logger=False, enable_progress_bar=False, enable_model_summary=False, **dm.trainer_arguments())
trainer.test(module, datamodule=dm, verbose=False)
if trainer.is_global_zero:
    print("FIGURES " + json.dumps(module.figures), flush=True)
"""
)


def one_process_figures() -> dict:
    scope = {"L": L, "SyntheticDataModule": SyntheticDataModule, "SyntheticTaskModule": SyntheticTaskModule,
             "ModelConfig": ModelConfig}  # fmt: skip
    exec(BUILD, scope)
    dm, module = scope["dm"], scope["module"]
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, **dm.trainer_arguments())  # fmt: skip
    trainer.test(module, datamodule=dm, verbose=False)
    return module.figures


@pytest.mark.slow
@TWO_CORES
def test_a_synthetic_set_the_ranks_do_not_divide_gives_one_process_figures(tmp_path):
    """Lightning's DistributedSampler padded rank 1 with a repeated sequence: accuracy and baselines counted it
    twice. Each rank now scores its own sequences (RankShard), and the metrics sum over ranks."""
    from tests.script_runs import run_script

    script = tmp_path / "two_ranks.py"
    script.write_text(textwrap.dedent(SCRIPT))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "PYTHONPATH": str(ROOT)}
    result = run_script(script, [], tmp_path, env, 240)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    two = json.loads(next(line for line in output.splitlines() if line.startswith("FIGURES ")).split(" ", 1)[1])
    torch.set_num_threads(1)
    one = one_process_figures()
    assert one.keys() == two.keys() == {"16", "32"}
    for length, row in one.items():
        assert row.keys() == two[length].keys()
        for metric, value in row.items():
            assert abs(value - two[length][metric]) <= 1e-6, (length, metric, value, two[length][metric])


@pytest.mark.slow
@TWO_CORES
def test_a_language_model_smoke_run_under_ddp_cpu_scores_its_one_batch_once(tmp_path):
    """debug=fast's evaluation is one batch (8 windows of the context): rank 1 got none, and Lightning refused its
    empty dataloader (the run failed on any corpus). It now scores a stand-in that counts nothing: the run ends,
    and its figures count the 256 tokens of the sample once."""
    from tests.datamodules.test_corpora import write_jsonl

    data = tmp_path / "data"
    write_jsonl(data / "web" / "docs.jsonl", [f"Document {i} has some words, {i * 7} of them." * 4 for i in range(40)])
    run_dir = tmp_path / "run"
    args = [
        "debug=fast", "trainer=ddp_cpu", "corpus=openwebtext", f"paths.data_dir={data}",
        f"paths.cache_dir={tmp_path / 'cache'}", "corpus.groups.main.local=[{pattern: 'web/*.jsonl'}]",
        "corpus.validation_fraction=0.25", "model=tiny", "encoding=rope", "task.context_length=32",
        "task.batch_size=4", "task.val_every_n_steps=5", "~callbacks.progress_bar", "~logger", "threads=1",
        f"hydra.run.dir={run_dir}",
    ]  # fmt: skip
    result = run_train(args, tmp_path, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "Starting with 2 processes" in result.stdout + result.stderr
    results = json.loads((run_dir / "results.json").read_text())
    assert results["status"] == "success" and results["steps"] == 10
    assert results["figures"]["32"]["bytes"] == 256  # 8 windows of 32 tokens (bytes), none counted twice
