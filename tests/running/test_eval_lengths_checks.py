"""Issue 24, item 5: a synthetic task's evaluation lengths are checked before anything runs. An empty (or null)
``task.eval_lengths`` would train a run that measures nothing and says ``success``; a length below the training
length would give the reports nothing past it to compare (``nan`` in the grid). Both stop train.py with one
sentence, exit status 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from poslab.running.checks import check_eval_lengths
from poslab.running.compose import compose_config
from poslab.running.precheck import check_command_line
from tests.conftest import run_train

FAST = ["debug=small", "~logger", "threads=1", "trainer.max_steps=2"]


def one_message(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("poslab: ")]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("value", "fragments"),
    [
        ("[]", ["task.eval_lengths=[] gives no evaluation length", "task.train_length=32"]),
        ("[8,16]", ["task.eval_lengths=[8, 16]", "below task.train_length=32 (8, 16)"]),
    ],
)
def test_train_py_refuses_evaluation_lengths_that_measure_nothing_and_writes_nothing(tmp_path, value, fragments):
    result = run_train(["task=lag", f"task.eval_lengths={value}", *FAST], tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    message = one_message(result.stderr)
    assert all(fragment in message for fragment in fragments), message
    assert "allowed:" in message and message.endswith(".")
    assert not (tmp_path / "logs").exists()  # no run directory, no log: nothing written
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        (["task=lag", "task.eval_lengths=null"], "task.eval_lengths=null gives no evaluation length"),
        (["task=seen", "task.eval_lengths=[16,32,64]"], "below task.train_length=32 (16)"),
        (["task=lag", "task.train_length=64"], "task.eval_lengths=[32, 64, 128] has lengths below task.train_length"),
        # a multirun with one such job starts none of its jobs
        (["-m", "task=lag", "task.train_length=32,64"], "below task.train_length=64 (32)"),
    ],
)
def test_the_command_line_check_refuses_them_for_every_job(capsys, overrides, fragment):
    with pytest.raises(SystemExit) as stopped:
        check_command_line([*overrides, *FAST])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err


@pytest.mark.parametrize(
    "overrides",
    [
        ["task=lag"],  # [32, 64, 128] at 32
        ["task=lag", "task.eval_lengths=[32]"],
        ["task=flip_flop", "task.eval_lengths=[48,100]"],  # at or past the training length, multiples or not
        ["task=lag", "task.train_lengths=[8,32]", "task.eval_lengths=[32,64]"],  # train_length is the longest
        ["task=lag", "task.train_length=24"],
        ["experiment=position_zoo"],
        ["corpus=wikitext2"],  # a language model has no evaluation lengths
    ],
)
def test_evaluation_lengths_at_or_past_the_training_length_pass(tmp_path, overrides):
    check_eval_lengths(compose_config(overrides, tmp_path))


@pytest.mark.slow
def test_the_extrapolation_grid_passes_the_whole_check(capsys):
    check_command_line(["-m", "experiment=extrapolation_grid"])  # 28 jobs, each checked; none refused
    assert capsys.readouterr().err == ""


def test_the_checks_doc_says_what_is_refused():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "checks.md").read_text()
    assert "`task.eval_lengths`" in doc and "below the training length" in doc
