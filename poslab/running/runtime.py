"""Process-level settings that make small CPU models faster."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys
from pathlib import Path

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def keep_freed_memory(limit_bytes: int = 1 << 30) -> bool:
    """Ask glibc's malloc to serve tensors below ``limit_bytes`` from its heap and to keep freed memory.

    By default glibc gives large blocks (from 128 KB, adaptively up to 32 MB) their own mmap and may return
    freed memory to the system, so a training step that allocates the same activations every time pays page
    faults to zero fresh pages each time (``sys`` time). Keeping the memory makes later steps reuse warm pages;
    the price is that the process does not hand back its peak memory until it exits. Returns whether it
    applied (glibc on Linux only).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, limit_bytes)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, limit_bytes))
    except (OSError, AttributeError):  # not glibc (musl, ...): nothing to tune
        return False


def wandb_offline_unless_key() -> str:
    """W&B runs online only when an API key is configured (WANDB_API_KEY, or `wandb login` in ~/.netrc);
    otherwise WANDB_MODE=offline, so no network is touched. An explicit WANDB_MODE is respected. W&B's console
    chatter (a deprecation notice Lightning triggers, the run history and summary it prints at the end: poslab
    prints its figures itself) is cut to its critical lines unless WANDB_QUIET is set."""
    import os
    from pathlib import Path

    os.environ.setdefault("WANDB_QUIET", "true")
    if "WANDB_MODE" not in os.environ:
        netrc = Path.home() / ".netrc"
        has_key = bool(os.environ.get("WANDB_API_KEY")) or (netrc.is_file() and "api.wandb.ai" in netrc.read_text())
        os.environ["WANDB_MODE"] = "online" if has_key else "offline"
    return os.environ["WANDB_MODE"]


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """The processor's name (Linux's first ``model name``), else what ``platform`` knows: a run's speed figures
    (train_seconds, throughput) mean little without the host they were taken on."""
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown"


def environment() -> dict[str, object]:
    """Where a run ran, for results.json: the visible GPUs, torch, the CPU, its cores and the threads used."""
    import torch

    return {
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
    }
