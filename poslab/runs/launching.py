"""Local multiruns on a machine with several GPUs (or with DDP jobs): one fresh process per job.

``hydra/launcher=local_parallel`` runs jobs in joblib's worker processes, which are reused from job to job.
Two things cannot work inside such a worker: choosing a GPU through ``CUDA_VISIBLE_DEVICES`` (CUDA reads it
once, when a process first uses it, so a reused worker keeps its first job's GPU), and DDP (Lightning starts
the other ranks by running the process's command line again, which for a worker is the whole multirun).

So a job that needs either runs as its own single run: the worker starts ``python train.py <the job's
overrides> hydra.run.dir=<the job's directory> hydra.job.num=<its number>`` with ``CUDA_VISIBLE_DEVICES`` set,
waits for it and reports its outcome. Job ``k`` gets GPU ``k mod N`` (``d`` consecutive GPUs for a job of ``d``
devices), and by default ``N // d`` jobs run at once (``POSLAB_JOBS`` overrides). ``N`` is the machine's CUDA
devices, or what ``POSLAB_GPUS`` says (a count, or a comma list of device ids: the GPUs to spread jobs over, or a
fake count in tests). The job's ranks all work in that job's directory. On SLURM use ``hydra/launcher=slurm``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from poslab.config.overrides import quoted

#: the multirun summary's status of a job folder holding a second run of one config and seed (it does not count)
DUPLICATE = "duplicate"
#: environment variable a job's own process is started with, so it does not start another one
CHILD_MARK = "POSLAB_JOB_PROCESS"


def visible_gpus() -> list[str]:
    """The GPU ids multirun jobs are spread over: ``POSLAB_GPUS`` (a count or a comma list), else every CUDA
    device this process sees (counting them does not start CUDA in this process)."""
    setting = os.environ.get("POSLAB_GPUS", "").strip()
    if setting:
        if setting.isdigit():
            return [str(i) for i in range(int(setting))]
        return [g.strip() for g in setting.split(",") if g.strip()]
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        return [g.strip() for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except Exception:  # no usable torch.cuda: no GPUs
        return []


def devices_per_job(devices: Any) -> int:
    text = str(devices).strip()
    return int(text) if text.isdigit() and int(text) > 0 else 1


def parallel_jobs(devices: Any = 1) -> int:
    """How many local multirun jobs run at once: ``POSLAB_JOBS``, else one per ``devices``-sized share of the
    GPUs, else 2 (two CPU cores here)."""
    jobs = environment_count("POSLAB_JOBS")
    if jobs is not None:
        return jobs
    gpus = visible_gpus()
    return max(1, len(gpus) // devices_per_job(devices)) if gpus else 2


def environment_count(variable: str) -> int | None:
    """A whole-number environment variable of at least 1 (``POSLAB_JOBS``), None where unset or blank; any other
    value raises ``ConfigError`` naming the variable."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        from poslab.errors import ConfigError

        raise ConfigError(
            f"the environment variable {variable}={text!r} must be a whole number of at least 1 (how many multirun "
            f"jobs run at once); set it so (export {variable}=2) or unset it (unset {variable})."
        )
    return int(text)


def check_environment() -> None:
    """The environment variables poslab reads as numbers, checked before a command runs anything
    (``POSLAB_GPUS`` may be any comma list of device ids, UUIDs included)."""
    environment_count("POSLAB_JOBS")


def gpus_for_job(job: int, devices: Any = 1, gpus: list[str] | None = None) -> list[str]:
    """The GPUs of job ``job``: ``d`` consecutive ones starting at ``(job * d) mod N``."""
    gpus = visible_gpus() if gpus is None else gpus
    if not gpus:
        return []
    d = min(devices_per_job(devices), len(gpus))
    return [gpus[(job * d + i) % len(gpus)] for i in range(d)]


#: ``POSLAB_SHARED_WORKERS=1``: local_parallel's jobs run inside joblib's worker processes, as before (each job's
#: imports saved, ~5 s; but a job killed by the kernel, OOM or a signal, takes the whole multirun with it)
SHARED_WORKERS = "POSLAB_SHARED_WORKERS"


