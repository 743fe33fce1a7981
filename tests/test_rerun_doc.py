"""docs/rerun.md's queue: every ``python train.py -m`` command composes with the current configs, and the number of
runs its comment states is the product of its sweep lists (the recipe's own sweeper lists, each replaced where the
command line gives that setting), so the runbook cannot name a setting or a count that is no longer true."""

from __future__ import annotations

import math
import re
import shlex
import subprocess
from collections import defaultdict
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


def script_commands() -> dict[str, tuple[int, list[list[str]]]]:
    """``sweeps/rerun.sh commands``: each sweep's stated runs and its multiruns' overrides."""
    printed = subprocess.run(
        ["bash", str(ROOT / "sweeps" / "rerun.sh"), "commands"], capture_output=True, text=True, check=True
    ).stdout
    sweeps: dict[str, tuple[int, list[list[str]]]] = defaultdict(lambda: (0, []))
    for line in printed.splitlines():
        sweep, runs, overrides = line.split("\t")
        sweeps[sweep] = (int(runs), [*sweeps[sweep][1], shlex.split(overrides)])
    return dict(sweeps)


def without_sweep_dir(overrides: list[str]) -> list[str]:
    return [o for o in overrides if not o.startswith("hydra.sweep.dir=")]


def test_the_script_runs_the_doc_s_commands_and_as_many_runs_as_it_states():
    """The script is the runbook's executable form: every multirun it gives train.py is one the doc lists (the
    sweep directory aside, which the doc writes with $POSLAB_LOG_DIR), and each sweep's multiruns together run
    as many jobs as the script states (what ``status`` counts against)."""
    documented = [without_sweep_dir(overrides) for overrides, _ in queue()]
    sweeps = script_commands()
    assert {"lm_zoo", "position_zoo_v3", "hrope_causal"} <= set(sweeps)
    for sweep, (runs, multiruns) in sweeps.items():
        for overrides in multiruns:
            assert without_sweep_dir(overrides) in documented or overrides == ["experiment=position_zoo"], sweep
        total = sum(math.prod(len(v) for v in sweep_lists(overrides).values()) for overrides in multiruns)
        assert total == runs, f"{sweep}: the script states {runs} runs, its multiruns run {total}"
