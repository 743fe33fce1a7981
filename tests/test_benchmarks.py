"""The benchmarks (benchmarks/*.py) say what they measure, each has a quick mode, ``make bench`` lists every one, and
a step-time measurement times the step alone: never the evaluation a run does after training (issue 39, item 2).
The files are parsed, not run (the benchmarks take minutes); one step measurement runs on a tiny model."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import lightning.pytorch as pl
import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = sorted((ROOT / "benchmarks").glob("*.py"))


def bench_listing() -> str:
    """What ``make bench`` prints (its recipe is ``echo``s: the list, no benchmark, nothing installed)."""
    done = subprocess.run(["make", "-s", "bench"], cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("path", BENCHMARKS, ids=[p.stem for p in BENCHMARKS])
def test_a_benchmark_says_what_it_measures_and_has_a_quick_mode(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    doc = ast.get_docstring(tree)
    assert doc and len(doc.split()) >= 8, f"{path.name}: no module docstring saying what it measures"
    flags = {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "attr", "") == "add_argument"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }
    # measurement_parser (benchmarks/compile.py) gives --quick to the benchmarks built on it
    shared = {"measurement_parser", "parse_measurement_arguments"} & {
        getattr(node.func, "id", "") for node in ast.walk(tree) if isinstance(node, ast.Call)
    }
    assert "--quick" in flags or shared, f"{path.name}: no --quick flag"
    assert "--quick" in doc, f"{path.name}: its docstring does not say what --quick does"


def test_make_bench_lists_every_benchmark_with_its_command():
    listing = bench_listing()
    for path in BENCHMARKS:
        lines = [line for line in listing.splitlines() if f"benchmarks/{path.name}" in line]
        assert len(lines) == 1, f"make bench lists benchmarks/{path.name} {len(lines)} times:\n{listing}"
        assert re.search(rf"python benchmarks/{re.escape(path.name)}", lines[0]), lines[0]
        assert len(lines[0]) <= 200, lines[0]


def load(name: str):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))


def test_bf16_speed_times_the_training_step_without_the_evaluation(tmp_path: Path, monkeypatch):
    """poslab's step measurement (``byte_model.poslab_steps``, which bf16_speed runs) fits and stops: the test after
    training (``training.test``, ``Trainer.test``) and any validation are never called."""
    import poslab.running.training

    bf16_speed = load("bf16_speed")
    byte_model = sys.modules["byte_model"]
    evaluated = []

    def refuse(*args, **kwargs):
        evaluated.append(args)
        raise AssertionError("the step measurement ran an evaluation")

    monkeypatch.setattr(poslab.running.training, "test", refuse)
    monkeypatch.setattr(pl.Trainer, "test", refuse)
    monkeypatch.setattr(pl.Trainer, "validate", refuse)
    byte_model.vocabulary_corpus(tmp_path, n_bytes=200_000)
    args = Namespace(steps=2, warmup=1, threads=1, batch=2, context=32)
    cfg = bf16_speed.step_config("hrope_cpu", "32-true", args, tmp_path)
    module_validation = []
    from poslab.lightning_modules.language import LanguageModelModule

    monkeypatch.setattr(LanguageModelModule, "validation_step", lambda *a, **k: module_validation.append(1))
    seconds = byte_model.poslab_steps(cfg)
    assert not evaluated and not module_validation
    assert 0 < seconds < 30


def test_bf16_speed_builds_each_model_at_its_recipes_vocabulary(tmp_path: Path):
    """The hrope_cpu model is its recipe's (hrope_rope_cpu: a 2048-symbol BPE), not 257 bytes as the byte-model
    recipe it borrows its optimizer from would give it; the byte model stays at 257 bytes (as gpu_check does)."""
    bf16_speed = load("bf16_speed")
    sys.modules["byte_model"].vocabulary_corpus(tmp_path, 100_000)
    args = Namespace(steps=2, warmup=1, threads=1, batch=2, context=32)
    assert bf16_speed.MODELS["hrope_cpu"][1] == "hrope_rope_cpu"
    hrope = bf16_speed.measured_model("hrope_cpu", args, tmp_path)
    assert hrope.cfg.vocab_size == 2048 and hrope.cfg.d_model == 128
    config = bf16_speed.step_config("hrope_cpu", "bf16-mixed", args, tmp_path)  # what each measurement trains
    assert config.corpus.tokenizer == "bpe" and config.corpus.vocab_size == 2048
    assert bf16_speed.measured_model("byte", args, tmp_path).cfg.vocab_size == 257


def test_bf16_speed_refuses_a_bpe_short_of_the_recipes_vocabulary(tmp_path: Path):
    """On make_corpus's ten words the BPE stops near 316 symbols: the script stops before timing another model."""
    bf16_speed = load("bf16_speed")
    sys.modules["byte_model"].make_corpus(tmp_path, n_bytes=100_000)
    args = Namespace(steps=2, warmup=1, threads=1, batch=2, context=32)
    with pytest.raises(RuntimeError, match=r"hrope_rope_cpu: the BPE .* has \d+ symbols, not the recipe's 2048"):
        bf16_speed.measured_model("hrope_cpu", args, tmp_path)


