"""Issue 26, item 1: ``poslab report grid`` and ``poslab report losses`` in three layers. Their text is pinned
(``tests/golden/``: the reports as they were before the move, on planted multiruns), and the same files come
back from the summary JSON alone (``--from``), the runs deleted first."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

from poslab.analysis.stats import Interval
from poslab.cli import main as poslab_main
from tests.close_text import assert_text_close

GOLDEN = Path(__file__).parents[1] / "golden"
LENGTHS = (32, 64, 128)


def grid_accuracy(task: int, scheme: int, seed: int, length: int) -> float:
    """Made-up accuracies: falling with the length, apart by task, scheme and seed (exact in 3 decimals)."""
    return round(0.99 - 0.07 * scheme * LENGTHS.index(length) - 0.03 * task - 0.011 * seed, 3)


def grid_result(run_dir: Path, task: str, label: str, seed: int, **options) -> dict:
    """A results.json as a synthetic-task job writes it; ``options``: ``d_model``, ``values`` (accuracy by length),
    ``steps``, ``baselines`` (written or not), ``status``."""
    t, s = ("lag", "seen").index(task), ("none", "rope:1000000", "rope", "alibi:0.0625").index(label)
    figures = {}
    for length in LENGTHS:
        accuracy = options.get("values", {}).get(length, grid_accuracy(t, s, seed, length))
        row = {"accuracy": accuracy, "accuracy_log_scaled": round(accuracy + 0.013, 3)}
        if length > 32:
            row["accuracy_past_train"] = round(accuracy - 0.021, 3)
        if options.get("baselines", True):
            row |= {"baseline_chance": 0.0625, "baseline_constant": round(0.1 + 0.01 * t + 0.001 * length, 3)}
        figures[str(length)] = row
    return {
        "status": options.get("status", "success"),
        "task": task,
        "encoding": label.split(":")[0],
        "label": label,
        "seed": seed,
        "train_length": 32,
        "eval_lengths": list(LENGTHS),
        "steps": options.get("steps", 100),
        "parameters": 1000,
        "figures": figures,
        "config": {
            "seed": seed,
            "task": {"name": task, "eval_size": 64},
            "encoding": {"name": label},
            "model": {"d_model": options.get("d_model", 32)},
            "trainer": {"max_steps": 100},
            "paths": {"output_dir": str(run_dir)},
        },
    }


#: (task, label, seeds, options) of the planted grid: two tasks, a scheme in the where_am_i reference, one run
#: at two widths (a settings column), one seed alone, seeds that split, a short run, no baselines, a diverged run
GRID_JOBS = [
    ("lag", "none", (0, 1, 2), {}),
    ("lag", "rope:1000000", (0, 1), {}),
    ("lag", "rope", (0, 1), {"d_model": 32}),
    ("lag", "rope", (0, 1), {"d_model": 64, "steps": 10}),
    ("lag", "alibi:0.0625", (0,), {}),
    ("seen", "none", (0, 1, 2), {"values": {128: None}}),  # filled per seed below: a split
    ("seen", "rope:1000000", (0, 1), {"baselines": False}),
    ("seen", "alibi:0.0625", (3,), {"status": "diverged"}),
]
SPLIT = {0: 0.05, 1: 0.95, 2: 0.97}  # seen/none at 128: two seeds learned it, one did not


def plant_grid(sweep: Path) -> Path:
    job = 0
    for task, label, seeds, options in GRID_JOBS:
        for seed in seeds:
            run_dir = sweep / f"{job}_task-{task}_seed-{seed}"
            (run_dir / ".hydra").mkdir(parents=True)
            values = {128: SPLIT[seed]} if "values" in options else {}
            result = grid_result(run_dir, task, label, seed, **{**options, "values": values})
            (run_dir / "results.json").write_text(json.dumps(result))
            job += 1
    return sweep


def lm_result(run_dir: Path, encoding: str, seed: int, d_model: int, **extra) -> dict:
    config = {"seed": seed, "model": {"d_model": d_model}, "task": {"name": "lm"}, "trainer": {"max_steps": 100}}
    return {
        "status": "success",
        "task": "lm",
        "corpus": "wikitext2",
        "encoding": encoding,
        "label": encoding,
        "seed": seed,
        "steps": 100,
        "parameters": 12345 + d_model,
        "groups": {"main": {"train": {"documents": 100}, "validation": {"documents": 40 + seed}}},
        "figures": {"val_loss": 2.0 + d_model / 100 + 0.0137 * seed, "val_bpb": 3.0 - 0.0071 * seed, "step": 100},
        "config": {**config, "paths": {"output_dir": str(run_dir)}},
        **extra,
    }


def plant_losses(sweep: Path) -> Path:
    """rope at two widths over two seeds, alibi one seed validated on a test split, a short run, a diverged run."""
    jobs = [("rope", 0, 32), ("rope", 1, 32), ("rope", 0, 64), ("rope", 1, 64), ("alibi", 0, 32)]
    for job, (encoding, seed, d_model) in enumerate(jobs):
        extra = {"data_notes": ["validates on the test split"]} if encoding == "alibi" else {}
        extra |= {"steps": 10} if job == 3 else {}
        result = lm_result(sweep / str(job), encoding, seed, d_model, **extra)
        (sweep / str(job)).mkdir(parents=True)
        (sweep / str(job) / "results.json").write_text(json.dumps(result))
    diverged = lm_result(sweep / "5", "alibi", 1, 32, status="diverged")
    (sweep / "5").mkdir()
    (sweep / "5" / "results.json").write_text(json.dumps(diverged))
    return sweep


def shown(text: str, directory: Path) -> str:
    """The report with the test's temporary directory written ``<DIR>`` (the golden files' form)."""
    return text.replace(str(directory), "<DIR>")


def test_the_grid_report_is_the_pinned_text(tmp_path):
    from poslab.analysis.grid_report import report_grid

    sweep = plant_grid(tmp_path / "sweep")
    result = report_grid(sweep, reference="where_am_i")
    assert_text_close(shown(result.report, tmp_path) + "\n", (GOLDEN / "grid_where_am_i.md").read_text())
    assert result.files["extrapolation_grid.md"] == (result.report + "\n").encode()
    plain = report_grid(sweep)
    assert_text_close(shown(plain.report, tmp_path) + "\n", (GOLDEN / "grid.md").read_text())


def test_the_losses_report_is_the_pinned_text(tmp_path):
    from poslab.analysis.losses_report import report_losses

    sweep = plant_losses(tmp_path / "sweep")
    result = report_losses([sweep])
    assert_text_close(shown(result.report, tmp_path) + "\n", (GOLDEN / "losses.md").read_text())
    assert result.files["losses.md"] == (result.report + "\n").encode()


def written(directory: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(directory.iterdir())}


def rerendered(tmp_path: Path, out: Path, summary_file: str, report: str, capsys) -> dict[str, bytes]:
    """The files of ``report --from`` a copy of ``out``'s summary (nothing else beside it), and the printed report
    equal to the first one's."""
    first = capsys.readouterr().out.strip().splitlines()
    summary = tmp_path / "copy" / summary_file
    summary.parent.mkdir()
    summary.write_bytes((out / summary_file).read_bytes())
    assert poslab_main(["report", report, "--from", str(summary)]) == 0
    again = capsys.readouterr().out.strip().splitlines()
    assert again[:-1] == first[:-1]  # the report; the last line says where the files went
    assert again[-1] == first[-1].replace(str(out), str(summary.parent))
    return written(summary.parent)


