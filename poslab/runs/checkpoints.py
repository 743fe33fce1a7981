"""The formats of what a run writes to be reloaded: the trained model, and training checkpoints to resume from.

``model.pt`` holds the model's weights and the run's resolved config, so an
analysis rebuilds exactly that model (any encoding) with the same builders
training used (``poslab.running.builders.load_run``). It is written atomically and
loaded with ``weights_only=True``.

Training checkpoints (``<run dir>/checkpoints/*.ckpt``, Lightning's format) hold
the model, optimizer, schedule, loop counters (hence the step, and with it the
data position) and the global RNG states; ``AtomicCheckpointIO`` writes them
atomically and every one of them loads with ``weights_only=True``. Each also records the resolved config
that made it (``CONFIG_KEY``, written by ``poslab.running.callbacks.RecordConfig``): resuming with a different
model-defining setting stops at start with the differences (``config_changes``). See docs/resume.md.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from poslab.config.targets import flatten
from poslab.errors import ConfigError
from poslab.io import write_atomic
from poslab.runs.files import AUTO, CHECKPOINT_DIR, LAST_CHECKPOINT, MODEL_FILE

# what a Lightning training checkpoint has and model.pt (or any other file) has not
TRAINING_STATE_KEYS = ("state_dict", "optimizer_states", "lr_schedulers", "loops", "global_step")
#: where a training checkpoint keeps the resolved config of the run that wrote it (plain values only)
CONFIG_KEY = "poslab_config"
#: the sections of a config that define what is trained: a resume must not change them unless told to (``seed``:
#: the data stream and the weights' start; a resume under another seed would continue one seed's model on
#: another's data, and its results.json would count it as the other seed)
MODEL_DEFINING = ("encoding", "model", "task", "corpus", "seed")
#: keys of those sections that say where files are, not what is trained (a resume from another directory
#: resolves them differently), repeat another section (``task.corpus`` is ``corpus``), or say how the model is
#: computed, not what it is (``model.compile``: the same weights, under the same names; a checkpoint of model/hrope
#: from before its YAML gave it has none)
NOT_MODEL_DEFINING = ("task.data_dir", "task.cache_dir", "task.corpus", "model.compile")


def uncompiled_state_dict(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state`` with the ``_orig_mod.`` that ``torch.compile``'s wrapper puts in parameter names removed
    (wherever a compiled module sat: ``_orig_mod.blocks.0...`` or ``blocks.0._orig_mod...``), so weights of a
    compiled model load into an uncompiled one. A state dict without it comes back unchanged."""
    return {key.replace("_orig_mod.", ""): value for key, value in state.items()}


