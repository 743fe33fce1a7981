"""Matplotlib without a screen, and figures written atomically as PNG."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from poslab.io import write_atomic  # noqa: E402


def save_figure(fig: plt.Figure, path: str | Path, dpi: int = 120) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return write_atomic(path, buffer.getvalue())


__all__ = ["plt", "save_figure"]
