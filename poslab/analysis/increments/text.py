"""Bytes, characters and words of the increments analyses: the category of each byte token, the UTF-8 characters
the tokens spell, and where jieba starts a Chinese word.

Byte tokens are ints 0..256 (256 the document separator); they may come as lists, numpy arrays or torch tensors.
Nothing here looks at a model or at increments.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from poslab.datamodules.codec import SEPARATOR

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
CJK_FIRST, CJK_LAST = 0x4E00, 0x9FFF  # CJK Unified Ideographs: the characters whose gaps are scored
_ASCII_PUNCT = frozenset(b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def as_numpy(x: Any) -> np.ndarray:
    """A numpy copy of a list, array or torch tensor (detached, on the CPU, bf16 widened to float32)."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if x.is_floating_point():
            x = x.float()
        return x.numpy()
    return np.asarray(x)


def as_tokens(tokens: Any) -> np.ndarray:
    """Byte tokens as int64 ``[N]``, checked to lie in 0..SEPARATOR."""
    t = as_numpy(tokens).astype(np.int64).reshape(-1)
    if t.size and (t.min() < 0 or t.max() > SEPARATOR):
        raise ValueError(f"byte tokens must lie in 0..{SEPARATOR}")
    return t


def as_layers(values: Any, n: int, what: str) -> np.ndarray:
    """``values`` as float64 ``[L, n]``; a single row ``[n]`` counts as one layer."""
    v = as_numpy(values).astype(np.float64)
    if v.ndim == 1:
        v = v[None, :]
    if v.ndim != 2 or v.shape[1] != n:
        raise ValueError(f"{what} must have shape [L, {n}] (one column per token), got {tuple(v.shape)}")
    return v


def sequence_length(byte: int) -> int:
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


def _single_byte_category(b: int) -> str:
    """The category of a byte that does not continue a sequence."""
    if 0x61 <= b <= 0x7A:
        return "en_lower"
    if 0x41 <= b <= 0x5A:
        return "en_upper"
    if 0x30 <= b <= 0x39:
        return "digit"
    if b in (0x20, 0x09):
        return "space"
    if b == 0x0A:
        return "newline"
    if b in _ASCII_PUNCT:
        return "punct"
    return "zh_lead" if b in ZH_LEADS else "other"


def byte_categories(tokens: Any) -> np.ndarray:
    """The category (a name from ``CATEGORIES``) of every byte token, as a numpy string array ``[N]``.

    A byte is classified from itself and the bytes before it, as a causal model sees it: 0xE4–0xE9 is
    ``zh_lead`` whatever follows (a truncated sequence keeps its lead), and a continuation byte is
    ``zh_cont`` only while it is one of the two bytes its zh_lead announced. Stray continuation bytes,
    other UTF-8 lead bytes and their continuations, bytes that never occur in UTF-8, control bytes and the
    separator are ``other``.
    """
    t = as_tokens(tokens)
    out = np.empty(t.size, dtype=f"<U{max(map(len, CATEGORIES))}")
    pending, pending_kind = 0, "other"  # continuation bytes still owed by the last lead byte, and their category
    for i, b in enumerate(t.tolist()):
        if b != SEPARATOR and _is_continuation(b) and pending:
            out[i] = pending_kind
            pending -= 1
            continue
        pending = 0  # anything but an owed continuation ends the sequence
        out[i] = "other" if b == SEPARATOR else _single_byte_category(b)
        if out[i] == "zh_lead":
            pending, pending_kind = 2, "zh_cont"
        elif out[i] == "other" and b != SEPARATOR and sequence_length(b) > 1:
            pending, pending_kind = sequence_length(b) - 1, "other"
    return out


def decode_characters(tokens: Any) -> list[tuple[str, int, int]]:
    """Decode byte tokens into ``(character, first_index, last_index)``, indices into ``tokens``.

    Unlike ``bytes.decode(errors="replace")``, every byte that does not belong to a valid UTF-8 sequence
    becomes its own U+FFFD, so each token belongs to exactly one character. The separator becomes
    ``SEPARATOR_CHAR``.
    """
    t = as_tokens(tokens).tolist()
    chars: list[tuple[str, int, int]] = []
    i = 0
    while i < len(t):
        b = t[i]
        if b == SEPARATOR:
            chars.append((SEPARATOR_CHAR, i, i))
            i += 1
            continue
        n = sequence_length(b)
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
