"""Data: synthetic tasks, and language modelling on real corpora (the ``corpora`` package prepares them).

The datamodules load lazily (they import torch and Lightning); the resolvers ``conf/corpus/local.yaml`` uses are
registered by ``poslab.running.resolvers``.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_LAZY = {
    "LanguageModelDataModule": "poslab.datamodules.language",
    "SyntheticDataModule": "poslab.datamodules.synthetic",
    "SyntheticTask": "poslab.datamodules.tasks",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'poslab.datamodules' has no attribute {name!r}")
