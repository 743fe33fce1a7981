"""Writing a resolved group into a cache directory: the split files, meta.json and each array's checksum.

Preparation streams document by document (peak memory does not grow with the corpus), logs a line every few seconds
(documents, MB, MB/s) and writes into a temporary directory that ``cache.prepare_group`` renames into place.
``meta.json`` records each array's size and sha256 (what ``cache.load_prepared`` checks).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from poslab.datamodules.corpora.coordinates import BOUNDARY_ARRAYS, COORDINATES
from poslab.datamodules.corpora.documents import SplitPlan
from poslab.datamodules.corpora.provenance import LISTED_FILES, SPLIT_BY_BYTES, SPLIT_BY_DOCUMENT
from poslab.datamodules.corpora.resolution import ResolvedGroup
from poslab.datamodules.corpora.sources import SPLITS
from poslab.datamodules.segmentation import segment
from poslab.datamodules.tokenization import Tokenizer, coordinate_bytes
from poslab.errors import ConfigError

log = logging.getLogger("poslab")

PROGRESS_SECONDS = 5.0  # a long preparation logs a line this often
CHECKSUM = "sha256"  # of each array file, in meta.json's ``files``: hashlib's sha256 ran at 1.7 GB/s here, blake2b 0.75
_CHUNK = 1 << 23  # bytes read at a time when checksumming


class _SplitWriter:
    """Appends documents to one split's files: the tokens, and the offsets where documents, paragraphs and
    sentences start. Paragraph and sentence indices are cumulative over the split (each document starts a new
    paragraph and sentence), so they never decrease along the split and a window spanning two documents still
    sees increasing coordinates; a document's own indices are the values minus those of its first token.

    Offsets are streamed as int64 (the split's length is not known until the end) and narrowed to uint32 at
    ``close`` when the split has fewer than 2**32 tokens: 4 bytes a boundary, a few boundaries per hundred tokens.
    """

    def __init__(self, directory: Path, split: str, separator: int) -> None:
        self.directory, self.split, self.separator, self.n_bytes = directory, split, separator, 0
        self.tokens = open(directory / f"{split}.tokens.u16", "wb")  # noqa: SIM115 (closed in close())
        self.offsets = {
            name: open(directory / f"{split}.{name}.i64.part", "wb")  # noqa: SIM115 (closed in close())
            for name in ("document_starts", "paragraph_starts", "sentence_starts")
        }
        self.ordinals = open(directory / f"{split}.document_ordinals.bin", "wb")  # noqa: SIM115
        self.count, self.n_documents, self.n_paragraphs, self.n_sentences = 0, 0, 0, 0
        self.lengths = dict.fromkeys(BOUNDARY_ARRAYS, 0)

    def _write(self, name: str, offsets: np.ndarray) -> None:
        self.offsets[name].write(offsets.astype("<i8").tobytes())
        self.lengths[name] += len(offsets)

    def add(
        self, ordinal: int, tokens: np.ndarray, paragraphs: np.ndarray, sentences: np.ndarray, n_bytes: int
    ) -> None:
        n = len(tokens) + 1  # each document ends with the separator, which belongs to its last paragraph
        last = (int(paragraphs[-1]), int(sentences[-1])) if len(tokens) else (0, 0)
        start = self.count
        self._write("document_starts", np.array([start]))
        self.ordinals.write(np.array([ordinal], dtype="<i4").tobytes())
        self.lengths["document_ordinals"] += 1
        for name, local, end in (("paragraph_starts", paragraphs, last[0]), ("sentence_starts", sentences, last[1])):
            values = np.append(np.asarray(local, dtype=np.int64), end)
            # the index moves up by one at a document after the split's first (the previous one's last + 1), by
            # its first token's own index there, and by each step inside it: repeated offsets carry steps above one
            first = int(values[0]) + (1 if start else 0)
            steps = np.diff(values)
            moved = np.flatnonzero(steps)
            self._write(name, np.concatenate((np.full(first, start), np.repeat(start + 1 + moved, steps[moved]))))
        self.tokens.write(np.append(tokens, self.separator).astype("<u2").tobytes())
        self.count += n
        self.n_bytes += n_bytes + 1  # the separator counts as one byte, as with the byte tokenizer
        self.n_documents += 1
        self.n_paragraphs += last[0] + 1
        self.n_sentences += last[1] + 1

    def close(self) -> dict[str, list[Any]]:
        """Close the files; narrow the offsets. Returns ``{name: [dtype, length]}`` of the boundary arrays."""
        for f in (self.tokens, self.ordinals, *self.offsets.values()):
            f.flush()
            os.fsync(f.fileno())
            f.close()
        dtype = "<u4" if self.count < 2**32 else "<i8"
        for name in self.offsets:
            part = self.directory / f"{self.split}.{name}.i64.part"
            target = self.directory / f"{self.split}.{name}.bin"
            if dtype == "<i8" or self.lengths[name] == 0:
                os.replace(part, target)
                continue
            source = np.memmap(part, dtype="<i8", mode="r", shape=(self.lengths[name],))
            with open(target, "wb") as f:
                for i in range(0, len(source), 1 << 22):  # in chunks: memory does not grow with the corpus
                    f.write(np.asarray(source[i : i + (1 << 22)]).astype(dtype).tobytes())
                f.flush()
                os.fsync(f.fileno())
            del source
            part.unlink()
        return {name: ["<i4" if name == "document_ordinals" else dtype, self.lengths[name]] for name in BOUNDARY_ARRAYS}

    def stats(self) -> dict[str, int]:
        return {
            "tokens": self.count,
            "bytes": self.n_bytes,
            "documents": self.n_documents,
            "paragraphs": self.n_paragraphs,
            "sentences": self.n_sentences,
        }


class _Progress:
    """A log line every ``PROGRESS_SECONDS`` while a group is prepared (documents, bytes, MB/s), and one at the end."""

    def __init__(self, name: str, total_bytes: int | None) -> None:
        self.name, self.total = name, total_bytes
        self.start = self.last = time.monotonic()
        self.documents, self.bytes = 0, 0

    def _line(self, now: float) -> str:
        rate = self.bytes / 1e6 / max(now - self.start, 1e-9)
        of = f" (of {self.total / 1e6:,.1f} MB of files)" if self.total else ""
        elapsed = now - self.start
        documents = f"{self.documents:,} document{'s' if self.documents != 1 else ''}"
        return f"{documents}, {self.bytes / 1e6:,.1f} MB{of} in {elapsed:.0f} s, {rate:.1f} MB/s"

    def update(self, n_bytes: int) -> None:
        self.documents, self.bytes = self.documents + 1, self.bytes + n_bytes
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            log.info("preparing %s: %s", self.name, self._line(now))

    def done(self) -> None:
        log.info("prepared %s: %s", self.name, self._line(time.monotonic()))


def _write_group(
    resolved: ResolvedGroup, final: Path, settings: dict[str, Any], fraction: float, tokenizer: Tokenizer
) -> None:
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        _write_into(tmp, resolved, final, settings, fraction, tokenizer)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # a bad line, an empty split, ^C: nothing half-written is left
        raise


def _write_into(
    tmp: Path, resolved: ResolvedGroup, final: Path, settings: dict[str, Any], fraction: float, tokenizer: Tokenizer
) -> None:
    writers = {split: _SplitWriter(tmp, split, tokenizer.separator) for split in SPLITS}
    summary = resolved.summary()
    progress = _Progress(f"{settings['corpus']}/{settings['group']}", summary.get("file_bytes"))
    arrays: dict[str, dict[str, list[Any]]] = {}
    try:
        for document in resolved.documents(fraction):
            tokens, first_bytes = tokenizer.encode(document.text)
            paragraphs, sentences = segment(document.text, document.style)  # per byte; a token: coordinate_bytes
            at = coordinate_bytes(document.text, first_bytes)
            writer = writers[document.split]
            writer.add(document.ordinal, tokens, paragraphs[at], sentences[at], len(paragraphs))
            progress.update(len(paragraphs))
    finally:
        for split, writer in writers.items():
            arrays[split] = writer.close()
    if resolved.plan is not None and resolved.plan.rule == "tail":  # one document, cut in two by bytes
        progress.documents -= 1  # its tail is not another document
        for entry in summary.get("listing", []):
            entry["split"] = SPLIT_BY_BYTES if entry["split"] == SPLIT_BY_DOCUMENT else entry["split"]
    progress.done()
    meta = {
        **settings,
        "splits": {s: w.stats() for s, w in writers.items()},
        "coordinates": list(COORDINATES),  # per token, computed from the boundary arrays when read
        "arrays": arrays,  # per split: {name: [dtype, length]} of {split}.{name}.bin
        "vocab_size": tokenizer.vocab_size,
        "separator": tokenizer.separator,
        "source_files": summary,
        # each array file's size and checksum: what load_prepared checks (sizes always, checksums per verify_cache)
        "checksum": CHECKSUM,
        "files": _file_records(tmp, arrays, writers),
        # corpus.decode_errors, and per file how many invalid UTF-8 sequences or lone surrogates it replaced
        "decode": {
            "policy": resolved.decode_errors,
            "replaced": sum(resolved.replaced.values()),
            "files": dict(resolved.replaced),
        },
    }
    if not resolved.use_hub:  # files that gave no document (empty, blank, only empty texts): counted, listed
        summary["empty_files"] = len(resolved.empty)
        summary["empty_listing"] = resolved.empty[:LISTED_FILES]
    meta["split"] = _split_record(resolved.plan, fraction, meta["splits"])
    empty = [split for split, writer in writers.items() if writer.count == 0]
    if empty:
        none = resolved.empty
        no_document = f"; {empty_files(none, len(none), len(resolved.files))}" if none else ""
        raise ConfigError(
            f"corpus {settings['corpus']!r}, group {settings['group']!r}: the {empty[0]} split is empty "
            f"({describe_splits(meta['splits'])}){no_document}; give more documents (a text file is one document "
            f"unless corpus.document_start splits it) or a larger corpus.validation_fraction."
        )
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
    os.replace(tmp, final)  # atomic: readers see no cache or a complete one (final is absent: see prepare_group)


def describe_splits(splits: dict[str, dict[str, int]]) -> str:
    """``train: 1 document, 12 tokens; validation: 0 documents, 0 tokens`` (meta.json's ``splits``, in words)."""

    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'' if n == 1 else 's'}"

    return "; ".join(
        f"{split}: {plural(c['documents'], 'document')}, {plural(c['tokens'], 'token')}" for split, c in splits.items()
    )


def _split_record(plan: SplitPlan | None, fraction: float, splits: dict[str, dict[str, int]]) -> dict[str, Any]:
    """What the split came out as (meta.json and results.json ``split``): the rule, the fraction asked for, and
    the documents and share of tokens held out."""
    tokens = splits["train"]["tokens"] + splits["validation"]["tokens"]
    record: dict[str, Any] = {
        "rule": plan.rule if plan else "hash",
        "validation_fraction": fraction,
        "validation_documents": splits["validation"]["documents"],
        "documents": splits["train"]["documents"] + splits["validation"]["documents"],
        "validation_token_share": splits["validation"]["tokens"] / tokens if tokens else 0.0,
    }
    if plan is not None and plan.rule == "tail":
        record["documents"] = 1
        record["tail_start_character"] = plan.tail_at
    return record


def empty_files(paths: list[str], count: int, files: int) -> str:
    """``2 of 8 files gave no document (empty or blank: a.txt, b.txt)``: ``count`` of them, the first three of
    ``paths`` named."""
    shown = ", ".join(Path(p).name for p in paths[:3])
    more = f" and {count - 3} more" if count > 3 else ""
    return f"{count} of {files} files gave no document (empty or blank: {shown}{more})"


def log_empty(name: str, summary: dict[str, Any]) -> None:
    """One line, whether prepared now or before: the files that gave no document (meta.json's source_files). A
    preparation that ends with an empty split names them in its refusal instead (``_write_into``)."""
    empty = summary.get("empty_files", 0)
    if empty:
        listed = summary.get("empty_listing", [])
        log.warning("%s: %s; they are left out", name, empty_files(listed, empty, summary.get("files", 0)))


def _array_files(split: str, layout: dict[str, list[Any]], n_tokens: int) -> dict[str, tuple[str, int]]:
    """``{file name: (dtype, length)}`` of one split's arrays: the tokens and the boundary arrays."""
    return {
        f"{split}.tokens.u16": ("<u2", n_tokens),
        **{f"{split}.{name}.bin": (str(layout[name][0]), int(layout[name][1])) for name in BOUNDARY_ARRAYS},
    }


def _file_records(tmp: Path, arrays: dict[str, dict[str, list[Any]]], writers: dict[str, Any]) -> dict[str, Any]:
    records = {}
    for split in SPLITS:
        for name, (dtype, length) in _array_files(split, arrays[split], writers[split].count).items():
            path = tmp / name
            records[name] = {"dtype": dtype, "length": length, "bytes": path.stat().st_size, CHECKSUM: _digest(path)}
    return records


def _digest(path: Path) -> str:
    digest = hashlib.new(CHECKSUM)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
