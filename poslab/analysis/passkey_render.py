"""The needle picture: passkey retrieval's exact match by distance (x, log 2, in multiples of the training context)
and depth (y, 0 at the top), one panel per encoding, drawn from the results' ``passkey`` dicts alone (no model;
``poslab.lightning_modules.passkey.passkey_result`` writes them)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.plotting import constant_note, note_sparse_panel, plain_number, plt, save_figure

COLUMNS = 4  # panels per row of the small multiples
ANNOTATE_UP_TO = 6  # panels whose cells carry their value as text (more: the cells are too small to read)


def is_result(value: Mapping[str, Any]) -> bool:
    """One passkey result (rather than ``{label: result}``)."""
    return "distances" in value and "depths" in value


def multiple_label(multiple: float) -> str:
    """1/8, 1/4, 1/2, 1, 2, ... 16 (a multiple of the context); others as they are."""
    if 0 < multiple < 1 and abs(1 / multiple - round(1 / multiple)) < 1e-9:
        return f"1/{round(1 / multiple)}"
    return f"{multiple:g}"


def edges(centres: np.ndarray, half: float) -> np.ndarray:
    """Cell edges midway between centres; the outer ones half a neighbour's gap out (``half`` for one cell)."""
    if len(centres) == 1:
        return np.array([centres[0] - half, centres[0] + half])
    middle = (centres[1:] + centres[:-1]) / 2
    return np.concatenate([[2 * centres[0] - middle[0]], middle, [2 * centres[-1] - middle[-1]]])


def way_of(result: Mapping[str, Any], way: str | None) -> np.ndarray | None:
    """The exact-match matrix ``[distance, depth]`` of ``way`` (None or "plain": the plain model); None if absent."""
    if way in (None, "plain"):
        return np.asarray(result["exact"], dtype=float)
    figures = result.get("ways", {}).get(way)
    return None if figures is None else np.asarray(figures["exact"], dtype=float)


def draw_panel(ax: Any, result: Mapping[str, Any], way: str | None, annotate: bool) -> Any:
    """One heatmap; the dashed line stands before the first distance at which both phrases never fit in one training
    window (d + m > L). Returns the mesh (None when ``way`` was not evaluated)."""
    context = int(result["context_length"])
    x = np.log2(np.asarray(result["distances"], dtype=float) / context)
    y = np.asarray(result["depths"], dtype=float)
    exact = way_of(result, way)
    if exact is None:
        note_sparse_panel(ax, 0, f"not evaluated as {way}")
        return None
    x_edges, y_edges = edges(x, 0.5), edges(y, 0.125)
    mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_invalid(exact.T), cmap="viridis", vmin=0.0, vmax=1.0)
    ax.set_facecolor("lightgrey")  # a cell not scored (nan)
    ax.set_xticks(x, [multiple_label(m) for m in np.asarray(result["distances"]) / context], fontsize=7)
    ax.set_yticks(y, [f"{q:g}" for q in y], fontsize=7)
    ax.set_xlim(x_edges[0], x_edges[-1])
    ax.set_ylim(y_edges[-1], y_edges[0])  # depth 0 (the first key opens the text) at the top
    phrase = len(result["phrase"].format(key="0" * int(result["key_length"])))
    beyond = [i for i, d in enumerate(result["distances"]) if d + phrase > context]
    if beyond:
        ax.axvline(x_edges[beyond[0]], color="red", ls="--", lw=1.2)
    if annotate:
        for i, xi in enumerate(x):
            for j, yj in enumerate(y):
                value = exact[i, j]
                text, colour = (
                    ("n/a", "black") if math.isnan(value) else (f"{value:.2f}", "black" if value > 0.6 else "white")
                )
                ax.text(xi, yj, text, ha="center", va="center", fontsize=6, color=colour)
    return mesh


