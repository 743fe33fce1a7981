"""Learned position increments: what a byte-level model thinks the distance between its tokens is.

A model with learned increments advances its position counter by a positive δ per byte token (and per
layer); a token's position is the running sum of the increments up to and including it. The functions
here take a stretch of text as byte tokens ``[N]`` (ints 0..256, 256 being the document separator) and
its increments ``δ [L, N]`` (one row per layer; a model with one shared increment has L = 1) and make the
write-up's tables and figures. They never look at the model: numpy arrays, torch tensors or lists all work.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.stats import roc_auc
from poslab.datamodules.codec import SEPARATOR
from poslab.fonts import cjk_font, has_glyph
from poslab.io import write_atomic
from poslab.plotting import plt, save_figure

SEPARATOR_CHAR = "\u241e"  # SYMBOL FOR RECORD SEPARATOR: how decode_characters shows the document separator

# Every byte token falls in exactly one category; this order is the order of the table's rows.
CATEGORIES: tuple[str, ...] = (
    "en_lower",
    "en_upper",
    "zh_lead",
    "zh_cont",
    "digit",
    "space",
    "punct",
    "newline",
    "other",
)
CATEGORY_LABELS: dict[str, str] = {
    "en_lower": "English (lowercase)",
    "en_upper": "English (uppercase)",
    "zh_lead": "Chinese (lead byte)",
    "zh_cont": "Chinese (continuation byte)",
    "digit": "Digits",
    "space": "Space and tab",
    "punct": "Punctuation",
    "newline": "Newline",
    "other": "Other",
}

ZH_LEADS = range(0xE4, 0xEA)  # lead bytes of U+4000..U+9FFF, the bulk of the CJK ideographs
CJK_FIRST, CJK_LAST = 0x4E00, 0x9FFF  # CJK Unified Ideographs: the characters whose gaps boundary_auc scores
_ASCII_PUNCT = frozenset(b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _numpy(x: Any) -> np.ndarray:
    """A numpy copy of a list, array or torch tensor (detached, on the CPU, bf16 widened to float32)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def _tokens(tokens: Any) -> np.ndarray:
    t = _numpy(tokens).astype(np.int64).reshape(-1)
    if t.size and (t.min() < 0 or t.max() > SEPARATOR):
        raise ValueError(f"byte tokens must lie in 0..{SEPARATOR}")
    return t


def _layers(values: Any, n: int, what: str) -> np.ndarray:
    """``values`` as float64 ``[L, n]``; a single row ``[n]`` counts as one layer."""
    v = _numpy(values).astype(np.float64)
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] != n:
        raise ValueError(f"{what} must have shape [L, {n}] (one column per token), got {tuple(v.shape)}")
    return v


def _sequence_length(byte: int) -> int:
    """How many bytes a UTF-8 sequence starting with ``byte`` has; 0 if it cannot start one."""
    if byte < 0x80:
        return 1
    if 0xC2 <= byte <= 0xDF:
        return 2
    if 0xE0 <= byte <= 0xEF:
        return 3
    if 0xF0 <= byte <= 0xF4:
        return 4
    return 0


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte <= 0xBF


# ---------------------------------------------------------------------------------------------------------
# Byte categories and the table of mean increments per category