def gpu_check_dry_run() -> Namespace:
    """The sizes ``gpu_check.py --dry-run`` trains a recipe at (its ``main``), 2 timed steps after 1."""
    return Namespace(dry_run=True, steps=2, warmup=1, batch=2, context=64, model=load("gpu_check").DRY_MODEL)


def test_gpu_check_trains_a_bpe_recipe_at_its_own_vocabulary(tmp_path: Path):
    """The hRoPE recipes ask for an 8192-symbol BPE: the generated corpus lets it reach 8192, so the model measured
    has the recipe's embeddings and head (the first GPU check's BPE stopped at 316 on ten words)."""
    gpu_check = load("gpu_check")
    gpu_check.vocabulary_corpus(tmp_path, 300_000)
    row = gpu_check.train_throughput("hrope_rope", gpu_check_dry_run(), tmp_path, tmp_path / "out")
    assert row["vocab_size"] == 8192 and row["tokenizer"] == "bpe"
    assert row["parameters"] > 2 * 8192 * 64  # embeddings and head at the dry run's width 64
    assert row["steps"] == 3 and row["tokens_per_s"] > 0


def test_gpu_check_refuses_a_bpe_short_of_the_recipes_vocabulary(tmp_path: Path):
    """On ten words a BPE stops at about 316 symbols: that is another model, recorded as not run."""
    gpu_check = load("gpu_check")
    sys.modules["byte_model"].make_corpus(tmp_path, n_bytes=300_000)
    with pytest.raises(RuntimeError, match=r"hrope_rope: the BPE .* has \d+ symbols, not the recipe's 8192"):
        gpu_check.train_throughput("hrope_rope", gpu_check_dry_run(), tmp_path, tmp_path / "out")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="a CUDA device: the check would run")
def test_gpu_check_without_a_gpu_says_so_and_stops(tmp_path: Path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1 and "no CUDA device; use --dry-run" in done.stderr
    assert "Traceback" not in done.stderr and not any(tmp_path.iterdir())


def test_lm_zoo_eval_cost_counts_the_test_against_the_training_in_flops():
    """The FLOP table's test count: windows x scored tokens x ways x forward FLOPs per token, in two rounds, in one
    round of every way, and plain; the forward count a third of the training's, times the evaluation's draws."""
    from benchmarks.frontier_cost import build
    from benchmarks.lm_zoo_eval_cost import evaluation_flops, forward_flops
    from poslab.running.callbacks import flops_per_token

    windows = {128: {"selection": 3, "test": 5}, 256: {"selection": 2, "test": 2}}
    ways = {128: {"selection": 1, "test": 1}, 256: {"selection": 6, "test": 2}}
    counted = evaluation_flops(windows, ways, {128: 10.0, 256: 20.0})
    assert counted["plain"] == 8 * 128 * 10 + 4 * 256 * 20
    assert counted["two rounds"] == 8 * 128 * 10 + (2 * 6 + 2 * 2) * 256 * 20
    assert counted["every way"] == 8 * 128 * 10 + 4 * 6 * 256 * 20
    rope = forward_flops("rope")
    assert rope[128] == pytest.approx(flops_per_token(build("rope", 128), 128, 16) / 3)
    assert rope[2048] > rope[1024] > rope[128]  # attention's share grows with the length
    randomized = forward_flops("randomized_rope")  # the same model, scored once per position draw (8 by default)
    assert all(randomized[n] == pytest.approx(8 * rope[n]) for n in rope)
