"""Kill a training run with SIGKILL, resume it with ckpt_path=last, and compare with an uninterrupted run.

    python benchmarks/kill_resume.py [--steps 300] [--every 100] [--kill-at 150] [--encoding rand_axial]
    python benchmarks/kill_resume.py --quick                  # 60 steps, a checkpoint every 20, killed at 30
    python benchmarks/kill_resume.py --kill-while-writing     # SIGKILL as soon as a checkpoint write starts
    POSLAB_DATA_DIR=../shared/corpora python benchmarks/kill_resume.py --byte-model --encoding rope \
        --steps 60 --every 20 --kill-at 30                     # the byte model (6.4M) on wiki_en_zh

Runs ``train.py`` three times on a tiny synthetic config, each a fresh process: uninterrupted for
``--steps`` steps; the same run killed with SIGKILL once its progress bar passes ``--kill-at`` (or, with
``--kill-while-writing``, the moment a checkpoint's temporary file appears); and the killed run resumed in
its own directory with ``ckpt_path=last``. Prints the step it was killed at, the step of its last
checkpoint, the steps lost, whether everything written before the kill is still there, and whether the
resumed run's final weights and figures equal the uninterrupted run's. Figures are in docs/resume.md.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
PROGRESS = re.compile(r"\|\s*(\d+)/\d+ \[")


def overrides(args: argparse.Namespace) -> list[str]:
    density = ["encoding.paragraph_density=0.05"] if args.encoding in ("rand_axial", "period_axial") else []
    if args.byte_model:  # the increments write-up's byte model on its corpus (POSLAB_DATA_DIR), CPU-sized batches
        task = [
            "experiment=increments_rope",
            "trainer=cpu",
            "task.batch_size=4",
            "task.context_length=128",
            f"task.val_every_n_steps={args.steps}",
            "task.val_windows=8",
            "threads=2",
        ]
    else:
        task = ["task=lag", "debug=fast", "threads=1"]
    return [
        *task,
        f"encoding={args.encoding}",
        *density,
        "optimizer.schedule=cosine",
        "optimizer.warmup_steps=10",
        f"optimizer.total_steps={args.steps}",
        f"trainer.max_steps={args.steps}",
        f"callbacks.checkpoint.every_n_train_steps={args.every}",
        "callbacks.progress_bar.refresh_rate=1",
        "trainer.log_every_n_steps=1",
    ]


def train(extra: list[str], run_dir: Path, args: argparse.Namespace) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline", "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, str(ROOT / "train.py"), *overrides(args), *extra, f"hydra.run.dir={run_dir}"]
    # Lightning's progress bar writes to stdout; the step count is read from it
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(process: subprocess.Popen) -> None:
    err, _ = process.communicate()
    if process.returncode != 0:
        sys.exit(f"train.py failed ({process.returncode}):\n{err.decode(errors='replace')[-3000:]}")


def files(run_dir: Path) -> dict[str, bytes]:
    """Everything in a run directory but Hydra's record of the latest command and the job log."""
    return {
        str(p.relative_to(run_dir)): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and ".hydra" not in p.parts and p.name != "train.log"
    }


