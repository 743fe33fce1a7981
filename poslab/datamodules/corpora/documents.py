"""The documents of a local file or a hub stream, and which of a group's documents are held out for validation.

Validation documents are chosen per document, so no document is in both splits (``plan_split``: in a fixed
pseudo-random order, a hash of the group name and the document's ordinal, as many as bring the held-out bytes
nearest ``validation_fraction`` of the group's; at least one and never all of two or more; a group of one document
is split by bytes, its tail held out, as nanoGPT does; the hub's streamed documents: each by its hash); sources may
also be pinned to one split (``split: train`` / ``split: validation``). That rule and the group's byte cap are
applied in one place, ``resolution.ResolvedGroup.documents``: the cache, the BPE tokenizer and the corpus
statistics all read documents through it.

Invalid UTF-8 in a data file, and a lone surrogate escape in a JSONL string, follow ``corpus.decode_errors`` (strict:
stop naming the file and byte offset or line; replace: U+FFFD, counted). A JSONL row without the text field, or a
parquet file without the text column (or with one of another type), stops naming the file and what it has.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poslab.datamodules.codec import (
    InvalidUtf8Error,
    byte_length,
    first_lone_surrogate,
    read_lines,
    replace_lone_surrogates,
)
from poslab.datamodules.corpora.sources import HubSource, LocalSource
from poslab.errors import DataError

MAX_KEYS = 12  # a row's keys named in a message at most


def _jsonl_documents(
    path: Path, text_field: str, decode_errors: str, replaced: dict[str, int] | None = None
) -> Iterator[str]:
    yield from (text for text, _ in jsonl_rows(path, text_field, decode_errors, replaced))


def jsonl_rows(
    path: Path,
    text_field: str,
    decode_errors: str,
    replaced: dict[str, int] | None = None,
    key_field: str | None = None,
) -> Iterator[tuple[str, str | None]]:
    """(text, the row's ``key_field`` as a string, or None) for every non-blank document of a JSONL file."""
    for number, line in enumerate(_lines(path, decode_errors, replaced), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            reason = error.msg.removesuffix(" at")  # 'Unterminated string starting at', ...
            raise DataError(
                f"{path}, line {number}: not valid JSON ({reason} at column {error.colno}); each non-blank line of a "
                f"JSONL file must be one JSON object."
            ) from None
        if not isinstance(row, dict):
            raise DataError(
                f"{path}, line {number}: a JSON {type(row).__name__}, not an object; each non-blank line of a JSONL "
                f"file must be one JSON object with a {text_field!r} field."
            )
        text = _row_text(row, text_field, Where(path, number), decode_errors, replaced)
        if text.strip():
            key = row.get(key_field) if key_field is not None else None
            yield text, None if key is None else str(key)


@dataclass(frozen=True)
class Where:
    """A JSONL line, for a message: ``path, line number``."""

    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path}, line {self.line}"


def _row_text(
    row: dict[str, Any], field: str, where: Where, decode_errors: str, replaced: dict[str, int] | None
) -> str:
    """A JSONL row's text: its ``field`` (null or "" is an empty document; a row without the field is refused,
    naming the keys it has, so a wrong field name never reads as an empty corpus), a lone surrogate escape refused
    or replaced (``_without_lone_surrogates``)."""
    if field not in row:
        keys = ", ".join(repr(key) for key in list(row)[:MAX_KEYS]) + (", ..." if len(row) > MAX_KEYS else "")
        raise DataError(
            f"{where}: the row has no {field!r} field (its keys: {keys or 'none, an empty object'}); point the "
            f"source's field (corpus.field for corpus=local) at the key holding the text."
        )
    text = row[field] if row[field] is not None else ""
    if not isinstance(text, str):
        raise DataError(
            f"{where}: the {field!r} field is a JSON {type(text).__name__}, not a string; point the source's field "
            f"(corpus.field for corpus=local) at the column holding the text."
        )
    return _without_lone_surrogates(text, field, where, decode_errors, replaced)


def _without_lone_surrogates(
    text: str, field: str, where: Where, decode_errors: str, replaced: dict[str, int] | None
) -> str:
    """``text`` without lone surrogates (a JSON escape of half a UTF-16 pair, ``\\ud83d``: an emoji cut in two by a
    scraper), which UTF-8 cannot hold: ``strict`` refuses the line, ``replace`` reads each as U+FFFD and counts it
    with the file's invalid UTF-8 (``replaced``)."""
    at = first_lone_surrogate(text)
    if at < 0:
        return text
    if decode_errors == "strict":
        raise DataError(
            f"{where}: the {field!r} field holds a lone surrogate escape (\\u{ord(text[at]):04x} at character {at}), "
            f"half of a UTF-16 pair such as an emoji cut in two, which no UTF-8 text can hold; fix the line, or set "
            f"corpus.decode_errors=replace to read each lone surrogate as U+FFFD (counted and logged)."
        )
    text, count = replace_lone_surrogates(text)
    if replaced is not None:
        replaced[str(where.path)] = replaced.get(str(where.path), 0) + count
    return text


def _lines(path: Path, decode_errors: str, replaced: dict[str, int] | None) -> Iterator[str]:
    """``codec.read_lines``, its invalid-UTF-8 error as poslab's (one message naming the file and byte offset)."""
    try:
        yield from read_lines(path, decode_errors, replaced)
    except InvalidUtf8Error as error:
        raise DataError(str(error)) from None


def _text_documents(
    path: Path, document_start: str | None, decode_errors: str, replaced: dict[str, int] | None = None
) -> Iterator[str]:
    """A plain-text file: one document, or several when ``document_start`` marks where each begins."""
    start = re.compile(document_start) if document_start else None
    lines: list[str] = []
    for line in _lines(path, decode_errors, replaced):
        if start is not None and start.match(line) and any(s.strip() for s in lines):
            yield "".join(lines)
            lines = []
        lines.append(line)
    if any(s.strip() for s in lines):
        yield "".join(lines)


WIKITEXT_TITLE = r"^ = [^=].* = \s*$"  # ' = Title = ' starts an article; ' = = Section = = ' does not


def _parquet_documents(path: Path, text_field: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(path)
    _check_text_column(path, parquet.schema_arrow, text_field)
    for batch in parquet.iter_batches(columns=[text_field], batch_size=256):
        yield from (t for t in batch.column(0).to_pylist() if t and t.strip())


def _check_text_column(path: Path, schema: Any, field: str) -> None:
    """A parquet file's ``field`` is a column of strings, or one sentence naming the columns it has or the type."""
    names = schema.names
    shown = ", ".join(repr(name) for name in names[:MAX_KEYS]) + (", ..." if len(names) > MAX_KEYS else "")
    fix = "point the source's field (corpus.field for corpus=local) at the column holding the text"
    if field not in names:
        raise DataError(f"{path}: no column {field!r} (its columns: {shown or 'none'}); {fix}.")
    kind = schema.field(field).type
    if not _is_string(kind):
        raise DataError(f"{path}: the column {field!r} holds {kind} values, not strings (its columns: {shown}); {fix}.")


def _is_string(kind: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(kind):
        return _is_string(kind.value_type)
    string_view = getattr(pa.types, "is_string_view", lambda _: False)  # pyarrow 16 on
    return pa.types.is_string(kind) or pa.types.is_large_string(kind) or string_view(kind)


def local_documents(
    source: LocalSource, path: Path, decode_errors: str, replaced: dict[str, int] | None = None
) -> Iterator[str]:
    """The documents of one local file. ``decode_errors`` (``corpus.decode_errors``) says what invalid UTF-8 does in
    every text format (jsonl, text, wikitext, python); ``replaced`` counts the replacements per file. Parquet
    strings are UTF-8 by Arrow's own rule, so the policy has nothing to do there."""
    kind = source.file_format(path)
    if kind == "jsonl":
        yield from _jsonl_documents(path, source.field, decode_errors, replaced)
    elif kind == "parquet":
        yield from _parquet_documents(path, source.field)
    elif kind == "wikitext":
        yield from _text_documents(path, source.document_start or WIKITEXT_TITLE, decode_errors, replaced)
    else:  # text, python: the file (or its marked parts)
        yield from _text_documents(path, source.document_start, decode_errors, replaced)


def hub_documents(hub: HubSource) -> Iterator[str]:
    from datasets import load_dataset

    stream = load_dataset(hub.path, hub.name, split=hub.split, streaming=True)
    total = 0
    for row in stream:
        if hub.field not in row:
            dataset = f"{hub.path} ({hub.name})" if hub.name else hub.path
            raise DataError(
                f"hub dataset {dataset}: its rows have no {hub.field!r} field (their keys: "
                f"{', '.join(repr(key) for key in list(row)[:MAX_KEYS])}); set the group's hub field to the column "
                f"holding the text."
            )
        text = row[hub.field] or ""
        if text.strip():
            yield text
            total += len(text.encode("utf-8"))
            if total >= hub.max_bytes:
                return


def document_draw(group: str, ordinal: int) -> float:
    """A fixed pseudo-random number in [0, 1) per document (a hash of the group's name and its ordinal)."""
    digest = hashlib.sha1(f"{group}:{ordinal}".encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32


def is_validation(group: str, ordinal: int, fraction: float) -> bool:
    """A fixed pseudo-random choice per document: the same document always lands in the same split (the hub's
    streamed documents, whose sizes are not known in advance; local files follow ``plan_split``)."""
    return document_draw(group, ordinal) < fraction


#: how local documents are split (part of the cache key and the tokenizer's: a change of rule prepares anew)
SPLIT_RULE = "tokens-v1"


@dataclass
class SplitPlan:
    """Which documents of a group are held out: ``held`` (ordinals), or, for a group of one document, its tail
    (``tail_at``: the character where validation starts)."""

    rule: str  # documents: whole documents; tail: one document split by bytes; hash: per-document draw (hub)
    held: frozenset[int] = frozenset()
    tail_of: int | None = None  # the ordinal of the one document split by bytes
    tail_at: int = 0  # its first validation character
    documents: int = 0  # documents the plan chose among (not pinned to a split)


def split_units(keys: dict[int, str | None]) -> dict[int, list[int]]:
    """The units of a split: documents with one key (``LocalSource.split_key``) together, under their first
    ordinal; a document without a key is a unit of its own."""
    units: dict[int, list[int]] = {}
    first: dict[str, int] = {}
    for ordinal in sorted(keys):
        key = keys[ordinal]
        unit = ordinal if key is None else first.setdefault(key, ordinal)
        units.setdefault(unit, []).append(ordinal)
    return units


def plan_split(
    group: str, sizes: dict[int, int], fraction: float, units: dict[int, list[int]] | None = None
) -> SplitPlan:
    """Validation documents whose bytes come as near ``fraction`` of the group's as whole documents allow.

    Documents are taken in a fixed pseudo-random order (``document_draw``) whenever taking one brings the held-out
    bytes nearer the target, and at least one and at most all but one are held out when there are two or more.
    ``units`` (``split_units``: documents of one split key) are taken or left whole, drawn by their first ordinal;
    without them (or with fewer than two) every document is its own. One document is split by bytes instead
    (``SplitPlan.tail_of``; the caller cuts it, as nanoGPT does)."""
    if len(sizes) == 1:
        return SplitPlan("tail", tail_of=next(iter(sizes)), documents=1)
    if not sizes:
        return SplitPlan("documents")
    if units is None or len(units) < 2:
        units = {ordinal: [ordinal] for ordinal in sizes}
    unit_sizes = {unit: sum(sizes[o] for o in members) for unit, members in units.items()}
    target, held, chosen = fraction * sum(sizes.values()), 0, []
    for unit in sorted(unit_sizes, key=lambda u: (document_draw(group, u), u)):
        if len(chosen) == len(unit_sizes) - 1:
            break
        if abs(held + unit_sizes[unit] - target) < abs(held - target):
            chosen.append(unit)
            held += unit_sizes[unit]
    if not chosen:  # every unit alone overshoots the target: the one nearest it
        chosen = [min(unit_sizes, key=lambda u: (abs(unit_sizes[u] - target), document_draw(group, u)))]
    documents = frozenset(o for unit in chosen for o in units[unit])
    return SplitPlan("documents", held=documents, documents=len(sizes))


def tail_cut(text: str, fraction: float) -> int:
    """The character where the last ``fraction`` of ``text``'s bytes starts (never the first or past the last)."""
    total, low, high = byte_length(text), 1, max(1, len(text) - 1)
    goal = total - fraction * total
    while low < high:  # the first character whose preceding bytes reach the goal
        middle = (low + high) // 2
        if byte_length(text[:middle]) >= goal:
            high = middle
        else:
            low = middle + 1
    return low


@dataclass(frozen=True)
class CorpusDocument:
    """One document of a source group, as every reader of a corpus sees it."""

    split: str  # train or validation
    ordinal: int  # its place in the group's fixed order: the document index stored in the cache
    style: str  # its segmentation style (segmentation.STYLES)
    text: str