def byte_categories(tokens: Any) -> np.ndarray:
    """The category (a name from ``CATEGORIES``) of every byte token, as a numpy string array ``[N]``.

    A byte is classified from itself and the bytes before it, as a causal model sees it: 0xE4–0xE9 is
    ``zh_lead`` whatever follows (a truncated sequence keeps its lead), and a continuation byte is
    ``zh_cont`` only while it is one of the two bytes its zh_lead announced. Stray continuation bytes,
    other UTF-8 lead bytes and their continuations, bytes that never occur in UTF-8, control bytes and the
    separator are ``other``.
    """
    t = _tokens(tokens)
    out = np.empty(t.size, dtype=f"<U{max(map(len, CATEGORIES))}")
    pending, pending_kind = 0, "other"  # continuation bytes still owed by the last lead byte, and their category
    for i, b in enumerate(t.tolist()):
        if b != SEPARATOR and _is_continuation(b) and pending:
            out[i] = pending_kind
            pending -= 1
            continue
        pending = 0  # anything but an owed continuation ends the sequence
        if b == SEPARATOR:
            out[i] = "other"
        elif 0x61 <= b <= 0x7A:
            out[i] = "en_lower"
        elif 0x41 <= b <= 0x5A:
            out[i] = "en_upper"
        elif 0x30 <= b <= 0x39:
            out[i] = "digit"
        elif b in (0x20, 0x09):
            out[i] = "space"
        elif b == 0x0A:
            out[i] = "newline"
        elif b in _ASCII_PUNCT:
            out[i] = "punct"
        elif b in ZH_LEADS:
            out[i] = "zh_lead"
            pending, pending_kind = 2, "zh_cont"
        else:
            out[i] = "other"
            if _sequence_length(b) > 1:
                pending, pending_kind = _sequence_length(b) - 1, "other"
    return out


@dataclass(frozen=True)
class CategoryRow:
    """One layer and category: how many bytes, their mean δ, and the spread of the per-byte-value means."""

    layer: str
    category: str
    count: int
    mean: float
    range_min: float
    range_max: float


def category_table(tokens: Any, deltas: Any, layer_names: Sequence[str] | None = None) -> list[CategoryRow]:
    """Per layer and category (in ``CATEGORIES`` order): count, mean δ over occurrences, and the range over
    the category's distinct byte values of each value's own mean δ. Categories absent from ``tokens`` are
    left out, since their mean is undefined."""
    t = _tokens(tokens)
    d = _layers(deltas, t.size, "deltas")
    names = list(layer_names) if layer_names is not None else [f"L{i}" for i in range(d.shape[0])]
    if len(names) != d.shape[0]:
        raise ValueError(f"{len(names)} layer names for {d.shape[0]} layers")
    cats = byte_categories(t)
    rows = []
    for layer, row in zip(names, d):
        for cat in CATEGORIES:
            mask = cats == cat
            if not mask.any():
                continue
            values, inverse = np.unique(t[mask], return_inverse=True)
            per_value = np.bincount(inverse, weights=row[mask]) / np.bincount(inverse)
            rows.append(
                CategoryRow(
                    layer=layer,
                    category=cat,
                    count=int(mask.sum()),
                    mean=float(row[mask].mean()),
                    range_min=float(per_value.min()),
                    range_max=float(per_value.max()),
                )
            )
    return rows


def format_category_table(rows: Sequence[CategoryRow], sort_by_mean: bool = True) -> str:
    """The table as the write-up prints it: a ``Learned Increment δ (L0)`` header per layer, then one
    ``English (lowercase) 0.68–0.96 (mean 0.79)`` line per category, smallest mean first (as the write-up
    orders them) unless ``sort_by_mean`` is False."""
    layers = list(dict.fromkeys(r.layer for r in rows))
    lines = []
    for layer in layers:
        mine = [r for r in rows if r.layer == layer]
        if sort_by_mean:
            mine.sort(key=lambda r: r.mean)
        lines.append(f"Learned Increment δ ({layer})")
        lines += [
            f"{CATEGORY_LABELS[r.category]} {r.range_min:.2f}–{r.range_max:.2f} (mean {r.mean:.2f})" for r in mine
        ]
    return "\n".join(lines)


