"""The review of ``poslab report grid`` (its items 2, 3 and 6): headers and titles from the first run only, a
reference compared at another length, a seed without a figure counted in ``seeds``, and a ``nan`` line skipped
when read back. Planted runs as ``tests/analysis/test_report_summaries`` plants them, with their own lengths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from poslab.analysis.extrapolation import compute_grid, parse_lines, reference_runs
from poslab.analysis.grid_render import grid_csv, grid_markdown, plot_grid
from poslab.errors import UsageError
from tests.analysis.test_report_summaries import grid_result


def plant(
    root: Path,
    name: str,
    label: str,
    seed: int,
    *,
    train: int = 32,
    lengths: tuple[int, ...] = (32, 64, 128, 256),
    past: float = 0.5,
    cpu: str = "AMD EPYC",
) -> None:
    """A finished lag run of ``label`` trained at ``train`` and tested at ``lengths``: 0.9 at every length, ``past``
    past the training length at the longest (NaN: not written), on a ``cpu`` host."""
    result = grid_result(root / name, "lag", "rope", seed)
    result["label"], result["train_length"], result["eval_lengths"] = label, train, list(lengths)
    result["figures"] = {str(n): {"accuracy": 0.9, "accuracy_log_scaled": 0.8} for n in lengths}
    if not math.isnan(past):
        result["figures"][str(max(lengths))]["accuracy_past_train"] = past
    result["environment"] = {"cpu": cpu}
    (root / name / ".hydra").mkdir(parents=True)
    (root / name / "results.json").write_text(json.dumps(result))


def test_rows_trained_at_other_lengths_are_tables_apart_under_their_own_headers(tmp_path):
    plant(tmp_path, "0_a", "other", 0, train=128, past=0.9)
    plant(tmp_path, "1_b", "rope", 0, past=0.5)
    summary = compute_grid(tmp_path)
    text = grid_markdown(summary)
    at_128, at_32 = text.split("Trained at 32, tested up to 256:")
    assert "Trained at 128, tested up to 256:" in at_128 and "at 256, past 128" in at_128 and "| other |" in at_128
    assert "at 256, past 32" in at_32 and "| rope |" in at_32 and "past 128" not in at_32
    assert [row["train_length"] for row in summary["rows"]] == [128, 32]


def test_the_plot_titles_each_panel_by_its_own_runs(tmp_path):
    plant(tmp_path, "0_a", "other", 0, train=128)
    plant(tmp_path, "1_b", "rope", 0)
    figure = plot_grid(compute_grid(tmp_path))
    assert sorted(ax.get_title() for ax in figure.axes) == ["lag (trained at 128)", "lag (trained at 32)"]


def test_mixed_hosts_are_stated_in_the_notes(tmp_path):
    plant(tmp_path, "0_a", "rope", 0)
    plant(tmp_path, "1_a", "rope", 1, cpu="Intel Xeon")
    summary = compute_grid(tmp_path)
    note = next(note for note in summary["notes"] if note.startswith("hosts mixed"))
    assert "AMD EPYC, Intel Xeon" in note and "lag rope" in note
    assert "Intel Xeon" in grid_csv(summary)


def test_the_reference_is_compared_only_at_the_figures_both_have(tmp_path):
    """Ours to 256, the write-up's to 128: its 'past 32' and log-scaled figures are at 128, not ours at 256."""
    for seed in (0, 1):
        plant(tmp_path, f"{seed}_a", "rope", seed, past=0.5)
    summary = compute_grid(tmp_path, "where_am_i")
    row = summary["rows"][0]
    assert row["compared"] == ["L32", "L64", "L128"] and set(row["reference"]) == {"L32", "L64", "L128"}
    assert row["max_abs_diff"] == pytest.approx(0.1)  # 0.9 against the write-up's 1.000, not 0.5 against 1.000
    header = grid_markdown(summary).split("\n\n")[1].splitlines()[0]
    assert "max abs diff (length 32; length 64; length 128) |" in header


def test_a_reference_trained_at_another_length_is_not_compared(tmp_path):
    plant(tmp_path, "0_a", "rope", 0, train=128)
    row = compute_grid(tmp_path, "where_am_i")["rows"][0]
    assert row["compared"] == [] and row["max_abs_diff"] is None
    assert "n/a (reference trained at 32)" in grid_markdown(compute_grid(tmp_path, "where_am_i"))


def test_a_figure_a_seed_did_not_write_says_how_many_seeds_it_rests_on(tmp_path):
    plant(tmp_path, "0_a", "rope", 0, past=0.5)
    plant(tmp_path, "1_a", "rope", 1, past=0.6)
    plant(tmp_path, "2_a", "rope", 2, past=math.nan)
    text = grid_markdown(compute_grid(tmp_path))
    assert "| 3 |" in text and "(2 of 3 seeds)" in text
    assert text.count("of 3 seeds)") == 1  # the other figures rest on all three


def test_report_lines_with_nan_read_back_as_nan_and_a_broken_line_is_refused(tmp_path):
    plant(tmp_path, "0_a", "rope", 0, past=math.nan)
    lines = grid_markdown(compute_grid(tmp_path)).splitlines()[:1]
    assert "positions past 32: nan;" in lines[0]
    (run,) = parse_lines("\n".join(lines))
    assert math.isnan(run.past_train) and run.accuracy[256] == 0.9
    reference = tmp_path / "lines.txt"
    reference.write_text("\n".join([*lines, lines[0].replace("0.900", "0.9x")]))
    with pytest.raises(UsageError, match="does not parse"):
        reference_runs(str(reference))
    assert len(reference_runs("where_am_i")) == 28  # the write-up's lines all parse
