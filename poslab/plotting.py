"""Matplotlib without a screen, Chinese drawn with a CJK font (``poslab.fonts``), figures written atomically as PNG."""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from poslab.fonts import use_cjk_fallback  # noqa: E402
from poslab.io import write_atomic  # noqa: E402

# before any figure: a text's font is fixed when it is made
use_cjk_fallback(plt.rcParams)


def save_figure(fig: plt.Figure, path: str | Path, dpi: int = 120) -> Path:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return write_atomic(path, buffer.getvalue())


__all__ = ["plt", "save_figure"]