def run_and_kill(run_dir: Path, args: argparse.Namespace) -> tuple[int, dict[str, bytes], float]:
    """Start the run, SIGKILL it at the chosen moment; (last progress seen, files just before the kill,
    seconds from start to kill)."""
    process = train([], run_dir, args)
    progress = [0]

    def read_progress() -> None:
        buffer = b""
        while chunk := process.stdout.read1(4096):
            buffer = (buffer + chunk)[-4096:]
            steps = PROGRESS.findall(buffer.decode(errors="replace"))
            if steps:
                progress[0] = max(progress[0], int(steps[-1]))

    reader = threading.Thread(target=read_progress, daemon=True)
    reader.start()
    start = time.perf_counter()
    checkpoints = run_dir / "checkpoints"
    before: dict[str, bytes] = {}
    while process.poll() is None:
        if args.kill_while_writing:
            writing = checkpoints.is_dir() and any(p.name.endswith(".tmp") for p in checkpoints.iterdir())
            if writing and (checkpoints / "last.ckpt").is_file():  # a complete checkpoint exists
                break
            time.sleep(0.0005)
        else:
            if progress[0] >= args.kill_at:
                break
            time.sleep(0.005)
    else:
        sys.exit("the run finished before it could be killed: raise --steps or lower --kill-at")
    if not args.kill_while_writing:
        before = files(run_dir)  # a checkpoint write may start in between: compared by name below
    os.kill(process.pid, signal.SIGKILL)
    killed_at = time.perf_counter() - start
    process.wait()
    reader.join(timeout=5)
    return progress[0], before, killed_at


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=100, help="checkpoint interval in steps")
    parser.add_argument("--kill-at", type=int, default=150, help="SIGKILL once the progress bar passes this step")
    parser.add_argument("--kill-while-writing", action="store_true", help="SIGKILL during a checkpoint write")
    parser.add_argument("--encoding", default="rand_axial")
    parser.add_argument("--byte-model", action="store_true", help="the byte model on wiki_en_zh (POSLAB_DATA_DIR)")
    parser.add_argument("--dir", type=Path, default=None, help="where the runs go (default: a temporary dir)")
    parser.add_argument("--quick", action="store_true", help="60 steps, a checkpoint every 20, killed at 30")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.every, args.kill_at = 60, 20, 30
    root = args.dir or Path(tempfile.mkdtemp(prefix="kill_resume_"))
    full, killed = root / "full", root / "killed"

    finish(train([], full, args))
    print(f"uninterrupted run: {args.steps} steps done ({full})", flush=True)
    seen, before, seconds = run_and_kill(killed, args)
    print(f"killed after {seconds:.1f} s, progress bar at step {seen}", flush=True)
    after = files(killed)
    last = killed / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(last, map_location="cpu", weights_only=True)  # a torn file would not load
    saved_step = int(checkpoint["global_step"])
    leftovers = sorted(p.name for p in (killed / "checkpoints").iterdir() if p.name.endswith(".tmp"))
    # everything present just before the kill is still there, unchanged, except checkpoint files rewritten
    # by a write that completed between the snapshot and the kill (last.ckpt)
    intact = all(after.get(name) == data or name.endswith("last.ckpt") for name, data in before.items())
    written_before = len(before)

    finish(train(["ckpt_path=last"], killed, args))
    # the metrics logged before the kill are still the start of the resumed run's log
    # (compared as records: the resumed run may add columns, e.g. validation figures, to the header)
    log_before = rows(before.get("csv/metrics.csv", b"").decode())
    log_after = rows((killed / "csv" / "metrics.csv").read_text())
    log_kept = len(log_after) > len(log_before) and all(
        {k: v for k, v in after_row.items() if v} == {k: v for k, v in row.items() if v}
        for row, after_row in zip(log_before, log_after)
    )
    full_weights = torch.load(full / "model.pt", weights_only=True)["state_dict"]
    resumed_weights = torch.load(killed / "model.pt", weights_only=True)["state_dict"]
    same_weights = all(torch.equal(full_weights[k], resumed_weights[k]) for k in full_weights)
    full_results = json.loads((full / "results.json").read_text())
    resumed_results = json.loads((killed / "results.json").read_text())
    report = {
        "config": " ".join(overrides(args)),
        "killed": "while writing a checkpoint" if args.kill_while_writing else f"after step {args.kill_at}",
        "seconds_to_kill": round(seconds, 2),
        "progress_seen_at_kill": seen,
        "last_checkpoint_step": saved_step,
        "steps_lost": max(0, seen - saved_step),
        "last_ckpt_loads_weights_only": True,
        "temporary_files_left": leftovers,
        "files_before_kill": written_before,
        "files_before_kill_intact": intact if before else "n/a (killed during a write)",
        "metrics_log_before_kill_kept_after_resume": log_kept if before else "n/a",
        "resumed_steps": resumed_results["steps"],
        "final_weights_equal": same_weights,
        "final_figures_equal": resumed_results["figures"] == full_results["figures"],
        "figures": resumed_results["figures"],
        "run_dirs": str(root),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
