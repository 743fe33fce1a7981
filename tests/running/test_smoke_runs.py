"""``debug=fast`` runs as a new user meets them: a smoke run of a synthetic task is a whole run that the multirun
summary counts as a success and the reports read; the values it cuts are checked as given first; a language
model trains on a small batch; and a recipe that is a sweep, run without ``-m``, says so."""

from __future__ import annotations

import pytest

from poslab.analysis.length_render import sample_line
from poslab.errors import ConfigError
from poslab.running.checks import COMMON_STAGES
from poslab.runs.results import results_problem
from tests.conftest import compose_config, run_train
from tests.runs.test_damaged_results import grid_result

#: one job of the position zoo (its sweep's keys given on the command line), as a smoke test
ZOO_JOB = ["experiment=position_zoo", "debug=fast", "seed=0", "task=lag", "encoding=rope"]


# ---- a smoke run's results are whole: the figures its own ways asked for ----------------------------------------
def plain_only(result: dict) -> dict:
    """``result`` as a debug=fast run writes it: one length, the plain model alone (task.eval_ways=plain)."""
    result["config"]["task"]["eval_ways"] = "plain"
    result["figures"] = {"32": {"accuracy": 0.9, "baseline_chance": 0.0625}}
    return result


def test_a_run_of_the_plain_model_alone_is_whole_without_log_scaled_figures(tmp_path):
    assert results_problem(plain_only(grid_result(tmp_path, 0))) is None


@pytest.mark.parametrize("ways", ["all", None])  # None: a record older than task.eval_ways, which scored every way
def test_a_run_whose_ways_asked_for_log_scaling_is_still_damaged_without_it(tmp_path, ways):
    result = grid_result(tmp_path, 0)
    if ways is not None:
        result["config"]["task"]["eval_ways"] = ways
    del result["figures"]["128"]["accuracy_log_scaled"]
    assert "figures.128.accuracy_log_scaled is missing" in (results_problem(result) or "")
    plain = plain_only(grid_result(tmp_path, 0))
    plain["figures"]["32"].pop("accuracy")  # the plain figure, which every way asks for
    assert "figures.32.accuracy is missing" in (results_problem(plain) or "")


@pytest.mark.slow
def test_a_debug_fast_job_of_the_position_zoo_succeeds_and_the_reports_read_it(tmp_path, capsys):
    from poslab.cli import main as poslab_main

    sweep = tmp_path / "sweep"
    result = run_train(["-m", *ZOO_JOB, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"multirun {sweep}: 1 job, 1 success." in result.stdout, result.stdout[-3000:]
    for report in ("zoo", "grid"):
        assert poslab_main(["report", report, str(sweep)]) == 0
        out = capsys.readouterr().out
        assert "damaged" not in out and "| rope |" in out.replace("  ", " "), out[-3000:]
        if report == "zoo":
            assert "1 run trained whole in one process" in out


@pytest.mark.slow
def test_the_position_zoo_without_dash_m_says_it_is_a_sweep_and_trains_one_whole_run(tmp_path):
    from poslab.runs.results import read_results

    result = run_train(["experiment=position_zoo", "debug=fast"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    notes = [line for line in result.stdout.splitlines() if "is a sweep" in line]  # Hydra logs to stdout
    assert len(notes) == 1, result.stdout[-3000:]
    assert "experiment=position_zoo is a sweep over seed, task, encoding: without -m, one run " in notes[0]
    assert "(seed=0 task=lag encoding=none)" in notes[0] and "python train.py -m experiment=position_zoo" in notes[0]
    (run_dir,) = (p.parent for p in (tmp_path / "logs").glob("runs/*/results.json"))
    assert read_results(run_dir)["figures"]["32"]["accuracy"] >= 0  # whole: it reads


@pytest.mark.slow
def test_a_config_without_a_sweep_or_with_every_swept_key_given_has_no_sweep_note(monkeypatch):
    from hydra.core.hydra_config import HydraConfig

    from poslab.runs import launching

    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # put back as it was (set below, as Hydra sets it)

    from poslab.running.training import sweep_note

    for overrides, noted in ((["experiment=position_zoo"], True), (ZOO_JOB, False), (["encoding=rope"], False)):
        config = compose_config(overrides, hydra_node=True)  # its hydra.overrides.task: the overrides given
        HydraConfig.instance().set_config(config)
        assert (sweep_note(config) is not None) == noted, overrides
    monkeypatch.setenv(launching.CHILD_MARK, "1")  # one job of a multirun, run in its own process: no note
    assert sweep_note(compose_config(["experiment=position_zoo"], hydra_node=True)) is None


# ---- the values debug=fast replaces are checked as given ----------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "refused"),
    [("task.eval_lengths=[32,abc]", "task.eval_lengths=[32, 'abc'] is not allowed"),
     ("task.eval_lengths=[16]", "task.eval_lengths=[16] has lengths below task.train_length=32"),
     ("task.eval_size=0", "task.eval_size=0")],
)  # fmt: skip
def test_debug_fast_refuses_the_evaluation_values_a_run_without_it_refuses(tmp_path, given, refused):
    pattern = refused.replace("[", r"\[").replace("]", r"\]")
    with pytest.raises(ConfigError, match=pattern):  # without debug=fast: the checks of stages 1 and 2
        for stage in ("settings", "combinations"):
            COMMON_STAGES[stage](compose_config([given], tmp_path))
    with pytest.raises(ConfigError, match=pattern):  # with it: before the cut replaces the value
        compose_config([given, "debug=fast"], tmp_path)


def test_train_py_refuses_a_mistyped_length_under_debug_fast(tmp_path):
    result = run_train(["task.eval_lengths=[32,abc]", "debug=fast"], tmp_path)
    assert result.returncode == 2 and "task.eval_lengths=[32, 'abc'] is not allowed" in result.stderr, result.stderr
    assert not (tmp_path / "logs").exists()


# ---- a language model's smoke run trains on a small batch ---------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "batch", "context"),
    [(["encoding=hrope_axial", "corpus=wikitext2"], 2, 512),  # 32 x 512 without debug=fast
     (["experiment=lm_zoo"], 8, 128),  # 16 x 128
     # one window of 2048 a step, two under DDP: a row for each of the processes that slice the batch
     (["corpus=wikitext2", "trainer=ddp_cpu", "trainer.devices=2", "task.context_length=2048"], 2, 2048)],
)  # fmt: skip
def test_debug_fast_shrinks_a_language_model_s_batch_and_keeps_its_context(tmp_path, overrides, batch, context):
    full = compose_config(overrides, tmp_path / "full")
    cfg = compose_config([*overrides, "debug=fast"], tmp_path / "fast")
    assert (cfg.task.batch_size, cfg.task.context_length) == (batch, context) and full.task.batch_size > batch
    assert full.task.context_length == context and cfg.trainer.max_steps == 10


def test_a_synthetic_task_s_batch_is_left_as_given(tmp_path):
    assert compose_config(["debug=fast"], tmp_path).task.batch_size == compose_config([], tmp_path).task.batch_size


# ---- wording ------------------------------------------------------------------------------------------------------
def test_the_length_report_s_sample_line_counts_one_document_in_the_singular():
    sample = {"stride": None, "seeds": [0], "hosts": ["h"], "mixed_hosts": False, "documents": 3, "tokens": 99,
              "bytes": 99, "steps": 10, "test_documents": 1, "test_bytes": 40, "selection_documents": 2,
              "selection_bytes": 59}  # fmt: skip
    line = sample_line({"sample": sample})
    assert "the test split 1 document (40 bytes) and the selection split 2 documents (59 bytes)" in line, line
