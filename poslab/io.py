"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import math
import os
import tempfile
import threading
from pathlib import Path
from typing import Any


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write to a temporary file in the same directory, flush it to disk, then rename it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes the file private (0600); results are for sharing
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    """The process's umask, read without setting it where the kernel says it (``/proc/self/status``: setting and
    restoring it, the only portable way, leaves a moment in which another thread creates files with umask 0)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    with _UMASK_LOCK:
        mask = os.umask(0)
        os.umask(mask)
    return mask


_UMASK_LOCK = threading.Lock()


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    """JSON has no NaN or infinity (Python writes them anyway, and strict readers refuse the file): such a
    number is written as null."""
    text = json.dumps(finite_or_null(obj), indent=2, sort_keys=False, default=str, allow_nan=False)
    return write_atomic(path, text + "\n")


def finite_or_null(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {key: finite_or_null(value) for key, value in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(value) for value in obj]
    return obj


def number_or_nan(value: float | None) -> float:
    """The reader's side of ``finite_or_null``: a number a JSON file holds as null (not finite, or not computed) is
    NaN again, so sums and comparisons treat it as missing."""
    return math.nan if value is None else float(value)


def read_json(path: str | os.PathLike) -> Any:
    with open(path) as f:
        return json.load(f)
