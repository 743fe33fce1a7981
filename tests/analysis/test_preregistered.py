"""``poslab report preregistered``: each registered claim read at its one place from the summaries the length and
zoo reports wrote, never at another multiple; claims the summaries lack, encodings without runs and places not
scored are rows that say so; bad registries and bad summaries are refused with what is expected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poslab.analysis.preregistered import preregistered_markdown, preregistered_summary, read_registry
from poslab.cli import main
from poslab.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
REGISTRY = """# claims
| claim | read at | source of the direction |
|---|---|---|
| `path<rope` | 4x | the PaTH paper |
| `fire<rope` | 4x | the FIRE paper |
| `xpos<rope` | 4x | the xPos paper |
| `path<rope@read_error_pct_ffl0.98` | flip_flop, 2x | the PaTH paper, sparse OOD |
| `path>rope` | state_tracking, 1x | the PaTH paper, A5 |
"""


def cell(mean, low, high, n, verdict):
    return {"mean": mean, "low": low, "high": high, "n": n, "verdict": verdict}


def summaries(tmp_path):
    # path<rope: reproduced at 4x, contradicted at 2x (a kinder-looking multiple the table must not read instead)
    path = {
        "claim": "path<rope",
        "missing": [],
        "by_multiple": {"2x": cell(0.2, 0.1, 0.3, 5, "contradicted"), "4x": cell(-0.5, -0.7, -0.3, 5, "reproduced")},
    }
    fire = {"claim": "fire<rope", "missing": ["fire"], "by_multiple": {}}
    length = {
        "report": "length",
        "corpora": {
            "webtext": {"claims": [path, fire]},
            "python_code": {"claims": [{**path, "by_multiple": {"4x": cell(-0.1, -0.3, 0.1, 5, "not resolved")}}]},
        },
    }
    zoo = {
        "tasks": {},
        "claims": [
            {
                "claim": "path<rope@read_error_pct_ffl0.98",
                "missing": [],
                "tasks": {"flip_flop": {"2x": cell(-20.0, -25.0, -15.0, 5, "reproduced")}},
            },
            {"claim": "path>rope", "missing": [], "tasks": {"copy": {"1x": cell(0.0, -0.1, 0.1, 5, "not resolved")}}},
        ],
    }
    (tmp_path / "length.json").write_text(json.dumps(length))
    (tmp_path / "zoo.json").write_text(json.dumps(zoo))
    (tmp_path / "claims.md").write_text(REGISTRY)
    return tmp_path / "length.json", tmp_path / "zoo.json", tmp_path / "claims.md"


def test_each_claim_is_read_at_its_registered_place_on_every_corpus(tmp_path):
    rows = preregistered_summary(*summaries(tmp_path))["rows"]
    by = {(r["claim"], r["place"]): r for r in rows}
    assert by[("path<rope", "webtext")]["verdict"] == "reproduced" and by[("path<rope", "webtext")]["mean"] == -0.5
    assert by[("path<rope", "python_code")]["verdict"] == "not resolved"  # each corpus its own verdict
    assert by[("fire<rope", "webtext")]["verdict"] == "not testable"
    assert by[("fire<rope", "webtext")]["why"] == "no runs of fire"
    # that corpus's report lacks the claim: no verdict at all (docs/verdicts.md has no "not computed"), a note
    assert by[("fire<rope", "python_code")]["verdict"] is None
    assert by[("xpos<rope", "webtext")]["verdict"] is None
    assert by[("xpos<rope", "webtext")]["why"] == "not computed: the report was run without this --claim"
    assert by[("path<rope@read_error_pct_ffl0.98", "flip_flop")]["verdict"] == "reproduced"
    # state tracking was not scored (only copy): not testable there, not read at another task
    assert by[("path>rope", "state_tracking")]["verdict"] == "not testable"
    assert by[("path>rope", "state_tracking")]["why"] == "not scored at this place"
    assert len(rows) == 3 * 2 + 2


def test_the_command_writes_the_table_csv_summary_and_figure(tmp_path, capsys):
    length, zoo, registry = summaries(tmp_path)
    out = tmp_path / "out"
    assert main(["report", "preregistered", str(length), str(zoo), "--claims", str(registry),
                 "--output-dir", str(out)]) == 0  # fmt: skip
    text = (out / "preregistered.md").read_text()
    assert "| `path<rope` | webtext, 4x | -0.500 [-0.70, -0.30] | 5 | reproduced | the PaTH paper |" in text
    assert "reproduced 2" in text and (out / "preregistered.png").stat().st_size > 0
    assert json.loads((out / "preregistered.json").read_text())["rows"][0]["claim"] == "path<rope"


def test_a_claim_the_report_was_run_without_is_tallied_apart_from_the_verdicts(tmp_path):
    text = preregistered_markdown(preregistered_summary(*summaries(tmp_path)))
    verdicts = text.split("Verdicts as docs/verdicts.md: ")[1].split(".")[0]
    assert verdicts == "not resolved 1, not testable 2, reproduced 2"  # docs/verdicts.md's categories only
    assert "No verdict (not computed: the report was run without the claim): 3 rows." in text
    line = next(line for line in text.splitlines() if line.startswith("| `xpos<rope` | python_code"))
    assert line == (
        "| `xpos<rope` | python_code, 4x | not computed: the report was run without this --claim | 0 |  | "
        "the xPos paper |"
    )


def test_the_forest_plot_gives_each_unit_its_own_panel_and_its_legend_every_verdict_drawn(tmp_path):
    """Read-error percentage points (-20) and accuracy differences (0 to 1) on one axis drew the accuracy claims as
    dots at 0; each unit has its panel. A not-testable row with a difference is drawn, in black, with its interval."""
    from poslab.analysis.plotting import plt
    from poslab.analysis.preregistered_figure import preregistered_figure

    summary = preregistered_summary(*summaries(tmp_path))
    state = next(r for r in summary["rows"] if r["claim"] == "path>rope")
    state |= {"mean": 0.01, "low": -0.2, "high": 0.22, "n": 5, "verdict": "not testable", "why": "both at the floor"}
    fig = preregistered_figure(summary)
    titles = [ax.get_title(loc="left") for ax in fig.axes]
    assert titles == [
        "language models: A - B bits/byte",
        "synthetic tasks: A - B read error (percentage points)",
        "synthetic tasks: A - B accuracy (0 to 1)",
    ]
    accuracy = fig.axes[2]
    drawn = [x for line in accuracy.get_lines() for x in line.get_xdata() if line.get_color() == "black"]
    assert min(drawn) == pytest.approx(-0.2) and max(drawn) == pytest.approx(0.22)  # its interval, not a dot
    assert accuracy.get_xlim()[0] > -1 and accuracy.get_xlim()[1] < 1  # not stretched to -25 points
    labels = [text.get_text() for text in fig.legends[0].get_texts()]
    assert labels == ["reproduced", "contradicted", "not resolved", "not testable"]
    plt.close(fig)


def test_a_place_without_a_multiple_and_a_wrong_summary_are_refused(tmp_path, capsys):
    with pytest.raises(UsageError, match=r"read at 'late'; write a multiple \(4x\)"):
        read_registry("| `path<rope` | late | the paper |\n")
    length, zoo, registry = summaries(tmp_path)
    assert main(["report", "preregistered", str(zoo), str(length), "--claims", str(registry)]) != 0
    said = capsys.readouterr().err
    assert "preregistered's LENGTH_JSON" in said and "holds no length summary" in said
    assert "give a length.json `poslab report length ... --claim ...` wrote" in said


def test_the_committed_registry_reads_as_twenty_language_and_seven_task_claims():
    claims = read_registry((ROOT / "docs" / "preregistered_claims.md").read_text(encoding="utf-8"))
    assert sum(c.task is None for c in claims) == 20 and sum(c.task is not None for c in claims) == 7
    assert {c.task for c in claims} - {None} == {"flip_flop", "state_tracking", "associative_recall", "copy"}
