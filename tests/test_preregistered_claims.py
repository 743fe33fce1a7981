"""docs/preregistered_claims.md: every claim in its commands parses, names encodings poslab has, and appears in
its table with the place it is read at; the table and the commands hold the same claims."""

from __future__ import annotations

from pathlib import Path

from poslab.analysis.claims import parse_claim
from poslab.analysis.length_claims import side
from poslab.analysis.preregistered import doc_commands, read_registry

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "preregistered_claims.md").read_text(encoding="utf-8")
ENCODINGS = {p.stem for p in (ROOT / "conf" / "encoding").glob("*.yaml")}


def commands() -> list[list[str]]:
    """The report commands of the doc's code blocks, their continuation lines joined."""
    return doc_commands(DOC)


def flag_value(command: list[str], flag: str) -> str | None:
    return next((value for given, value in zip(command, command[1:]) if given == flag), None)


def test_every_claim_parses_and_names_encodings_poslab_has():
    claims = [arg for command in commands() for flag, arg in zip(command, command[1:]) if flag == "--claim"]
    assert len(claims) >= 20
    for text in claims:
        claim = parse_claim(text)
        for name in (claim.a, claim.b):
            assert side(name)[0].split(":")[0] in ENCODINGS, f"{text}: {name} is no encoding of conf/encoding/"


def test_the_table_and_the_commands_hold_the_same_claims_each_read_at_one_place():
    by_report = {command[2]: {a for f, a in zip(command, command[1:]) if f == "--claim"} for command in commands()}
    assert set(by_report) == {"length", "zoo", "preregistered"} and not by_report["preregistered"]
    tabled = read_registry(DOC)  # refuses a place without a multiple
    assert len({c.claim for c in tabled}) == len(tabled)  # each claim read at one place
    assert {c.claim for c in tabled if c.task is None} == by_report["length"]
    assert {c.claim for c in tabled if c.task is not None} == by_report["zoo"]


def test_the_path_directions_table_is_pre_registered_claims_unchanged():
    """docs/path_directions.md (issue 38's table against the PaTH paper) adds, moves or rewords no claim: each of
    its rows is a row of the registry, with the same place and source."""
    registered = {(c.claim, c.task, c.multiple, c.source) for c in read_registry(DOC)}
    subset = read_registry((ROOT / "docs" / "path_directions.md").read_text(encoding="utf-8"))
    assert len(subset) == 8 and {(c.claim, c.task, c.multiple, c.source) for c in subset} <= registered
    assert {c.claim for c in subset} >= {"path<rope", "path<forget_gate", "forget_gate<rope", "path>rope"}


def test_the_three_commands_run_as_written_each_summary_read_where_it_is_written():
    """The length and zoo reports write their summaries where the verdict table's command reads them; the path
    directions' command reads the same two."""
    written = {}
    for command in commands():
        if command[2] in ("length", "zoo"):
            assert command[3].endswith("/runs"), command  # the committed runs of the rerun
            written[command[2]] = f"{flag_value(command, '--output-dir')}/{command[2]}.json"
    last = commands()[-1]
    assert last[:3] == ["poslab", "report", "preregistered"] and last[3:5] == [written["length"], written["zoo"]]
    for name in ("lm_zoo_rerun/runs", "position_zoo/v3/runs"):
        assert (ROOT / "docs" / name).is_dir()
    directions = doc_commands((ROOT / "docs" / "path_directions.md").read_text(encoding="utf-8"))
    assert [command[3:5] for command in directions] == [last[3:5]]
