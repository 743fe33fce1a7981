"""A prepared split's per-token coordinates (document, paragraph and sentence indices) and the prepared split and
group that hold them.

The cache stores, per split, a ``uint16`` token array and the token offsets where each document, paragraph and
sentence starts (``BOUNDARY_ARRAYS``, ``uint32`` below 2**32 tokens: about 2.1 bytes a token in all, where version 3
stored an ``int32`` document, paragraph and sentence index per token, 14 bytes). A split's per-token coordinates
(``PreparedSplit.documents``, ``paragraphs``, ``sentences``: the same values as version 3's arrays) are
``Coordinate``s made from those offsets with binary searches when read, and a training batch's in a few vectorised
calls (``Coordinate.relative_windows``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

#: the per-token coordinates a split exposes; since version 4 they are computed from boundary offsets when read
COORDINATES = ("documents", "paragraphs", "sentences")
#: what the cache stores per split beside the uint16 tokens: ``{split}.{name}.bin``, dtypes in meta.json's ``arrays``
BOUNDARY_ARRAYS = ("document_starts", "document_ordinals", "paragraph_starts", "sentence_starts")


def _as_query(positions: Any, starts: np.ndarray) -> np.ndarray:
    # searchsorted casts both sides to a common dtype: uint32 boundaries against int64 positions would copy the
    # whole (memory-mapped) boundary array on every call, so the positions take the boundaries' dtype instead
    return np.asarray(positions).astype(starts.dtype, copy=False)


class Coordinate:
    """One per-token coordinate of a split (document, paragraph or sentence index), computed from boundary offsets
    when it is read; it indexes (ints, slices, integer arrays, ``np.asarray``) like the ``int32`` array that caches
    before version 4 stored per token, with the same values.

    Two kinds. A *count* (paragraphs, sentences): the value at token ``i`` is ``base`` plus the number of entries of
    ``starts`` at or before ``i`` (sorted token offsets; an offset appears ``k`` times where the index moves up by
    ``k``, e.g. a BPE token that swallows a one-character sentence). A *lookup* (documents): ``values[j]`` from
    ``starts[j]`` up to the next start (``starts[0] == 0``).
    """

    dtype = np.dtype(np.int32)
    ndim = 1

    def __init__(self, n: int, starts: np.ndarray, values: np.ndarray | None = None, base: int = 0) -> None:
        self.n, self.starts, self.values, self.base = int(n), starts, values, int(base)
        if values is not None and self.n and (len(starts) == 0 or int(starts[0]) != 0):
            raise ValueError("a lookup coordinate needs a start at token 0.")

    @classmethod
    def from_values(cls, values: np.ndarray, lookup: bool = False) -> Coordinate:
        """The boundaries of a per-token array (a lookup: any values; a count: non-decreasing values)."""
        values = np.asarray(values, dtype=np.int64)
        steps = np.diff(values)
        if lookup:
            starts = np.concatenate(([0], np.flatnonzero(steps) + 1)) if len(values) else np.zeros(0, np.int64)
            return cls(len(values), starts.astype(np.int64), values[starts])
        if np.any(steps < 0):
            raise ValueError("a count coordinate (paragraphs, sentences) never decreases along the split.")
        moved = np.flatnonzero(steps)
        return cls(len(values), np.repeat(moved + 1, steps[moved]), base=int(values[0]) if len(values) else 0)

    def __len__(self) -> int:
        return self.n

    @property
    def shape(self) -> tuple[int]:
        return (self.n,)

    def _rank(self, positions: Any) -> np.ndarray:
        """How many boundaries lie at or before each position."""
        return np.searchsorted(self.starts, _as_query(positions, self.starts), side="right")

    def _at_rank(self, rank: np.ndarray) -> np.ndarray:
        return self.base + rank if self.values is None else np.asarray(self.values)[rank - 1].astype(np.int64)

    def _span_ranks(self, start: int, stop: int) -> np.ndarray:
        """Ranks of the tokens ``start .. stop - 1`` (``0 <= start < stop <= n``), reading only the boundaries
        inside the span: two binary searches and a cumulative count, whatever the split's size."""
        first = int(self._rank(start))
        inside = np.asarray(self.starts[first : int(self._rank(stop - 1))])
        return first + np.cumsum(np.bincount(inside - start, minlength=stop - start))

    def span(self, start: int, stop: int) -> np.ndarray:
        """The values of tokens ``start .. stop - 1`` (``int64``)."""
        start, stop = max(0, start), min(self.n, stop)
        return self._at_rank(self._span_ranks(start, stop)) if start < stop else np.zeros(0, np.int64)

    def relative(self, start: int, stop: int) -> np.ndarray:
        """The values of tokens ``start .. stop - 1`` minus the first's (``int64``): a window's coordinates."""
        values = self.span(start, stop)
        return values - values[:1]

    def relative_windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """``[len(starts), length]`` (``int64``): ``relative(s, s + length)`` for every start ``s`` (each window
        inside the split), in a few vectorised calls for the whole batch instead of a few per window."""
        starts = np.asarray(starts, dtype=np.int64)
        if self.values is not None or not len(starts):
            return np.stack([self.relative(int(s), int(s) + length) for s in starts]).reshape(len(starts), length)
        first, last = self._rank(starts), self._rank(starts + length - 1)
        counts = (last - first).astype(np.int64)
        row = np.repeat(np.arange(len(starts)), counts)
        # the boundaries inside each window: ranks first[r] + 0 .. counts[r] - 1, one flat gather for all rows
        ranks = np.arange(len(row)) - np.repeat(np.cumsum(counts) - counts, counts) + np.repeat(first, counts)
        offsets = np.asarray(self.starts[ranks]).astype(np.int64) - starts[row]
        marks = np.bincount(row * length + offsets, minlength=len(starts) * length)
        return np.cumsum(marks.reshape(len(starts), length), axis=1)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, np.integer)):
            index = int(key) + self.n if key < 0 else int(key)
            if not 0 <= index < self.n:
                raise IndexError(f"index {int(key)} is out of bounds for a coordinate of {self.n} tokens.")
            return self.dtype.type(self._at_rank(self._rank(index)))
        if isinstance(key, slice):
            start, stop, step = key.indices(self.n)
            if step == 1:
                return self.span(start, stop).astype(self.dtype)
            key = np.arange(start, stop, step)
        positions = np.asarray(key)
        if positions.dtype == bool:
            positions = np.flatnonzero(positions)
        positions = np.where(positions < 0, positions + self.n, positions)
        if positions.size and (positions.min() < 0 or positions.max() >= self.n):
            raise IndexError(f"an index is out of bounds for a coordinate of {self.n} tokens.")
        return self._at_rank(self._rank(positions)).astype(self.dtype)

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        return self.span(0, self.n).astype(dtype or self.dtype)

    def __repr__(self) -> str:
        kind = "count" if self.values is None else "lookup"
        return f"Coordinate({kind}, {self.n} tokens, {len(self.starts)} boundaries)"