def test_the_grid_renders_the_same_files_from_its_summary_alone(tmp_path, capsys):
    sweep, out = plant_grid(tmp_path / "sweep"), tmp_path / "out"
    assert poslab_main(["report", "grid", str(sweep), "--reference", "where_am_i", "--output-dir", str(out)]) == 0
    assert set(written(out)) == {
        "extrapolation_grid.md",
        "extrapolation_grid.csv",
        "grid.json",
        "extrapolation_grid.png",
    }
    shutil.rmtree(sweep)  # no runs: the summary alone
    assert rerendered(tmp_path, out, "grid.json", "grid", capsys) == written(out)
    assert shown((out / "extrapolation_grid.md").read_text(), tmp_path) == (GOLDEN / "grid_where_am_i.md").read_text()


def test_the_losses_render_the_same_files_from_their_summary_alone(tmp_path, capsys):
    sweep, out = plant_losses(tmp_path / "sweep"), tmp_path / "out"
    assert poslab_main(["report", "losses", str(sweep), "--output-dir", str(out)]) == 0
    assert set(written(out)) == {"losses.md", "losses.csv", "losses.json"}
    shutil.rmtree(sweep)
    assert rerendered(tmp_path, out, "losses.json", "losses", capsys) == written(out)
    assert shown((out / "losses.md").read_text(), tmp_path) == (GOLDEN / "losses.md").read_text()


