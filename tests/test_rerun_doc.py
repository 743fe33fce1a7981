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


def planted_seeds(log_dir: Path, sweep: str, finished: dict[int, int]) -> str:
    """``sweeps/rerun.sh seeds SWEEP`` over a log directory with ``finished[seed]`` finished runs of each seed (and,
    for the lm_zoo, a finished run of its absolute arms, which another sweep owns, in every seed)."""
    directory = log_dir / "multirun" / sweep
    name = "encoding-e{i}_experiment-position_zoo_seed-{seed}_task-lag"
    if sweep == "lm_zoo":
        name = "corpus-c_encoding-e{i}_experiment-lm_zoo_seed-{seed}"
        for seed in range(5):  # lm_zoo_absolute's runs in the same docs folder: never counted for the lm_zoo
            (directory / f"corpus-c_encoding-learned_experiment-lm_zoo_seed-{seed}").mkdir(parents=True)
            (directory / f"corpus-c_encoding-learned_experiment-lm_zoo_seed-{seed}/results.json").write_text("{}")
    for seed, count in finished.items():
        for i in range(count + 1):  # one more folder, unfinished (a checkpoint, no results.json)
            folder = directory / name.format(i=i, seed=seed)
            folder.mkdir(parents=True, exist_ok=True)
            if i < count:
                (folder / "results.json").write_text("{}")
    env = {"PATH": "/usr/bin:/bin", "POSLAB_LOG_DIR": str(log_dir)}
    script = ROOT / "sweeps" / "rerun.sh"
    return subprocess.run(["bash", str(script), "seeds", sweep], capture_output=True, text=True, check=True,
                          env=env).stdout.strip()  # fmt: skip


@pytest.mark.parametrize(
    ("sweep", "finished", "expected"),
    [
        ("position_zoo_v3", {}, ""),  # nothing finished: the command as documented
        ("position_zoo_v3", {0: 196, 1: 195, 2: 7}, "seed=1,2,3,4"),  # one run short: seed 1 still runs
        ("position_zoo_v3", {0: 196, 1: 196, 3: 196}, "seed=2,4"),
        ("position_zoo_v3", dict.fromkeys(range(5), 196), "none"),
        ("lm_zoo", {0: 52, 1: 51}, "seed=1,2,3,4"),
        ("lm_zoo", dict.fromkeys(range(5), 52), "none"),
        ("hrope_causal", {0: 12}, ""),  # not a seeded sweep: its command names its seeds
    ],
)
def test_run_leaves_out_the_seeds_finished_in_the_log_directory(tmp_path, sweep, finished, expected):
    assert planted_seeds(tmp_path, sweep, finished) == expected


def test_a_seed_override_keeps_the_sweep_seed_by_seed_and_counts_the_seeds_left():
    from poslab.running.precheck import job_overrides

    jobs = job_overrides(["experiment=position_zoo", "seed=2,4"], multirun=True)
    assert len(jobs) == 2 * 980 // 5
    assert [job[0] for job in jobs[: 980 // 5]] == ["seed=2"] * (980 // 5)  # seed first, as the sweeper lists it
