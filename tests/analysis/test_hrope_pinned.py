"""The hRoPE analysis's outputs pinned: the numbers of the streaming analysis (shuffles, interventions, bootstrap
intervals: the same seeds give the same numbers), and the whole report (table, CSV, the run and arm JSON) of a set
of runs, compared with the files under ``tests/golden/hrope/`` that the analysis wrote before it was split into
compute and render, numbers within a tolerance (``tests/close_text.py``: the last digits differ between CPUs). A
refactoring that changes a number, a cell or the order of the random draws fails here.

``POSLAB_WRITE_GOLDEN=1`` writes the files again (only after a change that is meant to change the outputs).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poslab.analysis.hrope import report
from poslab.analysis.hrope.compute import analyze_documents, read_run_facts
from poslab.analysis.hrope.documents import Document, shuffle_paragraphs
from poslab.analysis.hrope.render import (
    comparison_table,
    depth_table,
    per_run_table,
    render_summary,
    robustness_tables,
    runs_csv,
)
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.hrope.seeds import arm_summaries, claims
from tests.analysis.test_hrope_analysis import document
from tests.analysis.test_hrope_readings import PlantedModel
from tests.close_text import assert_file_close, assert_text_close

GOLDEN = Path(__file__).parents[1] / "golden" / "hrope"
DOCS_RUNS = Path(__file__).parents[2] / "docs" / "hrope" / "allocation" / "hrope_runs.json"

#: (encoding, frequencies, corpus, penalty by displacement): the arms of the pinned report
ARMS = [
    ("hrope_axial", "split", "python_code", {1: 1.2, 2: 0.8, 3: 0.4}),
    ("hrope_axial", "interleaved", "python_code", {1: 0.9, 2: 0.3}),
    ("rand_axial", "split", "python_code", {1: 0.3}),
    ("rope", None, "python_code", {}),
    ("hrope_axial", "split", "openwebtext", {1: 0.6, 2: 0.2}),
    ("rope", None, "openwebtext", {}),
]
SEEDS = (0, 1, 2)
SETTINGS = {"min_pairs": 5, "bootstrap": 40, "batch_size": 4, "seed": 0, "progress": False}


def golden(name: str, text: str) -> None:
    """``text`` is the golden file ``name`` (written instead under ``POSLAB_WRITE_GOLDEN=1``)."""
    path = GOLDEN / name
    if os.environ.get("POSLAB_WRITE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode())
    assert path.is_file(), f"{path} is missing: write it with POSLAB_WRITE_GOLDEN=1"
    # numbers within a tolerance, not as printed bytes: the last digits differ between CPUs (tests/close_text.py);
    # line endings and every word still count
    assert_file_close(text, path.read_bytes().decode(), name)


def run_documents(seed: int, n: int = 7) -> list[Document]:
    """A run's held-out documents: five paragraphs each (the shuffle test needs four), different per seed."""
    return [document([7 + s, 9, 6 + (s % 3), 8, 5 + (s + seed) % 4], seed=s + 10 * seed) for s in range(n)]


def result_numbers(result: dict[str, Any]) -> dict[str, Any]:
    """Every number ``analyze_documents`` returns, JSON-ready (NaN as None)."""
    clean = lambda v: None if isinstance(v, float) and math.isnan(v) else v
    numbers = lambda values: [clean(float(v)) for v in values]
    depths = {
        name: {
            "depth": numbers([d.depth.value, *d.depth.interval]),
            "shuffle_change": numbers([d.shuffle_change.value, *d.shuffle_change.interval]),
            "residual": numbers(d.well.residual),
            "shuffled_residual": numbers(d.shuffled_well.residual),
            "pairs": numbers(d.well.pairs),
            "location": d.well.location,
            "depth_replicates": numbers(d.depth.replicates[:5]),
        }
        for name, d in result["depths"].items()
    }
    interventions = {
        reading: {kind: numbers([e.value, *e.interval, *e.replicates[:3]]) for kind, e in by_kind.items()}
        for reading, by_kind in result["interventions"].items()
    }
    counts = {"documents": result["documents"], "shuffled_documents": result["shuffled_documents"]}
    return {**counts, "depths": depths, "interventions": interventions}


