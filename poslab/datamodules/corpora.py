"""Real corpora: where documents come from, and the prepared (tokenised, memory-mapped) cache.

A corpus is one or more *source groups* (e.g. ``en`` and ``zh`` for
``wiki_en_zh``), each with a weight (its share of training windows) and its
sources: local files under ``paths.data_dir`` (``POSLAB_DATA_DIR``) tried
first, then the Hugging Face hub through ``datasets`` when online. A group is
prepared once into a cache directory holding, per split, a ``uint16`` token
array and an ``int32`` per-token document index (room is left for paragraph
and sentence coordinates: ``coordinates`` in ``meta.json`` names the arrays).

Validation documents are chosen per document (a hash of the group name and the
document's ordinal), so no document is in both splits; sources may also be
pinned to one split (``split: train`` / ``split: validation``).

Preparation streams document by document (peak memory does not grow with the
corpus), writes into a temporary directory and renames it into place under a
file lock, so parallel jobs preparing the same data leave one valid cache.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from poslab.datamodules.segmentation import STYLES, segment
from poslab.datamodules.tokenization import BYTE_SEPARATOR, BpeTokenizer, Tokenizer, load_tokenizer
from poslab.errors import ConfigError

CACHE_VERSION = 3  # 2: paragraph and sentence coordinates; 3: tokenizers (bytes, bpe), bytes per split
SPLITS = ("train", "validation")
FORMATS = ("jsonl", "text", "wikitext", "parquet", "python")
DEFAULT_SEGMENTATION = {
    "jsonl": "blank_lines",
    "text": "blank_lines",
    "wikitext": "wikitext",
    "parquet": "blank_lines",
    "python": "code",
}
SEPARATOR = BYTE_SEPARATOR  # the document separator symbol of the byte tokenizer


@dataclass
class LocalSource:
    """Files under the data directory (a glob; ``{stdlib}`` stands for the running interpreter's library)."""

    pattern: str
    format: str = "auto"
    field: str = "text"  # jsonl / parquet column holding the text
    split: str = "both"  # both: documents split by hash; train / validation: the whole source
    document_start: str | None = None  # text: a regex; a line matching it starts a new document
    segmentation: str | None = None  # paragraph/sentence style (segmentation.STYLES); None: by format

    def segmentation_style(self, path: Path) -> str:
        return self.segmentation or DEFAULT_SEGMENTATION[self.file_format(path)]

    def files(self, data_dir: Path) -> list[Path]:
        pattern = self.pattern.replace("{stdlib}", sysconfig.get_paths()["stdlib"])
        root = Path(pattern) if Path(pattern).is_absolute() else data_dir / pattern
        return sorted(Path(p) for p in glob.glob(str(root), recursive=True) if Path(p).is_file())

    def file_format(self, path: Path) -> str:
        if self.format != "auto":
            return self.format
        suffix = path.suffix.lower()
        return {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".py": "python", ".raw": "wikitext"}.get(
            suffix, "text"
        )


@dataclass
class HubSource:
    path: str
    name: str | None = None
    split: str = "train"
    field: str = "text"
    max_bytes: int = 200_000_000  # a stream from the hub is cut here (Wikipedia is tens of GB)
    segmentation: str = "blank_lines"


@dataclass
class SourceGroup:
    name: str
    weight: float = 1.0
    local: list[LocalSource] = field(default_factory=list)
    hub: HubSource | None = None
    max_bytes: int | None = None  # cap on the prepared bytes of this group (both splits)

    @classmethod
    def from_config(cls, name: str, settings: dict[str, Any]) -> SourceGroup:
        settings = dict(settings)
        local = [LocalSource(**s) for s in settings.pop("local", []) or []]
        for source in local:
            if source.format not in (*FORMATS, "auto"):
                allowed = ", ".join(("auto", *FORMATS))
                raise ConfigError(f"corpus source {source.pattern!r} has format={source.format!r}; allowed: {allowed}.")
            if source.segmentation is not None and source.segmentation not in STYLES:
                raise ConfigError(
                    f"corpus source {source.pattern!r} has segmentation={source.segmentation!r}; "
                    f"allowed: {', '.join(STYLES)}."
                )
            if source.split not in ("both", *SPLITS):
                raise ConfigError(
                    f"corpus source {source.pattern!r} has split={source.split!r}; allowed: both, train, validation."
                )
        hub = settings.pop("hub", None)
        return cls(name=name, local=local, hub=HubSource(**hub) if hub else None, **settings)


# ---- reading documents -----------------------------------------------------------------------------------------


def _jsonl_documents(path: Path, text_field: str) -> Iterator[str]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                text = json.loads(line).get(text_field) or ""
                if text.strip():
                    yield text


def _text_documents(path: Path, document_start: str | None) -> Iterator[str]:
    """A plain-text file: one document, or several when ``document_start`` marks where each begins."""
    start = re.compile(document_start) if document_start else None
    lines: list[str] = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if start is not None and start.match(line) and any(s.strip() for s in lines):
                yield "".join(lines)
                lines = []
            lines.append(line)
    if any(s.strip() for s in lines):
        yield "".join(lines)


WIKITEXT_TITLE = r"^ = [^=].* = \s*$"  # ' = Title = ' starts an article; ' = = Section = = ' does not


def _parquet_documents(path: Path, text_field: str) -> Iterator[str]:
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(path).iter_batches(columns=[text_field], batch_size=256):
        yield from (t for t in batch.column(0).to_pylist() if t and t.strip())


def local_documents(source: LocalSource, path: Path) -> Iterator[str]:
    kind = source.file_format(path)
    if kind == "jsonl":
        yield from _jsonl_documents(path, source.field)
    elif kind == "parquet":
        yield from _parquet_documents(path, source.field)
    elif kind == "wikitext":
        yield from _text_documents(path, source.document_start or WIKITEXT_TITLE)
    else:  # text, python: the file (or its marked parts)
        yield from _text_documents(path, source.document_start)


def hub_documents(hub: HubSource) -> Iterator[str]:
    from datasets import load_dataset

    stream = load_dataset(hub.path, hub.name, split=hub.split, streaming=True)
    total = 0
    for row in stream:
        text = row.get(hub.field) or ""
        if text.strip():
            yield text
            total += len(text.encode("utf-8"))
            if total >= hub.max_bytes:
                return


def hub_is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False") or os.environ.get(
        "HF_DATASETS_OFFLINE", "0"
    ) not in ("0", "", "false", "False")


