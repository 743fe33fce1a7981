"""Where an analysis or report writes, and in what order: the report is complete before any file is written.

Every ``poslab analyze ...`` and ``poslab report ...`` builds an ``AnalysisResult``: the printed report and its
files (tables, JSON, PNGs) held in memory. The command prints the report, then writes the files into
``--output-dir``, or by default beside what it read (``RUN_DIR/analysis/<name>/`` for one run, the first
multirun directory's ``analysis/<name>/`` for several: ``poslab.run_files.default_analysis_dir``). A run
directory that cannot be written to (read-only, another user's) still yields the report, then one message
naming the directory and ``--output-dir``. Nothing is written into the current directory unless asked.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab.errors import OutputNotWritableError
from poslab.io import write_atomic

#: runs after the files are written, with their directory: e.g. log the figures to the runs' loggers
AfterWrite = Callable[[Path], "str | None"]


def figure_png(fig: Any, dpi: int = 120) -> bytes:
    """A matplotlib figure as PNG bytes (and closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    return buffer.getvalue()


@dataclass
class AnalysisResult:
    """The report of an analysis and the files it writes (by name, relative to the output directory)."""

    name: str
    report: str
    default_dir: Path
    files: dict[str, bytes] = field(default_factory=dict)
    after_write: list[AfterWrite] = field(default_factory=list)

    def add_text(self, filename: str, text: str) -> str:
        self.files[filename] = (text if text.endswith("\n") else text + "\n").encode()
        return filename

    def add_json(self, filename: str, obj: Any) -> str:
        self.files[filename] = (json.dumps(obj, indent=2, default=str) + "\n").encode()
        return filename

    def add_figure(self, filename: str, fig: Any) -> str:
        self.files[filename] = figure_png(fig)
        return filename

    def write(self, output_dir: str | Path | None = None) -> tuple[Path, list[str]]:
        """Write every file (atomically) into ``output_dir`` or the default directory; then run the
        ``after_write`` steps. Returns the directory and the lines those steps report."""
        directory = Path(output_dir) if output_dir is not None else self.default_dir
        written: list[str] = []
        try:
            for filename, payload in self.files.items():
                write_atomic(directory / filename, payload)
                written.append(filename)
        except OSError as error:
            reason = error.strerror or type(error).__name__
            done = f" ({len(written)} of {len(self.files)} files written)" if written else ""
            raise OutputNotWritableError(
                f"the report above is complete, but its files could not be written to {directory}: {reason}{done}; "
                f"give --output-dir DIR with a directory you can write to."
            ) from error
        lines = [line for step in self.after_write if (line := step(directory))]
        return directory, lines

    def written_line(self, directory: Path) -> str:
        names = ", ".join(self.files)
        return f"{self.name}: {len(self.files)} files written to {directory}: {names}"
