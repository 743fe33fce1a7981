"""The YAML's values: the one home of every default (``poslab.config.settings``' docstring says why), read for a config
built by hand that leaves settings out (a test, a library user, an older run's record). A leaf: no poslab import,
so that every light module (``poslab.config.settings``, ``poslab.config.passkey_settings``) may read them.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


@functools.cache
def _load(path: Path) -> dict[str, Any]:
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    assert isinstance(raw, dict)
    return raw


def file_values(path: Path) -> dict[str, Any]:
    """A YAML file's values, those of the files its defaults list names (in its own group) merged first, in
    Hydra's order, a fresh copy (each file is read once per process). An entry that overrides another group
    (``override /task: lm``) is that group's business."""
    raw = copy.deepcopy(_load(path))
    merged: dict[str, Any] = {}
    for entry in raw.pop("defaults", []) or []:
        if not isinstance(entry, str):
            continue
        name = entry.split("@", 1)[0]
        if name != "_self_":
            merged.update(file_values(path.parent / f"{name}.yaml"))
    merged.update(raw)
    return merged


def without_interpolations(value: Any) -> Any:
    """``value`` with every interpolation (``${...}``: a value only a composed config has) read as None."""
    if isinstance(value, dict):
        return {key: without_interpolations(item) for key, item in value.items()}
    if isinstance(value, list):
        return [without_interpolations(item) for item in value]
    return None if isinstance(value, str) and "${" in value else value


def yaml_defaults(group: str, option: str) -> dict[str, Any]:
    """The values ``conf/<group>/<option>.yaml`` gives (with the files its defaults list names), a fresh copy: what
    a config built by hand takes for the settings it leaves out. An interpolation (``${trainer.max_steps}``)
    reads None: outside a composed config there is nothing to take it from."""
    return without_interpolations(file_values(CONF_DIR / group / f"{option}.yaml"))


def root_defaults() -> dict[str, Any]:
    """The top-level settings ``conf/train.yaml`` gives (``seed``, ``save_model``, ...), a fresh copy."""
    values = without_interpolations(file_values(CONF_DIR / "train.yaml"))
    values.pop("hydra", None)
    return values


@functools.cache
def default_option(group: str) -> str:
    """The option of ``group`` that ``conf/train.yaml`` selects when the command line names none (``model``:
    ``tiny``): whose YAML gives a model built in Python its settings."""
    raw = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "train.yaml"), resolve=False)
    assert isinstance(raw, dict)
    for entry in raw.get("defaults") or []:
        if isinstance(entry, dict) and group in entry:
            return str(entry[group])
    raise KeyError(f"conf/train.yaml selects no default option of the group {group!r}")