@dataclass
class ResolvedGroup:
    """What a group will actually be read from: local files (with their sources) or the hub."""

    group: SourceGroup
    files: list[tuple[LocalSource, Path]]
    use_hub: bool

    def fingerprint(self) -> list[Any]:
        if self.use_hub:
            hub = self.group.hub
            return ["hub", hub.path, hub.name, hub.split, hub.field, hub.max_bytes]
        return [
            [str(p), p.stat().st_size, p.stat().st_mtime_ns, s.split, s.format, s.field, s.document_start]
            for s, p in self.files
        ]

    def documents(self) -> Iterator[tuple[str, str, str]]:
        """(split pin, segmentation style, text) for every document, in a fixed order."""
        if self.use_hub:
            hub = self.group.hub
            yield from (("both", hub.segmentation, text) for text in hub_documents(hub))
            return
        for source, path in self.files:
            style = source.segmentation_style(path)
            yield from ((source.split, style, text) for text in local_documents(source, path))


def resolve_group(corpus: str, group: SourceGroup, data_dir: Path) -> ResolvedGroup:
    files = [(source, path) for source in group.local for path in source.files(data_dir)]
    if files:
        return ResolvedGroup(group, files, use_hub=False)
    if group.hub is not None and not hub_is_offline():
        return ResolvedGroup(group, [], use_hub=True)
    looked = ", ".join(str(data_dir / s.pattern) for s in group.local) or "(no local patterns)"
    hub = f"the hub dataset {group.hub.path} ({group.hub.name})" if group.hub else "no hub dataset"
    offline = " (HF_HUB_OFFLINE is set, so the hub was not tried)" if group.hub and hub_is_offline() else ""
    raise ConfigError(
        f"corpus {corpus!r}, source group {group.name!r}: no local files matched {looked}, and {hub} is not "
        f"available{offline}. Put the files there in one of the formats {', '.join(FORMATS)} (e.g. a .jsonl with a "
        f"'text' field), or point POSLAB_DATA_DIR (paths.data_dir, now {data_dir}) at a directory that has them, "
        f"or go online so that `datasets` can fetch the hub copy."
    )


# ---- the prepared cache ----------------------------------------------------------------------------------------


