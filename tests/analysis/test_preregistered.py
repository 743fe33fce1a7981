"""``poslab report preregistered``: each registered claim read at its one place from the summaries the length and
zoo reports wrote, never at another multiple; claims the summaries lack, encodings without runs and places not
scored are rows that say so; bad registries and bad summaries are refused with what is expected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from poslab.analysis.preregistered import preregistered_summary, read_registry
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
    assert by[("fire<rope", "python_code")]["verdict"] == "not computed"  # that corpus's report lacks the claim
    assert by[("xpos<rope", "webtext")]["verdict"] == "not computed"
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
