"""A multirun's job folders: what they are named, and how ``ckpt_path=auto`` finds a job's earlier folder.

A sweep is keyed by its jobs' configs, not by folder names or job numbers:

* A job's folder is named by its overrides alone (``encoding-rope_seed-1``), whether or not ``ckpt_path=auto`` is
  given, so a sweep started without it and given again with it (the README's way to continue a stopped sweep) names
  every job's folder as before; a job added to the sweep's lists, which renumbers the others, leaves their folders
  as they are. A checkpoint path a job starts from is part of its name; ``auto``, ``last`` and ``null`` are not.
  Two jobs of one sweep never share a folder: the same job given twice (``seed=0,0``), or two whose overrides differ
  only in characters a folder name cannot hold, are refused before anything runs (``check_distinct_jobs``), and a
  name cut short carries a short hash of the whole.
* Under ``ckpt_path=auto`` a job continues in its earlier folder, whatever that is named: unless the folder its
  overrides name holds it finished, every folder of the sweep directory whose recorded job (``.hydra/overrides.yaml``
  and ``.hydra/config.yaml``) is this one (``RecordedJob.same_job``: the same overrides, or the same settings and
  seed) is a candidate, so numbered folders of older sweeps (``0_encoding-none_seed-0``) and commands spelled
  otherwise (``threads=2`` for ``threads=1``) are found. Of several, a finished one (its results.json reads), else
  one with a last checkpoint, else the folder its overrides name, else the newest. The job's log names the folder.

Light: no torch (the resolver runs in Hydra's launcher before a job starts).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poslab.runs.files import AUTO, CHECKPOINT_DIR, LAST_CHECKPOINT, OVERRIDES_FILE

JOB_NAME_LENGTH = 80  # characters of a job folder's name: `ls` shows them whole
#: a name cut short ends in this mark and ``HASH_LENGTH`` hex digits of a hash of the whole (``..._task.context_le+
#: 0678a702``): ``+`` is a character Hydra's override grammar takes unquoted, so the folder can be given back
#: (``parent=``, ``ckpt_path=``) as it is, and is not ``KV_SEP`` (``seed-49fb95ba`` would read as a seed). Names
#: written before used ``~``, which the grammar takes only quoted: ``folder_names`` finds those too
CUT_MARK, OLD_CUT_MARK, HASH_LENGTH = "+", "~", 8
#: how a job's overrides are joined into its folder's name: ``key-value`` items joined by ``_``
KV_SEP, ITEM_SEP = "-", "_"
#: ``ckpt_path`` values that say how to run a job, not which job it is (a checkpoint's path does: it is where a
#: fine-tuning starts): left out of the job's folder name and of the overrides it is recognised by
HOW_TO_RUN = (AUTO, "last", "null", "None", "")
#: the config Hydra records in a job folder (unresolved, as composed)
CONFIG_FILE = Path(".hydra") / "config.yaml"


def folder_name(dirname: str) -> str:
    """``dirname`` (a job's overrides joined: ``override_dirname``) made a folder name safe for a filesystem, a shell
    and Hydra's own parser (no ``=``, ``,``, ``/``, spaces or quotes, so ``ckpt_path=<job dir>`` needs no quoting) and
    cut to ``JOB_NAME_LENGTH`` characters with a short hash of the whole (two long names never collide); ``job`` for
    a job without overrides."""
    text = re.sub(r"[^\w.+-]+", "_", dirname).strip("_")
    if len(text) > JOB_NAME_LENGTH:
        digest = hashlib.sha1(text.encode()).hexdigest()[:HASH_LENGTH]
        text = text[: JOB_NAME_LENGTH - HASH_LENGTH - 1] + CUT_MARK + digest
    return text or "job"


def folder_names(name: str) -> tuple[str, ...]:
    """The names a job folder named ``name`` (``folder_name``'s) may have on disk: ``name``, and for a name cut
    short the same name as poslab wrote it before (``OLD_CUT_MARK``), which running sweeps and committed runs
    still have: every lookup of a job's folder tries both."""
    cut = JOB_NAME_LENGTH - HASH_LENGTH - 1
    if len(name) == JOB_NAME_LENGTH and name[cut] == CUT_MARK and re.fullmatch(r"[0-9a-f]+", name[cut + 1 :]):
        return (name, name[:cut] + OLD_CUT_MARK + name[cut + 1 :])
    return (name,)


def existing_job_folder(sweep_dir: Path, overrides: list[str]) -> Path | None:
    """The folder of ``sweep_dir`` that a job's overrides name (``job_folder_name``, or its older spelling,
    ``folder_names``), where one exists; None otherwise."""
    return next((sweep_dir / n for n in folder_names(job_folder_name(overrides)) if (sweep_dir / n).is_dir()), None)


def job_folder_name(overrides: list[str]) -> str:
    """A multirun job's folder name, from its overrides alone: ``encoding-rope_seed-1`` for ``seed=1 encoding=rope``,
    with or without ``ckpt_path=auto``."""
    return folder_name(override_dirname(overrides))


def job_folder(ckpt_path: Any = None, *, _root_: Any = None) -> str:
    """The resolver behind ``hydra.sweep.subdir`` (conf/hydra/default.yaml): the job's folder name (``job_folder_name``
    of its overrides, ``hydra.overrides.task``); under ``ckpt_path=auto`` the name of the job's earlier folder in the
    sweep directory when there is one (``earlier_job_folder``). ``_root_``: the job's whole config, Hydra's node too."""
    from omegaconf import OmegaConf

    overrides = [str(o) for o in OmegaConf.select(_root_, "hydra.overrides.task", default=None) or []]
    name = job_folder_name(overrides)
    sweep_dir = OmegaConf.select(_root_, "hydra.sweep.dir", default=None)
    if str(ckpt_path) != AUTO or sweep_dir is None:
        return name
    config = OmegaConf.to_container(_root_, resolve=False)
    assert isinstance(config, dict)
    found = earlier_job_folder(Path(str(sweep_dir)), name, RecordedJob.of(overrides, config))
    return found.name if found is not None else name


def override_key(line: str) -> str:
    """The key an override line sets (``+seed=1``, ``~logger``, ``hydra/launcher=local_parallel``)."""
    return line.split("=", 1)[0].lstrip("+~")


def names_the_job(line: str) -> bool:
    """Whether an override says which job this is: any but Hydra's own (``hydra.sweep.dir=...``) and a ``ckpt_path``
    of ``HOW_TO_RUN`` (``auto``, ``last``, ``null``)."""
    key = override_key(line)
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return False
    return key != "ckpt_path" or line.partition("=")[2].strip("'\" ") not in HOW_TO_RUN


def override_dirname(overrides: list[str]) -> str:
    """A job's overrides as one text, joined as Hydra's ``override_dirname`` joins them (sorted, ``=`` written ``-``,
    items joined by ``_``), of those that say which job it is (``names_the_job``)."""
    return ITEM_SEP.join(sorted(o for o in overrides if names_the_job(o))).replace("=", KV_SEP)


@dataclass(frozen=True)
class RecordedJob:
    """What a job is, as a job folder records it: its overrides (sorted; those that say which job it is,
    ``names_the_job``) and its identity (settings and seed, ``poslab.runs.results.run_identity``; None where its
    config cannot be read)."""

    overrides: tuple[str, ...]
    identity: str | None

    @classmethod
    def of(cls, overrides: list[str], config: dict[str, Any] | None) -> RecordedJob:
        from poslab.runs.results import run_identity

        kept = tuple(sorted(o for o in overrides if names_the_job(o)))
        return cls(kept, run_identity(config) if isinstance(config, dict) else None)

    def same_job(self, other: RecordedJob) -> bool:
        """The same overrides (the command that made it, however it ran), or the same settings and seed (the
        same job, however the command was spelled)."""
        return self.overrides == other.overrides or (self.identity is not None and self.identity == other.identity)


#: recorded jobs read, by folder, with the modification times of the files read (a multirun's jobs share a process)
_RECORDED: dict[Path, tuple[tuple[int, int], RecordedJob | None]] = {}


def recorded_job(folder: Path) -> RecordedJob | None:
    """The job a folder records (``.hydra/overrides.yaml`` and ``.hydra/config.yaml``); None where it records none
    or its files do not read (a folder being written by another job, a damaged file: not this job's)."""
    files = (folder / OVERRIDES_FILE, folder / CONFIG_FILE)
    try:
        stamp = (files[0].stat().st_mtime_ns, files[1].stat().st_mtime_ns)
    except OSError:
        return None
    cached = _RECORDED.get(folder)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    job = read_recorded_job(*files)
    _RECORDED[folder] = (stamp, job)
    return job


def read_recorded_job(overrides_file: Path, config_file: Path) -> RecordedJob | None:
    import yaml

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the C loader where PyYAML has it: a sweep has many
    try:
        overrides = yaml.load(overrides_file.read_text(encoding="utf-8"), Loader=loader)
        config = yaml.load(config_file.read_text(encoding="utf-8"), Loader=loader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(overrides, list):
        return None
    return RecordedJob.of([str(o) for o in overrides], config if isinstance(config, dict) else None)


def is_finished(folder: Path) -> bool:
    """A run directory holding a results.json the reports read: ``ckpt_path=auto`` skips it (a damaged one is
    unfinished: run again)."""
    from poslab.runs.results import finished_results

    return finished_results(folder) is not None


def earlier_job_folder(sweep_dir: Path, name: str, job: RecordedJob) -> Path | None:
    """The folder of ``sweep_dir`` where ``ckpt_path=auto`` continues ``job`` (whose own folder would be ``name``):
    that folder when it holds the job finished; else, of the folders recording the same job (``same_job``), a
    finished one, else one with a last checkpoint, else ``name``, else the newest; None when there is none.
    ``name`` stands for its older spelling too (``folder_names``)."""
    for own in (sweep_dir / n for n in folder_names(name)):
        if is_finished(own):
            return own
    if not sweep_dir.is_dir():
        return None
    candidates = []
    for folder in sorted(p for p in sweep_dir.iterdir() if p.is_dir()):
        recorded = recorded_job(folder)
        if recorded is not None and recorded.same_job(job):
            candidates.append(folder)
    if not candidates:
        return None
    return max(candidates, key=lambda folder: preference(folder, name))


def preference(folder: Path, name: str) -> tuple[bool, bool, bool, int, str]:
    """How much ``folder`` holds of its job, for choosing among the folders of one job: finished, then resumable,
    then the folder the job's overrides name (``folder_names``), then the newest (then the name: one answer on every
    machine)."""
    try:
        changed = (folder / CONFIG_FILE).stat().st_mtime_ns
    except OSError:
        changed = 0
    resumable = (folder / CHECKPOINT_DIR / LAST_CHECKPOINT).is_file()
    return is_finished(folder), resumable, folder.name in folder_names(name), changed, folder.name


def earlier_folder_note(output_dir: Path, overrides: list[str]) -> str | None:
    """The line a job's log gets when ``ckpt_path=auto`` found its earlier folder under another name than its
    overrides give (``earlier_job_folder``); None when the job runs in the folder its overrides name."""
    name = job_folder_name(overrides)
    if output_dir.name == name:
        return None
    return (
        f"ckpt_path=auto: this job continues in its earlier folder {output_dir} (it records the same job: its "
        f"overrides, or its settings and seed), not in a new folder {name}"
    )


def check_distinct_jobs(jobs: list[list[str]]) -> None:
    """Two jobs of one multirun never share a folder: the same job given twice (``seed=0,0``) would run twice into
    one folder and count its seed twice; jobs whose overrides differ only in characters a folder name cannot hold
    would be named alike. Raises ``ConfigError`` naming both jobs."""
    from poslab.errors import ConfigError

    named: dict[str, list[str]] = {}
    for number, job in enumerate(jobs):
        name = job_folder_name(job)
        if name not in named:
            named[name] = job
            continue
        earlier = named[name]
        shown = " ".join(o for o in job if names_the_job(o))
        # a sweeper setting swept on the command line: each job gets one value of it, which sweeps nothing
        swept = sorted(o.split("=")[0] for o in job if o.startswith("hydra.sweeper.params.") and o not in earlier)
        if swept:
            key = swept[0].removeprefix("hydra.sweeper.params.")
            raise ConfigError(
                f"{swept[0]} was given a comma list on the command line, which makes a job per value of that Hydra "
                f"setting rather than a sweep over {key}; give {key}=a,b on the command line (or the list in an "
                f"experiment file's hydra.sweeper.params)."
            )
        if sorted(earlier) == sorted(job):
            raise ConfigError(
                f"the multirun gives the job `{shown}` twice (job {number} repeats an earlier one): one config and "
                f"seed would run twice into one folder and count as two seeds; give each value of a list once."
            )
        raise ConfigError(
            f"jobs `{' '.join(o for o in earlier if names_the_job(o))}` and `{shown}` would share the job "
            f"folder {name}: their overrides differ only in characters a folder name cannot hold; give values that "
            f"differ in letters, digits or . + -."
        )
