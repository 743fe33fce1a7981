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
