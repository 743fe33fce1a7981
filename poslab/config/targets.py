"""A run's config read back from disk: which ``_target_``s it may name (checked before anything is imported
or built), and its settings as flat dotted keys (to compare two configs: resume, reports).

A finished run's config (in ``model.pt``, or a training checkpoint) is data someone else may have written, but
``hydra.utils.instantiate`` turns it into calls: ``task._target_: builtins.open`` with a path and a mode would
make an analysis create a file of the config's choosing, and ``weights_only=True`` does not help when the config
is code. So the analyses build objects from a loaded config only through these checks: every ``_target_`` (and
``task.module``) must name something below an allowed prefix (poslab's own, Lightning's loggers and callbacks),
and what is built (the datamodule, the LightningModule, the loggers) must be a *class* of the kind its place
needs; anything else is refused by name with a ``ConfigError`` before its module is imported. One exception
keeps user classes working without importing anything the config names: a class whose module this process
has already imported (your own logger, imported by your script) is accepted where it is of the right kind.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from poslab.errors import ConfigError

#: the prefixes a ``_target_`` of a loaded config may start with, whatever its place
ALLOWED_TARGET_PREFIXES = (
    "poslab.",
    "lightning.pytorch.loggers.",
    "lightning.pytorch.callbacks.",
    "lightning.pytorch.Trainer",  # recorded in every config (``trainer``); analyses never build it
)
#: modules that moved when poslab/ was regrouped into layers (2026-12): a run written before names the old path,
#: read back as the new one (building it, resuming it and comparing it with a new run's config alike)
MOVED_MODULES = {
    f"poslab.{old}.": f"poslab.running.{old}."
    for old in ("callbacks", "loggers", "hydra_callbacks", "training", "builders", "extension", "checks")
}

#: encoding settings added with a default that changes what a run does (a default that keeps the earlier behaviour
#: needs no entry): a record written before the setting existed ran with this value, and is read so (rebuilding
#: its model, resuming it, comparing it with newer runs) rather than with the newer default
ADDED_ENCODING_SETTINGS: dict[str, dict[str, Any]] = {
    "sinusoid": {"embedding_scale": 1.0},  # before: tokens added as they were (docs/absolute_scale.md)
    "randomized_rope": {"layer_draws": "shared"},  # before: one draw of positions for every layer
    "cope": {"table_weight_decay": True},  # before: the position tables decayed with the model's weights
}


def with_added_settings(config: Any) -> Any:
    """A plain copy of a recorded ``config`` whose ``encoding`` section has each of ``ADDED_ENCODING_SETTINGS``
    it lacks, at the value the run ran with."""
    config = _plain(config)
    encoding = config.get("encoding") if isinstance(config, dict) else None
    if not isinstance(encoding, dict):
        return config
    added = ADDED_ENCODING_SETTINGS.get(str(encoding.get("name")), {})
    return {**config, "encoding": {**added, **encoding}}


def filled_encoding(encoding: dict[str, Any], filled: dict[str, Any], keep: tuple[str, ...] = ()) -> dict[str, Any]:
    """A recorded ``encoding`` section with each setting it leaves null at the value the run filled it with at build
    (``filled``: its results' ``encoding_settings``, when they are of the same encoding), so that what ran is what is
    compared or rebuilt; the settings in ``keep`` stay null (they are filled again, as a table that grows)."""
    if filled.get("name", encoding.get("name")) != encoding.get("name"):
        return dict(encoding)
    resolved = {k: filled[k] for k, v in encoding.items() if v is None and filled.get(k) is not None and k not in keep}
    return {**encoding, **resolved}


def current_target(target: Any) -> Any:
    """``target`` with a module moved since it was written (``MOVED_MODULES``) named where it is now."""
    if isinstance(target, str):
        for old, new in MOVED_MODULES.items():
            if target.startswith(old):
                return new + target[len(old) :]
    return target


def renamed_targets(config: Any) -> Any:
    """A plain copy of ``config`` with every ``_target_`` through ``current_target``."""
    config = _plain(config)
    if isinstance(config, dict):
        return {k: current_target(v) if k == "_target_" else renamed_targets(v) for k, v in config.items()}
    if isinstance(config, (list, tuple)):
        return [renamed_targets(v) for v in config]
    return config


#: what may be built at each place of a run's config
DATAMODULE_PREFIXES = ("poslab.",)
MODULE_PREFIXES = ("poslab.",)
LOGGER_PREFIXES = ("poslab.", "lightning.pytorch.loggers.")
CALLBACK_PREFIXES = ("poslab.", "lightning.pytorch.callbacks.")


def _plain(config: Any) -> Any:
    if isinstance(config, (DictConfig, ListConfig)):
        return OmegaConf.to_container(config, resolve=False)
    return config


def targets(config: Any, where: str = "") -> Iterator[tuple[str, Any]]:
    """Every ``_target_`` below ``config`` (nested ones too: Hydra instantiates them first), with its key."""
    config = _plain(config)
    if isinstance(config, dict):
        for key, value in config.items():
            path = f"{where}.{key}" if where else str(key)
            if key == "_target_":
                yield path, value
            else:
                yield from targets(value, path)
    elif isinstance(config, (list, tuple)):
        for index, value in enumerate(config):
            yield from targets(value, f"{where}[{index}]")


def refuse(key: str, value: Any, prefixes: tuple[str, ...], source: str, reason: str = "") -> ConfigError:
    allowed = ", ".join(f"{p}*" if p.endswith(".") else p for p in prefixes)
    return ConfigError(
        f"{source}: {key}={value!r} is not allowed{reason}; a loaded config may only name poslab's own classes "
        f"and Lightning's loggers and callbacks (allowed: {allowed}), so nothing else is imported or built from it."
    )


def check_loaded_config(config: Any, source: str) -> None:
    """Refuse a loaded config (``source``: the file it came from) whose datamodule (``task._target_``),
    ``task.module`` or loggers are not classes of their kind (``allowed_class``), or that names any other
    ``_target_`` outside ``ALLOWED_TARGET_PREFIXES``; nothing outside them is imported."""
    from lightning.pytorch import LightningDataModule, LightningModule
    from lightning.pytorch.loggers import Logger

    for key, value in targets(config):
        if key == "task._target_":
            allowed_class(value, key, DATAMODULE_PREFIXES, source, LightningDataModule)
        elif re.fullmatch(r"logger\.[^.\[]+\._target_", key):
            allowed_class(value, key, LOGGER_PREFIXES, source, Logger, LOGGER_METHODS)
        elif not isinstance(value, str) or not value.startswith(ALLOWED_TARGET_PREFIXES):
            raise refuse(key, value, ALLOWED_TARGET_PREFIXES, source)
    plain = _plain(config)
    module = (plain.get("task") or {}).get("module") if isinstance(plain, dict) else None
    if module is not None:
        allowed_class(module, "task.module", MODULE_PREFIXES, source, LightningModule)


def already_loaded(target: str) -> Any:
    """What ``target`` names when its module is already imported by this process (nothing is imported)."""
    parts = target.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        found: Any = sys.modules.get(".".join(parts[:cut]))
        if found is None:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute, None)
        return found
    return None


#: what a class already imported by this process must have to be built as a logger (duck-typed, as Lightning's)
LOGGER_METHODS = ("log_metrics", "finalize")


def allowed_class(
    target: Any, key: str, prefixes: tuple[str, ...], source: str, base: type, methods: tuple[str, ...] = ()
) -> type:
    """The class ``target`` names, a subclass of ``base``: imported only once its name starts with one of
    ``prefixes``, or else already imported by this process (then a class with all of ``methods`` will do too).
    A function (``poslab.io.write_atomic``, ``builtins.open``) or a class of another kind is refused."""
    if not isinstance(target, str):
        raise refuse(key, target, prefixes, source)
    if target.startswith(prefixes):
        import hydra

        try:
            found = hydra.utils.get_object(target)
        except Exception as error:  # noqa: BLE001  (any import failure: the name does not exist)
            raise refuse(key, target, prefixes, source, f" (it cannot be imported: {error})") from None
    else:
        found = already_loaded(target)
        duck = bool(methods) and all(callable(getattr(found, m, None)) for m in methods)
        if not (isinstance(found, type) and (issubclass(found, base) or duck)):
            raise refuse(key, target, prefixes, source)
        return found
    if not isinstance(found, type):
        raise refuse(key, target, prefixes, source, " (it is not a class)")
    if not issubclass(found, base):
        raise refuse(key, target, prefixes, source, f" (it is not a {base.__name__})")
    return found


def flatten(config: Any, prefix: str = "") -> dict[str, Any]:
    """``{"model.d_model": 64, "encoding.name": "rope", ...}``: every leaf setting under a dotted key (lists are
    leaves, compared whole)."""
    config = _plain(config)
    if not isinstance(config, dict):
        return {prefix: config} if prefix else {}
    flat: dict[str, Any] = {}
    for key, value in config.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            flat.update(flatten(value, path))
        else:
            flat[path] = current_target(value) if key == "_target_" else value
    return flat
