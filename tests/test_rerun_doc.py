"""docs/rerun.md's queue: every ``python train.py -m`` command composes with the current configs, and the number of
runs its comment states is the product of its sweep lists (the recipe's own sweeper lists, each replaced where the
command line gives that setting), so the runbook cannot name a setting or a count that is no longer true."""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path

import pytest

from poslab.running.compose import compose_config

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "rerun.md").read_text(encoding="utf-8")


def queue() -> list[tuple[list[str], int]]:
    """(the overrides, the runs its comment states) of each multirun command with a stated count."""
    text = DOC.replace("\\\n", " ")
    found = []
    for line in text.splitlines():
        match = re.search(r"python train\.py -m (.*?)\s+#[^#]*?(\d+) runs", line)
        if match:
            found.append((shlex.split(match.group(1)), int(match.group(2))))
    return found


def choices(value: str) -> list[str]:
    """A command-line value's sweep: ``a,b`` two jobs; a list (``[128,256]``) one value, not a sweep."""
    return [value] if value.startswith("[") else value.split(",")


def sweep_lists(overrides: list[str]) -> dict[str, list[str]]:
    """Every swept setting's values: the recipe's ``hydra.sweeper.params``, then the command line's over them."""
    first = [f"{o.split('=', 1)[0]}={choices(o.split('=', 1)[1])[0]}" for o in overrides if not o.startswith("hydra.")]
    cfg = compose_config(first, hydra_node=True)
    lists = {key: str(value).split(",") for key, value in (cfg.hydra.sweeper.params or {}).items()}
    for override in overrides:
        key, value = override.split("=", 1)
        if not key.startswith("hydra."):
            lists[key] = choices(value)
    return lists


def test_the_queue_is_listed():
    assert len(queue()) >= 5


@pytest.mark.parametrize(("overrides", "runs"), queue(), ids=[" ".join(o)[:60] for o, _ in queue()])
def test_each_command_composes_and_runs_as_many_jobs_as_it_says(overrides, runs):
    lists = sweep_lists(overrides)
    assert math.prod(len(values) for values in lists.values()) == runs, f"{' '.join(overrides)}: {lists}"
