"""Rendering of the losses report (``poslab.analysis.losses``): its markdown tables and CSV from the summary
(``losses.json``) alone, so ``poslab report losses --from losses.json`` re-renders without runs."""

from __future__ import annotations

from typing import Any

from poslab.analysis.output import steps_cell
from poslab.analysis.tables import csv_text, markdown_table

RUN_COLUMNS = ["seed", "steps", "val documents", "parameters", "val loss (nats)", "val bits/byte", "data", "run"]


def runs_table(summary: dict[str, Any]) -> str:
    """One row per run: its corpus, encoding and the settings telling it apart, its figures and directory."""
    header = ["corpus", "encoding", *summary["setting_keys"], *RUN_COLUMNS]
    rows = [
        [run["corpus"], run["encoding"], *run["settings"], run["seed"], steps_cell(*run["steps"]),
         f"{run['val_documents']:,}", f"{run['parameters']:,}", f"{run['val_loss']:.4f}", f"{run['val_bpb']:.4f}",
         run["data"], run["run"]]
        for run in summary["runs"]
    ]  # fmt: skip
    return markdown_table(header, rows)


def means_table(summary: dict[str, Any]) -> str:
    """Per config, the mean over its seeds of each figure; nothing when no config has several seeds."""
    configs = summary["configs"]
    if all(config["seeds"] < 2 for config in configs):
        return ""
    header = ["corpus", "encoding", *summary["setting_keys"], "seeds", "mean val loss (nats)", "mean val bits/byte"]
    rows = [
        [c["corpus"], c["encoding"], *c["settings"], c["seeds"], f"{c['val_loss']['mean']:.4f}",
         f"{c['val_bpb']['mean']:.4f}"]
        for c in configs
    ]  # fmt: skip
    return markdown_table(header, rows)


def losses_markdown(summary: dict[str, Any]) -> str:
    """The runs' table, the seed means' (where a config has several seeds), the notes."""
    parts = [runs_table(summary)] + [table for table in [means_table(summary)] if table]
    notes = summary.get("notes") or []
    return "\n\n".join(parts + (["\n".join(notes)] if notes else []))


def losses_csv(summary: dict[str, Any]) -> str:
    """One row per run: its settings, seed, steps (and its recipe's), documents, parameters, figures, directory."""
    header = ["corpus", "encoding", *summary["setting_keys"], "seed", "steps", "recipe_steps", "val_documents"]
    header += ["parameters", "val_loss", "val_bpb", "data", "run"]
    rows = [
        [run["corpus"], run["encoding"], *run["settings"], run["seed"], *run["steps"], run["val_documents"],
         run["parameters"], run["val_loss"], run["val_bpb"], run["data"], run["run"]]
        for run in summary["runs"]
    ]  # fmt: skip
    return csv_text(header, rows)
