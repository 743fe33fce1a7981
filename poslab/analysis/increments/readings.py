"""What the increments analyses read off δ: the mean increment per byte category and layer, the learned positions,
and how well δ marks Chinese word boundaries (two scores per gap beside in-sample ceilings, per source subset).

The functions take a stretch of text as byte tokens ``[N]`` and its increments ``δ [L, N]`` (one row per layer; a
model with one shared increment has L = 1); numpy arrays, torch tensors or lists all work. They never look at the
model. ``boundary_summary`` and ``boundary_rows`` turn the boundary table into the summary's JSON and back.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.increments.text import CATEGORIES, as_layers, as_numpy, as_tokens, byte_categories, chinese_gaps
from poslab.analysis.stats import best_auc_given, roc_auc


def layer_names_for(layer_names: Sequence[str] | None, layers: int) -> list[str]:
    """The given names of ``layers`` layers (checked to be one per layer), or ``L0``, ``L1``, ..."""
    names = list(layer_names) if layer_names is not None else [f"L{i}" for i in range(layers)]
    if len(names) != layers:
        raise ValueError(f"{len(names)} layer names for {layers} layers")
    return names


# ---------------------------------------------------------------------------------------------------------
# Byte categories


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
    t = as_tokens(tokens)
    d = as_layers(deltas, t.size, "deltas")
    names = layer_names_for(layer_names, d.shape[0])
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


def positions_from_deltas(deltas: Any) -> np.ndarray:
    """Learned positions ``[L, N]``: the running sum of the increments up to and including each token."""
    d = as_numpy(deltas).astype(np.float64)
    return np.cumsum(d[None, :] if d.ndim == 1 else d, axis=-1)


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
    t = as_tokens(tokens)
    d = as_layers(deltas, t.size, "deltas")
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    _check_gaps(t, at)
    return {name: d[:, _gap_bytes(at, offsets)].sum(axis=-1) for name, offsets in SCORE_BYTES.items()}


def ceiling_keys(tokens: Any, at: Any) -> dict[str, np.ndarray]:
    """What each ceiling of ``CEILING_BYTES`` is a function of, per gap: ``{ceiling: [G, bytes]}``."""
    t = as_tokens(tokens)
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    _check_gaps(t, at)
    return {name: t[_gap_bytes(at, offsets)] for name, offsets in CEILING_BYTES.items()}


def gap_ceilings(tokens: Any, at: Any, labels: Any) -> dict[str, float]:
    """``best_auc_given`` the bytes of each ``CEILING_BYTES`` entry, for the gaps at ``at``."""
    return {name: best_auc_given(keys, labels) for name, keys in ceiling_keys(tokens, at).items()}


def boundary_auc(text: str, tokens: Any, deltas: Any, hmm: bool = True) -> list[float]:
    """Per layer, how well δ separates jieba's word boundaries from word-internal gaps (ROC-AUC).

    Only gaps between two Chinese characters are scored (see ``chinese_gaps``); the score of a gap is δ at
    the lead byte of its second character (``gap_scores``' ``lead``). NaN for a layer when the text has no gap
    of one of the classes. ``tokens`` must be ``list(text.encode("utf-8"))``.
    """
    t = as_tokens(tokens)
    if t.tolist() != list(text.encode("utf-8")):
        raise ValueError("tokens must be text encoded as UTF-8")
    at, labels = chinese_gaps(text, hmm=hmm)
    return [roc_auc(row, labels) for row in gap_scores(t, deltas, at)["lead"]]


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


def source_subsets(sources: Any, gaps: int) -> dict[str, np.ndarray]:
    """A mask of the gaps of each source subset (``source_kind`` names, one per gap, or None: no known source):
    in ``SOURCE_KINDS`` order (absent ones left out; unknown names after them), then ``all``."""
    subsets = {}
    if sources is not None:
        kinds = np.asarray(sources).astype(str).reshape(-1)
        if len(kinds) != gaps:
            raise ValueError(f"{len(kinds)} sources for {gaps} gaps")
        present = set(kinds.tolist())
        order = [k for k in SOURCE_KINDS if k in present] + sorted(present - set(SOURCE_KINDS) - {ALL_SOURCES})
        subsets = {kind: kinds == kind for kind in order}
    subsets[ALL_SOURCES] = np.ones(gaps, dtype=bool)
    return subsets


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
    t = as_tokens(tokens)
    d = as_layers(deltas, t.size, "deltas")
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    y = as_numpy(labels).astype(np.int64).reshape(-1)
    if len(y) != len(at):
        raise ValueError(f"{len(y)} labels for {len(at)} gaps")
    names = layer_names_for(layer_names, d.shape[0])
    scores = gap_scores(t, d, at)
    rows = []
    for subset, mask in source_subsets(sources, len(at)).items():
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


def boundary_rows(summary: dict[str, Any]) -> list[BoundaryRow]:
    """The rows back from ``boundary_summary``, in the order ``boundary_table`` made them (None back to NaN)."""
    auc = lambda value: math.nan if value is None else float(value)
    rows = []
    for subset, part in summary.items():
        count = {"subset": subset, "gaps": part["gaps"], "word_starts": part["word_starts"]}
        for score, by_layer in part["auc"].items():
            rows += [BoundaryRow(reading=score, layer=layer, auc=auc(a), **count) for layer, a in by_layer.items()]
        for ceiling, a in part["ceilings"].items():
            rows.append(
                BoundaryRow(reading=ceiling, layer="", auc=auc(a), values=part["ceiling_values"][ceiling], **count)
            )
    return rows
