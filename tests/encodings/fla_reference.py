"""fla-core's naive (pure PyTorch) references, loaded by file path from the installed ``fla-core`` (the ``test`` extra):
``import fla`` needs triton, and these files import only torch and einops."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from types import ModuleType

FLA_VERSION = "0.6.0"


def fla_naive(operation: str) -> ModuleType:
    """``fla/ops/<operation>/naive.py`` of the installed fla-core, as a module of its own (fla's package not run)."""
    distribution = importlib.metadata.distribution("fla-core")
    assert distribution.version == FLA_VERSION, (
        f"the references are fla-core {FLA_VERSION}'s, not {distribution.version}"
    )
    path = distribution.locate_file(f"fla/ops/{operation}/naive.py")
    spec = importlib.util.spec_from_file_location(f"fla_naive_{operation}", str(path))
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
