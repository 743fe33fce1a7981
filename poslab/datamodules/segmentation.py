"""Paragraph and sentence coordinates for every UTF-8 byte of a document (hierarchical RoPE needs them).

``segment(text, style)`` returns two ``int32`` arrays with one entry per UTF-8 byte of ``text``
(``codec.text_bytes(text)``, as the byte tokenizer encodes it): the index of the
paragraph and of the sentence the byte belongs to. Both start at 0 at the document's first byte and never
decrease.

Conventions, the same in every style:

- Causal: the indices at byte ``i`` depend on bytes ``0 .. i`` only (a model reads them as inputs at token ``i``;
  docs/causality.md). Every rule decides whether a character starts a unit from that character and those before
  it, never from one after it, and a character's start is marked on its *last* byte: the bytes of a multi-byte
  character before its last keep the index of the character before (at its first byte NBSP, U+00A0, is not yet
  told from ``©``, U+00A9, nor ``”`` from ``—``). For ASCII text every unit starts at its first character's byte.
  tests/datamodules/test_coordinate_causality.py checks it at every byte.
- The sentence index counts sentences in the whole document; it does not restart at 0 in each paragraph.
  A model then sees one monotone coordinate per level (as it sees the token index), and a paragraph start
  is always also a sentence start, so the sentence coordinate alone moves on at every boundary.
- Separators belong to the unit they end: the newlines and blank lines between two paragraphs belong to the
  first, and the whitespace after a sentence's final punctuation belongs to that sentence. A unit starts at
  its first non-whitespace character, in prose and code alike: a line's indentation is part of the separator
  before it (whether an indented line is blank is known only at its end, so a unit cannot start at its
  indentation without reading ahead).
- Whitespace before the first unit belongs to unit 0, so every document starts at 0.

Styles (``STYLES``):

- ``blank_lines`` (web text, Wikipedia): paragraphs are separated by one or more blank (whitespace-only)
  lines; sentences end at ``.``, ``!``, ``?`` followed by whitespace, and at Chinese ``。！？`` (no
  whitespace needed). Closing quotes and brackets right after the punctuation (``."``, ``。”``) stay
  with the sentence they close. Abbreviations (``Mr. Smith``) do split: a rule, not a parser.
- ``wikitext`` (WikiText raw): every non-blank line is a paragraph, headings (`` = Title = ``,
  `` = = Section = = ``) included; blank lines (`` `` lines) attach to the paragraph before them.
- ``lines`` (Chinese novels: one paragraph per line, blank lines between): every non-blank line is a
  paragraph. The same rule as ``wikitext``, kept under its own name so each corpus config says what its
  text is.
- ``code`` (Python source): paragraphs are blank-line separated blocks; each non-blank line is a sentence,
  starting at its first non-whitespace character.

``boundary_density`` measures paragraph boundaries per byte over documents: the density the ``rand_axial``
and ``period_axial`` controls are matched to.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np

from poslab.datamodules.codec import utf8_lengths
from poslab.errors import ConfigError

__all__ = ["STYLES", "boundary_density", "segment", "utf8_lengths"]  # utf8_lengths: kept importable here

#: a sentence ends at . ! ? followed by whitespace, or at 。！？; closing quotes/brackets stay with it, and the
#: whitespace after it is its separator. The match ends where the next sentence starts (at non-whitespace). Its
#: lookaheads are causal: ``(?=\s)`` reads the character before that start, ``(?=\S)`` the start itself. The
#: Chinese run of ends and closers is taken whole (an atomic group, ``(?=(...))\1``): backtracking into it would
#: make a trailing ``”`` or second ``。`` start a sentence where nothing follows, but not where text does.
_CLOSERS = "\"'”’」』）)\\]》"
_SENTENCE_END = re.compile(rf"(?:[.!?]+[{_CLOSERS}]*(?=\s)|(?=([。！？]+[{_CLOSERS}]*))\1)\s*(?=\S)")


def _lines(text: str) -> Iterable[tuple[int, str]]:
    """``(offset, line)`` for every ``\\n``-separated line (without its newline)."""
    offset = 0
    for line in text.split("\n"):
        yield offset, line
        offset += len(line) + 1


def _paragraph_starts(text: str, every_line: bool) -> list[int]:
    """Character offsets where paragraphs after the first start: at a line's first non-whitespace character.

    ``every_line``: each non-blank line is a paragraph; otherwise a paragraph starts at the first non-blank
    line after one or more blank lines.
    """
    starts: list[int] = []
    seen_content, after_blank = False, False
    for offset, line in _lines(text):
        stripped = line.lstrip()
        if not stripped:
            after_blank = True
            continue
        if seen_content and (every_line or after_blank):
            starts.append(offset + len(line) - len(stripped))
        seen_content, after_blank = True, False
    return starts


def _prose_sentence_starts(text: str) -> list[int]:
    return [match.end() for match in _SENTENCE_END.finditer(text)]


def _code_line_starts(text: str) -> list[int]:
    """The first non-whitespace character of each non-blank line after the first (code: a line is a sentence)."""
    starts = [offset + len(line) - len(line.lstrip()) for offset, line in _lines(text) if line.strip()]
    return starts[1:]


def _indices(starts: Iterable[int], lengths: np.ndarray) -> np.ndarray:
    """Per-byte index of the unit each byte is in, given the character offsets where units after the first start.

    A start is marked on the last byte of its character: only there has the character been read in full.
    """
    last_bytes = np.cumsum(lengths) - 1
    marks = np.zeros(int(lengths.sum()), dtype=np.int32)
    marks[last_bytes[np.asarray(sorted(set(starts)), dtype=np.int64)]] = 1  # a start that is both counts once
    return np.cumsum(marks, dtype=np.int32)


def _segment(text: str, paragraph_starts: list[int], sentence_starts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    lengths = utf8_lengths(text)
    paragraph = _indices(paragraph_starts, lengths)
    sentence = _indices([*paragraph_starts, *sentence_starts], lengths)  # a new paragraph, a new sentence
    return paragraph, sentence


def blank_lines(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Paragraphs separated by blank lines; sentences end at . ! ? + whitespace or at 。！？."""
    return _segment(text, _paragraph_starts(text, every_line=False), _prose_sentence_starts(text))