def test_the_grid_csv_has_every_runs_figures_with_all_their_digits(tmp_path):
    from poslab.analysis.grid_report import report_grid

    sweep = plant_grid(tmp_path / "sweep")
    rows = list(csv.DictReader(io.StringIO(report_grid(sweep).files["extrapolation_grid.csv"].decode())))
    assert len(rows) == 15  # the successful runs; the diverged one is listed under the table only
    for row in rows:
        run_dir = next(sweep.glob(f"*_task-{row['task']}_seed-{row['seed']}/results.json"), None)
        assert run_dir is not None
    lag_rope_64 = [row for row in rows if row["scheme"] == "rope" and row["model.d_model"] == "64"]
    assert [row["steps"] for row in lag_rope_64] == ["10", "10"] and lag_rope_64[0]["recipe_steps"] == "100"
    split = {int(row["seed"]): float(row["accuracy@128"]) for row in rows if row["task"] == "seen"
             and row["scheme"] == "none"}  # fmt: skip
    assert split == SPLIT
    first = json.loads(next(sweep.glob("0_*/results.json")).read_text())["figures"]
    assert float(rows[0]["accuracy@64"]) == first["64"]["accuracy"]
    assert float(rows[0]["accuracy_past_train@128"]) == first["128"]["accuracy_past_train"]
    assert float(rows[0]["accuracy_log_scaled@128"]) == first["128"]["accuracy_log_scaled"]
    assert rows[0]["eval_size"] == "64"


def test_the_losses_csv_has_every_runs_figures_with_all_their_digits(tmp_path):
    from poslab.analysis.losses_report import report_losses

    sweep = plant_losses(tmp_path / "sweep")
    text = report_losses([sweep]).files["losses.csv"].decode()
    assert "\r" not in text
    rows = {row["run"]: row for row in csv.DictReader(io.StringIO(text))}
    assert len(rows) == 5
    for run_dir, row in rows.items():
        result = json.loads((Path(run_dir) / "results.json").read_text())
        assert float(row["val_loss"]) == result["figures"]["val_loss"]  # repr: every digit
        assert float(row["val_bpb"]) == result["figures"]["val_bpb"]
        assert int(row["val_documents"]) == result["groups"]["main"]["validation"]["documents"]
        assert row["model.d_model"] == str(result["config"]["model"]["d_model"])


def test_the_summaries_seed_means_come_from_stats(tmp_path):
    """losses.json's config means and grid.json's cells are ``stats`` intervals over the seeds' values."""
    from poslab.analysis.grid_report import report_grid
    from poslab.analysis.losses_report import report_losses

    losses = json.loads(report_losses([plant_losses(tmp_path / "l")]).files["losses.json"])
    rope_32 = next(c for c in losses["configs"] if c["encoding"] == "rope" and c["settings"] == ["32"])
    values = [r["val_loss"] for r in losses["runs"] if r["encoding"] == "rope" and r["settings"] == ["32"]]
    assert rope_32["val_loss"] == {**Interval.of(values).as_dict(), "per_seed": {"0": values[0], "1": values[1]}}
    grid = json.loads(report_grid(plant_grid(tmp_path / "g")).files["grid.json"])
    seen_none = next(row for row in grid["rows"] if row["task"] == "seen" and row["label"] == "none")
    assert seen_none["figures"]["L128"]["split"] and not seen_none["figures"]["L64"]["split"]
    assert seen_none["figures"]["L128"]["per_seed"] == {str(seed): value for seed, value in SPLIT.items()}
    assert seen_none["figures"]["L64"]["high"] <= 1.0  # an accuracy's interval is clipped to 0..1


def test_from_refuses_another_reports_summary_and_dir_with_it(tmp_path, capsys):
    out = tmp_path / "out"
    assert poslab_main(["report", "losses", str(plant_losses(tmp_path / "sweep")), "--output-dir", str(out)]) == 0
    capsys.readouterr()
    assert poslab_main(["report", "grid", "--from", str(out / "losses.json")]) == 2
    assert "holds no grid summary" in capsys.readouterr().err
    assert poslab_main(["report", "losses", str(tmp_path / "sweep"), "--from", str(out / "losses.json")]) == 2
    assert "not both" in capsys.readouterr().err
    assert poslab_main(["report", "grid", "--from", str(out / "losses.json"), "--reference", "where_am_i"]) == 2
    assert "--from: --reference sets how the figures are computed" in capsys.readouterr().err
    assert poslab_main(["report", "losses"]) == 2
    assert "needs DIR" in capsys.readouterr().err
