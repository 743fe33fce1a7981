"""`poslab analyze increments` and `poslab report losses` on a tiny trained byte model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poslab.analysis.increments.readings import CEILING_BYTES
from poslab.analysis.increments.text import chinese_gaps
from poslab.cli import main as poslab_main
from tests.close_text import assert_json_close, assert_text_close
from tests.conftest import compose_config, make_unwritable
from tests.datamodules.test_corpora import make_corpus, write_jsonl

ZH = "人工智能是计算机科学的一个分支。它研究如何让机器像人一样思考和学习。自然语言处理是人工智能的重要方向。"
WIKI = "北京是中华人民共和国的首都，也是全国的政治中心和文化中心。"


@pytest.fixture(scope="module")
def trained_runs(tmp_path_factory):
    from poslab.running.training import run

    root = tmp_path_factory.mktemp("runs")
    data = root / "data"
    corpus = make_corpus(data)
    # a second Chinese source, read first: Wikipedia articles beside the novel's chapters (ordinals 1 and 15
    # of these 20 are held out at the fixture's validation fraction)
    write_jsonl(data / "zh" / "zhwiki_tiny.jsonl", [f"{WIKI}第{i}条。\n\n{WIKI}" for i in range(20)])
    runs = {}
    for encoding in ("rope", "increments_shared", "increments_layer"):
        out = root / encoding
        overrides = [
            f"encoding={encoding}",
            "corpus=wiki_en_zh",
            f"paths.data_dir={data}",
            f"paths.cache_dir={root / 'cache'}",
            "model=byte",
            "model.n_layers=2",
            "model.d_model=32",
            "model.n_heads=2",
            "model.mlp_hidden=64",
            "task.context_length=64",
            "task.batch_size=4",
            "task.val_every_n_steps=5",
            "task.val_windows=2",
            "trainer.max_steps=6",
            "trainer.log_every_n_steps=2",
            "~callbacks",
            "corpus.groups.en.local=[{pattern: 'en/*.jsonl'}]",
            "corpus.groups.zh.local=[{pattern: 'zh/*.jsonl'}, "
            "{pattern: 'zh/*.txt', format: text, document_start: '^第.{1,8}回'}]",
            f"corpus.validation_fraction={corpus['validation_fraction']}",
        ]
        if encoding != "increments_layer":  # that one keeps the CSV logger: the analysis logs to it too
            overrides.append("~logger")
        run(compose_config(overrides, out))
        runs[encoding] = out
    return runs


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["increments_shared", "increments_layer"])
def test_analyze_increments_writes_the_table_picture_and_aucs(trained_runs, tmp_path, capsys, encoding):
    zh_file = tmp_path / "zh.txt"
    zh_file.write_text(ZH * 3, encoding="utf-8")
    run_dir = trained_runs[encoding]
    assert poslab_main(["analyze", "increments", str(run_dir), "--zh-text", str(zh_file)]) == 0
    out = capsys.readouterr().out
    assert "English (lowercase)" in out and "Chinese (lead byte)" in out and "(mean " in out
    layers = ["shared"] if encoding == "increments_shared" else ["L0", "L1"]
    assert all(f"| {name} | " in out for name in layers)
    assert "| all | " in out and "| wikipedia | " not in out  # a --zh-text file has no sources
    assert "ceiling: lead byte" in out and "built in" in out  # shared and L0: δ of the byte alone
    written = run_dir / "analysis" / "increments"  # with no --output-dir: beside the run
    assert out.strip().splitlines()[-1].startswith(f"increments: 5 files written to {written}: ")
    summary = json.loads((written / "increments_analysis.json").read_text())
    assert list(summary["boundary_auc"]) == layers
    assert all(0.0 <= auc <= 1.0 for auc in summary["boundary_auc"].values())
    every = summary["boundaries"]["subsets"]["all"]
    assert every["auc"]["lead"] == summary["boundary_auc"]  # today's figure is the all/lead reading
    assert list(every["auc"]["char"]) == layers and set(every["ceilings"]) == set(CEILING_BYTES)
    assert every["gaps"] > 0 and 0 < every["word_starts"] < every["gaps"]
    boundaries_csv = (written / "increments_boundaries.csv").read_text()
    assert boundaries_csv.startswith("subset,reading,layer,gaps,word_starts,auc,values\n")
    assert (written / "increments_categories.csv").stat().st_size > 100
    assert (written / "increments_positions_0.png").stat().st_size > 1000
    assert (written / "increments_positions_1.png").stat().st_size > 1000
    if encoding == "increments_layer":  # its run has a CSV logger: the analysis is logged there as well
        logged = (run_dir / "csv" / "analysis" / "metrics.csv").read_text()
        assert "analysis/boundary_auc/L0" in logged and "analysis/delta/L1/en_lower" in logged
        assert "analysis/boundary_auc/all/char/L1" in logged and "analysis/boundary_ceiling/all/lead_byte" in logged
        assert "analysis/boundary_gaps/all" in logged
        assert "logged to: csv" in out
        training_log = (run_dir / "csv" / "metrics.csv").read_text()
        assert "val/loss" in training_log  # the training log is untouched
        assert "train/lr" in training_log.splitlines()[0]  # the learning rate is logged beside the loss


@pytest.mark.slow
def test_held_out_boundaries_are_split_by_source(trained_runs, tmp_path, capsys):
    run_dir = trained_runs["increments_layer"]
    assert poslab_main(["analyze", "increments", str(run_dir), "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Held-out documents by source (docs/increments.md: the rule): wikipedia 2, novels " in out
    assert "| wikipedia | " in out and "| novels | " in out and "| all | " in out
    boundaries = json.loads((tmp_path / "increments_analysis.json").read_text())["boundaries"]
    assert {Path(path).name: kind for path, kind in boundaries["source_files"].items()} == {
        "zhwiki_tiny.jsonl": "wikipedia",
        "novel.txt": "novels",
    }
    subsets = boundaries["subsets"]
    assert list(subsets) == ["wikipedia", "novels", "all"]
    assert subsets["wikipedia"]["gaps"] > 0 and subsets["novels"]["gaps"] > 0
    assert subsets["wikipedia"]["gaps"] + subsets["novels"]["gaps"] == subsets["all"]["gaps"]
    assert subsets["wikipedia"]["word_starts"] + subsets["novels"]["word_starts"] == subsets["all"]["word_starts"]
    # the two held-out articles hold 2 x 2 copies of WIKI and no other gap: all of its gaps but those whose
    # next character a 64-byte window cuts (about 350 bytes: at most 7 windows start inside them)
    wiki_gaps = len(chinese_gaps(WIKI)[0])
    assert 4 * wiki_gaps - 7 <= subsets["wikipedia"]["gaps"] <= 4 * wiki_gaps
    assert all(set(subset["auc"]) == {"lead", "char"} for subset in subsets.values())


@pytest.mark.slow
def test_report_losses_puts_the_runs_side_by_side(trained_runs, tmp_path, capsys):
    assert poslab_main(["report", "losses", *map(str, trained_runs.values()), "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count("| wiki_en_zh |") == 3
    assert "| increments_layer |" in out and "| rope |" in out
    assert (tmp_path / "losses.md").read_text().count("| wiki_en_zh |") == 3


@pytest.mark.slow
def test_an_analysis_of_a_read_only_run_prints_its_table_then_one_message(trained_runs, tmp_path, capsys):
    run_dir = trained_runs["increments_shared"]
    make_unwritable(run_dir)
    try:
        assert poslab_main(["analyze", "increments", str(run_dir), "--max-bytes", "2000"]) == 1
    finally:
        run_dir.chmod(0o755)
        (run_dir / "analysis").unlink()  # the blocker: the run is shared with the other tests, in any order
    captured = capsys.readouterr()
    assert "English (lowercase)" in captured.out  # the report came out first
    message = captured.err.strip().splitlines()
    assert len(message) == 1 and message[0].startswith("poslab: the report above is complete")
    assert str(run_dir / "analysis" / "increments") in message[0] and "--output-dir" in message[0]


def test_analyze_a_directory_without_a_model_fails_clearly(tmp_path, capsys):
    assert poslab_main(["analyze", "increments", str(tmp_path)]) == 2
    assert "model.pt does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ outputs pinned to a file
# The analysis on planted increments (a function of each byte, its layer and its place in the window, not of the
# model), so its tables, CSVs and JSON numbers are the same on every machine: they were recorded from the code
# before it became a package (compute, statistics, render) and must stay what they were.

#: where the model's δ comes from during the analysis (replaced by the planted ones)
COMPUTE_MODULE = "poslab.analysis.increments.compute"
PINNED = Path(__file__).parents[1] / "pinned" / "increments.json"
PINNED_FILES = ("increments_categories.csv", "increments_boundaries.csv", "increments_analysis.json")


def planted_increments(layers: int, shared: bool):
    """A stand-in for ``token_increments``: δ ``[layers, N]`` from the bytes and their place in the window (the
    same in every layer when ``shared``)."""

    def increments(model, tokens, context, batch_size=32):
        t = np.asarray(tokens, dtype=np.int64)
        place = np.arange(len(t)) % context
        rows = [(1 + (t * (5 + 2 * k) + place * (k + 1)) % 13) / 7 for k in ([0] * layers if shared else range(layers))]
        return np.stack(rows).astype(np.float32)  # the model's δ are float32

    return increments


def pinned_outputs(run_dir: Path, args: list[str], output: Path, shared: bool, monkeypatch, capsys) -> dict:
    """The report and the table files of ``analyze increments`` on planted δ of two layers, temporary paths
    replaced."""
    monkeypatch.setattr(f"{COMPUTE_MODULE}.token_increments", planted_increments(2, shared))
    assert poslab_main(["analyze", "increments", str(run_dir), *args, "--output-dir", str(output)]) == 0
    report = capsys.readouterr().out.rsplit("\n", 2)[0]  # less the line naming the files written

    def anonymous(text: str) -> str:
        return text.replace(str(run_dir.parent), "<RUNS>").replace(str(output), "<OUT>")

    files = {name: anonymous((output / name).read_text()) for name in PINNED_FILES}
    return {"report": anonymous(report), **files}


@pytest.fixture
def pinned_cases(trained_runs, tmp_path, monkeypatch, capsys) -> dict[str, dict]:
    given = tmp_path / "given"
    given.mkdir()
    (given / "zh.txt").write_text(ZH * 3, encoding="utf-8")
    (given / "en.txt").write_text("Hello, World! 42 times.\n\tTabs and 中文 mixed.", encoding="utf-8")
    given_args = ["--text", str(given / "en.txt"), "--zh-text", str(given / "zh.txt"), "--sentence", "δ = 1 人"]
    return {
        "held_out": pinned_outputs(trained_runs["increments_layer"], [], tmp_path / "a", False, monkeypatch, capsys),
        "given_text": pinned_outputs(
            trained_runs["increments_shared"], given_args, tmp_path / "b", True, monkeypatch, capsys
        ),
    }


def pinned_part(found: Any, expected: Any) -> Any:
    """``found`` with only the keys ``expected`` has, at every depth."""
    if isinstance(found, dict) and isinstance(expected, dict):
        return {key: pinned_part(found.get(key), value) for key, value in expected.items()}
    return found


@pytest.mark.slow  # builds a module of trained runs
def test_the_outputs_are_the_pinned_ones(pinned_cases):
    if os.environ.get("POSLAB_UPDATE_PINNED"):  # record them (once, from the code they pin)
        PINNED.parent.mkdir(exist_ok=True)
        PINNED.write_text(json.dumps(pinned_cases, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    pinned = json.loads(PINNED.read_text(encoding="utf-8"))
    for case, outputs in pinned.items():
        for name, expected in outputs.items():
            found = pinned_cases[case][name]
            if name.endswith(".json"):  # the pinned keys, each the same; the summary may hold more
                expected, found = json.loads(expected), json.loads(found)
                assert_json_close(pinned_part(found, expected), expected, f"{case}: {name}")
            else:  # numbers within a tolerance: the last digits differ between CPUs (tests/close_text.py)
                assert_text_close(found, expected, f"{case}: {name}")


# ------------------------------------------------------------------------------------ re-rendered from the summary


@pytest.mark.slow  # builds a module of trained runs
def test_the_summary_alone_renders_every_output_again_without_the_model(trained_runs, tmp_path, capsys):
    run_dir = tmp_path / "run"
    shutil.copytree(trained_runs["increments_layer"], run_dir)  # a copy: its checkpoint is deleted below
    full = tmp_path / "full"
    assert poslab_main(["analyze", "increments", str(run_dir), "--output-dir", str(full)]) == 0
    full_report = capsys.readouterr().out.splitlines()
    (run_dir / "model.pt").unlink()  # nothing can load the model now
    kept = tmp_path / "kept"
    kept.mkdir()
    shutil.copy(full / "increments_analysis.json", kept)
    assert poslab_main(["analyze", "increments", "--from", str(kept / "increments_analysis.json")]) == 0
    again_report = capsys.readouterr().out.splitlines()
    # the same report, less the full run's line about its loggers (a re-render logs nothing) and the files line
    assert again_report[:-1] == [line for line in full_report[:-1] if not line.startswith("logged to: ")]
    assert again_report[-1] == full_report[-1].replace(str(full), str(kept))  # the same files, beside the summary
    names = sorted(p.name for p in full.iterdir())
    assert sorted(p.name for p in kept.iterdir()) == names and len(names) == 5
    for name in names:  # every file byte for byte: tables, CSVs, the JSON and the PNGs
        assert (kept / name).read_bytes() == (full / name).read_bytes(), name


@pytest.mark.slow  # builds a module of trained runs
def test_rerendering_imports_no_torch(trained_runs, tmp_path):
    run_dir = trained_runs["increments_shared"]
    assert poslab_main(["analyze", "increments", str(run_dir), "--output-dir", str(tmp_path / "full")]) == 0
    root = str(Path(__file__).resolve().parents[2])  # this checkout's poslab, whatever is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    argv = ["analyze", "increments", "--from", str(tmp_path / "full" / "increments_analysis.json")]
    code = f"import sys; from poslab.cli import main; main({argv + ['--output-dir', str(tmp_path / 'again')]!r}); "
    code += "print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root, env=env)
    assert done.stdout.strip().splitlines()[-1] == "False"
    assert (tmp_path / "again" / "increments_positions_1.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "needs RUN_DIR"),
        (["RUN", "--from", "S.json"], "not both"),
        (["--from", "missing.json"], "cannot be read as JSON"),
    ],
)
def test_analyze_increments_refuses_a_wrong_source_in_one_sentence(tmp_path, capsys, argv, message):
    assert poslab_main(["analyze", "increments", *[str(tmp_path / a) if a != "--from" else a for a in argv]]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and message in error[0]


def test_a_summary_of_another_analysis_is_refused(tmp_path, capsys):
    (tmp_path / "length.json").write_text(json.dumps({"corpora": {}}))
    assert poslab_main(["analyze", "increments", "--from", str(tmp_path / "length.json")]) == 2
    assert "holds no increments summary" in capsys.readouterr().err