def wikitext(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Every non-blank line (headings included) a paragraph; blank lines attach to the paragraph before."""
    return _segment(text, _paragraph_starts(text, every_line=True), _prose_sentence_starts(text))


def lines(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Every non-blank line a paragraph (one paragraph per line, as in the Chinese novels)."""
    return _segment(text, _paragraph_starts(text, every_line=True), _prose_sentence_starts(text))


def code(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Blank-line separated blocks are paragraphs; every non-blank line is a sentence (from its first non-blank)."""
    return _segment(text, _paragraph_starts(text, every_line=False), _code_line_starts(text))


STYLES: dict[str, Callable[[str], tuple[np.ndarray, np.ndarray]]] = {
    "blank_lines": blank_lines,
    "wikitext": wikitext,
    "lines": lines,
    "code": code,
}


def segment(text: str, style: str) -> tuple[np.ndarray, np.ndarray]:
    """Per-byte ``(paragraph, sentence)`` indices (``int32``) of ``text`` under a segmentation ``style``."""
    if style not in STYLES:
        raise ConfigError(f"unknown segmentation style {style!r}; allowed: {', '.join(STYLES)}.")
    return STYLES[style](text)


def boundary_density(paragraph_arrays: Iterable[np.ndarray]) -> float:
    """Paragraph boundaries per byte over documents: paragraph starts after each document's first, over all bytes.

    The density the ``rand_axial`` and ``period_axial`` controls are matched to (``encoding.paragraph_density``).
    """
    boundaries, total = 0, 0
    for paragraph in paragraph_arrays:
        paragraph = np.asarray(paragraph)
        boundaries += int(np.count_nonzero(np.diff(paragraph)))
        total += paragraph.size
    if total == 0:
        raise ValueError("boundary_density needs at least one byte of text.")
    return boundaries / total
