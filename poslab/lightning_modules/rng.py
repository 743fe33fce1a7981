"""The global RNG states (torch and CUDA, numpy, Python) as a checkpoint stores them, and back: a resumed run
draws what the uninterrupted one would have. A leaf: the LightningModules save and restore them in their
checkpoint hooks, and nothing here knows about run files."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_states() -> dict[str, Any]:
    """The global RNG states of torch (and CUDA), numpy and Python, as tensors and plain values only, so a
    checkpoint holding them still loads with ``weights_only=True`` (numpy's own state is a tuple holding an
    ndarray, which ``weights_only`` refuses)."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    version, python_state, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {
            "kind": str(kind),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": {"version": int(version), "state": list(python_state), "gauss_next": gauss_next},
    }


def set_rng_states(states: dict[str, Any]) -> None:
    """Restore what ``rng_states`` returned."""
    torch.set_rng_state(states["torch"])
    if states.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    numpy_state = states["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy().astype(np.uint32),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    python_state = states["python"]
    random.setstate((python_state["version"], tuple(python_state["state"]), python_state["gauss_next"]))
