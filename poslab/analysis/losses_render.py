"""Rendering of the losses report (``poslab.analysis.losses``): its markdown tables and CSV from the summary
(``losses.json``) alone, so ``poslab report losses --from losses.json`` re-renders without runs."""

from __future__ import annotations

from typing import Any

from poslab.analysis.losses import FIGURES
from poslab.analysis.output import steps_cell
from poslab.analysis.stats import Interval
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


def documents_cell(config: dict[str, Any], key: str) -> str:
    """A figure over seeds and documents, with the table's shape; ``n/a`` where not every seed recorded the same
    held-out documents (or a summary written before the report computed it)."""
    crossed = (config.get("seeds_x_documents") or {}).get(key)
    if not crossed:
        return "n/a"
    return f"{Interval.from_dict(crossed).cell(4)} ({crossed['seeds']} seeds x {crossed['documents']:,} documents)"


def means_table(summary: dict[str, Any]) -> str:
    """Per config, each figure's mean over its seeds with the 95% t-interval over them (the mean alone for one
    seed) and, where any config has them, over seeds and held-out documents; nothing when no config has several
    seeds."""
    configs = summary["configs"]
    if all(config["seeds"] < 2 for config in configs):
        return ""
    header = ["corpus", "encoding", *summary["setting_keys"], "seeds"]
    header += ["val loss (nats), mean [95% over seeds]", "val bits/byte, mean [95% over seeds]"]
    rows = [
        [c["corpus"], c["encoding"], *c["settings"], c["seeds"],
         *(Interval.from_dict(c[key]).cell(4) for key in FIGURES)]
        for c in configs
    ]  # fmt: skip
    if any(config.get("seeds_x_documents") for config in configs):  # runs that recorded their held-out documents' sums
        header += [
            "val loss (nats), mean [95% over seeds x documents]",
            "val bits/byte, mean [95% over seeds x documents]",
        ]
        rows = [row + [documents_cell(c, key) for key in FIGURES] for row, c in zip(rows, configs)]
    return markdown_table(header, rows)


def losses_markdown(summary: dict[str, Any]) -> str:
    """The runs' table, the seed means' (where a config has several seeds), the notes."""
    parts = [runs_table(summary)] + [table for table in [means_table(summary)] if table]
    notes = summary.get("notes") or []
    return "\n\n".join(parts + (["\n".join(notes)] if notes else []))


def losses_csv(summary: dict[str, Any]) -> str:
    """One row per run: its settings, seed, steps (and its recipe's), documents, parameters, figures, directory."""
    header = ["corpus", "encoding", *summary["setting_keys"], "seed", "steps", "recipe_steps", "val_documents"]
    header += ["parameters", "val_loss", "val_bpb", "data", "data_hash", "host", "run"]
    rows = [
        [run["corpus"], run["encoding"], *run["settings"], run["seed"], *run["steps"], run["val_documents"],
         run["parameters"], run["val_loss"], run["val_bpb"], run["data"], run.get("data_hash"), run.get("host"),
         run["run"]]
        for run in summary["runs"]
    ]  # fmt: skip
    return csv_text(header, rows)
