"""The files a run directory holds, by name, and how to find runs on disk. Knows names and paths only:
nothing here reads a model or a config.

A run directory (``logs/runs/<time>_<name>/`` or ``logs/multirun/<time>/<job>/``) holds Hydra's ``.hydra/``
config, the loggers' files, ``results.json`` (the figures and the resolved config), ``model.pt`` (the trained
weights and the config, for the analyses), ``checkpoints/`` (training checkpoints to resume from), and, for a
multirun job that failed, ``failed.json``; while a run is under way, its lock ``.poslab.lock``. Analyses write
into ``analysis/<name>/`` beside what they read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from poslab.errors import MissingRunError

RESULTS_FILE = "results.json"
FAILURE_FILE = "failed.json"
MODEL_FILE = "model.pt"
CHECKPOINT_DIR = "checkpoints"
LAST_CHECKPOINT = "last.ckpt"
#: the test after training so far, beside the checkpoints (``poslab.running.evaluation_checkpoint``; a DDP rank r's:
#: ``evaluation-rank<r>.pt``), removed when the test ends
EVALUATION_STATE = "evaluation.pt"
#: the lock a run holds in its run directory (a multirun: in its sweep directory) for its life, with the holding
#: process's id and command line (``poslab.runs.guard.RunLock``); gone when the run ends
LOCK_FILE = ".poslab.lock"
#: ``ckpt_path=auto``: a run directory with a results.json the reports read is skipped, one with a last checkpoint
#: resumes from it, any other starts afresh (a multirun given again continues where an earlier one stopped, each job
#: in its earlier folder: ``poslab.runs.folders``)
AUTO = "auto"
ANALYSIS_DIR = "analysis"
#: Hydra writes this file into the directory of a multirun (the sweep directory)
MULTIRUN_FILE = "multirun.yaml"


def directories_holding(directory: str | Path, name: str) -> list[Path]:
    """The directories at or below ``directory`` that hold ``name`` (a run's file), sorted; what analyses wrote
    (``analysis/``) does not count."""
    directory = Path(directory)
    found = {p.parent for p in directory.rglob(name) if ANALYSIS_DIR not in p.relative_to(directory).parts}
    return sorted(found, key=natural_order)


def evaluation_state_name(rank: int = 0, world_size: int = 1) -> str:
    """The file a rank saves the test after training in: ``evaluation.pt`` in one process, ``evaluation-rank<r>.pt``
    for DDP rank r (every rank saves its own part)."""
    if world_size == 1:
        return EVALUATION_STATE
    stem, suffix = EVALUATION_STATE.rsplit(".", 1)
    return f"{stem}-rank{rank}.{suffix}"


def saved_test(checkpoints: Path) -> str | None:
    """How far the test saved in a run's ``checkpoints`` folder got (DDP: rank 0's file), or why it cannot be read;
    None where none is saved (``poslab runs``). Loads torch only where a file is there."""
    candidates = (checkpoints / evaluation_state_name(0, world) for world in (1, 2))  # one process; DDP rank 0
    saved = [path for path in candidates if path.is_file()]
    if not saved:
        return None
    import torch  # a run in its test: rare, and torch is slow to import for a listing

    try:
        return saved_test_progress(torch.load(saved[0], map_location="cpu", weights_only=True))
    except Exception as error:  # noqa: BLE001  (a file the run will not resume either: said, not raised)
        return f"unreadable ({type(error).__name__})"


def saved_test_progress(state: dict[str, Any]) -> str:
    """How far a saved test got: ``round selection done, 412 batches of round test``."""
    rounds, current = state["rounds_done"], state["module"]["test_round"]
    done = f"round {', '.join(map(str, rounds))} done, " if rounds else ""
    return f"{done}{int(state['scored'])} batches{f' of round {current}' if current else ''}"


def natural_order(path: Path) -> list[Any]:
    """Sort key with numbers as numbers: ``seed-2`` before ``seed-10`` (and an older sweep's numbered job folders,
    ``2_seed-0`` before ``10_seed-0``, in job order)."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def find_runs(paths: list[str | Path], marker: str = MODEL_FILE) -> list[Path]:
    """Run directories holding ``marker`` (``model.pt``: finished runs), given directly or anywhere below
    the directories given (multirun directories); raises ``MissingRunError`` naming what was not found."""
    runs: list[Path] = []
    for path in map(Path, paths):
        if (path / marker).is_file():
            runs.append(path)
        elif path.is_dir():
            runs += directories_holding(path, marker)
        else:
            raise MissingRunError(f"{path} is neither a run directory (with {marker}) nor a directory of runs.")
    if not runs:
        shown = ", ".join(map(str, paths))
        raise MissingRunError(f"no {marker} under {shown}: give finished train.py run directories.")
    return runs


def multirun_directory(run: Path) -> Path | None:
    """The multirun directory a run directory belongs to (the nearest one above it with ``multirun.yaml``)."""
    for parent in Path(run).resolve().parents:
        if (parent / MULTIRUN_FILE).is_file():
            return parent
    return None


def default_analysis_dir(name: str, paths: list[str | Path], runs: list[Path]) -> Path:
    """Where analysis ``name`` writes when no ``--output-dir`` is given: ``RUN_DIR/analysis/<name>/`` for one
    run; for several, ``analysis/<name>/`` of the first multirun directory: the first path given when it is a
    directory of runs, else the multirun holding the first run given (else the directory above it)."""
    first = Path(paths[0])
    is_run = first.resolve() in {Path(r).resolve() for r in runs}
    if not is_run:
        return first / ANALYSIS_DIR / name
    if len(runs) == 1:
        return first / ANALYSIS_DIR / name
    return (multirun_directory(first) or first.parent) / ANALYSIS_DIR / name


#: the command-line overrides a train.py run was composed with (Hydra writes them into the run directory)
OVERRIDES_FILE = Path(".hydra") / "overrides.yaml"


#: Hydra's own config of a run or multirun job (its ``hydra.job.num``: the job's number in its multirun)
HYDRA_FILE = Path(".hydra") / "hydra.yaml"


def job_number(run_dir: str | Path) -> int | None:
    """A multirun job's number in the multirun that last ran it (Hydra's ``hydra.job.num``), else the number an
    older sweep's job folder starts with (``3_encoding-rope_seed-1``); None for a single run or where neither says."""
    import yaml

    try:
        text = (Path(run_dir) / HYDRA_FILE).read_text(encoding="utf-8")
        recorded = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # C: a report reads many
        number = recorded["hydra"]["job"]["num"]
    except (OSError, UnicodeDecodeError, yaml.YAMLError, KeyError, TypeError):
        number = None
    if isinstance(number, int) and not isinstance(number, bool):
        return number
    match = re.match(r"(\d+)_", Path(run_dir).name)
    return int(match.group(1)) if match else None


def run_overrides(run_dir: str | Path) -> list[str] | None:
    """The overrides a run or multirun job was composed with, as its command line gave them; None for a run
    made without Hydra (a config composed in Python)."""
    path = Path(run_dir) / OVERRIDES_FILE
    if not path.is_file():
        return None
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.load(path)]
