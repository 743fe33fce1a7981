"""A 2-process DDP run on the CPU (trainer=ddp_cpu) ends with the figures of a 1-process run on the same
global batches and writes one set of outputs."""

from __future__ import annotations

import json
import os

import pytest
import torch

from tests.conftest import run_train

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
STEPS = 20


def one_and_two_processes(args: list[str], tmp_path) -> tuple:
    """``train.py args`` once in one process and once with trainer=ddp_cpu; their run directories and the
    DDP run's CompletedProcess."""
    single, ddp = tmp_path / "single", tmp_path / "ddp"
    one = run_train([*args, f"hydra.run.dir={single}"], tmp_path)
    assert one.returncode == 0, one.stderr[-3000:]
    two = run_train([*args, "trainer=ddp_cpu", f"hydra.run.dir={ddp}"], tmp_path, timeout=600)
    assert two.returncode == 0, two.stderr[-3000:]
    return single, ddp, two


@pytest.mark.slow
@pytest.mark.skipif(CORES < 2, reason="trainer=ddp_cpu runs 2 processes: needs 2 CPU cores")
def test_two_process_ddp_cpu_run_matches_one_process_run_and_writes_one_results_file(tmp_path):
    """lag: every row of a batch has the same number of scored positions, so the mean of the two ranks' mean
    gradients is the global batch's mean gradient; only summation order differs. rand_axial: its random paragraph
    boundaries are a function of (seed, step, global row), so both runs train on the same boundaries."""
    base = ["debug=small", "encoding=rand_axial", "encoding.paragraph_density=0.2", f"trainer.max_steps={STEPS}"]
    base += ["~callbacks.progress_bar", "threads=1"]
    single, ddp, two = one_and_two_processes(base, tmp_path)
    assert "Starting with 2 processes" in two.stdout + two.stderr

    a = json.loads((single / "results.json").read_text())
    b = json.loads((ddp / "results.json").read_text())
    assert b["steps"] == a["steps"] == STEPS
    assert b["config"]["trainer"]["devices"] == 2 and b["config"]["trainer"]["strategy"] == "ddp"
    assert a["figures"].keys() == b["figures"].keys()
    for length, row in a["figures"].items():
        assert row.keys() == b["figures"][length].keys()
        for metric, value in row.items():
            assert abs(value - b["figures"][length][metric]) <= 1e-6, (length, metric, value, b["figures"][length])

    wa = torch.load(single / "model.pt", weights_only=True)["state_dict"]
    wb = torch.load(ddp / "model.pt", weights_only=True)["state_dict"]
    assert all(torch.allclose(wa[k], wb[k], rtol=1e-4, atol=1e-4) for k in wa)

    # one rank writes: one results.json, one model.pt, one metrics log, one set of checkpoints, anywhere
    for name in ("results.json", "model.pt", "metrics.csv", "last.ckpt", "failed.json"):
        found = [p for p in tmp_path.rglob(name) if ddp in p.parents]
        assert len(found) == (0 if name == "failed.json" else 1), (name, found)
    assert not list(tmp_path.glob("logs/**/results.json"))  # the other rank did not write a run directory


@pytest.mark.slow
@pytest.mark.skipif(CORES < 2, reason="trainer=ddp_cpu runs 2 processes: needs 2 CPU cores")
def test_flip_flop_mixes_under_ddp_are_the_batches_one_process_draws(tmp_path):
    """Each rank's mix batch b is the run's batch b x 2 + rank: the two ranks draw different batches, together one
    process's two (before, both drew batch 0). Weights unchanged (lr 0): only the evaluation is compared."""
    base = ["debug=small", "task=flip_flop", "task.eval_batch_size=8", "task.eval_lengths=[32,64]",
            "trainer.max_steps=2", "optimizer.lr=0.0", "~callbacks.progress_bar", "~logger", "threads=1"]  # fmt: skip
    single, ddp, _ = one_and_two_processes(base, tmp_path)
    a = json.loads((single / "results.json").read_text())["figures"]
    b = json.loads((ddp / "results.json").read_text())["figures"]
    mixes = [(n, key) for n, row in a.items() if n.isdigit() for key in row if key.startswith("read_error_pct_ffl")]
    assert len(mixes) == 6  # two mixes at 32, and at 64 each also past the training length
    for length, key in mixes:
        assert abs(a[length][key] - b[length][key]) <= 1e-6, (length, key, a[length][key], b[length][key])