def _rows_csv(rows: Sequence[Any], row_type: type) -> str:
    """Dataclass rows as CSV, one column per field; floats with all their digits (``repr``), so they round-trip."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[f.name for f in fields(row_type)], lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: repr(v) if isinstance(v, float) else v for k, v in asdict(r).items()})
    return buffer.getvalue()


def category_csv(rows: Sequence[CategoryRow]) -> str:
    """The rows as CSV (layer, category, count, mean, range_min, range_max)."""
    return _rows_csv(rows, CategoryRow)


def write_category_csv(rows: Sequence[CategoryRow], path: str | Path) -> Path:
    """``category_csv`` written atomically to ``path``."""
    return write_atomic(path, category_csv(rows))


def read_category_csv(path: str | Path) -> list[CategoryRow]:
    with open(path, newline="") as f:
        return [
            CategoryRow(
                layer=r["layer"],
                category=r["category"],
                count=int(r["count"]),
                mean=float(r["mean"]),
                range_min=float(r["range_min"]),
                range_max=float(r["range_max"]),
            )
            for r in csv.DictReader(f)
        ]


# ---------------------------------------------------------------------------------------------------------
# Characters and their learned positions


def decode_characters(tokens: Any) -> list[tuple[str, int, int]]:
    """Decode byte tokens into ``(character, first_index, last_index)``, indices into ``tokens``.

    Unlike ``bytes.decode(errors="replace")``, every byte that does not belong to a valid UTF-8 sequence
    becomes its own U+FFFD, so each token belongs to exactly one character. The separator becomes
    ``SEPARATOR_CHAR``.
    """
    t = _tokens(tokens).tolist()
    chars: list[tuple[str, int, int]] = []
    i = 0
    while i < len(t):
        b = t[i]
        if b == SEPARATOR:
            chars.append((SEPARATOR_CHAR, i, i))
            i += 1
            continue
        n = _sequence_length(b)
        chunk = t[i : i + n] if n else []
        # bytes.decode rejects overlong forms, surrogates and code points past U+10FFFF for us
        try:
            if len(chunk) != n or n == 0 or SEPARATOR in chunk:
                raise UnicodeDecodeError("utf-8", b"", 0, 1, "incomplete")
            chars.append((bytes(chunk).decode("utf-8"), i, i + n - 1))
            i += n
        except UnicodeDecodeError:
            chars.append(("\ufffd", i, i))
            i += 1
    return chars


#: the x axis of the positions picture of an encoding that learns its positions (the increments encodings)
LEARNED_POSITION = "learned position (running sum of δ)"


def positions_from_deltas(deltas: Any) -> np.ndarray:
    """Learned positions ``[L, N]``: the running sum of the increments up to and including each token."""
    d = _numpy(deltas).astype(np.float64)
    return np.cumsum(d[None, :] if d.ndim == 1 else d, axis=-1)


@cache
def _default_font() -> str:
    from matplotlib import font_manager

    return font_manager.findfont(font_manager.FontProperties(), fallback_to_default=True)


def cjk_font_path() -> str | None:
    """The file of the font figures draw Chinese with (``poslab.fonts``), or None when there is none."""
    font = cjk_font()
    return font.path if font is not None else None


_SHOWN_AS = {"\n": "↵", "\t": "⇥", " ": "", SEPARATOR_CHAR: "<sep>"}


def character_label(char: str) -> tuple[str, str | None, bool]:
    """How plot_positions draws ``char``: ``(text, font file or None for the default, rotated)``.

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


