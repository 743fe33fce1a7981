"""docs/rerun.md's queue: every ``python train.py -m`` command composes with the current configs, and the number of
runs its comment states is the product of its sweep lists (the recipe's own sweeper lists, each replaced where the
command line gives that setting), so the runbook cannot name a setting or a count that is no longer true."""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
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


def report_lines(*args: str) -> list[list[str]]:
    """The commands ``sweeps/rerun_reports.py --dry-run`` prints, as argument lists."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "sweeps" / "rerun_reports.py"), "--dry-run", *args],
        capture_output=True, text=True, check=True, cwd=ROOT,
    )  # fmt: skip
    return [shlex.split(line[2:]) for line in done.stdout.splitlines() if line.startswith("$ ")]


def test_the_reports_of_the_whole_rerun_chain_in_order_from_the_runs_in_docs(tmp_path):
    """Every report the doc lists, in order: each summary a command reads was written by an earlier one, and each
    run folder read is one the rerun collects into docs/."""
    commands = report_lines()
    assert [c[2] for c in commands] == ["length", "zoo", "preregistered", "preregistered", "length", "zoo", "length",
                                        "length"]  # fmt: skip
    written: set[str] = set()
    for command in commands:
        reads = [arg for arg in command[3:] if arg.endswith(".json")]
        assert set(reads) <= written, f"{shlex.join(command)} reads a summary no earlier command writes"
        output = command[command.index("--output-dir") + 1]
        written |= {f"{output}/{command[2]}.json"}
        for folder in (arg for arg in command[3:] if arg.endswith("/runs")):
            assert f" {folder.removeprefix('docs/')} " in (ROOT / "sweeps" / "rerun.sh").read_text()  # a sweep's folder


def test_with_out_the_reports_write_nothing_into_docs(tmp_path):
    for command in report_lines("--out", str(tmp_path)):
        for previous, arg in zip(command, command[1:]):
            if previous == "--output-dir" or arg.endswith(".json"):
                assert arg.startswith(str(tmp_path)), shlex.join(command)
        assert all(arg.startswith("docs/") for arg in command[3:] if arg.endswith("/runs"))  # read where they are
        assert "docs/path_directions.md" in command or "--claims" not in command  # a registry is read, not moved


def test_the_reports_are_refused_until_the_rerun_is_whole_in_docs(tmp_path):
    """The script in a checkout whose docs/ holds no run yet (its folders are its own checkout's) refuses, naming
    each sweep's count, and writes nothing."""
    script = tmp_path / "repo" / "sweeps" / "rerun.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(ROOT / "sweeps" / "rerun.sh", script)
    env = {**os.environ, "POSLAB_LOG_DIR": str(tmp_path / "logs")}
    done = subprocess.run(["bash", str(script), "reports"], capture_output=True, text=True, env=env)
    assert done.returncode == 1 and "the rerun is not whole in docs/ (lm_zoo 0 of 260," in done.stderr
    assert "cope_counting_128_v2 0 of 27 runs); give OUT" in done.stderr
    assert sorted(p.name for p in (tmp_path / "repo").iterdir()) == ["sweeps"]


def process_state(pid: int) -> str:
    """The kernel's one-letter state of ``pid`` (``T``: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def settled_state(pid: int, stopped: bool, seconds: float = 20) -> str:
    """``pid``'s state once it is (or is not) ``T``, or as it stands after ``seconds``: ``kill`` returns before the
    target has run to take the signal, so on a loaded machine its state changes a moment later."""
    deadline = time.monotonic() + seconds
    while (process_state(pid) == "T") != stopped and time.monotonic() < deadline:
        time.sleep(0.02)
    return process_state(pid)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc (Linux)")
def test_pause_stops_this_checkout_s_chains_where_they_are_and_resume_continues_them(tmp_path):
    """A chain ``run`` started under setsid (its own process group, led by ``rerun.sh run``) is stopped by ``pause``
    and continued by ``resume``; a chain of another checkout is not touched (the script copied into a checkout of
    its own signals only the chain started there)."""
    repo = tmp_path / "repo"
    (repo / "sweeps").mkdir(parents=True)
    shutil.copy(ROOT / "sweeps" / "rerun.sh", repo / "sweeps" / "rerun.sh")
    elsewhere = tmp_path / "other"
    elsewhere.mkdir()
    fake = ["bash", "-c", 'exec -a "bash sweeps/rerun.sh run lm_zoo" sleep 120']  # a chain's command line
    chain = subprocess.Popen(fake, cwd=repo, start_new_session=True)
    other = subprocess.Popen(fake, cwd=elsewhere, start_new_session=True)
    script = ["bash", str(repo / "sweeps" / "rerun.sh")]
    try:
        deadline = time.monotonic() + 20
        while "rerun.sh run" not in Path(f"/proc/{chain.pid}/cmdline").read_text(errors="replace"):
            assert time.monotonic() < deadline, "the fake chain never started"
            time.sleep(0.05)
        paused = subprocess.run([*script, "pause"], capture_output=True, text=True, check=True)
        assert paused.stdout.strip() == f"rerun.sh: paused 1 chain(s) (process groups {chain.pid})"
        assert settled_state(chain.pid, stopped=True) == "T"
        assert settled_state(other.pid, stopped=True, seconds=1) != "T"  # a moment to show a stop it was sent
        resumed = subprocess.run([*script, "resume"], capture_output=True, text=True, check=True)
        assert resumed.stdout.strip() == f"rerun.sh: resumed 1 chain(s) (process groups {chain.pid})"
        assert settled_state(chain.pid, stopped=False) != "T"
    finally:
        for process in (chain, other):
            process.kill()
            process.wait()
    idle = subprocess.run([*script, "pause"], capture_output=True, text=True, check=True)
    assert idle.stdout.strip() == "rerun.sh: no chain started by 'run' under setsid is running"
