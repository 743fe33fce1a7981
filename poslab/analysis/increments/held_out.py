"""The held-out text the increments analyses read, and which source each of its documents came from.

The prepared cache records each document's ordinal, not its file; which source a held-out document came from
is read off the group's files (``validation_source_kinds``), so caches prepared before this analysis need no
change. The model is run on windows of its context length (``compute.token_increments``); the helpers here
say which tokens and gaps lie inside one window.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.increments.readings import SCORE_BYTES, source_kind
from poslab.datamodules.codec import byte_length
from poslab.datamodules.corpora import PreparedGroup, PreparedSplit, decode_bytes, local_documents, resolve_corpus
from poslab.errors import DataError


def within_windows(n_tokens: int, context: int) -> np.ndarray:
    """True for every token of a stream run in windows of ``context`` but the first of each window, whose δ
    is its window's starting coordinate rather than a distance to a previous token."""
    return np.arange(n_tokens) % context != 0


def gaps_within_windows(at: np.ndarray, n_tokens: int, context: int) -> np.ndarray:
    """True for each gap (the byte offset of its second character) whose scored bytes (``SCORE_BYTES``: the next
    character's three) all lie inside one window: no δ of a window's first token enters a score."""
    offsets = np.array(sorted({o for bytes_ in SCORE_BYTES.values() for o in bytes_}), dtype=np.int64)
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    return within_windows(n_tokens, context)[at[:, None] + offsets].all(axis=1)


def held_out_text(datamodule: Any, max_bytes: int) -> dict[str, bytes]:
    """Validation bytes of each source group of the run's corpus (documents never trained on)."""
    datamodule.setup()
    return {g.name: decode_bytes(np.asarray(g.splits["validation"].tokens[:max_bytes])) for g in datamodule.groups}


def chinese_text(raw: bytes) -> str:
    """Decodable text with Chinese in it; invalid bytes (a window cut inside a character) are dropped."""
    return raw.decode("utf-8", errors="ignore")


def validation_source_kinds(
    corpus: dict[str, Any], data_dir: str | Path, group: PreparedGroup
) -> tuple[dict[int, str], dict[str, str]]:
    """The source subset (``readings.source_kind``) of each validation document of ``group``, by ordinal, and
    of each file the group reads.

    The prepared cache records a document's ordinal (its place in the group's reading order), not its file.
    The ordinals count the documents file by file, in the order ``ResolvedGroup.documents`` reads them, so
    reading the files again tells which file each ordinal falls in; each held-out document's length is then
    checked against the cache, so files changed since preparation stop the analysis instead of mislabelling.
    """
    resolved = next(g for g in resolve_corpus(corpus, data_dir).groups if g.group.name == group.name)
    spans = list(group.splits["validation"].document_spans())
    if resolved.use_hub:  # one dataset: every document is of its kind
        kind = source_kind(resolved.group.hub.path, "hub")
        return {ordinal: kind for ordinal, _, _ in spans}, {resolved.group.hub.path: kind}
    owners: list[str] = []
    lengths: list[int] = []
    files: dict[str, str] = {}
    for source, path in resolved.files:
        kind = files[str(path)] = source_kind(str(path), source.file_format(path))
        for text in local_documents(source, path, resolved.decode_errors):
            owners.append(kind)
            lengths.append(byte_length(text))
    for ordinal, start, stop in spans:
        if ordinal >= len(owners) or lengths[ordinal] + 1 != stop - start:  # + 1: the separator after each
            found = f"{lengths[ordinal]:,} bytes" if ordinal < len(owners) else "no such document"
            raise DataError(
                f"cannot tell which source each held-out document of group {group.name!r} came from: the cache "
                f"{group.directory} holds document {ordinal} with {stop - start - 1:,} bytes, but reading the "
                f"group's {len(resolved.files)} files again ({len(owners):,} documents) gives {found}. The files "
                f"have changed since the cache was prepared; analyse with the files the run was trained on, or "
                f"give --zh-text FILE for the boundary AUC without the split by source."
            )
    return {ordinal: owners[ordinal] for ordinal, _, _ in spans}, files


def held_out_chinese(
    split: PreparedSplit, kinds: dict[int, str], max_bytes: int
) -> tuple[str, np.ndarray, Counter[str]]:
    """The held-out text the boundary AUC reads (``chinese_text`` of the split's first ``max_bytes`` tokens,
    separators dropped, as ``held_out_text`` gives it), the source subset of each of its UTF-8 bytes (that of
    the document the byte belongs to; ``kinds``: by ordinal), and how many documents of each subset it holds."""
    pieces: list[str] = []
    byte_kinds: list[np.ndarray] = []
    documents: Counter[str] = Counter()
    for ordinal, start, stop in split.document_spans():
        if start >= max_bytes:
            break
        piece = chinese_text(decode_bytes(np.asarray(split.tokens[start : min(stop, max_bytes)])))
        pieces.append(piece)
        byte_kinds.append(np.full(len(piece.encode("utf-8")), kinds[ordinal]))
        documents[kinds[ordinal]] += 1
    return "".join(pieces), (np.concatenate(byte_kinds) if byte_kinds else np.zeros(0, dtype=str)), documents