def plot_passkey(results: Mapping[str, Any], way: str | None = None) -> Any:
    """Small multiples of ``{label: result}`` (or one result), exact match coloured 0..1 with one colour bar."""
    panels = {"passkey": results} if is_result(results) else dict(results)
    columns = min(COLUMNS, len(panels))
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(
        rows, columns, figsize=(3.0 * columns + 2.4, 2.5 * rows + 1.3), squeeze=False, layout="constrained"
    )
    mesh = None
    # what every panel shares goes in the labels and the title; what differs (an extension's context, another
    # trial count) in each panel's own title, never the first panel's value for all
    shared = {key: _shared(panels, key) for key in ("context_length", "trials")}
    recorded = all("seeds" in result for result in panels.values())  # a run's own result has no seed count
    shared["seeds"] = _shared(panels, "seeds") if recorded else None
    for ax, (label, result) in zip(axes.flat, panels.items()):
        drawn = draw_panel(ax, result, way, annotate=len(panels) <= ANNOTATE_UP_TO)
        mesh = mesh or drawn
        title = label if way in (None, "plain") else f"{label}, {way}"
        own = [f"L = {result['context_length']}" if shared["context_length"] is None else "",
               f"{result['trials']} trials" if shared["trials"] is None else "",
               f"{result['seeds']} seeds" if recorded and shared["seeds"] is None else ""]  # fmt: skip
        if any(own):
            title += f" ({', '.join(part for part in own if part)})"
        exact = way_of(result, way)
        if exact is not None and (even := constant_note(exact)):
            title += f": {even}"  # an even colour: 0 (or 1) everywhere, not a scale without contrast
        ax.set_title(title, fontsize=8)
    for ax in list(axes.flat)[len(panels) :]:
        fig.delaxes(ax)  # the last row's spare places: nothing there, not even an empty axis
    first = next(iter(panels.values()))
    context = "its own context L" if shared["context_length"] is None else f"context L = {shared['context_length']}"
    for column in range(columns):  # the lowest panel drawn in each column carries the distance axis's label
        lowest = (len(panels) - 1 - column) // columns
        axes[lowest, column].set_xlabel(f"distance d (x {context})", fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("depth of the first key", fontsize=7)
    if mesh is not None:  # one colour bar, no taller than three rows of panels
        bar = fig.colorbar(mesh, ax=list(axes.flat)[: len(panels)], shrink=min(1.0, 3 / rows))
        bar.set_label(f"exact match\n(all {first['key_length']} digits)", fontsize=8)
    drawn = [e for r in panels.values() if (e := way_of(r, way)) is not None]
    every = constant_note(np.concatenate([e.ravel() for e in drawn])) if drawn else ""
    note = f"\nEVERY PANEL: {every.upper()}" if every else ""
    fig.suptitle(suptitle(first, shared["trials"], panels, shared["seeds"]) + note, fontsize=8)
    return fig


def _shared(panels: Mapping[str, Mapping[str, Any]], key: str) -> Any:
    """The value of ``key`` every panel has, or None where they differ."""
    values = {str(result[key]) for result in panels.values()}
    return next(iter(panels.values()))[key] if len(values) == 1 else None


def lengths_text(panels: Mapping[str, Mapping[str, Any]]) -> str:
    """The sequence lengths scored (``sequence_lengths``: filler, both keys and the question), over every panel:
    ``sequences 56-2,200 tokens``; empty for results that did not record them."""
    lengths = [n for r in panels.values() for row in r.get("sequence_lengths") or [] for n in row]
    return f"sequences {plain_number(min(lengths))}-{plain_number(max(lengths))} tokens" if lengths else ""


def seeds_text(panels: Mapping[str, Mapping[str, Any]], seeds: Any) -> str:
    """``mean of 3 seeds`` (shared), ``seeds in each panel's title`` (they differ), or ``one run`` (a single run's
    result, which has no seed count)."""
    if seeds is not None:
        return f"mean of {seeds} seeds" if int(seeds) > 1 else "one seed"
    if all("seeds" in r for r in panels.values()):
        return "seeds in each panel's title"
    return "one run"


def suptitle(
    result: Mapping[str, Any],
    trials: Any = None,
    panels: Mapping[str, Mapping[str, Any]] | None = None,
    seeds: Any = None,
) -> str:
    """The figure's title: what was scored (sequence lengths, trials per cell, seeds), chance, the dashed line."""
    panels = panels or {"passkey": result}
    per_cell = f"{trials} trials per cell" if trials is not None else "trials per cell in each panel's title"
    sample = ", ".join(part for part in (lengths_text(panels), per_cell, seeds_text(panels, seeds)) if part)
    return (
        f"passkey retrieval: {sample}\n"
        f"chance: {result['chance_digit']:g} per digit, 1e-{result['key_length']} exact\n"
        "right of the dashed line: both keys never\nfit in one training window"
    )


def write_passkey_figure(results: Mapping[str, Any], path: str | Path, way: str | None = None) -> Path:
    """``plot_passkey`` written atomically as a PNG at ``path``."""
    return save_figure(plot_passkey(results, way), path)