def save_model(path: str | Path, model: torch.nn.Module, config: dict[str, Any]) -> Path:
    """Write ``model.pt``: the weights (names as an uncompiled model has them) and the resolved config."""
    state = {k: v.detach().cpu() for k, v in uncompiled_state_dict(model.state_dict()).items()}
    buffer = io.BytesIO()
    torch.save({"state_dict": state, "config": config}, buffer)
    return write_atomic(path, buffer.getvalue())


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's checkpoint writer, made atomic on local disks.

    Lightning's own ``_atomic_save`` writes through an fsspec transaction, which for a local path writes a
    temporary file in the system's temporary directory and then ``shutil.move``s it: a copy, not a rename,
    when that directory is on another file system, and nothing is flushed to disk. A SIGKILL during that
    copy leaves a truncated ``last.ckpt``. Here the bytes go to a temporary file next to the target, are
    fsynced and renamed over it (``poslab.io.write_atomic``): a reader, or a resumed run, sees the previous
    checkpoint or the new one, never part of one. Remote paths (``s3://`` ...) keep Lightning's writer.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        write_atomic(path, buffer.getbuffer())

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        """Loads with ``weights_only=True`` unless told otherwise: poslab's checkpoints hold only tensors and
        plain Python values (RNG states included, see ``poslab.lightning_modules.rng.rng_states``)."""
        if map_location is None:
            map_location = "cpu"
        return super().load_checkpoint(path, map_location, True if weights_only is None else weights_only)


def resolve_checkpoint(ckpt_path: str | None, output_dir: str | Path) -> Path | None:
    """The training checkpoint ``ckpt_path`` names, checked; ``None`` when not resuming.

    ``last``: this run directory's ``checkpoints/last.ckpt`` (resume in place: ``hydra.run.dir=<the run's
    directory>``); ``auto``: the same when it exists, else None (a fresh start; a finished run is skipped before
    this, ``training.finished_earlier``: how a multirun given again continues where it stopped); a directory:
    the ``checkpoints/last.ckpt`` of that run directory (or that file in the directory itself); anything else:
    a checkpoint file. A path that does not exist, or a file that is not a training checkpoint poslab can load
    with ``weights_only=True``, raises ``ConfigError``.
    """
    if ckpt_path is None or str(ckpt_path).strip() in ("", "null", "None"):
        return None
    value = str(ckpt_path)
    if value == AUTO:  # resume this run directory's last checkpoint if it has one, else start afresh
        path = Path(output_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT
        if not path.is_file():
            return None
        check_training_checkpoint(path, f"ckpt_path={AUTO}")
        return path.resolve()
    if value == "last":
        path = Path(output_dir) / CHECKPOINT_DIR / LAST_CHECKPOINT
        if not path.is_file():
            raise ConfigError(
                f"ckpt_path=last resumes from this run directory's {CHECKPOINT_DIR}/{LAST_CHECKPOINT}, but {path} "
                f"does not exist; allowed: last with hydra.run.dir=<the directory of the run to resume>, auto (resume "
                f"when there is a checkpoint, else start), the path of a run directory, or the path of a .ckpt file."
            )
    else:
        path = Path(value).expanduser()
        if path.is_dir():
            candidates = [path / CHECKPOINT_DIR / LAST_CHECKPOINT, path / LAST_CHECKPOINT]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                raise ConfigError(
                    f"ckpt_path={value} is a directory without a checkpoint ({candidates[0]} does not exist); "
                    f"allowed: last, a run directory with {CHECKPOINT_DIR}/{LAST_CHECKPOINT}, or a .ckpt file."
                )
            path = found
        elif not path.exists():
            raise ConfigError(
                f"ckpt_path={value} does not exist; allowed: last (this run directory's "
                f"{CHECKPOINT_DIR}/{LAST_CHECKPOINT}), auto (the same when it exists, else a fresh start), a run "
                f"directory, or the path of a .ckpt file."
            )
    check_training_checkpoint(path, f"ckpt_path={value}")
    return path.resolve()


def check_training_checkpoint(path: Path, what: str) -> None:
    """Raise ``ConfigError`` unless ``path`` is a Lightning training checkpoint that loads with
    ``weights_only=True``. Tensors are memory-mapped, so this reads little more than the pickled index."""
    allowed = "a .ckpt file written by train.py (checkpoints/last.ckpt or checkpoints/step*.ckpt of a run)"
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"{what}: {path} is not a checkpoint (not a torch.save file); allowed: {allowed}.")
    try:
        saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, zipfile.BadZipFile) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError(
            f"{what}: {path} cannot be loaded as a checkpoint with weights_only=True ({first_line}); "
            f"allowed: {allowed}."
        ) from error
    missing = [k for k in TRAINING_STATE_KEYS if not isinstance(saved, dict) or k not in saved]
    if missing:
        hint = " (model.pt holds the trained weights only)" if path.name == MODEL_FILE else ""
        raise ConfigError(
            f"{what}: {path} is not a training checkpoint{hint}: it lacks {', '.join(missing)}; allowed: {allowed}."
        )


def checkpoint_config(path: str | Path) -> dict[str, Any] | None:
    """The resolved config a training checkpoint records; ``None`` for a checkpoint written before poslab
    recorded it. Tensors are memory-mapped, so this reads little more than the pickled index."""
    saved = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    config = saved.get(CONFIG_KEY) if isinstance(saved, dict) else None
    return config if isinstance(config, dict) else None


def _covered(key: str, prefixes: Any) -> bool:
    return any(key == p or key.startswith(f"{p}.") for p in prefixes)


def config_changes(
    saved: dict[str, Any], current: dict[str, Any], allowed: Any = (), at_default: Any = ()
) -> list[str]:
    """``key: saved → now`` for every model-defining setting (``MODEL_DEFINING``) that differs between the
    config a checkpoint recorded and the current one, leaving out ``NOT_MODEL_DEFINING``, the keys (or
    sections: ``encoding`` covers ``encoding.base``) in ``allowed``, and the keys of ``at_default`` that the
    checkpoint's config does not have: settings added to poslab after the checkpoint was written, left at
    their declared defaults (which keep the behaviour of before: a new setting's default must)."""
    old = {k: v for k, v in flatten(saved).items() if _covered(k, MODEL_DEFINING)}
    new = {k: v for k, v in flatten(current).items() if _covered(k, MODEL_DEFINING)}
    added = set(at_default) - old.keys()
    changes = []
    for key in sorted(old.keys() | new.keys()):
        if _covered(key, NOT_MODEL_DEFINING) or _covered(key, allowed) or key in added:
            continue
        before, after = old.get(key, "(not set)"), new.get(key, "(not set)")
        if before != after:
            changes.append(f"{key}: {before} → {after}")
    return changes