def positions_figure(
    text: str,
    tokens: Any,
    positions: Any,
    title: str | None = None,
    layer_names: Sequence[str] | None = None,
    position_label: str = LEARNED_POSITION,
) -> Any:
    """Draw every character of ``text`` at its learned position, one row per layer (a matplotlib figure).
    ``position_label`` names the x axis: what the positions are (a plain RoPE run's are counted token indices,
    ``increments_report.positions_axis_label``).

    ``positions [L, N]`` are the running sums of the increments (``positions_from_deltas``), so a
    character spans from the position before its first byte (0 for the first token) to the position of its
    last byte: a multi-byte character (Chinese: three bytes) is drawn at its start and is as wide as the sum
    of its bytes' increments. A bar under each character shows that span. Each row has its own x range, as
    layers can learn very different scales.

    Chinese is drawn with the CJK font of ``poslab.fonts`` (Noto Sans CJK SC, a dependency); with none
    installed, each such character is written as its code point, e.g. ``U+4EBA``, rotated (never a crash or
    a row of empty boxes). ``text`` must be what ``decode_characters(tokens)`` decodes to, i.e. for valid
    UTF-8 ``tokens == list(text.encode("utf-8"))``.
    """
    from matplotlib.font_manager import FontProperties

    t = _tokens(tokens)
    pos = _layers(positions, t.size, "positions")
    chars = decode_characters(t)
    if not chars:
        raise ValueError("nothing to plot: no tokens")
    if "".join(c for c, _, _ in chars) != text:
        raise ValueError("text and tokens do not correspond: tokens must be text encoded as UTF-8")
    names = list(layer_names) if layer_names is not None else [f"L{i}" for i in range(pos.shape[0])]
    if len(names) != pos.shape[0]:
        raise ValueError(f"{len(names)} layer names for {pos.shape[0]} layers")

    # Give the typical (median-width) character about 0.13 inch in the row that needs the most room, so
    # narrow bytes stay legible next to wide ones; very long texts are capped and will overlap.
    before = np.concatenate([np.zeros((pos.shape[0], 1)), pos[:, :-1]], axis=1)  # position before each token
    firsts = np.array([first for _, first, _ in chars])
    lasts = np.array([last for _, _, last in chars])
    char_widths = pos[:, lasts] - before[:, firsts]
    typical = np.maximum(np.median(char_widths, axis=1), 1e-9)
    width = float(np.clip(1.5 + 0.13 * np.max(pos[:, -1] / typical), 6.0, 40.0))
    fig, axes = plt.subplots(pos.shape[0], 1, figsize=(width, 0.9 * pos.shape[0] + 0.9), squeeze=False)
    labels = [character_label(c) for c, _, _ in chars]
    fonts = {f: FontProperties(fname=f) for _, f, _ in labels if f is not None}
    for ax, name, row, starts, widths in zip(axes[:, 0], names, pos, before[:, firsts], char_widths):
        spans = list(zip(starts.tolist(), widths.tolist()))
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
        ax.set_xlim(-0.02 * row[-1], row[-1] * 1.02)
        ax.set_ylim(0, 1)
        ax.set_yticks([])
        ax.set_ylabel(name, rotation=0, ha="right", va="center")
        for side in ("left", "right", "top"):
            ax.spines[side].set_visible(False)
    axes[-1, 0].set_xlabel(position_label)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------------------
# Chinese word boundaries


def byte_offsets(text: str) -> list[int]:
    """The index, in ``text.encode("utf-8")``, of each character's first byte."""
    offsets, at = [], 0
    for ch in text:
        offsets.append(at)
        at += len(ch.encode("utf-8"))
    return offsets


def _is_cjk(ch: str) -> bool:
    return CJK_FIRST <= ord(ch) <= CJK_LAST


def jieba_word_starts(text: str, hmm: bool = True) -> set[int]:
    """Indices of the characters of ``text`` where jieba starts a word."""
    import jieba

    jieba.setLogLevel(logging.WARNING)  # it announces loading its dictionary otherwise
    starts, at = set(), 0
    for word in jieba.cut(text, HMM=hmm):
        starts.add(at)
        at += len(word)
    if at != len(text):
        raise RuntimeError("jieba's words do not add up to the text")
    return starts


