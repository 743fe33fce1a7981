"""Issue 11: no silent failure. Each numbered failure of the issue that this file covers (3, 5, 6, 7, 8) is a
test: the command a user would give, its exit status, its message, and what is on disk afterwards (nothing
lost, nothing overwritten, nothing created where it should not be)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from poslab.cli import main as poslab_main
from tests.conftest import compose_config, job_dir, run_train
from tests.datamodules.test_corpora import make_corpus

FAST = ["debug=small", "~callbacks.progress_bar", "threads=1", "trainer.max_steps=4"]
CHECKPOINTS = ["callbacks.checkpoint.every_n_train_steps=2"]


def snapshot(directory: Path) -> dict[Path, bytes]:
    """Every file below ``directory`` (Hydra's ``.hydra/`` included) and its bytes."""
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def everything(directory: Path) -> set[Path]:
    return set(directory.rglob("*"))


def one_message(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("poslab: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def lag_run(tmp_path_factory) -> Path:
    """A finished lag/RoPE run with a CSV log, checkpoints every 2 steps and model.pt."""
    root = tmp_path_factory.mktemp("lag")
    run_dir = root / "run"
    result = run_train([*FAST, *CHECKPOINTS, "encoding=rope", f"hydra.run.dir={run_dir}"], root)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


# ---- 3. runs tied to configs -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_checkpoint_records_the_config_that_made_it(lag_run):
    saved = torch.load(lag_run / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert saved["poslab_config"]["encoding"]["name"] == "rope"
    assert saved["poslab_config"]["model"]["d_model"] == 64


@pytest.mark.slow
def test_resuming_with_another_encoding_stops_with_the_differences_and_touches_nothing(lag_run, tmp_path):
    before = snapshot(lag_run)
    result = run_train(
        [*FAST, *CHECKPOINTS, "encoding=alibi", "ckpt_path=last", "trainer.max_steps=6", f"hydra.run.dir={lag_run}"],
        tmp_path,
    )
    assert result.returncode == 2
    message = one_message(result.stderr)
    assert "ckpt_path=last holds a model trained with other settings" in message
    assert "encoding.name: rope → alibi" in message and "encoding.base: 10000 → (not set)" in message
    assert "resume_allow_changes=[" in message
    assert snapshot(lag_run) == before  # .hydra/config.yaml, metrics.csv, last.ckpt, results.json: as they were


@pytest.mark.slow
def test_a_change_allowed_on_purpose_resumes(lag_run, tmp_path):
    """task.batch_size is model-defining (task); resume_allow_changes lets a resume change it."""
    new = tmp_path / "new"
    args = [*FAST, *CHECKPOINTS, "encoding=rope", f"ckpt_path={lag_run}", "trainer.max_steps=6", "task.batch_size=16"]
    refused = run_train([*args, f"hydra.run.dir={new}"], tmp_path)
    assert refused.returncode == 2 and "task.batch_size: 64 → 16" in one_message(refused.stderr)
    assert not new.exists()  # refused before Hydra made the directory
    allowed = run_train([*args, "resume_allow_changes=[task.batch_size]", f"hydra.run.dir={new}"], tmp_path)
    assert allowed.returncode == 0, allowed.stderr[-3000:]
    assert json.loads((new / "results.json").read_text())["steps"] == 6


@pytest.mark.slow
def test_a_resume_trains_with_the_optimizer_settings_it_is_given(lag_run, tmp_path):
    """Optimizer settings may change at a resume (docs/resume.md); Lightning restores the checkpoint's lr, weight
    decay and schedule base, so they once stayed the old ones, silently. The resumed steps now log the new lr."""
    import csv

    new = tmp_path / "new"
    args = [*FAST, *CHECKPOINTS, "encoding=rope", f"ckpt_path={lag_run}", "trainer.max_steps=6"]
    resumed = run_train([*args, "optimizer.lr=0.0123", f"hydra.run.dir={new}"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = list(csv.DictReader((new / "csv" / "metrics.csv").open()))
    logged = {int(r["step"]): float(r["train/lr"]) for r in rows if r.get("train/lr")}
    assert logged and all(lr == pytest.approx(0.0123) for step, lr in logged.items() if step >= 4), logged


@pytest.mark.slow
def test_training_again_into_a_finished_run_stops_and_overwrites_nothing(lag_run, tmp_path):
    before = snapshot(lag_run)
    result = run_train([*FAST, *CHECKPOINTS, "encoding=rope", f"hydra.run.dir={lag_run}"], tmp_path)
    assert result.returncode == 2
    message = one_message(result.stderr)
    assert f"the run directory {lag_run} already holds a run (results.json, model.pt, checkpoints/last.ckpt)" in message
    assert "give ckpt_path=last" in message and "new directory" in message
    assert snapshot(lag_run) == before  # metrics.csv not appended to, last.ckpt and results.json untouched
    assert not (lag_run / "checkpoints" / "last-v1.ckpt").exists()


# ---- 5. reports ---------------------------------------------------------------------------------------------


def write_results(run_dir: Path, **fields) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(fields))


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory) -> Path:
    """A lag multirun whose runs differ in model.d_model (two seeds each), plus a failed job, a job without
    results (killed) and a diverged run, as other engineers' code writes them."""
    root = tmp_path_factory.mktemp("grid")
    sweep = root / "sweep"
    args = ["-m", "encoding=rope", "model.d_model=32,64", "seed=0,1", *FAST, "~logger", f"hydra.sweep.dir={sweep}"]
    result = run_train(args, root)
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep / "7" / ".hydra").mkdir(parents=True)
    (sweep / "7" / "failed.json").write_text(json.dumps({"error": "ConfigError: something was wrong\nmore"}))
    (sweep / "8" / ".hydra").mkdir(parents=True)  # started, never finished
    diverged = json.loads((job_dir(sweep, 0) / "results.json").read_text())
    diverged["status"], diverged["figures"] = "diverged", {k: None for k in diverged["figures"]}
    diverged["seed"] = diverged["config"]["seed"] = 2  # a run of its own (the same seed would be a duplicate of job 0)
    write_results(sweep / "9", **diverged)
    return sweep


@pytest.mark.slow
def test_report_grid_keeps_different_configs_apart_and_lists_every_job_left_out(grid_sweep, capsys):
    assert poslab_main(["report", "grid", str(grid_sweep), "--output-dir", str(grid_sweep.parent / "out")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| task | scheme |"))
    table = [line for line in lines[start : lines.index("", start)] if line.startswith("| ")]  # baselines follow
    assert table[0].startswith("| task | scheme | model.d_model | seeds | length 32")
    assert len(table) == 1 + 2  # the header, and d_model 32 and 64 apart: not one row of "4 seeds"
    assert table[1].startswith("| lag | rope | 32 | 2 | ") and table[2].startswith("| lag | rope | 64 | 2 | ")
    assert f"1 run(s) left out, their status is not success: {grid_sweep / '9'} (diverged)" in out
    assert f"1 job(s) failed (see their failed.json): {grid_sweep / '7'}: ConfigError: something was wrong" in out
    assert f"1 job(s) wrote no results.json nor failed.json (still running, or killed): {grid_sweep / '8'}" in out


@pytest.mark.slow
def test_a_multirun_into_a_directory_of_finished_runs_stops_before_any_job(grid_sweep, tmp_path):
    before = snapshot(grid_sweep)
    args = ["-m", "encoding=rope", "seed=0,1", *FAST, "~logger", f"hydra.sweep.dir={grid_sweep}"]
    result = run_train(args, tmp_path)
    assert result.returncode == 2
    message = one_message(result.stderr)
    jobs = ", ".join(sorted(p.parent.name for p in grid_sweep.glob("*/results.json")))
    assert f"hydra.sweep.dir={grid_sweep} already holds runs ({jobs})" in message, message
    assert snapshot(grid_sweep) == before


def lm_results(run_dir: Path, d_model: int, seed: int, **extra) -> None:
    config = {"seed": seed, "model": {"d_model": d_model}, "task": {"name": "lm"}}
    config["paths"] = {"output_dir": str(run_dir)}
    fields = {"task": "lm", "corpus": "wikitext2", "label": "rope", "seed": seed, "steps": 10, "parameters": 1000}
    figures = {"val_loss": 2.0 + d_model / 100, "val_bpb": 3.0}
    write_results(run_dir, **{**fields, "figures": figures, "config": config, **extra})


def test_report_grid_on_a_language_model_multirun_names_the_report_that_fits(tmp_path, capsys):
    lm_results(tmp_path / "lm" / "0", 32, 0)
    assert poslab_main(["report", "grid", str(tmp_path / "lm")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"poslab: {tmp_path / 'lm'} holds language-model runs (task=lm), not an extrapolation grid of lag/seen "
        f"runs: `poslab report losses {tmp_path / 'lm'}` reports them."
    ]
    assert not (tmp_path / "lm" / "analysis").exists()


def test_report_losses_keeps_different_configs_apart_and_lists_runs_left_out(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for job, (d_model, seed) in enumerate([(32, 0), (32, 1), (64, 0), (64, 1)]):
        lm_results(sweep / str(job), d_model, seed)
    lm_results(sweep / "4", 32, 2, status="diverged", figures={"val_loss": None, "val_bpb": None})
    (sweep / "5" / ".hydra").mkdir(parents=True)
    assert poslab_main(["report", "losses", str(sweep), "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "| corpus | encoding | model.d_model | seed | steps |" in out
    same = "[degenerate: all 2 seeds equal]"  # the seed means of each config apart, with their interval
    assert f"| wikitext2 | rope | 32 | 2 | 2.3200 {same} | 3.0000 {same} |" in out
    assert f"| wikitext2 | rope | 64 | 2 | 2.6400 {same} | 3.0000 {same} |" in out
    assert f"1 run(s) left out, their status is not success: {sweep / '4'} (diverged)" in out
    assert f"wrote no results.json nor failed.json (still running, or killed): {sweep / '5'}" in out


# ---- 6. analyses refuse runs of the wrong kind ----------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("analysis", "fragment"),
    [
        ("increments", "is a task=lag run; the increments analyses read δ per byte of text, so they need a "),
        ("hrope", "is a 'lag' run; the hRoPE analyses need a language-model run."),
    ],
)
def test_analyses_refuse_a_lag_run_with_one_sentence(lag_run, capsys, analysis, fragment):
    assert poslab_main(["analyze", analysis, str(lag_run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err
    assert not (lag_run / "analysis").exists()


@pytest.mark.slow
def test_analyses_refuse_a_run_that_did_not_succeed(tmp_path, lag_run, capsys):
    import shutil

    run_dir = tmp_path / "diverged"
    shutil.copytree(lag_run, run_dir)
    results = json.loads((run_dir / "results.json").read_text())
    (run_dir / "results.json").write_text(json.dumps({**results, "status": "diverged"}))
    assert poslab_main(["analyze", "increments", str(run_dir)]) == 2
    assert "is not a successful run (its results.json says status 'diverged')" in capsys.readouterr().err
    assert poslab_main(["analyze", "hrope", str(run_dir)]) == 2
    assert f"1 run(s) left out, their status is not success: {run_dir} (diverged)" in capsys.readouterr().err


@pytest.mark.slow
def test_plain_rope_has_increments_of_exactly_one_once_window_starts_are_left_out(tmp_path, capsys):
    from poslab.running.training import run

    data = tmp_path / "data"
    corpus = make_corpus(data)
    run_dir = tmp_path / "rope"
    overrides = [
        "encoding=rope",
        "corpus=wiki_en_zh",
        f"paths.data_dir={data}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "model=byte",
        "model.n_layers=1",
        "model.d_model=32",
        "model.n_heads=2",
        "model.mlp_hidden=64",
        "task.context_length=32",
        "task.batch_size=2",
        "task.val_every_n_steps=2",
        "task.val_windows=1",
        "trainer.max_steps=2",
        "~callbacks",
        "~logger",
        "corpus.groups.en.local=[{pattern: 'en/*.jsonl'}]",
        "corpus.groups.zh.local=[{pattern: 'zh/*.txt', format: text, document_start: '^第.{1,8}回'}]",
        f"corpus.validation_fraction={corpus['validation_fraction']}",
    ]
    run(compose_config(overrides, run_dir))
    text = tmp_path / "text.txt"
    text.write_text("The quick brown fox jumps over the lazy dog. 人工智能是计算机科学的一个分支。" * 8, "utf-8")
    out_dir = tmp_path / "out"
    assert poslab_main(["analyze", "increments", str(run_dir), "--text", str(text), "--output-dir", str(out_dir)]) == 0
    assert "each window's first byte left out" in capsys.readouterr().out
    rows = list(csv.DictReader((out_dir / "increments_categories.csv").open()))
    assert rows and all(float(row[key]) == 1.0 for row in rows for key in ("mean", "range_min", "range_max")), rows


# ---- 7. loading is safe ---------------------------------------------------------------------------------------


def crafted_model(run_dir: Path, change) -> Path:
    """A model.pt with a real run's config, changed by ``change`` (what an attacker would write)."""
    config = OmegaConf.to_container(compose_config(["debug=small", "~logger"], run_dir), resolve=True)
    change(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"state_dict": {}, "config": config}, run_dir / "model.pt")
    return run_dir


def nested_open(target: Path):
    def change(config):
        config["task"]["payload"] = {"_target_": "builtins.open", "file": str(target), "mode": "w"}

    return change


def set_key(section: str, key: str, value):
    def change(config):
        config.setdefault(section, {})[key] = value

    return change


def evil_logger(target: Path):
    def change(config):
        config["logger"] = {"evil": {"_target_": "builtins.open", "file": str(target), "mode": "w"}}

    return change


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (nested_open, "task.payload._target_='builtins.open' is not allowed"),
        (lambda t: set_key("task", "_target_", "pathlib.Path.touch"), "task._target_='pathlib.Path.touch' is not"),
        (lambda t: set_key("task", "module", "os.system"), "task.module='os.system' is not allowed"),
        (lambda t: set_key("task", "_target_", "poslab.io.write_atomic"), "(it is not a class)"),
        (evil_logger, "logger.evil._target_='builtins.open' is not allowed"),
        (lambda t: set_key("logger", "evil", {"_target_": "subprocess.Popen", "args": ["touch", str(t)]}), "Popen"),
    ],
    ids=["nested-open", "path-touch", "module-os-system", "poslab-function", "logger-open", "logger-popen"],
)
@pytest.mark.parametrize("analysis", ["increments", "hrope"])
def test_a_crafted_model_pt_builds_nothing_and_is_refused_by_name(tmp_path, capsys, make, fragment, analysis):
    target = tmp_path / "created_by_the_config"
    run_dir = crafted_model(tmp_path / "run", make(target))
    assert poslab_main(["analyze", analysis, str(run_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0] and "allowed: poslab.*" in err[0], err
    assert not target.exists()  # nothing of the config's choosing was created
    assert not (run_dir / "analysis").exists()


# ---- 8. names -------------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../../../x", "a/b", "..", "x\\..\\y"])
def test_a_name_with_a_path_separator_is_refused_before_anything_is_written(tmp_path, name):
    work = tmp_path / "work"
    work.mkdir()
    result = run_train([*FAST, f"name={name}"], work)
    assert result.returncode == 2
    assert f"name={name!r} is not allowed" in one_message(result.stderr)
    assert everything(tmp_path) == {work}  # no logs/, nothing above or beside it


@pytest.mark.slow
def test_a_multirun_with_such_a_name_is_refused_before_any_job(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    result = run_train(["-m", "seed=0,1", *FAST, "name=../../x"], work)
    assert result.returncode == 2
    assert "name='../../x' is not allowed" in one_message(result.stderr)
    assert everything(tmp_path) == {work}


# (1) a non-finite loss


def strict_json(path: Path):
    """JSON as a strict reader sees it: NaN or Infinity in the file is an error."""

    def refuse(constant: str):
        raise AssertionError(f"{path} holds {constant}")

    return json.loads(path.read_text(), parse_constant=refuse)


@pytest.mark.slow
def test_a_run_whose_loss_turns_nan_stops_as_diverged_and_says_so(tmp_path):
    run_dir = tmp_path / "run"
    result = run_train(
        ["debug=small", "optimizer.lr=1e6", "trainer.max_steps=20", "~logger", f"hydra.run.dir={run_dir}"], tmp_path
    )
    assert result.returncode == 1, result.stderr[-2000:]
    message = one_message(result.stderr)
    assert "the run diverged and stops here" in message and "optimizer.lr=1000000.0" in message
    saved = strict_json(run_dir / "results.json")
    assert saved["status"] == "diverged" and 0 <= saved["diverged_at_step"] < 20
    assert f"at step {saved['diverged_at_step']}:" in message
    assert not (run_dir / "model.pt").exists()  # no NaN weights left for an analysis to read


def test_skip_nonfinite_steps_skips_that_many_then_stops():
    from poslab.errors import DivergedError
    from poslab.running.builders import build_datamodule, build_module

    cfg = compose_config(["debug=small", "optimizer.skip_nonfinite_steps=2"])
    module = build_module(cfg, build_datamodule(cfg))
    nan = torch.tensor(float("nan"))
    assert torch.isnan(module.skip_or_stop(nan)) and torch.isnan(module.skip_or_stop(nan))  # two skipped
    with pytest.raises(DivergedError, match="skipped non-finite steps so far: 2 of optimizer.skip_nonfinite_steps=2"):
        module.skip_or_stop(nan)


def test_results_never_hold_nan(tmp_path):
    from poslab.io import write_json_atomic

    path = write_json_atomic(tmp_path / "r.json", {"figures": {"val_loss": float("nan"), "x": [1.0, float("inf")]}})
    assert strict_json(path) == {"figures": {"val_loss": None, "x": [1.0, None]}}


def test_a_resume_after_skipped_steps_goes_on_from_the_batches_drawn():
    """A skipped non-finite step draws a batch without a step (manual optimisation counts the steps taken): a resume
    must go on after every batch drawn, not train the skipped ones again, and keep the skip allowance used."""
    from poslab.datamodules.synthetic import training_batches_drawn
    from poslab.running.builders import build_datamodule, build_module

    cfg = compose_config(["debug=small", "optimizer.skip_nonfinite_steps=3"])
    module = build_module(cfg, build_datamodule(cfg))
    nan = torch.tensor(float("nan"))
    module.skip_or_stop(nan)
    module.skip_or_stop(nan)
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    resumed = build_module(cfg, build_datamodule(cfg))
    resumed.on_load_checkpoint(checkpoint)
    assert resumed.batches_drawn == 2  # global step 0 + 2 skipped
    trainer = type("Trainer", (), {"lightning_module": resumed, "global_step": 0})()
    assert training_batches_drawn(trainer) == 2
    resumed.skip_or_stop(nan)  # the third of 3 allowed: still skipped, the count went on from the checkpoint
    with pytest.raises(Exception, match="skipped non-finite steps so far: 3"):
        resumed.skip_or_stop(nan)