@dataclass
class PreparedSplit:
    """One split of a prepared group: the tokens and, per token, its document, paragraph and sentence.

    ``paragraphs`` and ``sentences`` are cumulative over the split (see ``_SplitWriter``); all three are
    ``Coordinate``s computed from the boundary offsets the cache stores. Per-token arrays are accepted too
    (converted to boundaries), so a split can be built in memory as the cache would store it.
    """

    tokens: np.ndarray  # uint16 [N], memory-mapped
    documents: Coordinate  # the ordinal of each token's document
    paragraphs: Coordinate  # cumulative over the split
    sentences: Coordinate  # likewise

    def __post_init__(self) -> None:
        for name in COORDINATES:
            value = getattr(self, name)
            if not isinstance(value, Coordinate):
                setattr(self, name, Coordinate.from_values(np.asarray(value), lookup=name == "documents"))
            if len(getattr(self, name)) != len(self.tokens):
                raise ValueError(f"{name} has {len(getattr(self, name))} entries for {len(self.tokens)} tokens.")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def paragraph_density(self) -> float:
        """Paragraph boundaries per token: what rand_axial and period_axial are matched to."""
        return float(self.paragraphs[-1] - self.paragraphs[0]) / max(1, len(self) - 1) if len(self) else 0.0

    def document_spans(self) -> Iterator[tuple[int, int, int]]:
        """``(ordinal, start, stop)`` of each document in the split, in order; ``stop`` is past its separator."""
        documents = self.documents
        starts, ordinals = np.asarray(documents.starts), np.asarray(documents.values)
        stops = np.append(starts[1:], len(self))
        yield from zip(ordinals.tolist(), starts.tolist(), stops.tolist())


@dataclass
class PreparedGroup:
    name: str
    weight: float
    directory: Path
    meta: dict[str, Any]
    splits: dict[str, PreparedSplit]
