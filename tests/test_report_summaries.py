"""Issue 26, item 1: ``poslab report grid`` and ``poslab report losses`` in three layers. Their text is pinned
(``tests/golden/``: the reports as they were before the move, on planted multiruns), and the same files come
back from the summary JSON alone (``--from``), the runs deleted first."""

from __future__ import annotations

import json
from pathlib import Path

GOLDEN = Path(__file__).parent / "golden"
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
    from poslab.analysis.extrapolation import report_grid

    sweep = plant_grid(tmp_path / "sweep")
    result = report_grid(sweep, reference="where_am_i")
    assert shown(result.report, tmp_path) + "\n" == (GOLDEN / "grid_where_am_i.md").read_text()
    assert result.files["extrapolation_grid.md"] == (result.report + "\n").encode()
    plain = report_grid(sweep)
    assert shown(plain.report, tmp_path) + "\n" == (GOLDEN / "grid.md").read_text()


def test_the_losses_report_is_the_pinned_text(tmp_path):
    from poslab.analysis.losses import report_losses

    sweep = plant_losses(tmp_path / "sweep")
    result = report_losses([sweep])
    assert shown(result.report, tmp_path) + "\n" == (GOLDEN / "losses.md").read_text()
    assert result.files["losses.md"] == (result.report + "\n").encode()
