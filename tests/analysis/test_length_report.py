"""Issue 25, item 5: ``poslab report length`` on a tiny multirun of real language-model runs (2 encodings x 2 seeds
on a local corpus): tables, CSV, JSON and PNGs; intervals from the seeds; the ranking over 2x-16x only; the same
files again from the summary alone; an old run without figures by length noted, not a traceback."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from poslab.analysis.length import RANKED, LengthRun, run_cost
from poslab.analysis.length_render import cost_table
from poslab.analysis.length_report import report_length, rerender_length
from poslab.analysis.stats import t_quantile
from poslab.cli import main
from poslab.running.compose import compose_config
from poslab.running.training import run
from tests.datamodules.test_local_corpus import text_folder

ENCODINGS, SEEDS = ("rope", "alibi"), (0, 1)
PNGS = {"length_bpb.png", "length_position.png", "length_passkey_my_notes.png"}


@pytest.fixture(scope="module")
def multirun(tmp_path_factory) -> Path:
    """Four tiny runs at context 16, evaluated at 1x, 2x and 4x (sliding windows too), one passkey trial per cell,
    in the layout of a multirun (``DIR/<job>/results.json``); and an old run with only ``val_bpb``."""
    root = tmp_path_factory.mktemp("length_report")
    corpus, directory = text_folder(root / "data"), root / "multirun"
    common = [
        "corpus=local", f"corpus.path={corpus}", f"paths.cache_dir={root / 'cache'}", "corpus.validation_fraction=0.3",
        "model=tiny", "task.context_length=16", "task.batch_size=4", "task.val_windows=1", "task.val_every_n_steps=2",
        "task.eval_lengths=[32,64]", "task.eval_stride=16", "trainer.max_steps=2", "save_model=false",
        "task.passkey.trials=1", "task.passkey.distances=[2,4]", "~logger", "~callbacks", "threads=1",
        "task.every_way_on_test=true",  # one round: every rule has a test figure (the extension sits by its rule)
    ]  # fmt: skip
    for job, (encoding, seed) in enumerate((e, s) for e in ENCODINGS for s in SEEDS):
        run(compose_config([*common, f"encoding={encoding}", f"seed={seed}"], directory / str(job)))
    old = json.loads((directory / "0" / "results.json").read_text())
    old["seed"] = old["config"]["seed"] = 7  # another job than job 0 (a duplicate config and seed counts once)
    old["figures"] = {key: old["figures"][key] for key in ("val_loss", "val_bpb", "step")}
    for key in ("loss_by_position", "passkey", "evaluation"):
        old.pop(key, None)
    (directory / "old").mkdir()
    (directory / "old" / "results.json").write_text(json.dumps(old))
    return directory


@pytest.fixture(scope="module")
def report(multirun):
    return report_length([multirun])


@pytest.mark.slow
def test_the_report_writes_tables_csv_json_and_pngs(multirun, report, tmp_path):
    directory, _ = report.write(tmp_path / "out")
    assert {"length.md", "length.csv", "length.json", *PNGS} == set(report.files)
    assert all((directory / name).stat().st_size > 0 for name in report.files)
    text = report.report
    assert "### my_notes: bits per byte" in text and "| rope + sliding |" in text and "| rope + test_yarn |" in text
    assert any(line.startswith("| alibi") and "+ log_scaled" in line for line in text.splitlines())
    assert "passkey exact match" in text
    assert "(bytes not recorded)" not in text  # a run records the bytes it scored (figures.<L>.bytes)
    assert json.loads(report.files["length.json"])["corpora"]["my_notes"]["sample"]["bytes"] > 0
    rows = list(csv.DictReader(io.StringIO((directory / "length.csv").read_text())))
    assert {row["multiple"] for row in rows if row["row"] == "rope"} == {"1x", "2x", "4x"}


@pytest.mark.slow
def test_a_run_without_figures_by_length_is_noted_not_a_traceback(report):
    assert "1 run(s) left out, no figures past the training context" in report.report
    assert "my_notes rope seed 7" in report.report
    summary = json.loads(report.files["length.json"])
    assert len(summary["runs"]) == 4


@pytest.mark.slow
def test_intervals_come_from_the_seeds(multirun, report):
    """rope's 2x bits per byte: the mean of its two seeds' with the t-interval (t at 1 df x sd / sqrt 2)."""
    values = []
    for job in ("0", "1"):
        result = json.loads((multirun / job / "results.json").read_text())
        values.append(result["figures"]["32"]["bpb"])
    summary = json.loads(report.files["length.json"])
    rope = next(row for row in summary["corpora"]["my_notes"]["rows"] if row["name"] == "rope")
    cell = rope["bpb"]["2x"]
    mean = sum(values) / 2
    half = t_quantile(1) * abs(values[0] - values[1]) / 2  # sd = |a - b| / sqrt 2, over sqrt 2 seeds
    assert cell["n"] == 2 and cell["mean"] == pytest.approx(mean)
    assert cell["high"] - mean == pytest.approx(half) and mean - cell["low"] == pytest.approx(half)
    one_x = [json.loads((multirun / j / "results.json").read_text())["figures"]["16"]["bpb"] for j in ("0", "1")]
    assert rope["ratio_to_1x"]["2x"]["per_seed"]["0"] == pytest.approx(values[0] / one_x[0])


@pytest.mark.slow  # builds a module of trained runs
def test_the_ranking_averages_2x_to_16x_only(report):
    summary = json.loads(report.files["length.json"])
    rows = summary["corpora"]["my_notes"]["rows"]
    for row in rows:
        assert row["score_multiples"] == [m for m in (2, 4) if m in RANKED]
        scored = [row["bpb"][f"{m}x"]["per_seed"] for m in (2, 4)]
        for seed in ("0", "1"):
            assert row["score"]["per_seed"][seed] == pytest.approx((scored[0][seed] + scored[1][seed]) / 2)
    means = [row["score"]["mean"] for row in rows]
    assert means == sorted(means)  # best (lowest bits per byte) first
    ranked = [row for row in rows if row["way"] in ("plain", "sliding")]  # test-time variants are not ranked
    assert min(row["rank"] for row in ranked) == 1 and all(row["rank_interval"] is not None for row in ranked)
    assert all(row["rank"] is None for row in rows if row not in ranked)


@pytest.mark.slow
def test_re_rendering_from_the_summary_alone_gives_the_same_files(report, tmp_path):
    summary = tmp_path / "copy" / "length.json"
    summary.parent.mkdir()
    summary.write_bytes(report.files["length.json"])
    again = rerender_length(summary)
    twice = rerender_length(summary)
    assert again.files["length.md"] == report.files["length.md"] == twice.files["length.md"]
    assert again.files["length.csv"] == report.files["length.csv"]
    assert again.files["length.json"] == report.files["length.json"]
    assert set(again.files) == set(report.files) and again.default_dir == summary.parent


@pytest.mark.slow
def test_the_command_runs_from_directories_and_from_a_summary(multirun, tmp_path, capsys):
    assert main(["report", "length", str(multirun), "--output-dir", str(tmp_path / "a")]) == 0
    assert main(["report", "length", "--from", str(tmp_path / "a" / "length.json")]) == 0
    assert (tmp_path / "a" / "length.md").read_text().startswith("### my_notes")
    assert main(["report", "length"]) == 2
    assert "needs DIR" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", "length", str(empty)]) == 2
    shutil.rmtree(empty)


@pytest.mark.slow  # builds a module of trained runs
def test_a_context_extension_is_measured_at_its_parents_multiples_beside_the_rule_at_test_time(multirun, tmp_path):
    """A context extension's row (trained on at 4x its parent's context 16, evaluated from 16 tokens) takes the
    parent's multiples, is named by its rule and factor, and the report sets it beside the parent's ``test_yarn``
    row: the same rule at test time only."""
    directory = tmp_path / "with_extension"
    shutil.copytree(multirun, directory)
    result = json.loads((directory / "0" / "results.json").read_text())  # rope, seed 0
    assert result["label"] == "rope"
    result["context_length"] = 64
    result["parent"] = {"path": str(directory / "0"), "label": "rope", "context_length": 16, "seed": 0}
    result["extension"] = {"rule": "yarn", "factor": 4.0, "context_length": 64}
    result["config"]["task"]["context_length"] = 64  # what an extension derives from its parent: not columns
    result["config"]["optimizer"]["lr"] = 0.1 * result["config"]["optimizer"]["lr"]
    (directory / "ext").mkdir()
    (directory / "ext" / "results.json").write_text(json.dumps(result))
    report = report_length([directory])
    (part,) = json.loads(report.files["length.json"])["corpora"].values()
    names = {row["name"] for row in part["rows"]}
    assert "rope extended yarn x4" in names and "rope" in names, names
    assert not any("context_length" in name or "optimizer.lr" in name for name in names), names
    extended = next(row for row in part["rows"] if row["name"] == "rope extended yarn x4")
    assert sorted(extended["bpb"]) == ["1x", "2x", "4x"]
    (comparison,) = part["extensions"]
    assert comparison["test_time"] == "rope + test_yarn" and comparison["rule"] == "yarn"
    assert comparison["bpb_extension"]["2x"]["mean"] == pytest.approx(result["figures"]["32"]["bpb"])
    assert "context extension (fine-tuned) against the same rule at test time only" in report.report


@pytest.mark.slow  # builds a module of trained runs
def test_the_cost_of_evaluation_is_reported_beside_training(report):
    """Each run records the seconds of its evaluation after training (passkey's part in its grid): the report
    shows them per encoding with the evaluation's share of the run."""
    for part in json.loads(report.files["length.json"])["corpora"].values():
        assert len(part["cost"]) == len(ENCODINGS)
        for cost in part["cost"].values():
            assert cost["test_seconds"] > cost["passkey_seconds"] > 0 and cost["train_seconds"] > 0
            share = cost["test_seconds"] / (cost["train_seconds"] + cost["test_seconds"])
            assert cost["evaluation_share"] == pytest.approx(share) and cost["seeds"] == len(SEEDS)
    assert "evaluation share" in report.report


def test_the_cost_leaves_out_resumed_runs_and_says_so():
    """A resumed run's train_seconds are its last process's part: a whole run's cost beside it, or none at all."""

    def run_of(seed: int, train: float, trained: int) -> LengthRun:
        result = {"steps": 720, "trained_steps": trained, "train_seconds": train, "test_seconds": 90.0}
        return LengthRun("web", "rope", seed, 128, {}, result, Path(f"run{seed}"))

    cost = run_cost([run_of(0, 300.0, 720), run_of(1, 0.5, 0)])
    assert (cost["train_seconds"], cost["test_seconds"], cost["seeds"], cost["resumed"]) == (300.0, 90.0, 1, 1)
    assert run_cost([run_of(1, 0.5, 0)])["train_seconds"] is None
    text = cost_table("web", {"cost": {"rope": cost, "alibi": run_cost([run_of(1, 0.5, 0)])}})
    assert "| rope | 300.0 | 90.0 |  | 23.1% | 1 (1 resumed, left out) |" in text
    assert "| alibi | - | - |  | - | 0 (1 resumed, left out) |" in text and "left out of the means" in text


@pytest.mark.slow
def test_rows_show_only_the_named_encodings_and_keep_the_places_among_all(multirun, report, tmp_path, capsys):
    summary = tmp_path / "whole" / "length.json"
    summary.parent.mkdir()
    summary.write_bytes(report.files["length.json"])
    whole = json.loads(report.files["length.json"])
    alone = rerender_length(summary, ["alibi"])
    part = json.loads(alone.files["length.json"])["corpora"]["my_notes"]
    base = lambda label: label.split(":")[0]  # noqa: E731 (a row's label carries its settings: alibi:<slope>)
    assert {base(row["encoding"]) for row in part["rows"]} == {"alibi"}
    assert {base(label) for label in part["loss_by_position"]} == {"alibi"}
    ranks = {r["name"]: r["rank"] for r in whole["corpora"]["my_notes"]["rows"] if base(r["encoding"]) == "alibi"}
    assert {r["name"]: r["rank"] for r in part["rows"]} == ranks  # places among all the rows, not renumbered
    assert "Rows shown: alibi (--rows)" in alone.files["length.md"].decode()
    assert main(["report", "length", "--from", str(summary), "--rows", "alibi,sinusoid", "--output-dir",
                 str(tmp_path / "b")]) == 2  # fmt: skip
    assert "no row of sinusoid in this report; its rows: alibi" in capsys.readouterr().err
    assert main(["report", "length", "--from", str(summary), "--rows", "alibi"]) == 2  # would overwrite the whole
    assert "give --output-dir" in capsys.readouterr().err
    assert json.loads(summary.read_text()) == whole
    computed = tmp_path / "computed"  # from the runs, as from the summary
    assert main(["report", "length", str(multirun), "--rows", "rope", "--output-dir", str(computed)]) == 0
    rows = json.loads((computed / "length.json").read_text())["corpora"]["my_notes"]["rows"]
    assert {base(row["encoding"]) for row in rows} == {"rope"}