def is_validation(group: str, ordinal: int, fraction: float) -> bool:
    """A fixed pseudo-random choice per document: the same document always lands in the same split."""
    digest = hashlib.sha1(f"{group}:{ordinal}".encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32 < fraction


def encode_bytes(text: str) -> np.ndarray:
    """The byte tokenizer: the UTF-8 bytes of ``text`` as symbols 0..255 (the separator is 256)."""
    return np.frombuffer(text.encode("utf-8", errors="surrogateescape"), dtype=np.uint8).astype(np.uint16)


def decode_bytes(tokens: np.ndarray | list[int]) -> bytes:
    """Back to bytes; the separator (and any symbol above 255) is dropped."""
    values = np.asarray(tokens)
    return values[values < 256].astype(np.uint8).tobytes()


@dataclass
class PreparedSplit:
    tokens: np.ndarray  # uint16 [N], memory-mapped
    documents: np.ndarray  # int32 [N], memory-mapped: the ordinal of each token's document
    paragraphs: np.ndarray  # int32 [N], memory-mapped, cumulative over the split (see _SplitWriter)
    sentences: np.ndarray  # int32 [N], likewise

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def paragraph_density(self) -> float:
        """Paragraph boundaries per token: what rand_axial and period_axial are matched to."""
        return float(self.paragraphs[-1] - self.paragraphs[0]) / max(1, len(self) - 1) if len(self) else 0.0


@dataclass
class PreparedGroup:
    name: str
    weight: float
    directory: Path
    meta: dict[str, Any]
    splits: dict[str, PreparedSplit]


COORDINATES = ("documents", "paragraphs", "sentences")  # the int32 arrays stored beside the tokens


class _SplitWriter:
    """Appends documents to one split's arrays. Paragraph and sentence indices are stored cumulatively over
    the split (each document starts a new paragraph and sentence), so they never decrease along the array
    and a window spanning two documents still sees increasing coordinates; a document's own indices are
    the stored ones minus those of its first token."""

    def __init__(self, directory: Path, split: str, separator: int) -> None:
        self.separator, self.n_bytes = separator, 0
        self.tokens = open(directory / f"{split}.tokens.u16", "wb")  # noqa: SIM115 (closed in close())
        self.arrays = {name: open(directory / f"{split}.{name}.i32", "wb") for name in COORDINATES}  # noqa: SIM115
        self.count, self.n_documents, self.n_paragraphs, self.n_sentences = 0, 0, 0, 0

    def add(
        self, ordinal: int, tokens: np.ndarray, paragraphs: np.ndarray, sentences: np.ndarray, n_bytes: int
    ) -> None:
        n = len(tokens) + 1  # each document ends with the separator, which belongs to its last paragraph
        last = (int(paragraphs[-1]), int(sentences[-1])) if len(tokens) else (0, 0)
        values = {
            "documents": np.full(n, ordinal),
            "paragraphs": np.append(paragraphs, last[0]) + self.n_paragraphs,
            "sentences": np.append(sentences, last[1]) + self.n_sentences,
        }
        self.tokens.write(np.append(tokens, self.separator).astype("<u2").tobytes())
        for name, f in self.arrays.items():
            f.write(values[name].astype("<i4").tobytes())
        self.count += n
        self.n_bytes += n_bytes + 1  # the separator counts as one byte, as with the byte tokenizer
        self.n_documents += 1
        self.n_paragraphs += last[0] + 1
        self.n_sentences += last[1] + 1

    def close(self) -> None:
        for f in (self.tokens, *self.arrays.values()):
            f.flush()
            os.fsync(f.fileno())
            f.close()

    def stats(self) -> dict[str, int]:
        return {
            "tokens": self.count,
            "bytes": self.n_bytes,
            "documents": self.n_documents,
            "paragraphs": self.n_paragraphs,
            "sentences": self.n_sentences,
        }


def prepare_group(
    corpus: str,
    resolved: ResolvedGroup,
    cache_dir: Path,
    validation_fraction: float,
    tokenizer: Tokenizer | None = None,
) -> PreparedGroup:
    """Tokenise a group into the cache (once), and map it."""
    tokenizer = tokenizer or Tokenizer()
    group = resolved.group
    settings = {
        "version": CACHE_VERSION,
        "corpus": corpus,
        "group": group.name,
        "tokenizer": tokenizer.name,
        "tokenizer_fingerprint": tokenizer.fingerprint(),
        "validation_fraction": validation_fraction,
        "max_bytes": group.max_bytes,
        "sources": resolved.fingerprint(),
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    final = cache_dir / f"{corpus}-{group.name}-{key}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if not (final / "meta.json").is_file():
            _write_group(resolved, final, settings, validation_fraction, tokenizer)
    return load_prepared(final, group.weight)


def training_documents(resolved: ResolvedGroup, fraction: float) -> Iterator[str]:
    """The texts of the group's training documents, in cache order (what a bpe tokenizer is trained on)."""
    total, cap = 0, resolved.group.max_bytes
    for ordinal, (pin, _, text) in enumerate(resolved.documents()):
        held_out = is_validation(resolved.group.name, ordinal, fraction)
        if (pin if pin != "both" else ("validation" if held_out else "train")) == "train":
            yield text
        total += len(text.encode("utf-8", errors="surrogateescape"))
        if cap is not None and total >= cap:
            return


def _write_group(
    resolved: ResolvedGroup, final: Path, settings: dict[str, Any], fraction: float, tokenizer: Tokenizer
) -> None:
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    writers = {split: _SplitWriter(tmp, split, tokenizer.separator) for split in SPLITS}
    total, cap = 0, resolved.group.max_bytes
    try:
        for ordinal, (pin, style, text) in enumerate(resolved.documents()):
            tokens, first_bytes = tokenizer.encode(text)
            paragraphs, sentences = segment(text, style)  # per byte; a token is where its first byte is
            n_bytes = len(paragraphs)
            held_out = is_validation(resolved.group.name, ordinal, fraction)
            split = pin if pin != "both" else ("validation" if held_out else "train")
            writers[split].add(ordinal, tokens, paragraphs[first_bytes], sentences[first_bytes], n_bytes)
            total += n_bytes
            if cap is not None and total >= cap:
                break
    finally:
        for writer in writers.values():
            writer.close()
    meta = {
        **settings,
        "splits": {s: w.stats() for s, w in writers.items()},
        "coordinates": list(COORDINATES),
        "vocab_size": tokenizer.vocab_size,
        "separator": tokenizer.separator,
    }
    empty = [split for split, writer in writers.items() if writer.count == 0]
    if empty:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(
            f"corpus {settings['corpus']!r}, group {settings['group']!r}: the {empty[0]} split is empty "
            f"({meta['splits']}); give more documents or a larger corpus.validation_fraction."
        )
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
    os.replace(tmp, final)  # atomic: readers see no cache or a complete one


def load_prepared(directory: Path, weight: float = 1.0) -> PreparedGroup:
    meta = json.loads((directory / "meta.json").read_text())
    splits = {}
    for split in SPLITS:
        n = meta["splits"][split]["tokens"]
        arrays = {
            name: np.memmap(directory / f"{split}.{name}.i32", dtype="<i4", mode="r", shape=(n,))
            for name in COORDINATES
        }
        splits[split] = PreparedSplit(
            tokens=np.memmap(directory / f"{split}.tokens.u16", dtype="<u2", mode="r", shape=(n,)), **arrays
        )
    return PreparedGroup(meta["group"], weight, directory, meta, splits)


def prepare_corpus(corpus: dict[str, Any], data_dir: str | Path, cache_dir: str | Path) -> list[PreparedGroup]:
    """Resolve and prepare every source group of a corpus config (``conf/corpus/*.yaml``)."""
    name = corpus["name"]
    groups = corpus.get("groups") or {}
    if not groups:
        raise ConfigError(f"corpus {name!r} names no source groups (corpus.groups); see conf/corpus/ for examples.")
    fraction = float(corpus.get("validation_fraction", 0.02))
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"corpus.validation_fraction={fraction} must be between 0 and 1 (exclusive).")
    resolved = [resolve_group(name, SourceGroup.from_config(g, s), Path(data_dir)) for g, s in groups.items()]

    def all_training_documents() -> Iterator[str]:  # one tokenizer for all groups: a shared vocabulary
        for group in resolved:
            yield from training_documents(group, fraction)

    fingerprint = [[group.group.name, group.group.max_bytes, group.fingerprint(), fraction] for group in resolved]
    tokenizer = load_tokenizer(corpus, Path(cache_dir), fingerprint, all_training_documents)
    return [prepare_group(name, group, Path(cache_dir), fraction, tokenizer) for group in resolved]


def corpus_tokenizer(prepared: list[PreparedGroup], cache_dir: str | Path) -> Tokenizer:
    """The tokenizer a prepared corpus was written with (to decode its tokens)."""
    meta = prepared[0].meta
    if meta.get("tokenizer", "bytes") == "bytes":
        return Tokenizer()

    fingerprint = meta["tokenizer_fingerprint"]
    for path in sorted((Path(cache_dir) / "tokenizers").glob("*.json")):
        tokenizer = BpeTokenizer(path)
        if tokenizer.fingerprint() == fingerprint:
            return tokenizer
    raise ConfigError(f"the bpe tokenizer {fingerprint} of {prepared[0].directory} is no longer in {cache_dir}.")


def describe(prepared: list[PreparedGroup]) -> str:
    parts = []
    for group in prepared:
        s = group.meta["splits"]
        parts.append(
            f"{group.name}: {s['train']['tokens']:,} train / {s['validation']['tokens']:,} validation tokens "
            f"({s['train']['documents']:,} / {s['validation']['documents']:,} documents), weight {group.weight}"
        )
    return "; ".join(parts)
