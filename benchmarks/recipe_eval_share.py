"""The share of a full recipe run's time spent evaluating, against issue 39's target of at most 20%.

    POSLAB_DATA_DIR=../shared/corpora python benchmarks/recipe_eval_share.py [--quick] [--steps 30] [--threads 2]

Each recipe trains a short run (``--steps``, at the recipe's own size, data and evaluation) in a fresh
``python train.py`` process, and the full run's time is extrapolated from it, as stated here:

- training: the median training step (``results.json``'s ``throughput.step_seconds``, after the Throughput
  callback's warm-up) x the recipe's ``trainer.max_steps``;
- validations (a language model's, every ``task.val_every_n_steps``): the short run validates once, at its last
  step (``task.val_every_n_steps`` = its steps); that validation's time (Lightning's ``Timer`` callback, read from
  the run's ``last.ckpt``) x the full run's count of validations;
- the test after training: ``results.json``'s ``test_seconds``, the same in the full run (it scores the same held-out
  windows, lengths and ways whatever the steps; passkey retrieval included).

Evaluation's share = (validations + test) / (training + validations + test). Start-up (imports, reading the corpus)
is left out of both. Printed as it goes: one line a recipe. ``--quick``: the increments CPU recipe and one arm of
the position zoo (2 recipes, well under 3 minutes on 2 quiet cores once the corpus is prepared); the default adds
the hRoPE CPU recipe and the lm_zoo (one job each).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from poslab.running.compose import compose_config  # noqa: E402

#: the issue's target: a full recipe run spends at most this share of its time evaluating
TARGET = 0.20
#: (name, overrides): the recipes measured; one job of a sweep (its first corpus and encoding)
QUICK = [
    ("increments_layer_cpu", ["experiment=increments_layer_cpu"]),
    ("position_zoo (lag, rope)", ["experiment=position_zoo", "task=lag", "encoding=rope"]),
]
FULL = [
    *QUICK,
    ("hrope_axial_cpu", ["experiment=hrope_axial_cpu", "corpus=wikitext2"]),
    ("lm_zoo (openwebtext, rope)", ["experiment=lm_zoo", "encoding=rope"]),
]


def recipe_plan(overrides: list[str]) -> tuple[int, int | None]:
    """The full run's steps and its validation interval (None: no validation, a synthetic task)."""
    cfg = compose_config(overrides)
    return int(cfg.trainer.max_steps), int(cfg.task.val_every_n_steps) if "val_every_n_steps" in cfg.task else None


def short_run(overrides: list[str], steps: int, threads: int, lm: bool, folder: Path) -> dict:
    """A ``steps``-step run of the recipe: its results.json and its one validation's seconds."""
    run_dir = folder / "run"
    args = [
        *overrides, f"trainer.max_steps={steps}", f"threads={threads}", f"hydra.run.dir={run_dir}",
        "trainer.accelerator=cpu", "trainer.devices=1", "callbacks.progress_bar.refresh_rate=0",
        "callbacks.throughput.warmup=3", "+callbacks.timer._target_=lightning.pytorch.callbacks.Timer",
        "ckpt_path=null", "logger=csv",
        *([f"task.val_every_n_steps={steps}"] if lm else []),
    ]  # fmt: skip
    env = {**os.environ, "POSLAB_LOG_DIR": str(folder / "logs"), "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    done = subprocess.run([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, env=env, capture_output=True,
                          text=True)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"train.py {' '.join(overrides)} failed:\n{done.stderr[-2000:]}")
    results = json.loads((run_dir / "results.json").read_text())
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    timer = next((state for key, state in checkpoint.get("callbacks", {}).items() if "Timer" in key), {})
    results["validation_seconds"] = float(timer.get("time_elapsed", {}).get("validate", 0.0))
    return results


def measure(name: str, overrides: list[str], steps: int, threads: int) -> float:
    """One recipe's line; returns its evaluation share."""
    full_steps, val_every = recipe_plan(overrides)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as folder:
        results = short_run(overrides, steps, threads, val_every is not None, Path(folder))
    step = float(results["throughput"]["step_seconds"])
    train = step * full_steps
    validations = (full_steps // val_every) * results["validation_seconds"] if val_every else 0.0
    test = float(results["test_seconds"])
    share = (validations + test) / (train + validations + test)
    verdict = "meets" if share <= TARGET else "misses"
    count = full_steps // val_every if val_every else 0
    print(
        f"{name}: {full_steps} steps x {step:.3f} s = {train:.0f} s training; {count} validations x "
        f"{results['validation_seconds']:.2f} s = {validations:.0f} s; test {test:.1f} s; evaluation "
        f"{100 * share:.1f}% of the run ({verdict} <= {100 * TARGET:.0f}%; measured in "
        f"{time.perf_counter() - start:.0f} s)",
        flush=True,
    )
    return share


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two recipes, under 3 minutes")
    parser.add_argument("--steps", type=int, default=None, help="steps of each short run (default 20, quick 12)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", default=None, help="the recipes whose name holds this text")
    args = parser.parse_args()
    steps = args.steps or (12 if args.quick else 20)
    print(f"evaluation's share of a full recipe run, from {steps}-step runs ({args.threads} threads):", flush=True)
    recipes = [(name, o) for name, o in (QUICK if args.quick else FULL) if args.only is None or args.only in name]
    shares = [measure(name, overrides, steps, args.threads) for name, overrides in recipes]
    met = sum(share <= TARGET for share in shares)
    print(f"{met} of {len(shares)} recipes spend at most {100 * TARGET:.0f}% of a full run evaluating", flush=True)


if __name__ == "__main__":
    main()
