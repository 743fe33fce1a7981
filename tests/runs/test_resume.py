"""Checkpoints and exact resume: an interrupted run, resumed in a fresh process, ends exactly where an
uninterrupted one does; checkpoints load with weights_only=True and are written atomically."""

from __future__ import annotations

import csv
import io
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from poslab.lightning_modules.rng import rng_states, set_rng_states
from poslab.runs.checkpoints import AtomicCheckpointIO
from tests.conftest import run_train

N = 30  # steps of the whole run; the interrupted run stops at 2N/3 and a fresh process resumes to N
EVERY = 10  # checkpoint interval


def resume_overrides(encoding: str) -> list[str]:
    """A tiny lag run whose schedule (warm-up, cosine over N steps) is the same whether it stops early or not."""
    extra = ["encoding.paragraph_density=0.05"] if encoding == "rand_axial" else []
    return [
        "debug=small",
        f"encoding={encoding}",
        *extra,
        "optimizer.schedule=cosine",
        "optimizer.warmup_steps=5",
        f"optimizer.total_steps={N}",
        f"callbacks.checkpoint.every_n_train_steps={EVERY}",
        "~callbacks.progress_bar",
        "threads=1",
    ]


def check(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, result.stderr[-3000:]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)["state_dict"]


@pytest.mark.slow
@pytest.mark.parametrize("encoding", ["rope", "rand_axial"])  # rand_axial draws from the global RNG every step
def test_interrupted_and_resumed_run_ends_exactly_as_an_uninterrupted_one(encoding, tmp_path):
    full, part = tmp_path / "full", tmp_path / "resumed"
    base = resume_overrides(encoding)
    check(run_train([*base, f"trainer.max_steps={N}", f"hydra.run.dir={full}"], tmp_path))
    check(run_train([*base, f"trainer.max_steps={2 * N // 3}", f"hydra.run.dir={part}"], tmp_path))
    first_part_rows = (part / "csv" / "metrics.csv").read_text().splitlines()
    assert (part / "checkpoints" / "last.ckpt").is_file()
    # a fresh process resumes in the same run directory from its last checkpoint
    resumed = run_train([*base, f"trainer.max_steps={N}", "ckpt_path=last", f"hydra.run.dir={part}"], tmp_path)
    check(resumed)
    assert "Restored all states from the checkpoint" in resumed.stdout + resumed.stderr

    a, b = weights(full), weights(part)
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a), [k for k in a if not torch.equal(a[k], b[k])]
    results_full = json.loads((full / "results.json").read_text())
    results_part = json.loads((part / "results.json").read_text())
    assert results_part["figures"] == results_full["figures"]
    assert results_part["steps"] == results_full["steps"] == N
    # the resumed process trained the last third only, and says so (a cost report times whole trainings only)
    assert results_full["trained_steps"] == N and results_part["trained_steps"] == N - 2 * N // 3

    # the final checkpoints agree too: optimizer moments, schedule, step, RNG states
    last_full = torch.load(full / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    last_part = torch.load(part / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last_full["global_step"] == last_part["global_step"] == N
    for s_full, s_part in zip(
        last_full["optimizer_states"][0]["state"].values(), last_part["optimizer_states"][0]["state"].values()
    ):
        assert all(torch.equal(s_full[k], s_part[k]) for k in s_full)
    assert last_full["lr_schedulers"] == last_part["lr_schedulers"]
    assert torch.equal(last_full["rng_states"]["torch"], last_part["rng_states"]["torch"])

    # periodic checkpoints next to last.ckpt; the log of the first part is kept, not replaced
    assert {p.name for p in (part / "checkpoints").glob("step*.ckpt")} == {"step000020.ckpt", "step000030.ckpt"}
    rows = (part / "csv" / "metrics.csv").read_text().splitlines()
    assert len(rows) > len(first_part_rows) and rows[1 : len(first_part_rows)] == first_part_rows[1:]
    steps = [int(row["step"]) for row in csv.DictReader(rows)]
    assert min(steps) == 0 and max(steps) >= N - 1


@pytest.mark.slow
def test_resume_from_a_checkpoint_file_of_another_run_directory(tmp_path):
    """ckpt_path may name a .ckpt file (or a run directory): the run resumes from it and writes to its own
    directory, leaving the old one as it was."""
    old, new = tmp_path / "old", tmp_path / "new"
    base = resume_overrides("rope")
    check(run_train([*base, f"trainer.max_steps={N}", f"hydra.run.dir={old}"], tmp_path))
    before = {p: p.read_bytes() for p in old.rglob("*") if p.is_file() and ".hydra" not in p.parts}
    step20 = old / "checkpoints" / "step000020.ckpt"
    check(run_train([*base, f"trainer.max_steps={N}", f"ckpt_path={step20}", f"hydra.run.dir={new}"], tmp_path))
    assert {p: p.read_bytes() for p in old.rglob("*") if p.is_file() and ".hydra" not in p.parts} == before
    assert (
        json.loads((new / "results.json").read_text())["figures"]
        == json.loads((old / "results.json").read_text())["figures"]
    )
    assert all(torch.equal(weights(old)[k], v) for k, v in weights(new).items())


def test_rng_states_round_trip_and_load_with_weights_only(tmp_path):
    torch.manual_seed(1)
    np.random.seed(2)
    random.seed(3)
    np.random.standard_normal()  # numpy caches a gaussian: part of its state
    saved = rng_states()
    path = tmp_path / "rng.pt"
    torch.save(saved, path)
    draws = (torch.rand(3), np.random.rand(3), random.random(), np.random.standard_normal())
    torch.manual_seed(99)
    np.random.seed(99)
    random.seed(99)
    set_rng_states(torch.load(path, weights_only=True))
    again = (torch.rand(3), np.random.rand(3), random.random(), np.random.standard_normal())
    assert torch.equal(draws[0], again[0]) and np.array_equal(draws[1], again[1])
    assert draws[2] == again[2] and draws[3] == again[3]


def test_checkpoint_write_failure_leaves_the_previous_checkpoint_and_no_temporary_file(tmp_path, monkeypatch):
    io = AtomicCheckpointIO()
    path = tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"global_step": 1, "w": torch.ones(3)}, path)

    def fail(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"global_step": 2, "w": torch.zeros(3)}, path)
    monkeypatch.undo()
    assert io.load_checkpoint(path)["global_step"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]


def start_checkpoint_writer(path: Path) -> tuple[int, io.TextIOWrapper]:
    """A forked process writing checkpoints to ``path`` in a loop (16 MB each: most of its time is spent
    writing), printing each step once its checkpoint is saved; its pid and the read end of those lines."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer, until it is killed
        try:
            os.close(read_end)
            writer, step = AtomicCheckpointIO(), 0
            while True:
                step += 1
                writer.save_checkpoint({"global_step": step, "w": torch.full((4_000_000,), float(step))}, path)
                os.write(write_end, f"{step}\n".encode())
        finally:
            os._exit(1)
    os.close(write_end)
    return pid, io.TextIOWrapper(io.FileIO(read_end, "r"))


@pytest.mark.slow
def test_sigkill_during_checkpoint_writes_never_leaves_a_corrupt_checkpoint(tmp_path):
    path = tmp_path / "last.ckpt"
    for delay in (0.05, 0.13, 0.29):
        pid, lines = start_checkpoint_writer(path)
        with lines:
            assert lines.readline().strip() == "1"  # one complete checkpoint exists
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        saved = AtomicCheckpointIO().load_checkpoint(path)  # weights_only=True; a torn file would not load
        assert saved["global_step"] >= 1 and bool((saved["w"] == saved["global_step"]).all())