def chinese_gaps(text: str, hmm: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """The gaps between two consecutive Chinese characters (CJK Unified Ideographs, nothing in between):
    the byte index of each gap's second character's lead byte, and 1 where jieba starts a word there."""
    starts = jieba_word_starts(text, hmm=hmm)
    offsets = byte_offsets(text)
    gaps = [k for k in range(1, len(text)) if _is_cjk(text[k - 1]) and _is_cjk(text[k])]
    return (
        np.array([offsets[k] for k in gaps], dtype=np.int64),
        np.array([int(k in starts) for k in gaps], dtype=np.int64),
    )


def boundary_auc(text: str, tokens: Any, deltas: Any, hmm: bool = True) -> list[float]:
    """Per layer, how well δ separates jieba's word boundaries from word-internal gaps (ROC-AUC).

    Only gaps between two Chinese characters are scored (see ``chinese_gaps``); the score of a gap is δ at
    the lead byte of its second character (``gap_scores``' ``lead``). NaN for a layer when the text has no gap
    of one of the classes. ``tokens`` must be ``list(text.encode("utf-8"))``.
    """
    t = _tokens(tokens)
    if t.tolist() != list(text.encode("utf-8")):
        raise ValueError("tokens must be text encoded as UTF-8")
    at, labels = chinese_gaps(text, hmm=hmm)
    return [roc_auc(row, labels) for row in gap_scores(t, deltas, at)["lead"]]


# ---------------------------------------------------------------------------------------------------------
# Word boundaries read two ways, by source, against what any function of the bytes could reach

#: how a gap is scored, per layer: δ summed over these bytes of the gap's second character (offsets from its
#: lead byte; a CJK ideograph is three UTF-8 bytes)
SCORE_BYTES: dict[str, tuple[int, ...]] = {"lead": (0,), "char": (0, 1, 2)}
SCORE_LABELS: dict[str, str] = {
    "lead": "δ at the next character's lead byte",
    "char": "δ summed over the next character's three bytes",
}
#: the in-sample ceilings: the best AUC any function of these bytes (offsets from the next character's lead
#: byte; -3..-1 is the previous character) reaches on the same gaps. The shared model's δ, and layer 0's (it
#: reads the token embeddings), is a function of the byte alone: its ``lead`` score is a function of the lead
#: byte, its ``char`` score of the next character, so neither can beat the matching ceiling.
CEILING_BYTES: dict[str, tuple[int, ...]] = {
    "lead_byte": (0,),
    "next_character": (0, 1, 2),
    "previous_character_and_lead_byte": (-3, -2, -1, 0),
}
CEILING_LABELS: dict[str, str] = {
    "lead_byte": "lead byte",
    "next_character": "next character",
    "previous_character_and_lead_byte": "previous character + lead byte",
}
#: the held-out source subsets, in report order (``source_kind`` decides which a document belongs to), then all
SOURCE_KINDS: tuple[str, ...] = ("wikipedia", "novels", "other")
ALL_SOURCES = "all"


def source_kind(path: str, file_format: str) -> str:
    """Which subset of the boundary table a source's documents count in: ``wikipedia`` for a file (or hub
    dataset) whose name contains "wiki" (``zhwiki_sample_simplified.jsonl``, ``wikimedia/wikipedia``),
    ``novels`` for any other plain-text file (format ``text``: ``三国演义.txt``, split by chapter), ``other``
    for anything else."""
    if "wiki" in Path(path).name.lower():
        return "wikipedia"
    return "novels" if file_format == "text" else "other"


def _check_gaps(t: np.ndarray, at: np.ndarray) -> None:
    """Every offset is the lead byte of a three-byte character that follows another (what ``chinese_gaps``
    gives for ``tokens == text.encode()``), so each reading's bytes lie inside ``t``."""
    inside = (at >= 3) & (at + 2 < t.size)
    if not inside.all():
        raise ValueError(
            f"gap offset {int(at[~inside][0])} leaves no room for two three-byte characters around it in "
            f"{t.size} tokens; give the offsets chinese_gaps returns for these tokens."
        )
    for first in (at - 3, at):
        leads, conts = t[first], t[first[:, None] + np.array([1, 2])]
        if not (((leads >= 0xE0) & (leads <= 0xEF)).all() and ((conts >= 0x80) & (conts <= 0xBF)).all()):
            raise ValueError(
                "a gap offset does not sit between two three-byte UTF-8 characters (a lead byte E0-EF and two "
                "continuation bytes each); give the offsets chinese_gaps returns for these tokens."
            )


def _gap_bytes(at: np.ndarray, offsets: tuple[int, ...]) -> np.ndarray:
    return at[:, None] + np.array(offsets, dtype=np.int64)  # [G, len(offsets)] token indices


def gap_scores(tokens: Any, deltas: Any, at: Any) -> dict[str, np.ndarray]:
    """Each score of ``SCORE_BYTES`` for every gap and layer: ``{score: [L, G]}``. ``at`` are the byte offsets
    of the gaps' second characters (``chinese_gaps``)."""
    t = _tokens(tokens)
    d = _layers(deltas, t.size, "deltas")
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    _check_gaps(t, at)
    return {name: d[:, _gap_bytes(at, offsets)].sum(axis=-1) for name, offsets in SCORE_BYTES.items()}


def best_auc_given(keys: Any, labels: Any) -> float:
    """The highest ROC-AUC any score that is a function of ``keys`` reaches on these gaps (an in-sample upper
    bound): each gap is scored by its key's empirical boundary rate. Ordering the key values by that rate is
    optimal (the Neyman-Pearson order of a discrete feature), and every score that is a function of the key
    ties the gaps sharing a key as this one does. ``keys`` is ``[G]`` or ``[G, k]`` (a key per row)."""
    k = _numpy(keys)
    y = _numpy(labels).astype(np.float64).reshape(-1)
    k = k.reshape(len(k), -1) if k.size else k.reshape(0, 1)
    if len(k) != len(y):
        raise ValueError(f"{len(k)} keys for {len(y)} labels")
    _, group = np.unique(k, axis=0, return_inverse=True)
    group = group.reshape(-1)
    rate = np.bincount(group, weights=y) / np.bincount(group) if len(y) else y
    return roc_auc(rate[group], y)


def ceiling_keys(tokens: Any, at: Any) -> dict[str, np.ndarray]:
    """What each ceiling of ``CEILING_BYTES`` is a function of, per gap: ``{ceiling: [G, bytes]}``."""
    t = _tokens(tokens)
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    _check_gaps(t, at)
    return {name: t[_gap_bytes(at, offsets)] for name, offsets in CEILING_BYTES.items()}


def gap_ceilings(tokens: Any, at: Any, labels: Any) -> dict[str, float]:
    """``best_auc_given`` the bytes of each ``CEILING_BYTES`` entry, for the gaps at ``at``."""
    return {name: best_auc_given(keys, labels) for name, keys in ceiling_keys(tokens, at).items()}


@dataclass(frozen=True)
class BoundaryRow:
    """One reading of the word-boundary table on one source subset: a score of one layer (``SCORE_BYTES``), or
    a ceiling (``CEILING_BYTES``; layer empty), with the gaps and word starts it is measured on. A ceiling's
    ``values`` is how many distinct values what it names takes on those gaps: with thousands, the in-sample
    ceiling is far above what any function of it could reach on new text."""

    subset: str  # a SOURCE_KINDS name, or ALL_SOURCES
    reading: str  # a SCORE_BYTES or CEILING_BYTES name
    layer: str
    gaps: int
    word_starts: int
    auc: float
    values: int | None = None  # ceilings only


def boundary_table(
    tokens: Any,
    deltas: Any,
    at: Any,
    labels: Any,
    sources: Any = None,
    layer_names: Sequence[str] | None = None,
) -> list[BoundaryRow]:
    """Every score per layer and every ceiling, on each source subset of the gaps and on all of them.

    ``at`` and ``labels`` are the gaps (``chinese_gaps``, possibly a selection of them); ``sources`` names the
    subset of each gap (``source_kind``), or None for text of no known source (then only ``all``). Subsets
    come in ``SOURCE_KINDS`` order (absent ones left out; unknown names after them), ``all`` last.
    """
    t = _tokens(tokens)
    d = _layers(deltas, t.size, "deltas")
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    y = _numpy(labels).astype(np.int64).reshape(-1)
    if len(y) != len(at):
        raise ValueError(f"{len(y)} labels for {len(at)} gaps")
    names = list(layer_names) if layer_names is not None else [f"L{i}" for i in range(d.shape[0])]
    if len(names) != d.shape[0]:
        raise ValueError(f"{len(names)} layer names for {d.shape[0]} layers")
    subsets = {}
    if sources is not None:
        kinds = np.asarray(sources).astype(str).reshape(-1)
        if len(kinds) != len(at):
            raise ValueError(f"{len(kinds)} sources for {len(at)} gaps")
        present = set(kinds.tolist())
        order = [k for k in SOURCE_KINDS if k in present] + sorted(present - set(SOURCE_KINDS) - {ALL_SOURCES})
        subsets = {kind: kinds == kind for kind in order}
    subsets[ALL_SOURCES] = np.ones(len(at), dtype=bool)
    scores = gap_scores(t, d, at)
    rows = []
    for subset, mask in subsets.items():
        count = {"subset": subset, "gaps": int(mask.sum()), "word_starts": int(y[mask].sum())}
        for score, values in scores.items():
            rows += [
                BoundaryRow(reading=score, layer=name, auc=roc_auc(row[mask], y[mask]), **count)
                for name, row in zip(names, values)
            ]
        for ceiling, keys in ceiling_keys(t, at[mask]).items():
            auc, values = best_auc_given(keys, y[mask]), len(np.unique(keys, axis=0))
            rows.append(BoundaryRow(reading=ceiling, layer="", auc=auc, values=values, **count))
    return rows


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
    lines = [
        "| source | gaps | word starts | " + " | ".join(ceilings) + " |",
        "|---|---:|---:|" + "---:|" * len(ceilings),
    ]
    for s in subsets:
        cells = [f"{first[s].gaps:,}", f"{first[s].word_starts:,}"]
        cells += [f"{_auc_cell(by[s, c, ''].auc)} ({by[s, c, ''].values:,})" for c in CEILING_BYTES]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| layer | " + " | ".join(f"{s}: {score}" for s in subsets for score in SCORE_BYTES) + " |",
        "|---|" + "---:|" * (len(subsets) * len(SCORE_BYTES)),
    ]
    for layer in layers:
        cells = [_auc_cell(by[s, score, layer].auc) for s in subsets for score in SCORE_BYTES]
        lines.append(f"| {layer} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def boundary_csv(rows: Sequence[BoundaryRow]) -> str:
    """The rows as CSV (subset, reading, layer, gaps, word_starts, auc, values; a ceiling's layer is empty, a
    score's values too)."""
    return _rows_csv(rows, BoundaryRow)


def boundary_summary(rows: Sequence[BoundaryRow]) -> dict[str, Any]:
    """The rows as nested JSON: per subset its gaps, word starts, ``auc[score][layer]``, ``ceilings`` and
    ``ceiling_values``; an AUC that is undefined (a subset with one class only) is None."""
    out: dict[str, Any] = {}
    for r in rows:
        subset = out.setdefault(
            r.subset, {"gaps": r.gaps, "word_starts": r.word_starts, "auc": {}, "ceilings": {}, "ceiling_values": {}}
        )
        auc = None if math.isnan(r.auc) else r.auc
        if r.reading in SCORE_BYTES:
            subset["auc"].setdefault(r.reading, {})[r.layer] = auc
        else:
            subset["ceilings"][r.reading] = auc
            subset["ceiling_values"][r.reading] = r.values
    return out


__all__ = [
    "ALL_SOURCES",
    "CATEGORIES",
    "CATEGORY_LABELS",
    "CEILING_BYTES",
    "CEILING_LABELS",
    "SCORE_BYTES",
    "SCORE_LABELS",
    "SOURCE_KINDS",
    "BoundaryRow",
    "CategoryRow",
    "SEPARATOR",
    "SEPARATOR_CHAR",
    "best_auc_given",
    "boundary_auc",
    "boundary_csv",
    "boundary_summary",
    "boundary_table",
    "ceiling_keys",
    "format_boundary_table",
    "gap_ceilings",
    "gap_scores",
    "source_kind",
    "byte_categories",
    "byte_offsets",
    "category_table",
    "character_label",
    "chinese_gaps",
    "cjk_font_path",
    "decode_characters",
    "format_category_table",
    "jieba_word_starts",
    "plot_positions",
    "positions_figure",
    "category_csv",
    "positions_from_deltas",
    "read_category_csv",
    "roc_auc",
    "write_category_csv",
]
