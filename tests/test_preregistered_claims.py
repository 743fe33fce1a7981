"""docs/preregistered_claims.md: every claim in its commands parses, names encodings poslab has, and appears in
its table with the place it is read at; the table and the commands hold the same claims."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from poslab.analysis.claims import parse_claim
from poslab.analysis.length_claims import side
from poslab.analysis.preregistered import read_registry

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "preregistered_claims.md").read_text(encoding="utf-8")
ENCODINGS = {p.stem for p in (ROOT / "conf" / "encoding").glob("*.yaml")}


def commands() -> list[list[str]]:
    """The report commands of the doc's code blocks, their continuation lines joined."""
    blocks = re.findall(r"\n    (poslab report .*?)(?:\n\n|\Z)", DOC, re.S)
    return [shlex.split(block.replace("\\\n", " ")) for block in blocks]


def test_every_claim_parses_and_names_encodings_poslab_has():
    claims = [arg for command in commands() for flag, arg in zip(command, command[1:]) if flag == "--claim"]
    assert len(claims) >= 20
    for text in claims:
        claim = parse_claim(text)
        for name in (claim.a, claim.b):
            assert side(name)[0].split(":")[0] in ENCODINGS, f"{text}: {name} is no encoding of conf/encoding/"


def test_the_table_and_the_commands_hold_the_same_claims_each_read_at_one_place():
    by_report = {command[2]: {a for f, a in zip(command, command[1:]) if f == "--claim"} for command in commands()}
    assert set(by_report) == {"length", "zoo"}
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
