"""The scripts under docs/ and the committed `poslab report` outputs regenerate from committed inputs: the same text,
every number the same within a tolerance (``tests/close_text.py``: one unit in the last printed place, as a figure
on a rounding boundary may print on another CPU; JSON parsed, rel 1e-6).

Each is the command its doc names (the doc's figures come from it); a change to the library that moves one of those
figures, or breaks the script, fails here instead of leaving the doc silently out of date. Inputs are the committed
summaries and runs' results.json files only: no corpus, no model, no network.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from poslab.cli import main
from tests.close_text import assert_file_close, assert_text_close

ROOT = Path(__file__).resolve().parents[1]

#: (script, its arguments, the markdown it writes) as the docs give the commands; slow: they rebuild evaluation
#: sets or encodings, or read the zoo's hundreds of runs (2-20 s on the 2 cores)
SCRIPTS = [
    pytest.param(
        "docs/lm_extrapolation/alibi_shape.py",
        ["docs/lm_extrapolation/length.json"],
        "docs/lm_extrapolation/alibi_shape.md",
    ),
    pytest.param(
        "docs/lm_extrapolation/zoo_vs_text.py",
        ["docs/position_zoo/v2/zoo.json", "docs/lm_extrapolation/length.json"],
        "docs/lm_extrapolation/zoo_vs_text.md",
    ),
    pytest.param(  # the single rerun's every row against the paper, then the front report's @ratio claims
        "docs/lm_extrapolation/alibi_shape.py",
        ["docs/lm_zoo_rerun/length.json", "docs/lm_zoo_rerun/front/length.json"],
        "docs/lm_zoo_rerun/alibi_shape.md",
    ),
    pytest.param(
        "docs/lm_extrapolation/zoo_vs_text.py",
        ["docs/position_zoo/v3/zoo.json", "docs/lm_zoo_rerun/length.json"],
        "docs/lm_zoo_rerun/zoo_vs_text.md",
    ),
    pytest.param(
        "docs/lm_extrapolation/passkey_curve.py",
        ["docs/lm_extrapolation/passkey/runs"],
        "docs/lm_extrapolation/passkey/curve.md",
    ),
    pytest.param("docs/reproduction/seed_intervals.py", [], "docs/reproduction/seed_intervals.md"),
    pytest.param("docs/reproduction/seed_intervals.py", ["causal"], "docs/reproduction/seed_intervals_causal.md"),
    pytest.param(
        "docs/lm_extrapolation/verdict_pairs.py",
        ["docs/lm_extrapolation/length.json"],
        "docs/lm_extrapolation/verdict_pairs.md",
    ),
    pytest.param("docs/extrapolation_grid_verdicts.py", [], "docs/extrapolation_grid_verdicts.md"),
    pytest.param("docs/extrapolation_grid_summary.py", [], "docs/extrapolation_grid/grid.json"),
    pytest.param(
        "docs/position_zoo/first_zoo_baselines.py",
        [],
        "docs/position_zoo/first_zoo_baselines.md",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "docs/position_zoo/hrope_frequencies.py", [], "docs/position_zoo/hrope_frequencies.md", marks=pytest.mark.slow
    ),
    pytest.param(
        "docs/position_zoo/v2/explain.py",
        ["docs/position_zoo/v2/runs", "docs/position_zoo/checks/runs"],
        "docs/position_zoo/v2/explain.md",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        "docs/position_zoo/variable/compare.py",
        ["docs/position_zoo/v2/runs", "docs/position_zoo/variable/runs"],
        "docs/position_zoo/variable/compare.md",
        marks=pytest.mark.slow,
    ),
]


#: (report, the run directories it reads and its options, the committed directory it wrote): tables compared, PNGs
#: not (fonts and matplotlib versions move pixels, not figures)
REPORTS = [
    ("length", ["docs/lm_extrapolation/runs"], "docs/lm_extrapolation"),
    ("length", ["docs/lm_extrapolation/passkey/runs"], "docs/lm_extrapolation/passkey"),
    (
        "length",  # the fine-tuned runs beside their parents, whose test-time rules are the comparison
        [
            "docs/lm_extrapolation/extension/runs",
            "docs/lm_extrapolation/runs/corpus-wikitext2_encoding-rope_experiment-lm_zoo_seed-0",
            "docs/lm_extrapolation/runs/corpus-wikitext2_encoding-rope_experiment-lm_zoo_seed-1",
        ],
        "docs/lm_extrapolation/extension",
    ),
    ("zoo", ["docs/position_zoo/v2/runs"], "docs/position_zoo/v2"),
    ("zoo", ["docs/position_zoo/variable/runs"], "docs/position_zoo/variable"),
    ("zoo", ["docs/position_zoo/cope_counting_v2/runs"], "docs/position_zoo/cope_counting_v2"),
    ("zoo", ["docs/diagnostic_tasks/runs"], "docs/diagnostic_tasks"),
    ("smallest", ["docs/diagnostic_tasks/runs"], "docs/diagnostic_tasks"),
    (
        "length",  # stick-breaking's past-keys-only runs among the rerun's rows, with the doc's options
        [
            "docs/lm_zoo_rerun/stick_breaking_past_only/runs",
            "docs/lm_zoo_rerun/runs",
            *("--rows", "rope,alibi,forget_gate,path,path_fox,kerple_power,stick_breaking,stick_breaking:past_only"),
            *("--claim", "stick_breaking:past_only<stick_breaking", "--claim", "stick_breaking:past_only<path_fox"),
            *("--claim", "stick_breaking:past_only<rope"),
        ],
        "docs/lm_zoo_rerun/stick_breaking_past_only",
    ),
]


@pytest.mark.parametrize(("script", "arguments", "written"), SCRIPTS, ids=[Path(c.values[0]).stem for c in SCRIPTS])
def test_docs_script_regenerates_its_table(script: str, arguments: list[str], written: str) -> None:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    done = subprocess.run(
        [sys.executable, script, *arguments], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-3000:]}"
    command = f"`python {script} {' '.join(arguments)}`"
    assert_text_close(
        done.stdout, (ROOT / written).read_text(encoding="utf-8"), f"{written} is not what {command} writes now"
    )


@pytest.mark.slow
@pytest.mark.parametrize(("report", "run_dirs", "committed"), REPORTS, ids=[c for _, _, c in REPORTS])
def test_committed_report_regenerates(
    report: str, run_dirs: list[str], committed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)  # the run directories as the docs name them, relative to the root
    assert main(["report", report, *run_dirs, "--output-dir", str(tmp_path)]) == 0
    tables = sorted(path.name for path in tmp_path.iterdir() if path.suffix in {".md", ".csv", ".json"})
    assert tables, f"poslab report {report} wrote no table into {tmp_path}"
    for name in tables:
        found, expected = (tmp_path / name).read_text(encoding="utf-8"), (ROOT / committed / name).read_text("utf-8")
        what = f"{committed}/{name} is not what `poslab report {report} {' '.join(run_dirs)}` writes now"
        assert_file_close(found, expected, what)


@pytest.mark.slow
def test_the_rerun_s_committed_reports_regenerate(tmp_path: Path) -> None:
    """Every report of the finished rerun (``sweeps/rerun.sh reports``: the registry's verdicts, the PaTH
    directions, the lm_zoo's three length reports, the zoo's), written anew under ``--out`` from the committed runs:
    each table the docs read is what it writes now (about 25 s: every lm_zoo run's document arrays)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    done = subprocess.run(
        [sys.executable, "sweeps/rerun_reports.py", "--out", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, f"sweeps/rerun_reports.py failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    assert "skipped" not in done.stdout, "the rerun is whole in docs/: no report may be skipped"
    tables = sorted(p for p in tmp_path.rglob("*") if p.suffix in {".md", ".csv", ".json"})
    folders = {str(p.parent.relative_to(tmp_path)) for p in tables}
    expected = {"lm_zoo_rerun", "lm_zoo_rerun/front", "lm_zoo_rerun/frontier", "preregistered", "path_directions"}
    assert expected <= folders, f"the reports wrote into {sorted(folders)}"
    for path in tables:
        committed = Path("docs") / path.relative_to(tmp_path)
        what = f"{committed} is not what `sweeps/rerun.sh reports` writes now from the committed runs"
        found = path.read_text(encoding="utf-8").replace(str(tmp_path), "docs")  # the summaries each names as read
        assert_file_close(found, (ROOT / committed).read_text(encoding="utf-8"), what)


#: (analysis, its committed summaries, the folder of the tables drawn from them): the tables a doc cites are what
#: ``--from`` draws from the committed summary now (the merged ones: what merging their parts gives)
ANALYSES = [
    ("corpus", ["docs/hrope/corpus_statistics/corpus_statistics.json"], "docs/hrope/corpus_statistics"),
    ("hrope", ["docs/hrope/causal/analysis/hrope.json"], "docs/hrope/causal/analysis"),
    (
        "hrope",
        ["docs/hrope/causal/analysis/hrope.json", "docs/hrope/allocation_causal/analysis/parts/hrope.json"],
        "docs/hrope/allocation_causal/analysis",
    ),
    (
        "hrope",
        [
            "docs/hrope/causal/analysis/hrope.json",
            "docs/hrope/bipe/analysis/parts/rope/hrope.json",
            "docs/hrope/bipe/analysis/parts/alibi/hrope.json",
        ],
        "docs/hrope/bipe/analysis",
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("analysis", "summaries", "committed"), ANALYSES, ids=[c for _, _, c in ANALYSES])
def test_committed_analysis_redraws_from_its_summaries(
    analysis: str, summaries: list[str], committed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["analyze", analysis, "--from", *summaries, "--output-dir", str(tmp_path)]) == 0
    tables = sorted(p.name for p in tmp_path.iterdir() if p.suffix in {".md", ".csv"})
    assert tables, f"poslab analyze {analysis} --from wrote no table into {tmp_path}"
    for name in tables:
        found, expected = (tmp_path / name).read_text(encoding="utf-8"), (ROOT / committed / name).read_text("utf-8")
        what = f"{committed}/{name} is not what `poslab analyze {analysis} --from {' '.join(summaries)}` draws now"
        assert_file_close(found, expected, what)


def test_every_docs_script_is_checked() -> None:
    """A new script under docs/ joins the lists above (or this test says which one is missing)."""
    checked = {case.values[0] for case in SCRIPTS}
    present = {str(path.relative_to(ROOT)) for path in ROOT.glob("docs/**/*.py")}
    assert present == checked, f"docs scripts not regenerated by a test: {sorted(present - checked)}"


def test_the_alibi_shape_reads_a_rerun_with_documents_and_its_ratio_claims(tmp_path) -> None:
    """``alibi_shape.py`` on runs that recorded their test documents (the rerun's): ratios to 4 places with their
    interval over seeds and documents, the paper's column found under a label with settings, and the ``@ratio``
    claims of a second summary as a table with verdicts (not yet covered by a committed output)."""
    from tests.analysis.test_length_claims import planted

    runs, out = tmp_path / "runs", tmp_path / "out"
    for seed in range(3):
        planted(runs, "alibi", seed, 2.0, 0.02, -0.01)
        planted(runs, "t5_bias:32x127", seed, 2.2, 0.02, 0.05)
    claims = ["--claim", "alibi<1@ratio", "--claim", "alibi<t5_bias@ratio"]
    assert main(["report", "length", str(runs), *claims, "--output-dir", str(out)]) == 0
    summary = str(out / "length.json")
    done = subprocess.run(
        [sys.executable, "docs/lm_extrapolation/alibi_shape.py", summary, summary],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    t5 = next(line for line in lines if line.startswith("| t5_bias:32x127 |"))
    assert t5.endswith("| 0.985 / 1.013 |")  # the paper's T5 row, under the label with its settings
    ratios = [float(x) for x in re.findall(r"\| (\d\.\d{4}) \[\d\.\d{3}, \d\.\d{3}\]", t5)]  # 4 places, an interval
    assert ratios == pytest.approx([1.05, 1.10, 1.15, 1.20], abs=0.01)  # 1 + 0.05 log2(multiple), planted
    assert "interval over seeds and documents" in done.stdout and "| alibi - 1 |" not in done.stdout
    assert any(line.startswith("| `alibi<1@ratio` |") and line.count("reproduced") == 4 for line in lines)
    assert any(line.startswith("| `alibi<t5_bias@ratio` |") and line.count("reproduced") == 4 for line in lines)