@pytest.mark.slow
@pytest.mark.skipif(CORES < 2, reason="trainer=ddp_cpu runs 2 processes: needs 2 CPU cores")
def test_language_model_validation_under_ddp_counts_every_window_once(tmp_path):
    """3 validation windows on 2 ranks: a DistributedSampler would pad rank 1 with a repeated window and the
    reduced loss would differ from one process's; with disjoint shards it is the same (weights unchanged:
    lr 0, so only the evaluation is compared)."""
    from tests.datamodules.test_corpora import write_jsonl

    data = tmp_path / "data"
    write_jsonl(data / "web" / "docs.jsonl", [f"Document {i} has some words, {i * 7} of them." * 4 for i in range(40)])
    base = [
        "corpus=openwebtext",
        f"paths.data_dir={data}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "corpus.groups.main.local=[{pattern: 'web/*.jsonl'}]",
        "corpus.validation_fraction=0.25",
        "model=tiny",
        "encoding=rope",
        "task.context_length=32",
        "task.batch_size=4",
        "task.val_windows=3",
        "task.eval_batch_size=1",
        "task.val_every_n_steps=2",
        "trainer.max_steps=2",
        "optimizer.lr=0.0",
        "~callbacks.progress_bar",
        "~logger",
        "threads=1",
    ]
    single, ddp, two = one_and_two_processes(base, tmp_path)
    a = json.loads((single / "results.json").read_text())["figures"]
    b = json.loads((ddp / "results.json").read_text())["figures"]
    assert abs(a["val_loss"] - b["val_loss"]) <= 1e-6 and abs(a["val_bpb"] - b["val_bpb"]) <= 1e-6, (a, b)
    # the per-document sums are gathered from both ranks (a rank with no batch at a length joins too): the same
    # documents, tokens and figures on the selection and test splits as one process's (issue 37)
    c = json.loads((single / "results.json").read_text())["held_out"]
    d = json.loads((ddp / "results.json").read_text())["held_out"]
    for length, row in c["lengths"].items():
        for part in ("selection", "test"):
            one, two = row[part]["plain"], d["lengths"][length][part]["plain"]
            assert (one["tokens"], one["documents"]) == (two["tokens"], two["documents"]) and one["tokens"] > 0
            assert abs(one["loss"] - two["loss"]) <= 1e-6, (length, part, one, two)
    assert c["documents"]["main"]["by_length"]["32"]["tokens"] == d["documents"]["main"]["by_length"]["32"]["tokens"]
    # the test in two rounds: every rank takes the same choice on the selection documents, then scores it on test
    assert c["test_ways"] == d["test_ways"] and c["chosen"]["way"] == d["chosen"]["way"]
    for length, figure in c["chosen"]["test"].items():
        other = d["chosen"]["test"][length]
        assert figure["tokens"] == other["tokens"] > 0 and abs(figure["loss"] - other["loss"]) <= 1e-6


def saved_rounds(run_dir, ranks: int) -> list[tuple[list, int]] | None:
    """(rounds done, batches scored) of each rank's saved evaluation, or None while a rank has none readable."""
    found = []
    for rank in range(ranks):
        try:
            state = torch.load(run_dir / "checkpoints" / f"evaluation-rank{rank}.pt", weights_only=True)
        except (FileNotFoundError, EOFError, RuntimeError):
            return None
        found.append((state["rounds_done"], state["scored"]))
    return found


@pytest.mark.slow
@pytest.mark.skipif(CORES < 2, reason="trainer=ddp_cpu runs 2 processes: needs 2 CPU cores")
def test_a_ddp_run_killed_in_its_test_resumes_it_on_every_rank(tmp_path):
    """Both ranks save their own sums; the run SIGKILLed (both processes) once both have finished the selection
    round and scored test batches, and started again, resumes on both ranks and ends with the figures of a DDP
    run never stopped (poslab.running.evaluation_checkpoint)."""
    import signal
    import time

    from tests.close_text import assert_json_close
    from tests.conftest import start_train
    from tests.datamodules.test_corpora import write_jsonl

    data = tmp_path / "data"
    texts = [f"Document {i} has some words, {i * 7} of them, and more words after." * 12 for i in range(160)]
    write_jsonl(data / "web" / "docs.jsonl", texts)
    base = [
        "corpus=openwebtext", f"paths.data_dir={data}", f"paths.cache_dir={tmp_path / 'cache'}",
        "corpus.groups.main.local=[{pattern: 'web/*.jsonl'}]", "corpus.validation_fraction=0.25", "model=tiny",
        "encoding=rope", "task.context_length=32", "task.batch_size=4", "task.eval_batch_size=1",
        "task.passkey.enabled=false", "trainer.max_steps=2", "~callbacks.progress_bar", "~logger", "threads=1",
        "callbacks.evaluation_checkpoint.every_seconds=0", "trainer=ddp_cpu", "ckpt_path=auto",
    ]  # fmt: skip
    whole, stopped = tmp_path / "whole", tmp_path / "stopped"
    done = run_train([*base, f"hydra.run.dir={whole}"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    console = tmp_path / "console.txt"
    process = start_train([*base, f"hydra.run.dir={stopped}"], tmp_path, console)
    deadline = time.monotonic() + 300
    while not ((found := saved_rounds(stopped, 2)) and all(r == ["selection"] and n >= 2 for r, n in found)):
        assert process.poll() is None, "the run ended before it was killed:\n" + console.read_text()[-3000:]
        assert time.monotonic() < deadline, console.read_text()[-3000:]
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)  # the run and the rank it started: its own process group
    process.wait(60)

    resumed = run_train([*base, f"hydra.run.dir={stopped}"], tmp_path, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    output = resumed.stdout + resumed.stderr
    assert output.count("test: resuming the evaluation an earlier process of this run saved") == 2  # each rank
    after = json.loads((stopped / "results.json").read_text())
    before = json.loads((whole / "results.json").read_text())
    assert after["test_resumed"]["rounds_done"] == ["selection"]
    assert_json_close(after["figures"], before["figures"], "figures")
    assert_json_close(after["held_out"], before["held_out"], "held_out")
    assert not list((stopped / "checkpoints").glob("evaluation*.pt"))
