"""The test after training resumes where a stopped process left it (``poslab.running.evaluation_checkpoint``): a
run killed during its evaluation (SIGKILL, as a session's end or a preempted job) and started again scores only
the batches not scored yet, and its figures are those of a run never stopped; a saved evaluation of other weights
is not resumed."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest
import torch

from poslab.runs.files import CHECKPOINT_DIR, EVALUATION_STATE
from tests.close_text import assert_json_close
from tests.conftest import compose_config, run_train, start_train
from tests.test_lm_zoo import write_corpus

EVALUATION_FILE = Path(CHECKPOINT_DIR) / EVALUATION_STATE


def overrides(tmp_path: Path, run_dir: Path) -> list[str]:
    """The lm_zoo recipe shrunk, two steps on a local corpus (RoPE: a choice among test-time ways, so two rounds),
    its evaluation saved after every batch."""
    return [
        "experiment=lm_zoo",
        "encoding=rope",
        "corpus=local",
        f"corpus.path={tmp_path / 'corpus'}",
        "model.n_layers=1",
        "model.d_model=32",
        "model.n_heads=2",
        "task.val_windows=16",
        "task.eval_lengths=[128,256,512]",
        "task.eval_batch_size=2",
        "task.passkey.enabled=false",
        "trainer.max_steps=2",
        "callbacks.evaluation_checkpoint.every_seconds=0",
        f"hydra.run.dir={run_dir}",
    ]


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results.json").read_text())


def kill_in_round_test(process: subprocess.Popen, console: Path, run_dir: Path) -> dict:
    """SIGKILL once the saved evaluation has finished its selection round and scored batches of the test round;
    the state it was killed at."""
    deadline = time.monotonic() + 300
    while True:
        assert process.poll() is None, "the run ended before it was killed:\n" + console.read_text()[-3000:]
        assert time.monotonic() < deadline, console.read_text()[-3000:]
        try:
            state = torch.load(run_dir / EVALUATION_FILE, map_location="cpu", weights_only=True)
        except (FileNotFoundError, EOFError, RuntimeError):
            time.sleep(0.01)
            continue
        if state["rounds_done"] == ["selection"] and state["scored"] >= 2:
            process.kill()
            process.wait(60)
            return state
        time.sleep(0.01)


def figures_and_held_out(result: dict) -> tuple[dict, dict]:
    return result["figures"], result["held_out"]


@pytest.mark.slow
def test_a_run_killed_in_its_test_resumes_it_and_ends_as_one_never_stopped(tmp_path):
    write_corpus(tmp_path / "corpus", n_documents=80)
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    done = run_train(overrides(tmp_path, whole), tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (whole / EVALUATION_FILE).exists()  # removed when the test ended
    assert "test_resumed" not in results(whole)

    console = tmp_path / "console.txt"
    process = start_train(overrides(tmp_path, stopped), tmp_path, console)
    killed_at = kill_in_round_test(process, console, stopped)
    assert not (stopped / "results.json").exists()

    # the same run started again (ckpt_path=auto: training ended) takes the test over where it was saved
    resumed = run_train(overrides(tmp_path, stopped), tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    assert "test: resuming the evaluation an earlier process of this run saved" in output
    assert "test, round selection" not in output  # the finished round is not scored again
    after = results(stopped)
    assert after["trained_steps"] == 0 and after["test_resumed"]["rounds_done"] == ["selection"]
    assert after["test_resumed"]["batches_scored_earlier"] >= killed_at["scored"]
    assert not (stopped / EVALUATION_FILE).exists()

    figures, held_out = figures_and_held_out(results(whole))
    resumed_figures, resumed_held_out = figures_and_held_out(after)
    # float64 sums restored as saved and the same batches in the same order: equal but for the CPU's last digits
    assert_json_close(resumed_figures, figures, "figures")
    assert_json_close(resumed_held_out, held_out, "held_out")


@pytest.mark.slow
def test_a_saved_evaluation_of_other_weights_or_batches_is_not_resumed(tmp_path):
    write_corpus(tmp_path / "corpus", n_documents=80)
    run_dir = tmp_path / "run"
    console = tmp_path / "console.txt"
    process = start_train(overrides(tmp_path, run_dir), tmp_path, console)
    state = kill_in_round_test(process, console, run_dir)
    state["fingerprint"]["weights"] = "0" * 64  # as if saved by a run trained otherwise
    torch.save(state, run_dir / EVALUATION_FILE)

    # and batches cut otherwise (a change a resume allows only on purpose): a batch index would name other windows
    other_batches = ["task.eval_batch_size=4", "resume_allow_changes=[task.eval_batch_size]"]
    resumed = run_train([*overrides(tmp_path, run_dir), *other_batches], tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    assert "is not resumed: its weights, batching differ from this run's; scoring the whole test" in output
    assert "test, round selection" in output and "test_resumed" not in results(run_dir)


def test_the_lm_recipes_save_their_test_in_the_run_directory(tmp_path):
    cfg = compose_config(["experiment=lm_zoo", f"paths.output_dir={tmp_path}"])
    saving = cfg.callbacks.evaluation_checkpoint
    assert saving._target_ == "poslab.running.evaluation_checkpoint.EvaluationCheckpoint"
    assert Path(saving.dirpath) == tmp_path / "checkpoints" and saving.every_seconds > 0


@pytest.mark.parametrize("value", ["abc", "-1", "[60]"])
def test_a_bad_interval_is_refused_by_name_before_anything_runs(value):
    from poslab.config.settings import check_settings
    from poslab.errors import ConfigError

    cfg = compose_config(["task=lag", f"callbacks.evaluation_checkpoint.every_seconds={value}"])
    with pytest.raises(ConfigError, match=r"callbacks\.evaluation_checkpoint\.every_seconds=.* takes a number, at "
                                          r"least 0, or null"):  # fmt: skip
        check_settings(cfg)
    check_settings(compose_config(["task=lag", "callbacks.evaluation_checkpoint.every_seconds=null"]))  # off: fine
    check_settings(compose_config(["task=lag", "~callbacks.evaluation_checkpoint"]))  # none at all: fine


def test_a_process_stopped_after_its_last_batch_writes_the_figures_again_from_the_saved_sums(tmp_path, monkeypatch):
    """The last round is never saved as done: stopped after its last batch (before results.json, before the file is
    removed), the run resumes that round with every batch scored, scores none again, and reports the same figures."""
    import lightning as L

    from poslab.running.evaluation_checkpoint import EvaluationCheckpoint
    from poslab.running.training import test
    from tests.datamodules.test_local_corpus import text_folder
    from tests.datamodules.test_whole_held_out import datamodule, quiet_trainer, untrained_rope

    dm = datamodule(text_folder(tmp_path / "text", n=60))
    whole = untrained_rope(dm)
    test(quiet_trainer(), whole, dm)

    def trainer_saving() -> L.Trainer:
        saving = EvaluationCheckpoint(str(tmp_path / "checkpoints"), every_seconds=0)
        return L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
                         callbacks=[saving])  # fmt: skip

    stopped = untrained_rope(dm)  # the same weights
    monkeypatch.setattr(EvaluationCheckpoint, "discard", lambda self, trainer: None)  # stopped before the removal
    test(trainer_saving(), stopped, dm)
    monkeypatch.undo()
    saved = torch.load(tmp_path / "checkpoints" / "evaluation.pt", weights_only=True)
    assert saved["rounds_done"] == ["selection"] and saved["scored"] > 0  # the last round: saved, not done

    resumed, scored = untrained_rope(dm), []
    monkeypatch.setattr(resumed, "evaluation_step", lambda batch: scored.append(batch))
    test(trainer_saving(), resumed, dm)
    assert scored == []  # every batch was in the saved sums
    assert resumed.figures.keys() == whole.figures.keys()
    for length in ("24", "48", "96"):
        assert resumed.figures[length] == pytest.approx(whole.figures[length], rel=1e-9)
    assert resumed.held_out["chosen"] == whole.held_out["chosen"]
    assert not (tmp_path / "checkpoints" / "evaluation.pt").exists()
