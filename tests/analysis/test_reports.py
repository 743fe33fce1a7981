"""Reports: the grid report in the write-up's format, and the wavelength table."""

from __future__ import annotations

import re

import pytest

from poslab.analysis.extrapolation import parse_lines, reference_runs
from poslab.analysis.grid_report import report_grid
from poslab.analysis.wavelengths import wavelength_table
from poslab.cli import main as poslab_main
from tests.conftest import run_train

WRITEUP_LINE = re.compile(
    r"^(lag |seen) (\S+) +seed \d: length 32 / 64 / 128: \d\.\d{3} / \d\.\d{3} / \d\.\d{3}; "
    r"at 128, positions past 32: \d\.\d{3}; scores x log128/log32: \d\.\d{3}$"
)


def test_the_writeup_lines_parse_and_render_back_identically():
    from importlib import resources

    text = (resources.files("poslab.analysis.resources") / "where_am_i_grid.txt").read_text()
    runs = parse_lines(text)
    assert len(runs) == 28
    assert [r.line() for r in runs] == text.strip().splitlines()


@pytest.mark.slow
def test_report_grid_on_a_small_multirun_prints_the_writeup_format(tmp_path, capsys):
    sweep = tmp_path / "grid"
    result = run_train(
        [
            "-m",
            "task=lag,seen",
            "+scheme=none,rope_base1m,alibi_slope1_16",
            "seed=0,1",
            "debug=small",
            "trainer.max_steps=3",
            "~logger",
            f"hydra.sweep.dir={sweep}",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    text = report_grid(sweep, reference="where_am_i").report
    lines = text.splitlines()
    run_lines = lines[:12]
    assert all(WRITEUP_LINE.match(line) for line in run_lines), run_lines
    assert [line[:23] for line in run_lines[:4]] == [
        "lag  none         seed ",
        "lag  none         seed ",
        "lag  rope:1000000 seed ",
        "lag  rope:1000000 seed ",
    ]
    assert lines[4].startswith("lag  alibi:0.0625 seed 0") and lines[6].startswith("seen none         seed 0")
    start = next(i for i, line in enumerate(lines) if line.startswith("| task | scheme |"))
    table = lines[start : lines.index("", start)]  # the seed table; the baselines' table follows it
    assert table[0].startswith("| task | scheme | seeds | length 32 | length 64 | length 128")
    assert len(table) == 2 + 6  # header, separator, 2 tasks x 3 schemes
    table = [line for line in table if line.startswith("| ")]
    header = [cell.strip() for cell in table[0].strip("|").split("|")]
    seen_none = next(line for line in table if line.startswith("| seen | none | 2 | "))
    row = dict(zip(header, (cell.strip() for cell in seen_none.strip("|").split("|"))))
    assert row["steps"].startswith("3")  # each seed trained 3 steps (of its recipe's, when more)
    assert row["write-up (reference): length 32"] == "0.997"  # the write-up's seen/none mean, in its own column
    assert row["sequences"].isdigit()
    # the same through the command line, which writes the table and the plot into the multirun's analysis/grid/
    assert poslab_main(["report", "grid", str(sweep)]) == 0
    printed = capsys.readouterr().out
    assert "lag  none         seed 0: length 32 / 64 / 128:" in printed
    assert (sweep / "analysis" / "grid" / "extrapolation_grid.png").stat().st_size > 1000
    assert (sweep / "analysis" / "grid" / "extrapolation_grid.md").read_text().startswith("lag  none")
    assert (
        printed.strip()
        .splitlines()[-1]
        .endswith(
            f"written to {sweep / 'analysis' / 'grid'}: extrapolation_grid.md, extrapolation_grid.csv, grid.json, "
            "extrapolation_grid.png"
        )
    )


def test_report_grid_on_a_directory_without_runs_fails_clearly(tmp_path, capsys):
    assert poslab_main(["report", "grid", str(tmp_path)]) == 2
    assert "no results.json below" in capsys.readouterr().err


def test_reference_figures_are_the_writeups():
    runs = {(r.task, r.label, r.seed): r for r in reference_runs("where_am_i")}
    assert runs[("seen", "none", 0)].log_scaled == 0.960
    assert runs[("lag", "alibi:0.5", 1)].accuracy[64] == 0.936


def test_wavelength_table_matches_the_writeup():
    text = wavelength_table(128, [10_000, 500_000], [8192, 131_072])
    lines = text.splitlines()
    assert lines[0].split() == ["pair", "base", "10,000", "base", "500,000"]
    assert lines[1].split() == ["0", "6.3", "6.3"]
    assert lines[4].split() == ["32", "628.3", "4,442.9"]
    # 2*pi*10000^(i/64) > 8192  <=>  i > 64*log(8192/2pi)/log(10000) = 49.8: pairs 50..63 -> 14
    assert lines[-2] == "base 10,000: 14 of 64 pairs never finish one turn within 8,192 positions,  0 within 131,072"
    assert lines[-1].startswith("base 500,000: 29 of 64 pairs") and lines[-1].endswith("15 within 131,072")


def test_wavelengths_command(capsys):
    assert poslab_main(["wavelengths", "--head-dim", "64", "--bases", "10000", "--context", "1000"]) == 0
    out = capsys.readouterr().out
    assert "of 32 pairs never finish one turn within 1,000 positions" in out
    assert poslab_main(["wavelengths", "--head-dim", "7"]) == 2


@pytest.mark.slow
def test_report_grid_shows_the_baselines_of_the_evaluation_sets(tmp_path):
    sweep = tmp_path / "grid"
    args = ["-m", "task=seen", "+scheme=none,rope", "seed=0,1", "debug=small", "trainer.max_steps=3", "~logger"]
    result = run_train([*args, f"hydra.sweep.dir={sweep}"], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    report = report_grid(sweep)
    table = [line for line in report.report.splitlines() if line.startswith("| seen | ")]
    constant = next(line for line in table if line.startswith("| seen | constant |"))
    chance = next(line for line in table if line.startswith("| seen | chance |"))
    assert chance.startswith("| seen | chance | 0.500 | 0.500 |")
    values = [float(cell) for cell in constant.strip("|").split("|")[2:]]
    assert all(0.5 <= value <= 1.0 for value in values)  # the commoner answer of two, on each evaluation set
    seeds_row = next(line for line in table if line.startswith("| seen | none | 2 | "))
    assert "[" in seeds_row  # two seeds: a t-interval beside each mean


def test_a_setting_only_newer_runs_record_does_not_split_a_row_but_a_value_that_differs_does():
    """Runs of one encoding from two poslab versions: the older never recorded ``encoding.beta_fast`` (added later
    with the older behaviour as its default), so the row stays one; two recorded values that differ split it."""
    from pathlib import Path

    from poslab.runs.results import FinishedRun, differing_settings

    def run(settings: dict) -> FinishedRun:
        return FinishedRun(Path("."), {"label": "cope"}, settings)

    older, newer = run({"encoding.name": "cope"}), run({"encoding.name": "cope", "encoding.beta_fast": 32})
    assert differing_settings([older, newer], lambda r: r.result["label"]) == []
    other = run({"encoding.name": "cope", "encoding.beta_fast": 16})
    assert differing_settings([older, newer, other], lambda r: r.result["label"]) == ["encoding.beta_fast"]
