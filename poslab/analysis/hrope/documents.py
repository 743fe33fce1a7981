"""The analysis windows of the hRoPE analysis and what is done to their paragraph index: the fake merge and
split (the interventions: only the index changes) and the shuffle test's permutation of whole paragraphs.

A window is a held-out document's first ``context_length`` tokens, kept when it holds at least two paragraphs;
its paragraph and sentence indices count from 0 (as the model sees them in training).

**Steps of the indices.** From one token to the next an index moves by 0 or 1 in every corpus here: a unit
(paragraph, sentence) starts at a non-whitespace character that follows whitespace (``datamodules.segmentation``),
a token takes the indices of its first character (``tokenization.coordinate_bytes``), and a byte-level BPE token
(GPT-2's pre-tokenizer) holds at most one whitespace-to-text transition, its leading space, so a token with a unit
start inside it ends in text and the next token cannot start a unit too (checked on the three hRoPE corpora with a
BPE of 2048 trained on them: no step above 1 in about 8M tokens). Were there a larger step, the displacement ``k``
(an index difference, what a model that reads the index sees) would count it as that many boundaries, and the
shuffle, which renumbers the paragraphs consecutively, would close it; the fake merge joins the two paragraphs
whatever the step (it takes the whole step away).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from poslab.datamodules.corpora import PreparedSplit


@dataclass
class Document:
    """One analysis window: tokens and their paragraph and sentence indices (each from 0)."""

    ordinal: int
    tokens: np.ndarray
    paragraph: np.ndarray
    sentence: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def n_paragraphs(self) -> int:
        return int(self.paragraph[-1] - self.paragraph[0]) + 1 if len(self) else 0


def held_out_documents(
    split: PreparedSplit, context: int, limit: int | None = None, min_paragraphs: int = 2, min_tokens: int = 8
) -> Iterator[Document]:
    """The first ``context`` tokens of each document of ``split`` with ``min_paragraphs`` paragraphs in them."""
    found = 0
    for ordinal, start, end in split.document_spans():
        if limit is not None and found >= limit:
            return
        stop = min(end - 1, start + context)  # drop the separator closing the document
        if stop - start >= min_tokens:
            paragraph = np.asarray(split.paragraphs[start:stop], dtype=np.int64)
            sentence = np.asarray(split.sentences[start:stop], dtype=np.int64)
            if paragraph[-1] - paragraph[0] + 1 >= min_paragraphs:
                tokens = np.asarray(split.tokens[start:stop], dtype=np.int64)
                yield Document(ordinal, tokens, paragraph - paragraph[0], sentence - sentence[0])
                found += 1


def boundaries(paragraph: np.ndarray) -> np.ndarray:
    """Token positions where a new paragraph starts (after the first)."""
    return np.flatnonzero(np.diff(paragraph)) + 1


def fake_merge(paragraph: np.ndarray, boundary: int) -> np.ndarray:
    """The paragraphs on both sides of ``boundary`` (a position in ``boundaries``) get one index (later ones move
    down by the step there: 1 in every corpus here, see the module docstring)."""
    if boundary not in set(boundaries(paragraph).tolist()):
        raise ValueError(f"position {boundary} is not a paragraph boundary.")
    merged = paragraph.copy()
    merged[boundary:] -= paragraph[boundary] - paragraph[boundary - 1]
    return merged


def fake_split(paragraph: np.ndarray, position: int) -> np.ndarray:
    """Tokens from ``position`` on in its paragraph, and all later paragraphs, move up by one index."""
    if position <= 0 or position >= len(paragraph) or paragraph[position] != paragraph[position - 1]:
        raise ValueError(f"position {position} is not inside a paragraph.")
    split = paragraph.copy()
    split[position:] += 1
    return split


def merge_boundary(paragraph: np.ndarray) -> int:
    """The boundary nearest the middle of the window (where both sides have context)."""
    starts = boundaries(paragraph)
    return int(starts[np.argmin(np.abs(starts - len(paragraph) / 2))])


def split_position(paragraph: np.ndarray, min_tokens: int = 4) -> int | None:
    """The middle of the longest paragraph, or None when no paragraph has ``min_tokens`` tokens."""
    values, starts, counts = np.unique(paragraph, return_index=True, return_counts=True)
    longest = int(np.argmax(counts))
    if counts[longest] < min_tokens:
        return None
    return int(starts[longest] + counts[longest] // 2)


def segment_split_position(paragraph: np.ndarray, segment: np.ndarray, min_tokens: int = 4) -> int | None:
    """``split_position`` moved to the nearest token of its paragraph where a new ``segment`` can start (one that
    is not already a segment's first): a fake split on a segment coordinate (BiPE's sentences) inserts a boundary
    there, as on the paragraph index. None when no paragraph is long enough or none such token exists."""
    middle = split_position(paragraph, min_tokens)
    if middle is None:
        return None
    same = paragraph == paragraph[middle]
    inside = same[1:] & same[:-1] & (segment[1:] == segment[:-1])  # token t: t and t - 1 in one segment
    candidates = np.flatnonzero(inside) + 1
    return int(candidates[np.argmin(np.abs(candidates - middle))]) if len(candidates) else None


def crossing_pairs(paragraph: np.ndarray, position: int) -> tuple[np.ndarray, np.ndarray]:
    """(queries, keys): tokens after ``position`` and before it, within the paragraphs meeting there."""
    before, after = paragraph[position - 1], paragraph[position]
    index = np.arange(len(paragraph))
    queries = index[(index >= position) & (paragraph == after)]
    keys = index[(index < position) & (paragraph == before)]
    return queries, keys


def shuffle_paragraphs(document: Document, rng: np.random.Generator, keep_ends: bool = True) -> Document | None:
    """Paragraphs in a random order (never the identity); indices renumbered in the new order.

    ``keep_ends`` (the write-up's test, the default): the first paragraph (token 0, the attention sink, and the
    document's start) and the last one (the window cuts it short) stay where they are and only the whole
    paragraphs between them move; a window needs four paragraphs for that (None otherwise). Without it every
    paragraph moves (two suffice), which also moves the truncated last paragraph into the middle and changes
    token 0 for every model.
    """
    starts = np.concatenate(([0], boundaries(document.paragraph), [len(document)]))
    pieces = [slice(a, b) for a, b in zip(starts[:-1], starts[1:])]
    fixed = 1 if keep_ends else 0
    movable = len(pieces) - 2 * fixed
    if movable < 2:
        return None
    order = np.arange(len(pieces))
    while np.array_equal(order, np.arange(len(pieces))):
        order[fixed : len(pieces) - fixed] = fixed + rng.permutation(movable)
    tokens = np.concatenate([document.tokens[pieces[i]] for i in order])
    paragraph = np.concatenate([np.full(pieces[i].stop - pieces[i].start, rank) for rank, i in enumerate(order)])
    # sentences keep their grouping, renumbered in reading order (a paragraph start is a sentence start)
    sentence_pieces = [document.sentence[pieces[i]] for i in order]
    sentence, offset = [], 0
    for piece in sentence_pieces:
        local = piece - piece[0]
        sentence.append(local + offset)
        offset += int(local[-1]) + 1
    return Document(document.ordinal, tokens, paragraph.astype(np.int64), np.concatenate(sentence))
