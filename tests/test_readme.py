"""The front page and the docs' index cannot go stale (issue 39, item 1).

README.md is short: the two commands first, every number it states checked here against the code, every link
leading to a file. docs/README.md lists every doc once. The docs that list what the code registers (encodings,
config options, sweep sizes) name all of it.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from poslab.encodings import ENCODINGS
from tests.conftest import CONF, ROOT

README = ROOT / "README.md"
DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
MAX_LINES = 150
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
NUMBER = re.compile(r"(?<![\w/.^\-])\d+(?:,\d{3})*(?:\.\d+)?(?![\d^_/])")  # 28, 2,015, 1.5, 4x (not v3, 2^7)
YEARS = {"2025"}  # "the 2025 data-dependent methods": a name, not a count


def readme() -> str:
    return README.read_text(encoding="utf-8")


def commands(text: str) -> list[str]:
    """The indented command lines before the first paragraph of prose."""
    lines = text.splitlines()
    found = []
    for line in lines[1:]:
        if line.startswith("    "):
            found.append(line.split("#", 1)[0].strip())
        elif line.strip() and found:
            break
    return found


def grid_runs() -> int:
    """The runs of `make run`: the product of experiment=extrapolation_grid's multirun values."""
    params = yaml.safe_load((CONF / "experiment" / "extrapolation_grid.yaml").read_text())["hydra"]["sweeper"]["params"]
    return math.prod(len(str(values).split(",")) for values in params.values())


def stated_numbers() -> dict[str, int]:
    """Each number the front page states, by the phrase it sits in, with its value from the code."""
    text = readme()
    checks = {
        r"\((\d+) runs, no download\)": grid_runs(),
        r"Its (\d+) position encodings": len(ENCODINGS),
        r"its (\d+) recipes": len(list((CONF / "experiment").glob("*.yaml"))),
    }
    stated = {}
    for phrase, value in checks.items():
        match = re.search(phrase, text)
        assert match, f"README.md no longer says {phrase!r}: drop its check here, or say it again"
        stated[match.group(1)] = value
        assert int(match.group(1)) == value, f"README.md says {match.group(0)!r}; the code has {value}"
    return stated


def test_the_front_page_is_short():
    assert len(readme().splitlines()) <= MAX_LINES


def test_the_two_commands_come_first_and_ci_runs_the_readmes_test_command():
    assert commands(readme()) == ["make run", "make test"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert "make test" in [line.strip() for line in ci], ".ci/run must run the README's test command"


def test_every_number_on_the_front_page_is_checked_against_the_code():
    checked = set(stated_numbers())
    prose = re.sub(r"\S+=\S+", "", re.sub(LINK, "", readme()))  # link targets are paths, seed=0,1 an argument
    found = set(NUMBER.findall(prose))
    unchecked = found - checked - YEARS
    assert not unchecked, f"README.md states {sorted(unchecked)}: check each in stated_numbers, or drop it"


def test_the_number_pattern_finds_counts_and_skips_names():
    found = NUMBER.findall("28 runs, 2,015 tests, 1.5 h, position_zoo_v3, 2^7, L2048, 4x, see(22)")
    assert found == ["28", "2,015", "1.5", "4", "22"]


def relative_links(path: Path) -> list[str]:
    targets = LINK.findall(path.read_text(encoding="utf-8"))
    return [t for t in targets if not re.match(r"[a-z]+:|#", t)]


@pytest.mark.parametrize(
    "path", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: str(p.relative_to(ROOT)) if p else ""
)
def test_every_relative_link_leads_to_a_file(path):
    missing = [t for t in relative_links(path) if not (path.parent / t.split("#")[0]).exists()]
    assert not missing, f"{path.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_front_page_has_a_figure_that_exists():
    images = [t for t in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", readme())]
    assert len(images) == 1 and images[0].endswith(".png") and (ROOT / images[0]).is_file()


def test_the_index_lists_every_doc_once():
    linked = [t.split("#")[0] for t in relative_links(INDEX) if "/" not in t and t.endswith(".md")]
    docs = sorted(p.name for p in DOCS.glob("*.md") if p.name != "README.md")
    twice = sorted({t for t in linked if linked.count(t) > 1})
    assert not twice, f"docs/README.md lists {twice} more than once"
    assert sorted(linked) == docs, f"docs/README.md misses {sorted(set(docs) - set(linked))}"


def test_the_front_pages_doc_table_links_the_index():
    assert "(docs/README.md)" in readme()


def test_every_registered_encoding_has_a_row_in_the_encodings_doc():
    rows = [line for line in (DOCS / "encodings.md").read_text().splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(\w+)`", row.split(" | ")[0])}
    assert set(ENCODINGS) <= named, f"docs/encodings.md has no row for {sorted(set(ENCODINGS) - named)}"


GROUPS = ["task", "corpus", "model", "optimizer", "trainer", "logger", "callbacks", "scheme", "experiment"]
GROUPS += ["recipe", "debug", "hydra/launcher"]


@pytest.mark.parametrize("group", GROUPS)
def test_the_configuration_doc_names_every_option_of_each_group(group):
    rows = [row for row in (DOCS / "configuration.md").read_text().splitlines() if row.startswith(f"| `{group}` |")]
    assert len(rows) == 1, f"docs/configuration.md has {len(rows)} rows for the group {group}"
    named = set(re.findall(r"`(\w+)`", rows[0].split(" | ")[1]))
    options = {p.stem for p in (CONF / group).glob("*.yaml")}
    assert options and options <= named, f"docs/configuration.md's {group} row misses {sorted(options - named)}"