def needs_own_process(uses_gpu: bool, world_size: int, launcher_target: str) -> bool:
    """A local multirun job runs in its own process when it trains on a GPU of several, or with DDP, or under
    local_parallel with jobs at once (joblib: a worker killed mid-job, by the OOM killer or a signal, ends every job
    of the pool, so each job is a process of its own whose death is its failure alone, unless
    ``POSLAB_SHARED_WORKERS=1``); never
    inside a job's own process (that would start another), and never under SLURM (submitit starts it)."""
    if os.environ.get(CHILD_MARK) or "submitit" in launcher_target.lower():
        return False
    # one job at a time (POSLAB_JOBS=1) runs in this process: a kill there ends the command, as any run's would
    isolated = "joblib" in launcher_target.lower() and parallel_jobs() > 1 and os.environ.get(SHARED_WORKERS) != "1"
    return isolated or world_size > 1 or (uses_gpu and len(visible_gpus()) > 0)


def run_in_own_process(job: int, overrides: list[str], job_dir: Path, devices: Any) -> int:
    """Run one multirun job as a single run of ``train.py`` in a fresh process; returns its exit status."""
    env = {**os.environ, CHILD_MARK: "1"}
    gpus = gpus_for_job(job, devices)
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    train_py = Path(__file__).resolve().parents[2] / "train.py"
    # the job's number too: the job folder records it (.hydra/hydra.yaml), and the reports order jobs by it
    command = [sys.executable, str(train_py), *overrides, f"hydra.run.dir={quoted(str(job_dir))}"]
    command.append(f"hydra.job.num={job}")
    return subprocess.run(command, env=env).returncode


def summary_lines(sweep_dir: Path) -> tuple[list[str], bool]:
    """One summary line for a multirun, then one per job (status, overrides, directory); and whether all
    succeeded (a second run of one config and seed is no failure: it is named, and does not count). The jobs are
    read as the reports read them (``poslab.runs.results.collect_runs``)."""
    from poslab.runs.files import RESULTS_FILE, natural_order, run_overrides
    from poslab.runs.results import DAMAGED, SUCCESS, collect_runs

    runs = collect_runs([sweep_dir])
    jobs = [(SUCCESS, run.path, "") for run in runs.counted]
    jobs += [(status, path, "") for path, status in runs.not_success]
    jobs += [("failed", path, error) for path, error in runs.failed]
    jobs += [(DAMAGED, path.parent, f"{RESULTS_FILE} {problem}") for path, problem in runs.damaged]
    jobs += [("no result", path, "neither results.json nor failed.json") for path in runs.missing]
    jobs += [(DUPLICATE, path, f"the same config and seed as {kept}, which counts") for path, kept in runs.duplicates]
    counts = Counter(status for status, _, _ in jobs)
    head = f"multirun {sweep_dir}: {len(jobs)} job{'' if len(jobs) == 1 else 's'}, " + ", ".join(
        f"{n} {s}" for s, n in counts.items()
    )
    lines = [head + "."]
    for status, path, detail in sorted(jobs, key=lambda job: natural_order(job[1])):
        overrides = " ".join(run_overrides(path) or [])
        lines.append(f"  {status:9s} {overrides:50s} {path}" + (f": {detail}" if detail else ""))
    # a duplicate is a job run twice, by this multirun or an earlier one; the run that counts is listed too
    ok = bool(jobs) and all(status in (SUCCESS, DUPLICATE) for status, _, _ in jobs)
    return lines, ok


def launch_one_at_a_time(launch_one: Any, job_overrides: Any, initial_job_idx: int) -> list[Any]:
    """Run ``launch_one([overrides], index)`` (a launcher's launch of a one-job sweep, which waits for it) for
    every job, ``parallel_jobs()`` at a time, the next starting as soon as one ends; results in job order."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=parallel_jobs()) as pool:
        futures = [pool.submit(launch_one, [job], initial_job_idx + i) for i, job in enumerate(job_overrides)]
        return [future.result()[0] for future in futures]