def dumped(obj: Any) -> str:
    return json.dumps(obj, indent=1) + "\n"


@pytest.mark.parametrize("seed, keep_ends", [(0, True), (3, True), (0, False)])
def test_the_streaming_analysis_gives_the_pinned_numbers(seed, keep_ends):
    """The shuffles draw from one generator in document order and the bootstrap from another: the same seed gives
    the same shuffles, wells, intervals and interventions."""
    model = PlantedModel({1: 1.0, 2: 0.5})
    settings = {**SETTINGS, "seed": seed, "keep_ends": keep_ends}
    result = analyze_documents(model, iter(run_documents(0, 9)), **settings)
    golden(f"numbers_seed{seed}_{'ends' if keep_ends else 'all'}.json", dumped(result_numbers(result)))


def test_the_shuffles_draw_in_document_order():
    rng = np.random.default_rng(5)
    orders = []
    for d in run_documents(1, 6):
        mixed = shuffle_paragraphs(d, rng)
        orders.append([int(t) for t in mixed.tokens[:: max(1, len(mixed) // 12)]])
    golden("shuffle_tokens.json", dumped(orders))


#: the held-out documents' bytes in every fake run, and each document's bits/byte less the run's (bytes-weighted: 0)
DOCUMENT_BYTES = (1000.0, 1000.0, 2000.0, 1000.0)
DOCUMENT_OFFSETS = (0.2, -0.2, 0.05, -0.1)


def document_losses(bpb: float) -> dict[str, Any]:
    """``held_out.documents`` of a results.json whose documents add up to ``bpb``: each one's summed loss (nats)
    and bytes at the training length, as training writes them."""
    loss = [(bpb + offset) * size * math.log(2) for offset, size in zip(DOCUMENT_OFFSETS, DOCUMENT_BYTES)]
    at = {"bytes": list(DOCUMENT_BYTES), "tokens": [300, 300, 600, 300], "loss": {"plain": loss}}
    return {"documents": {"main": {"by_length": {"256": at}}}}


def fake_run_dir(root: Path, number: int, encoding: str, corpus: str, seed: int, status: str = "success") -> Path:
    """A finished run as the report reads it: the model file it looks for and a results.json (with its held-out
    documents' losses: bits/byte has document replicates)."""
    run_dir = root / f"{number}_{encoding}_{corpus}_{seed}"
    run_dir.mkdir(parents=True)
    (run_dir / "model.pt").write_bytes(b"")
    sources = {"main": {"files": 1, "listing": [{"path": f"{corpus}.txt", "bytes": 2_000_000, "split": "train"}],
                        "file_bytes": 2_000_000, "sha256": "0123456789abcdef"}}  # fmt: skip
    result = {
        "status": status,
        "task": "lm",
        "encoding": encoding,
        "label": encoding,
        "seed": seed,
        "corpus": corpus,
        "groups": {"main": {"train": {"documents": 100}, "validation": {"documents": 7}}},
        "parameters": 1000,
        "steps": 80 if seed == 2 else 400,
        "figures": {"val_loss": 2.0, "val_bpb": 1.5 + 0.01 * number + 0.003 * seed},
        "evaluation": {"train_length": 256},
        "held_out": document_losses(1.5 + 0.01 * number + 0.003 * seed),
        "config": {"seed": seed, "trainer": {"max_steps": 400}, "task": {"name": "lm"}, "paths": {}},
        "sources": sources,
        "data_notes": [f"corpus {corpus} is a fixture"] if corpus == "openwebtext" else [],
    }
    (run_dir / "results.json").write_text(json.dumps(result))
    return run_dir


def pinned_runs(tmp_path: Path) -> tuple[Path, dict[str, RunAnalysis]]:
    """A multirun directory of the arms' runs (one more that diverged) and each run's analysis, by directory."""
    root = tmp_path / "multirun"
    root.mkdir()
    (root / "multirun.yaml").write_text("{}\n")
    analyses = {}
    number = 0
    for encoding, frequencies, corpus, penalty in ARMS:
        for seed in SEEDS:
            run_dir = fake_run_dir(root, number, encoding, corpus, seed)
            scaled = {k: v * (1 + 0.25 * seed) for k, v in penalty.items()}
            result = analyze_documents(PlantedModel(scaled), iter(run_documents(seed)), **SETTINGS)
            analyses[str(run_dir)] = RunAnalysis(
                str(run_dir), encoding, corpus, seed, frequencies=frequencies, **result,
                facts=read_run_facts(run_dir, SETTINGS["bootstrap"], SETTINGS["seed"]),
            )  # fmt: skip
            number += 1
    fake_run_dir(root, number, "rope", "openwebtext", 0, status="diverged")
    return root, analyses


def without_tmp(text: str, tmp_path: Path) -> str:
    return text.replace(str(tmp_path), "<tmp>")


@pytest.mark.slow
def test_the_report_of_a_multirun_is_the_pinned_report(tmp_path, monkeypatch):
    root, analyses = pinned_runs(tmp_path)
    monkeypatch.setattr(report, "analyze_run", lambda run, documents, **settings: analyses[str(run)])
    result = report.analyze_hrope([str(root)], documents=7, trend="linear", keep_ends=True)
    assert result.default_dir == root / "analysis" / "hrope"
    for name in ("hrope_table.md", "hrope_runs.csv", "hrope_runs.json", "hrope_arms.json"):
        golden(f"report/{name}", without_tmp(result.files[name].decode(), tmp_path))
    assert_text_close(
        without_tmp(result.report, tmp_path) + "\n", (GOLDEN / "report" / "hrope_table.md").read_bytes().decode()
    )


def test_the_tables_of_the_write_ups_runs_are_the_pinned_tables():
    """The 60 runs of docs/hrope/allocation read back from their JSON (no run directories: bits/byte and steps
    n/a; no document replicates: every interval over seeds only, said so, and no verdict)."""
    analyses = [RunAnalysis.from_summary(s) for s in json.loads(DOCS_RUNS.read_text())]
    found = claims(analyses)
    parts = [
        depth_table(analyses),
        render_summary(arm_summaries(analyses)),
        comparison_table(found),
        robustness_tables(analyses, "linear", found),
        per_run_table(analyses),
    ]
    golden("docs_runs/tables.md", "\n\n".join(parts) + "\n")
    golden("docs_runs/hrope_runs.csv", runs_csv(analyses))


@pytest.mark.slow
def test_the_report_renders_again_from_its_summary_alone(tmp_path, monkeypatch, capsys):
    """``poslab analyze hrope --from hrope.json``: the same files, byte for byte (figures included), with the run
    directories gone (no model, no results.json, nothing to load) and nothing computed."""
    from poslab.cli import main

    root, analyses = pinned_runs(tmp_path)
    monkeypatch.setattr(report, "analyze_run", lambda run, documents, **settings: analyses[str(run)])
    monkeypatch.setattr(report, "log_to_the_runs_loggers", lambda analyses, wells: None)  # fakes have no config
    out = tmp_path / "computed"
    assert main(["analyze", "hrope", str(root), "--documents", "7", "--output-dir", str(out)]) == 0
    computed = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(computed) == {"hrope.json", "hrope_table.md", "hrope_runs.csv", "hrope_runs.json", "hrope_arms.json",
                             "hrope_well.png", "hrope_shuffle.png"}  # fmt: skip
    summary = tmp_path / "kept" / "hrope.json"
    summary.parent.mkdir()
    summary.write_bytes(computed["hrope.json"])
    for run_dir in root.iterdir():  # the runs, their models and results are gone
        if run_dir.is_dir():
            for path in sorted(run_dir.rglob("*"), reverse=True):
                path.unlink() if path.is_file() else path.rmdir()
            run_dir.rmdir()
    monkeypatch.setattr(report, "analyze_run", lambda *a, **k: pytest.fail("--from must not analyse a run"))
    capsys.readouterr()
    assert main(["analyze", "hrope", "--from", str(summary)]) == 0  # beside the summary by default
    printed = capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in summary.parent.iterdir()} == computed
    assert computed["hrope_table.md"].decode() in printed


def test_from_a_file_that_is_not_the_summary_is_one_message(tmp_path, capsys):
    from poslab.cli import main

    runs_only = tmp_path / "hrope_runs.json"
    runs_only.write_text(DOCS_RUNS.read_text())  # the runs' view: no arms
    (tmp_path / "broken.json").write_text("{")
    for path in (runs_only, tmp_path / "broken.json", tmp_path / "missing.json"):
        assert main(["analyze", "hrope", "--from", str(path)]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and "hrope.json" in error[0] and str(path) in error[0]
    assert main(["analyze", "hrope"]) == 2
    assert "RUN_DIR" in capsys.readouterr().err


def assert_close_tree(found: Any, expected: Any, path: str = "") -> None:
    """Two JSON trees alike, their numbers within a relative 1e-4 (the merged summaries' replicates are kept at 6
    significant digits, which moves a percentile interval's last digits)."""
    if isinstance(expected, dict):
        assert isinstance(found, dict) and found.keys() == expected.keys(), path
        for key in expected:
            assert_close_tree(found[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(found, list) and len(found) == len(expected), path
        for index, (a, b) in enumerate(zip(found, expected)):
            assert_close_tree(a, b, f"{path}[{index}]")
    elif isinstance(expected, float) and isinstance(found, float):
        assert math.isclose(found, expected, rel_tol=1e-4, abs_tol=1e-9) or (
            math.isnan(found) and math.isnan(expected)
        ), path
    else:
        assert found == expected, path


@pytest.mark.slow
def test_summaries_of_runs_analysed_apart_merge_into_the_report_of_all_of_them(tmp_path, monkeypatch, capsys):
    """The runs of a multirun analysed in two halves (as two sessions would, each while its checkpoints exist), then
    ``--from HALF1/hrope.json HALF2/hrope.json --output-dir DIR``: the arms and comparisons of analysing all of them
    at once, the intervals over seeds and documents included (each entry keeps its document replicates)."""
    from poslab.cli import main

    root, analyses = pinned_runs(tmp_path)
    monkeypatch.setattr(report, "analyze_run", lambda run, documents, **settings: analyses[str(run)])
    monkeypatch.setattr(report, "log_to_the_runs_loggers", lambda analyses, wells: None)  # planted: no config
    together = report.analyze_hrope([str(root)], documents=7, trend="linear", keep_ends=True)
    runs = sorted(analyses)
    halves = []
    for number, half in enumerate((runs[::2], runs[1::2])):
        directory, _ = report.analyze_hrope(half, documents=7, trend="linear", keep_ends=True).write(
            tmp_path / f"h{number}"
        )
        halves.append(str(directory / "hrope.json"))
    merged_dir = tmp_path / "merged"
    assert main(["analyze", "hrope", "--from", *halves, "--output-dir", str(merged_dir)]) == 0
    merged = json.loads((merged_dir / "hrope.json").read_text())
    expected = json.loads(together.files["hrope.json"])
    assert merged["merged_from"] == halves and sorted(e["run_dir"] for e in merged["runs"]) == runs
    assert all(arm["U*"]["over"] == "seeds and documents" and arm["U*"]["low"] is not None for arm in expected["arms"])
    assert all(arm["interventions"]["same_pairs"]["merge"]["over"] == "seeds and documents" for arm in expected["arms"])
    # the well's shape (H3) and the bits/byte keep theirs too
    assert all(arm["shape"]["growth"]["over"] == "seeds and documents" for arm in expected["arms"])
    assert all(arm["val_bpb"]["over"] == "seeds and documents" for arm in expected["arms"])
    assert_close_tree(merged["arms"], expected["arms"])
    assert_close_tree(merged["comparisons"], expected["comparisons"])
    capsys.readouterr()
    assert main(["analyze", "hrope", "--from", *halves]) == 2  # without --output-dir: it would overwrite the first
    assert "--output-dir" in capsys.readouterr().err
    assert main(["analyze", "hrope", "--from", halves[0], halves[0], "--output-dir", str(tmp_path / "twice")]) == 2
    assert "in both" in capsys.readouterr().err
    other = report.analyze_hrope(runs[1::2], documents=5, trend="linear", keep_ends=True).write(tmp_path / "other")[0]
    assert (
        main(["analyze", "hrope", "--from", halves[0], str(other / "hrope.json"), "--output-dir", str(tmp_path / "x")])
        == 2
    )
    assert "documents: 7" in capsys.readouterr().err
