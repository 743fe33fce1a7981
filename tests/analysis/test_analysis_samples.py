"""Analyses state their sample: documents, pairs and training steps behind each figure, one warning line when
an interval rests on too few documents or a run trained far less than its recipe, and "n/a" where nothing
could be compared."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from poslab.analysis.hrope.compute import read_run_facts
from poslab.analysis.hrope.render import depth_table, sample_lines
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.losses_report import report_losses
from poslab.analysis.output import (
    MIN_DOCUMENTS,
    MIN_RECIPE_FRACTION,
    REFERENCE_LABEL,
    few_documents_warning,
    short_run_warning,
    training_steps,
)
from poslab.cli import main
from poslab.runs.files import OVERRIDES_FILE
from tests.analysis.test_corpus_statistics import cli_corpora

RECIPE = ["experiment=hrope_axial_cpu", "corpus=openwebtext"]  # its recipe trains 480 steps


def fake_run(directory: Path, steps: int, documents: int, overrides: list[str] | None = None) -> Path:
    """A finished language-model run as the reports read it: results.json, and Hydra's overrides when given."""
    directory.mkdir(parents=True)
    config = {"seed": 0, "trainer": {"max_steps": steps}, "task": {"name": "lm"}, "paths": {}}
    result = {
        "status": "success",
        "task": "lm",
        "encoding": "hrope_axial",
        "label": "hrope_axial",
        "seed": 0,
        "corpus": "openwebtext",
        "groups": {"main": {"train": {"documents": 100}, "validation": {"documents": documents}}},
        "steps": steps,
        "parameters": 1000,
        "figures": {"val_loss": 2.0, "val_bpb": 1.5},
        "config": config,
    }
    (directory / "results.json").write_text(json.dumps(result))
    if overrides is not None:
        (directory / OVERRIDES_FILE).parent.mkdir()
        (directory / OVERRIDES_FILE).write_text("".join(f"- {o}\n" for o in overrides))
    return directory


def test_warnings_name_their_threshold_and_only_the_small_samples():
    assert few_documents_warning({"a": MIN_DOCUMENTS, "b": 500}) is None
    line = few_documents_warning({"a": 3, "b": MIN_DOCUMENTS})
    assert line is not None and "1 of 2" in line and "a: 3" in line and f"fewer than {MIN_DOCUMENTS}" in line
    assert "\n" not in line
    recipe = 480
    enough = int(MIN_RECIPE_FRACTION * recipe)
    assert short_run_warning({"a": (enough, recipe), "b": (None, recipe), "c": (50, None)}) is None
    line = short_run_warning({"a": (enough - 1, recipe), "b": (recipe, recipe)})
    assert line is not None and f"a: {enough - 1} of {recipe}" in line and f"{MIN_RECIPE_FRACTION:.0%}" in line


def test_the_recipe_is_the_run_composed_again_without_its_max_steps(tmp_path):
    short = fake_run(tmp_path / "short", 50, 3, [*RECIPE, "trainer.max_steps=50"])
    assert training_steps(short) == (50, 480)
    full = fake_run(tmp_path / "full", 480, 30, RECIPE)
    assert training_steps(full) == (480, 480)
    python_made = fake_run(tmp_path / "python", 4, 30)  # no Hydra files: its own max_steps
    assert training_steps(python_made) == (4, 4)


def test_report_losses_states_documents_and_steps_and_warns_for_small_runs(tmp_path):
    fake_run(tmp_path / "short", 50, 3, [*RECIPE, "trainer.max_steps=50"])
    report = report_losses([tmp_path / "short"]).report
    assert "| steps | val documents |" in report and "| 50 of 480 | 3 |" in report
    warnings = [line for line in report.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 2 and f"fewer than {MIN_DOCUMENTS} documents" in warnings[0]
    assert "50 of 480" in warnings[1]
    fake_run(tmp_path / "full", 480, 30, RECIPE)
    adequate = report_losses([tmp_path / "full"]).report
    assert "| 480 | 30 |" in adequate and "warning" not in adequate


def analysis(run_dir: Path, documents: int) -> RunAnalysis:
    """A run's analysis back from a summary entry, with what the report reads from its directory."""
    no_interval = [float("nan"), float("nan")]
    saved = RunAnalysis.from_summary(
        {
            "run_dir": str(run_dir), "encoding": "hrope_axial", "corpus": "openwebtext", "seed": 0,
            "documents": documents, "U*": -0.3, "U*_at": 1, "U*_ci": [-0.4, -0.2], "shuffled_U*": -0.2,
            "shuffle_change": 0.1, "shuffle_ci": no_interval, "merge_change": 0.0, "merge_ci": no_interval,
            "split_change": 0.0, "split_ci": no_interval, "residual": [0.0, -0.3, -0.1],
            "shuffled_residual": [0.0, -0.2, -0.1], "pairs": [900, 400, 200],
        }
    )  # fmt: skip
    return replace(saved, facts=read_run_facts(run_dir))


def test_hrope_sample_lines_count_documents_pairs_and_steps(tmp_path):
    small = analysis(fake_run(tmp_path / "short", 50, 3, [*RECIPE, "trainer.max_steps=50"]), documents=3)
    lines = sample_lines([small])
    assert lines[0] == (
        "Sample: 1 run(s); per run 3 held-out documents (3 with four or more paragraphs for the shuffle test), "
        "600 query/key pairs across paragraphs, 50 training steps "
        "(per run: the last table)."
    )
    assert len(lines) == 3 and "hrope_axial/OpenWebText seed 0: 3" in lines[1] and "50 of 480" in lines[2]
    adequate = analysis(fake_run(tmp_path / "full", 480, 300, RECIPE), documents=200)
    assert len(sample_lines([adequate])) == 1
    table = depth_table([adequate]).splitlines()
    # the write-up's value only in its own, labelled column
    assert table[0] == f"| U* | OpenWebText | OpenWebText: {REFERENCE_LABEL} |"
    assert table[2] == "| hrope_axial | −0.30 (1) | −0.31 |"


@pytest.mark.parametrize("corpora", [["openwebtext"], ["openwebtext", "wikitext2"]])
@pytest.mark.slow
def test_analyze_corpus_says_n_a_where_nothing_could_be_compared(tmp_path, monkeypatch, capsys, corpora):
    cli_corpora(tmp_path, monkeypatch)
    argv = ["analyze", "corpus", *corpora, "--split", "all", "--no-embeddings", "--output-dir", str(tmp_path / "o")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    rows = [line for line in printed.splitlines() if line.startswith("| lexical") or line.startswith("| paragraph")]
    assert len(rows) == 5
    cells = {line.rstrip(" |").rsplit("| ", 1)[-1] for line in rows}
    compared = len(corpora) > 1  # two corpora with a U*: each quantity's order is compared, never a verdict
    assert cells == ({"none (post hoc)"} if compared else {"n/a"})  # its direction is chosen after looking
    orders = {line.rstrip(" |").rsplit("| ", 3)[-3] for line in rows}
    assert orders <= {"yes ", "no "} if compared else orders == {"n/a "}
    assert "openwebtext (reference U* -0.31)" in printed
    assert ("direction chosen post hoc), every pair: n/a." in printed) != compared
