"""``poslab analyze increments``, the render layer: the printed report, ``increments_categories.csv``,
``increments_boundaries.csv`` and the ``increments_positions_*.png`` pictures, from the summary
(``increments_analysis.json``, ``compute.increments_summary``) alone: no run, no model, so
``poslab analyze increments --from increments_analysis.json`` draws them all again.

The picture puts every character of a sentence at its learned position, one row per layer: a multi-byte character
(Chinese: three bytes) is drawn at its start and is as wide as the sum of its bytes' increments. Chinese is drawn
with the CJK font of ``poslab.analysis.fonts``; with none installed, as code points (``U+4EBA``), rotated.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from dataclasses import astuple, fields
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.fonts import cjk_font, has_glyph
from poslab.analysis.increments.readings import (
    ALL_SOURCES,
    CEILING_BYTES,
    CEILING_LABELS,
    SCORE_BYTES,
    SCORE_LABELS,
    SOURCE_KINDS,
    BoundaryRow,
    CategoryRow,
    boundary_rows,
    layer_names_for,
    positions_from_deltas,
)
from poslab.analysis.increments.text import CATEGORY_LABELS, SEPARATOR_CHAR, as_layers, as_tokens, decode_characters
from poslab.analysis.output import AnalysisResult, read_summary, steps_cell
from poslab.analysis.plotting import plt, save_figure
from poslab.analysis.tables import csv_text, markdown_table

#: the summary (``compute.increments_summary``), the one JSON file: all this layer reads (``--from``)
SUMMARY_FILE = "increments_analysis.json"
#: the x axis of the positions picture of an encoding that learns its positions (the increments encodings)
LEARNED_POSITION = "learned position (running sum of δ)"
NO_CHINESE = "Chinese word boundaries: no Chinese text (give --zh-text FILE, or a corpus with a 'zh' group)."
#: layers whose δ is a function of the byte alone: the shared DeltaMLP reads the token embeddings, and so does
#: layer 0's (its residual stream is the embeddings)
BYTE_ONLY_LAYERS = ("shared", "L0")


# ---------------------------------------------------------------------------------------------------------
# Tables and CSVs


#: the category table's heading per layer, by whether the positions are learned (the write-up's) or counted
LEARNED_HEADING = "Learned Increment δ"
COUNTED_HEADING = "Counted increment δ, not learned"


def format_category_table(rows: Sequence[CategoryRow], sort_by_mean: bool = True, learned: bool = True) -> str:
    """The table as the write-up prints it: a ``Learned Increment δ (L0)`` header per layer, then one
    ``English (lowercase) 0.68–0.96 (mean 0.79)`` line per category, smallest mean first (as the write-up
    orders them) unless ``sort_by_mean`` is False. ``learned=False`` (plain RoPE: δ = 1 per byte, counted)
    heads each layer ``Counted increment δ, not learned``, so the baseline is not read as a learned table."""
    layers = list(dict.fromkeys(r.layer for r in rows))
    heading = LEARNED_HEADING if learned else COUNTED_HEADING
    lines = []
    for layer in layers:
        mine = [r for r in rows if r.layer == layer]
        if sort_by_mean:
            mine.sort(key=lambda r: r.mean)
        lines.append(f"{heading} ({layer})")
        lines += [
            f"{CATEGORY_LABELS[r.category]} {r.range_min:.2f}–{r.range_max:.2f} (mean {r.mean:.2f})" for r in mine
        ]
    return "\n".join(lines)


def _rows_csv(rows: Sequence[Any], row_type: type) -> str:
    """Dataclass rows as CSV, one column per field (floats with all their digits, None empty)."""
    return csv_text([f.name for f in fields(row_type)], [astuple(r) for r in rows])


def category_csv(rows: Sequence[CategoryRow]) -> str:
    """The rows as CSV (layer, category, count, mean, range_min, range_max)."""
    return _rows_csv(rows, CategoryRow)


def boundary_csv(rows: Sequence[BoundaryRow]) -> str:
    """The rows as CSV (subset, reading, layer, gaps, word_starts, auc, values; a ceiling's layer is empty, a
    score's values too)."""
    return _rows_csv(rows, BoundaryRow)


def _auc_cell(auc: float) -> str:
    return "–" if math.isnan(auc) else f"{auc:.3f}"


def format_boundary_table(rows: Sequence[BoundaryRow]) -> str:
    """Two markdown tables: per source subset its gaps, word starts and ceilings (each with the number of
    distinct values of what it names); per layer each subset's scores."""
    subsets = list(dict.fromkeys(r.subset for r in rows))
    layers = list(dict.fromkeys(r.layer for r in rows if r.reading in SCORE_BYTES))
    by = {(r.subset, r.reading, r.layer): r for r in rows}
    first = {s: next(r for r in rows if r.subset == s) for s in subsets}
    ceilings = [f"ceiling: {CEILING_LABELS[c]} (values)" for c in CEILING_BYTES]
    sources = markdown_table(
        ["source", "gaps", "word starts", *ceilings],
        [
            [s, f"{first[s].gaps:,}", f"{first[s].word_starts:,}"]
            + [f"{_auc_cell(by[s, c, ''].auc)} ({by[s, c, ''].values:,})" for c in CEILING_BYTES]
            for s in subsets
        ],
        align="l" + "r" * (2 + len(ceilings)),
    )
    scores = [(s, score) for s in subsets for score in SCORE_BYTES]
    layer_table = markdown_table(
        ["layer", *(f"{s}: {score}" for s, score in scores)],
        [[layer, *(_auc_cell(by[s, score, layer].auc) for s, score in scores)] for layer in layers],
        align="l" + "r" * len(scores),
    )
    return f"{sources}\n\n{layer_table}"


# ---------------------------------------------------------------------------------------------------------
# The picture


def positions_title(encoding: str, learned: bool, unit_steps: bool, steps: str) -> str:
    """The picture's title, saying what was trained: positions learned in so many training steps, or positions the
    encoding counts (plain RoPE: δ = 1 per byte, the baseline), which no training changes."""
    if learned:
        return f"{encoding}: positions learned in {steps} training steps"
    if unit_steps:
        return f"{encoding}: positions counted, not learned (δ = 1 per byte: the baseline)"
    return f"{encoding}: the positions the encoding computes, not learned"


def positions_axis_label(learned: bool, unit_steps: bool) -> str:
    """The picture's x axis, saying what the positions are: learned (the increments encodings), or the token index
    an encoding counts (plain RoPE: byte 0, 1, 2, ...), or whatever else the encoding computes."""
    if learned:
        return LEARNED_POSITION
    if unit_steps:
        return "token index (byte offset: positions counted, δ = 1 per byte)"
    return "position the encoding computes (not learned)"


@cache
def _default_font() -> str:
    from matplotlib import font_manager

    return font_manager.findfont(font_manager.FontProperties(), fallback_to_default=True)


def cjk_font_path() -> str | None:
    """The file of the font figures draw Chinese with (``poslab.analysis.fonts``), or None when there is none."""
    font = cjk_font()
    return font.path if font is not None else None


_SHOWN_AS = {"\n": "↵", "\t": "⇥", " ": "", SEPARATOR_CHAR: "<sep>"}


def character_label(char: str) -> tuple[str, str | None, bool]:
    """How positions_figure draws ``char``: ``(text, font file or None for the default, rotated)``.

    A character no available font can draw is written as its code point (``U+4EBA``), rotated to fit the
    narrow space a character gets; so are control characters.
    """
    if char in _SHOWN_AS:
        return _SHOWN_AS[char], None, char == SEPARATOR_CHAR
    if unicodedata.category(char) == "Cc":
        return f"U+{ord(char):04X}", None, True
    if has_glyph(_default_font(), char):
        return char, None, False
    cjk = cjk_font_path()
    if cjk is not None and has_glyph(cjk, char):
        return char, cjk, False
    return f"U+{ord(char):04X}", None, True


def character_spans(chars: list[tuple[str, int, int]], pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each character starts and how wide it is, per layer (``[L, C]`` each): from the position before its
    first byte to the position of its last byte. The first token has no position before it; it gets the row's
    median step (counted positions start at 0, so ``before = 0`` would draw the first two characters at one x)."""
    steps = np.diff(pos, axis=1)
    typical = np.median(steps, axis=1, keepdims=True) if steps.shape[1] else np.ones((pos.shape[0], 1))
    before = np.concatenate([pos[:, :1] - typical, pos[:, :-1]], axis=1)  # position before each token
    firsts = np.array([first for _, first, _ in chars])
    lasts = np.array([last for _, _, last in chars])
    return before[:, firsts], pos[:, lasts] - before[:, firsts]


Label = tuple[str, str | None, bool]  # what character_label gives: text, font file, rotated


def _draw_row(
    ax: Any, name: str, row: np.ndarray, spans: list[tuple[float, float]], labels: list[Label], fonts: dict[str, Any]
) -> None:
    """One layer's row: a bar under each character's span, the character written at its start."""
    colors = ["tab:blue" if k % 2 == 0 else "tab:orange" for k in range(len(spans))]
    ax.broken_barh(spans, (0.05, 0.12), facecolors=colors, alpha=0.6)
    for (x0, _), (label, font, rotated) in zip(spans, labels):
        if not label:
            continue
        ax.text(
            x0,
            0.6,
            label,
            ha="left",
            va="center",
            rotation=90 if rotated else 0,
            fontsize=6 if rotated else 10,
            fontproperties=fonts.get(font),
            parse_math=False,  # a lone '$' is a character, not the start of mathtext
        )
    left, right = min(x0 for x0, _ in spans), float(row[-1])
    pad = 0.02 * (right - left)
    ax.set_xlim(left - pad, right + pad)
    ax.set_ylim(0, 1)
    ax.set_yticks([])
    ax.set_ylabel(name, rotation=0, ha="right", va="center")
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)


def positions_figure(
    text: str,
    tokens: Any,
    positions: Any,
    title: str | None = None,
    layer_names: Sequence[str] | None = None,
    position_label: str = LEARNED_POSITION,
) -> Any:
    """Draw every character of ``text`` at its learned position, one row per layer (a matplotlib figure).
    ``position_label`` names the x axis: what the positions are (``positions_axis_label``).

    ``positions [L, N]`` are the running sums of the increments (``readings.positions_from_deltas``); each row has
    its own x range, as layers can learn very different scales. ``text`` must be what
    ``decode_characters(tokens)`` decodes to, i.e. for valid UTF-8 ``tokens == list(text.encode("utf-8"))``.
    """
    from matplotlib.font_manager import FontProperties

    t = as_tokens(tokens)
    pos = as_layers(positions, t.size, "positions")
    chars = decode_characters(t)
    if not chars:
        raise ValueError("nothing to plot: no tokens")
    if "".join(c for c, _, _ in chars) != text:
        raise ValueError("text and tokens do not correspond: tokens must be text encoded as UTF-8")
    names = layer_names_for(layer_names, pos.shape[0])
    starts, widths = character_spans(chars, pos)
    # Give the typical (median-width) character about 0.13 inch in the row that needs the most room, so
    # narrow bytes stay legible next to wide ones; very long texts are capped and will overlap.
    typical = np.maximum(np.median(widths, axis=1), 1e-9)
    width = float(np.clip(1.5 + 0.13 * np.max(pos[:, -1] / typical), 6.0, 40.0))
    fig, axes = plt.subplots(pos.shape[0], 1, figsize=(width, 0.9 * pos.shape[0] + 0.9), squeeze=False)
    labels = [character_label(c) for c, _, _ in chars]
    fonts = {f: FontProperties(fname=f) for _, f, _ in labels if f is not None}
    for ax, name, row, row_starts, row_widths in zip(axes[:, 0], names, pos, starts, widths):
        _draw_row(ax, name, row, list(zip(row_starts.tolist(), row_widths.tolist())), labels, fonts)
    axes[-1, 0].set_xlabel(position_label)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_positions(
    text: str,
    tokens: Any,
    positions: Any,
    path: str | Path,
    title: str | None = None,
    layer_names: Sequence[str] | None = None,
    position_label: str = LEARNED_POSITION,
) -> Path:
    """``positions_figure`` saved as a PNG at ``path``."""
    return save_figure(positions_figure(text, tokens, positions, title, layer_names, position_label), path)


# ---------------------------------------------------------------------------------------------------------
# The report, from the summary


def category_rows(summary: dict[str, Any]) -> list[CategoryRow]:
    return [CategoryRow(**row) for row in summary["categories"]]


def boundary_lines(summary: dict[str, Any]) -> list[str]:
    """The word-boundary section of the report: what was read, the two tables, and for a layer whose δ is a
    function of the byte alone what its scores cannot beat."""
    part = summary["boundaries"]
    rows = boundary_rows(part["subsets"])
    if not rows:
        return [NO_CHINESE]
    scores = "; ".join(f"{name}: {label}" for name, label in SCORE_LABELS.items())
    lines = [
        f"Chinese word boundaries (jieba): ROC-AUC (0.5 = chance) on {part['characters']:,} {part['text']} "
        f"characters, the gaps between two CJK characters whose next character lies inside one window; {scores}. A "
        f"ceiling is the best AUC any function of what it names reaches on the same gaps (in-sample: an upper bound).",
    ]
    if part["documents"]:
        shown = ", ".join(f"{kind} {part['documents'][kind]}" for kind in SOURCE_KINDS if kind in part["documents"])
        lines.append(f"Held-out documents by source (docs/increments.md: the rule): {shown}.")
    lines.append(format_boundary_table(rows))
    byte_only = [name for name in summary["layers"] if name in BYTE_ONLY_LAYERS]
    ceilings = {r.reading: r.auc for r in rows if r.subset == ALL_SOURCES and not r.layer}
    if byte_only and not math.isnan(ceilings["lead_byte"]):  # NaN: the gaps hold one class only
        lines.append(
            f"{' and '.join(byte_only)}: δ there is a function of the byte alone, so its lead score cannot beat the "
            f"lead-byte ceiling ({ceilings['lead_byte']:.3f} on all gaps, {ceilings['lead_byte'] - 0.5:+.3f} from "
            f"chance: an AUC near 0.5 there is built in, not a finding about the model) nor its char score the "
            f"next-character ceiling ({ceilings['next_character']:.3f})."
        )
    return lines


def report_text(summary: dict[str, Any]) -> str:
    """The printed report: the run, the category table, the notes on the sample, the word-boundary section."""
    text = summary["category_text"]
    lines = [
        f"run {summary['run']}: encoding {summary['encoding']}, corpus {summary['corpus']}, "
        f"{steps_cell(*summary['steps'])} training steps",
        "",
        f"δ by byte category on {text['bytes']:,} held-out bytes ({', '.join(text['streams'])}; each window's first "
        f"byte left out):",
        format_category_table(category_rows(summary), learned=summary["pictures"]["learned"]),
    ]
    if summary["validation_documents"] is not None:  # held-out text: the validation documents behind the table
        lines.append(
            f"Held-out text: up to {text['max_bytes']:,} bytes per group from {summary['validation_documents']:,} "
            f"validation documents."
        )
    return "\n".join([*lines, *summary["notes"], "", *boundary_lines(summary)])


def positions_pictures(summary: dict[str, Any]) -> list[Any]:
    """The picture of each sentence (matplotlib figures), titled with what was trained."""
    pictures = summary["pictures"]
    learned, unit_steps = pictures["learned"], pictures["unit_steps"]
    title = positions_title(summary["encoding"], learned, unit_steps, steps_cell(*summary["steps"]))
    axis = positions_axis_label(learned, unit_steps)
    return [
        positions_figure(
            sentence["text"],
            list(sentence["text"].encode("utf-8")),
            positions_from_deltas(sentence["deltas"]),
            title=title,
            layer_names=summary["layers"],
            position_label=axis,
        )
        for sentence in pictures["sentences"]
    ]


def render_increments(summary: dict[str, Any], directory: Path) -> AnalysisResult:
    """The report and every file of the analysis from ``summary`` alone, for ``directory``."""
    result = AnalysisResult("increments", report_text(summary), directory)
    result.add_text("increments_categories.csv", category_csv(category_rows(summary)))
    for i, figure in enumerate(positions_pictures(summary)):
        result.add_figure(f"increments_positions_{i}.png", figure)
    rows = boundary_rows(summary["boundaries"]["subsets"])
    if rows:
        result.add_text("increments_boundaries.csv", boundary_csv(rows))
    result.add_json(SUMMARY_FILE, summary)
    return result


def rerender_increments(path: str | Path) -> AnalysisResult:
    """``--from``: the report and files again from an ``increments_analysis.json`` the analysis wrote (beside it
    unless ``--output-dir`` says otherwise)."""
    summary = read_summary(path, "increments", "pictures", SUMMARY_FILE, "poslab analyze increments RUN_DIR")
    return render_increments(summary, Path(path).parent)
