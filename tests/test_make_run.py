"""Issue 24, item 9: ``make run`` reports on the grid it just ran. The multirun prints its directory first
(``multirun into DIR``, ``poslab.running.hydra_callbacks.MultirunSummary``) and the Makefile's report reads that line,
not the
newest ``logs/multirun/*_extrapolation_grid``: with ``POSLAB_LOG_DIR`` set, or another grid under ``./logs``,
the glob reported on (and wrote its analysis into) another grid.

The Makefile's recipe runs here with a stand-in virtual environment (``VENV=``): its ``python`` prints what
train.py prints and makes the sweep directory, its ``poslab`` records the arguments it was given; the 28 runs
are never trained."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_train

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="no make on this machine")


def fake_venv(tmp_path: Path, train: str) -> Path:
    """A virtual environment whose python runs ``train`` (a shell script body) and whose poslab writes its
    arguments to ``report_args``; ``make install`` sees it as installed."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f"#!/bin/bash\n{train}\n")
    poslab = venv / "bin" / "poslab"
    poslab.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path / "report_args"}\necho "report of $3"\n')
    python.chmod(0o755)
    poslab.chmod(0o755)
    (tmp_path / "pyproject.toml").write_text("")
    (venv / ".installed").write_text("")
    old = (tmp_path / "pyproject.toml").stat().st_mtime - 10
    os.utime(tmp_path / "pyproject.toml", (old, old))  # older than .installed: nothing to install
    return venv


def make(tmp_path: Path, target: str, venv: Path, log_dir: Path | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("POSLAB_LOG_DIR", "MAKEFLAGS", "MAKELEVEL")}
    if log_dir is not None:
        env["POSLAB_LOG_DIR"] = str(log_dir)
    env["TMPDIR"] = str(tmp_path / "tmp")  # where the recipe keeps the multirun's lines while it runs
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return subprocess.run(
        [MAKE, "-f", str(ROOT / "Makefile"), target, f"VENV={venv}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def a_multirun(sweep: str, status: int = 0) -> str:
    """What train.py -m prints (its directory first, then the jobs and the summary), as a shell script."""
    return (
        f'[ "$1 $2 $3" = "train.py -m experiment=extrapolation_grid" ] || exit 9\n'
        f'mkdir -p "{sweep}"\n'
        f'echo "multirun into {sweep}"\n'
        f'echo "[HYDRA] Launching 28 jobs locally"\n'
        f'echo "multirun {sweep}: 28 jobs, 28 success."\n'
        f"exit {status}\n"
    )


@pytest.fixture
def other_grid(tmp_path: Path) -> Path:
    """Another (newer-named) grid under ./logs: what the old glob picked."""
    other = tmp_path / "logs" / "multirun" / "2099-12-31_23-59-59_extrapolation_grid"
    other.mkdir(parents=True)
    return other


@pytest.mark.parametrize("log_dir", ["elsewhere", None])
def test_make_run_reports_on_the_directory_the_multirun_printed(tmp_path, other_grid, log_dir):
    logs = tmp_path / log_dir if log_dir else tmp_path / "logs"
    sweep = logs / "multirun" / "2026-01-02_03-04-05_extrapolation_grid"
    venv = fake_venv(tmp_path, a_multirun(str(sweep)))
    result = make(tmp_path, "run", venv, logs if log_dir else None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "report_args").read_text().splitlines() == [
        "report",
        "grid",
        str(sweep),
        "--reference",
        "where_am_i",
    ]
    assert f"multirun into {sweep}" in result.stdout  # the multirun's own lines still show
    assert f"report of {sweep}" in result.stdout
    assert not list(other_grid.iterdir())  # nothing written into the other grid
    assert not list((tmp_path / "tmp").iterdir())  # nothing left behind


def test_a_directory_with_spaces_is_passed_whole(tmp_path, other_grid):
    sweep = tmp_path / "my logs" / "multirun" / "2026-01-02_03-04-05_extrapolation_grid"
    venv = fake_venv(tmp_path, a_multirun(str(sweep)))
    result = make(tmp_path, "run", venv, tmp_path / "my logs")
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "report_args").read_text().splitlines()[2] == str(sweep)


def test_a_failed_multirun_stops_make_with_its_status_and_no_report(tmp_path, other_grid):
    sweep = tmp_path / "elsewhere" / "multirun" / "2026-01-02_03-04-05_extrapolation_grid"
    venv = fake_venv(tmp_path, a_multirun(str(sweep), status=1))
    result = make(tmp_path, "run", venv, tmp_path / "elsewhere")
    assert result.returncode != 0
    assert not (tmp_path / "report_args").exists()


def test_a_multirun_that_names_no_directory_stops_make_with_one_message(tmp_path, other_grid):
    venv = fake_venv(tmp_path, 'echo "something else"')
    result = make(tmp_path, "run", venv, tmp_path / "elsewhere")
    assert result.returncode != 0
    assert not (tmp_path / "report_args").exists()  # never the glob's grid
    assert "multirun into" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_the_makefile_reads_no_glob_of_the_log_directory():
    text = (ROOT / "Makefile").read_text()
    assert "ls -d logs/multirun" not in text and "*_extrapolation_grid" not in text


@pytest.mark.slow
def test_train_py_prints_the_directory_of_its_multirun_first(tmp_path):
    """The line the Makefile reads: ``multirun into DIR``, on stdout, before any job, naming the sweep directory
    the jobs write into (here under POSLAB_LOG_DIR, no hydra.sweep.dir given)."""
    args = ["-m", "task=lag", "seed=0", "debug=small", "~logger", "threads=1", "trainer.max_steps=1"]
    result = run_train([*args, "~callbacks.progress_bar"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = [
        line.removeprefix("multirun into ") for line in result.stdout.splitlines() if line.startswith("multirun into ")
    ]
    assert len(printed) == 1 and result.stdout.splitlines()[0].startswith("multirun into "), result.stdout[:2000]
    sweep = Path(printed[0])
    assert sweep.parent == tmp_path / "logs" / "multirun"
    assert len(list(sweep.glob("*/results.json"))) == 1
