"""Real corpora: where documents come from, and the prepared (tokenised, memory-mapped) cache.

A corpus is one or more *source groups* (e.g. ``en`` and ``zh`` for
``wiki_en_zh``), each with a weight (its share of training windows) and its
sources: local files under ``paths.data_dir`` (``POSLAB_DATA_DIR``) tried
first, then the Hugging Face hub through ``datasets`` when online. A group is
prepared once into a cache directory holding, per split, a ``uint16`` token
array and the token offsets where each document, paragraph and sentence starts
(``BOUNDARY_ARRAYS``, ``uint32`` below 2**32 tokens: about 2.1 bytes a token in
all, where version 3 stored an ``int32`` document, paragraph and sentence index
per token, 14 bytes). A split's per-token coordinates (``PreparedSplit.documents``,
``paragraphs``, ``sentences``: the same values as version 3's arrays) are
``Coordinate``s made from those offsets with binary searches when read, and a
training batch's in a few vectorised calls (``Coordinate.relative_windows``).

Validation documents are chosen per document, so no document is in both splits
(``plan_split``: in a fixed pseudo-random order, a hash of the group name and the
document's ordinal, as many as bring the held-out bytes nearest
``validation_fraction`` of the group's; at least one and never all of two or
more; a group of one document is split by bytes, its tail held out, as nanoGPT
does; the hub's streamed documents: each by its hash); sources may also be
pinned to one split (``split: train`` / ``split: validation``). That rule and
the group's byte cap live in one place, ``ResolvedGroup.documents``: the cache,
the BPE tokenizer and the corpus statistics all read documents through it.

``corpus=local corpus.path=PATH`` (``conf/corpus/local.yaml``) is one group
``main`` whose one local source is PATH: a file, a directory (every file of
``corpus.format`` below it) or a glob; ``local_pattern`` and ``local_corpus_name``
turn PATH into that source's glob and the corpus's name (OmegaConf resolvers, so
the run directory and the saved config say what was trained on).

Preparation streams document by document (peak memory does not grow with the
corpus), logs a line every few seconds (documents, MB, MB/s), writes into a
temporary directory and renames it into place under a file lock, so parallel
jobs preparing the same data leave one valid cache. ``meta.json`` records each array's
size and sha256; a cache is checked when opened (sizes always, checksums per
``corpus.verify_cache``), and a bad one is moved aside and prepared again. Invalid UTF-8
in a data file follows ``corpus.decode_errors`` (strict: stop naming the file and byte
offset; replace: U+FFFD, counted). docs/prepared_data.md: the layout, the integrity
checks and their figures.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from dataclasses import field as dataclass_field  # LocalSource has a setting named `field`
from pathlib import Path
from typing import Any

import numpy as np
from filelock import FileLock

from poslab.datamodules.codec import (
    DECODE_ERRORS,
    SEPARATOR,
    InvalidUtf8Error,
    byte_length,
    decode_bytes,
    encode_bytes,
    read_lines,
)
from poslab.datamodules.segmentation import STYLES, segment
from poslab.datamodules.tokenization import BpeTokenizer, Tokenizer, load_tokenizer
from poslab.errors import ConfigError, DataError
from poslab.overrides import quoted
from poslab.settings import FORMATS, VERIFY_CACHE

__all__ = ["SEPARATOR", "decode_bytes", "encode_bytes"]  # the byte codec (codec.py), re-exported for its users here

CACHE_VERSION = 4  # 2: paragraph and sentence coordinates; 3: tokenizers (bytes, bpe), bytes per split;
# 4: boundary offsets instead of per-token int32 coordinates (14 -> ~2.1 bytes a token)
SPLITS = ("train", "validation")
DEFAULT_SEGMENTATION = {
    "jsonl": "blank_lines",
    "text": "blank_lines",
    "wikitext": "wikitext",
    "parquet": "blank_lines",
    "python": "code",
}
STDLIB = "{stdlib}"  # in a pattern: the running interpreter's standard library directory
# inside {stdlib}: third-party packages installed there (they are not the standard library, and change whenever
# anything is pip-installed), and the standard library's own test packages (kept with include_tests: true)
NOT_STDLIB = ("site-packages", "dist-packages")
TEST_PACKAGES = ("test", "tests", "idle_test")

log = logging.getLogger("poslab")


@dataclass
class LocalSource:
    """Files under the data directory (a glob, relative to it unless absolute).

    ``{stdlib}`` stands for the running interpreter's standard library directory, and a pattern under it
    takes the standard library only: never the third-party packages installed inside it (``site-packages``,
    ``dist-packages``), and its test packages only with ``include_tests``. ``exclude`` drops files below
    directories whose names match one of its shell patterns (relative to where the glob starts).
    """

    pattern: str
    format: str = "auto"
    field: str = "text"  # jsonl / parquet column holding the text
    split: str = "both"  # both: documents split by hash; train / validation: the whole source
    document_start: str | None = None  # text: a regex; a line matching it starts a new document
    segmentation: str | None = None  # paragraph/sentence style (segmentation.STYLES); None: by format
    exclude: list[str] = dataclass_field(default_factory=list)  # directory names (shell patterns) to skip
    include_tests: bool = True  # False: skip test packages (TEST_PACKAGES directories)

    def segmentation_style(self, path: Path) -> str:
        return self.segmentation or DEFAULT_SEGMENTATION[self.file_format(path)]

    @property
    def excluded(self) -> tuple[str, ...]:
        stdlib = NOT_STDLIB if self.pattern.startswith(STDLIB) else ()
        return (*stdlib, *self.exclude, *(() if self.include_tests else TEST_PACKAGES))

    def files(self, data_dir: Path) -> list[Path]:
        pattern = self.pattern.replace(STDLIB, sysconfig.get_paths()["stdlib"])
        full = Path(pattern) if Path(pattern).is_absolute() else data_dir / pattern
        root, excluded = glob_root(str(full)), self.excluded
        files = []
        for name in glob.glob(str(full), recursive=True):
            path = Path(name)
            folders = path.parent.relative_to(root).parts if path.parent.is_relative_to(root) else ()
            if path.is_file() and not any(fnmatch.fnmatch(part, ex) for part in folders for ex in excluded):
                files.append(path)
        return sorted(files)

    def file_format(self, path: Path) -> str:
        if self.format != "auto":
            return self.format
        suffix = path.suffix.lower()
        return {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".py": "python", ".raw": "wikitext"}.get(
            suffix, "text"
        )


#: extensions that name a structured format: such a file is read in that format or not at all (``format_mismatch``)
STRUCTURED_SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".ndjson": "jsonl", ".parquet": "parquet"}


def format_mismatch(kind: str, path: Path) -> str | None:
    """What the extension of ``path`` says against reading it as ``kind`` (a declared format), or None.

    A ``.jsonl`` (``.json``, ``.ndjson``) or ``.parquet`` file is read in its own format only: read as text its
    syntax would be trained on (a JSONL line ``{"text": "...`` a document's bytes), and ``parquet`` is binary. The
    text formats (text, wikitext, python) take any other extension (``.md``, ``.tokens``, none), and ``auto`` reads
    each file by its extension."""
    by_suffix = STRUCTURED_SUFFIXES.get(path.suffix.lower())
    if kind == "auto" or by_suffix == kind or (by_suffix is None and kind != "parquet"):
        return None
    return by_suffix or "not parquet"


def glob_root(pattern: str) -> Path:
    """The directory a glob starts from: its longest leading part without wildcards."""
    parts = Path(pattern).parts
    for i, part in enumerate(parts):
        if glob.has_magic(part):
            return Path(*parts[:i]) if i else Path(".")
    return Path(pattern).parent  # no wildcard: a file, its folder is the root


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


def _jsonl_documents(
    path: Path, text_field: str, decode_errors: str = "strict", replaced: dict[str, int] | None = None
) -> Iterator[str]:
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
        text = row.get(text_field) or ""
        if not isinstance(text, str):
            raise DataError(
                f"{path}, line {number}: the {text_field!r} field is a JSON {type(text).__name__}, not a string; "
                f"point the source's field (corpus.field for corpus=local) at the column holding the text."
            )
        if text.strip():
            yield text


def _lines(path: Path, decode_errors: str, replaced: dict[str, int] | None) -> Iterator[str]:
    """``codec.read_lines``, its invalid-UTF-8 error as poslab's (one message naming the file and byte offset)."""
    try:
        yield from read_lines(path, decode_errors, replaced)
    except InvalidUtf8Error as error:
        raise DataError(str(error)) from None


def _text_documents(
    path: Path, document_start: str | None, decode_errors: str = "strict", replaced: dict[str, int] | None = None
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

    for batch in pq.ParquetFile(path).iter_batches(columns=[text_field], batch_size=256):
        yield from (t for t in batch.column(0).to_pylist() if t and t.strip())


def local_documents(
    source: LocalSource, path: Path, decode_errors: str = "strict", replaced: dict[str, int] | None = None
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


def plan_split(group: str, sizes: dict[int, int], fraction: float) -> SplitPlan:
    """Validation documents whose bytes come as near ``fraction`` of the group's as whole documents allow.

    Documents are taken in a fixed pseudo-random order (``document_draw``) whenever taking one brings the held-out
    bytes nearer the target, and at least one and at most all but one are held out when there are two or more.
    One document is split by bytes instead (``SplitPlan.tail_of``; the caller cuts it, as nanoGPT does)."""
    if len(sizes) == 1:
        return SplitPlan("tail", tail_of=next(iter(sizes)), documents=1)
    if not sizes:
        return SplitPlan("documents")
    target, held, chosen = fraction * sum(sizes.values()), 0, []
    for ordinal in sorted(sizes, key=lambda o: (document_draw(group, o), o)):
        if len(chosen) == len(sizes) - 1:
            break
        if abs(held + sizes[ordinal] - target) < abs(held - target):
            chosen.append(ordinal)
            held += sizes[ordinal]
    if not chosen:  # every document alone overshoots the target: the one nearest it
        chosen = [min(sizes, key=lambda o: (abs(sizes[o] - target), document_draw(group, o)))]
    return SplitPlan("documents", held=frozenset(chosen), documents=len(sizes))


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


LISTED_FILES = 20  # files listed one by one in meta.json and results.json; a larger group shows its first ones
SPLIT_BY_DOCUMENT = "train+validation (by document)"  # a source not pinned to a split feeds both, per document


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 22), b""):
            digest.update(chunk)
    return digest.hexdigest()


def split_of(source: LocalSource) -> str:
    return SPLIT_BY_DOCUMENT if source.split in ("both", None) else source.split


#: Python source files: ``test_*.py`` is a module of tests (``corpus=python_code corpus.include_tests=true``),
#: code like any other, never a corpus's test split
PYTHON_SUFFIXES = (".py", ".pyi", ".pyw")


def is_test_file(path: str) -> bool:
    """A file whose name marks it as a test split (``wiki.test.raw``, ``test.jsonl``, ``x-test-00.parquet``); a
    Python source file never is (``test_os.py`` holds tests of code, not held-out data)."""
    name = Path(path).name.lower()
    return Path(name).suffix not in PYTHON_SUFFIXES and "test" in re.split(r"[._\-]+", name)


def named_files(paths: list[str], what: str) -> str:
    """Files in a one-line message: ``wiki.test.raw`` for one, ``3 files <what> (e.g. a.raw)`` for more, so a
    message stays one line whatever the corpus holds (a folder of 1,000 files is not listed)."""
    names = [Path(p).name for p in paths]
    return names[0] if len(names) == 1 else f"{len(names):,} files {what} (e.g. {names[0]})"


@dataclass(frozen=True)
class CorpusDocument:
    """One document of a source group, as every reader of a corpus sees it."""

    split: str  # train or validation
    ordinal: int  # its place in the group's fixed order: the document index stored in the cache
    style: str  # its segmentation style (segmentation.STYLES)
    text: str


@dataclass
class ResolvedGroup:
    """What a group will actually be read from: local files (with their sources) or the hub."""

    group: SourceGroup
    files: list[tuple[LocalSource, Path]]
    use_hub: bool
    decode_errors: str = "strict"  # corpus.decode_errors: invalid UTF-8 stops (strict) or is replaced and counted
    replaced: dict[str, int] = field(default_factory=dict)  # file -> invalid sequences replaced, in the last pass
    empty: list[str] = field(default_factory=list)  # files that gave no document (empty, blank), in the last pass
    plan: SplitPlan | None = None  # the split of the last pass (documents)

    def fingerprint(self) -> list[Any]:
        if self.use_hub:
            hub = self.group.hub
            return ["hub", hub.path, hub.name, hub.split, hub.field, hub.max_bytes]
        files = [
            [str(p), p.stat().st_size, p.stat().st_mtime_ns, s.split, s.format, s.field, s.document_start]
            for s, p in self.files
        ]
        # replace can give other text than strict (which stops instead): its caches are its own; strict's keep
        # the key they had before the setting existed
        return files if self.decode_errors == "strict" else [*files, ["decode_errors", self.decode_errors]]

    def summary(self) -> dict[str, Any]:
        """What the group was read from, for meta.json and results.json: file count and bytes (and the Python
        version whose standard library a ``{stdlib}`` source is), or the hub dataset."""
        if self.use_hub:
            return {"hub": f"{self.group.hub.path}" + (f" ({self.group.hub.name})" if self.group.hub.name else "")}
        listing = [
            {"path": str(path), "bytes": path.stat().st_size, "sha256": file_sha256(path), "split": split_of(source)}
            for source, path in self.files
        ]
        whole = hashlib.sha256("".join(f["sha256"] for f in listing).encode()).hexdigest()
        python = {str(path) for source, path in self.files if source.file_format(path) == "python"}
        tests = [f for f in listing if is_test_file(f["path"]) and f["path"] not in python]  # code has no test split
        out: dict[str, Any] = {
            "files": len(self.files),
            "file_bytes": sum(f["bytes"] for f in listing),
            "sha256": whole,  # of the files' own sha256s in reading order: one hash for the group's data
            # each file (the first LISTED_FILES of a large group): path, bytes, sha256 and the split it feeds
            "listing": listing[:LISTED_FILES],
            # files whose name says they are a test split, read here for training: a run must say so
            "test_files_trained_on": [f["path"] for f in tests if f["split"] != "validation"],
            "test_files_validated_on": [f["path"] for f in tests if f["split"] != "train"],
        }
        if any(source.pattern.startswith(STDLIB) for source, _ in self.files):
            out["python_version"] = platform.python_version()
        return out

    def _texts(self) -> Iterator[tuple[str, str, str]]:
        """(split pin, segmentation style, text) for every document, in a fixed order."""
        if self.use_hub:
            hub = self.group.hub
            yield from (("both", hub.segmentation, text) for text in hub_documents(hub))
            return
        self.replaced.clear()  # counted afresh on every pass over the files
        self.empty.clear()
        for source, path in self.files:
            style = source.segmentation_style(path)
            count = 0
            for text in local_documents(source, path, self.decode_errors, self.replaced):
                count += 1
                yield source.split, style, text
            if not count:
                self.empty.append(str(path))

    def _capped(self) -> Iterator[tuple[int, str, str, str]]:
        """(ordinal, split pin, style, text) up to the group's byte cap (the document that reaches it is the last)."""
        total, cap = 0, self.group.max_bytes
        for ordinal, (pin, style, text) in enumerate(self._texts()):
            yield ordinal, pin, style, text
            total += byte_length(text)
            if cap is not None and total >= cap:
                return

    def split_plan(self, validation_fraction: float) -> SplitPlan:
        """The split of the group's documents (``plan_split``): a first pass over local files for their sizes; the
        hub's stream keeps the per-document draw."""
        if self.use_hub:
            return SplitPlan("hash")
        sizes = {ordinal: byte_length(text) for ordinal, pin, _, text in self._capped() if pin == "both"}
        return plan_split(self.group.name, sizes, validation_fraction)

    def documents(self, validation_fraction: float) -> Iterator[CorpusDocument]:
        """Every document of the group with its split, in cache order, up to the group's byte cap (``max_bytes``:
        the document that reaches it is the last). The one place that says which document is in which split
        (``split_plan``; ``self.plan`` is the last one used). A group of one document gives two pieces: its head
        (training) and its tail (validation, the next ordinal after the group's last)."""
        plan = self.plan = self.split_plan(validation_fraction)
        last = -1
        for ordinal, pin, style, text in self._capped():
            last = ordinal
            if pin != "both":
                yield CorpusDocument(pin, ordinal, style, text)
            elif plan.rule == "hash":
                held_out = is_validation(self.group.name, ordinal, validation_fraction)
                yield CorpusDocument("validation" if held_out else "train", ordinal, style, text)
            elif ordinal == plan.tail_of:
                plan.tail_at = tail_cut(text, validation_fraction)
                yield CorpusDocument("train", ordinal, style, text[: plan.tail_at])
                tail = CorpusDocument("validation", -1, style, text[plan.tail_at :])
            else:
                yield CorpusDocument("validation" if ordinal in plan.held else "train", ordinal, style, text)
        if plan.tail_of is not None:
            yield CorpusDocument(tail.split, last + 1, tail.style, tail.text)


def resolve_group(corpus: str, group: SourceGroup, data_dir: Path, decode_errors: str = "strict") -> ResolvedGroup:
    files = [(source, path) for source in group.local for path in source.files(data_dir)]
    for source, path in files:
        wrong = format_mismatch(source.format, path)
        if wrong is not None:
            fix = f"set its format to {wrong} (or auto)" if wrong != "not parquet" else "give it a format it is in"
            raise ConfigError(
                f"corpus {corpus!r}, source {source.pattern!r}: {path} is a {path.suffix or 'suffix-less'} file, "
                f"which format={source.format} cannot read as it is; {fix}."
            )
    if files:
        return ResolvedGroup(group, files, use_hub=False, decode_errors=decode_errors)
    if group.hub is not None and not hub_is_offline():
        return ResolvedGroup(group, [], use_hub=True, decode_errors=decode_errors)
    looked = ", ".join(str(data_dir / s.pattern) for s in group.local) or "(no local patterns)"
    hub = f"the hub dataset {group.hub.path} ({group.hub.name})" if group.hub else "no hub dataset"
    offline = " (HF_HUB_OFFLINE is set, so the hub was not tried)" if group.hub and hub_is_offline() else ""
    raise ConfigError(
        f"corpus {corpus!r}, source group {group.name!r}: no local files matched {looked}, and {hub} is not "
        f"available{offline}. Put the files there in one of the formats {', '.join(FORMATS)} (e.g. a .jsonl with a "
        f"'text' field), or point POSLAB_DATA_DIR (paths.data_dir, now {data_dir}) at a directory that has them, "
        f"or go online so that `datasets` can fetch the hub copy."
    )


@dataclass
class ResolvedCorpus:
    """A corpus config's source groups, resolved to what they are read from, and its split setting."""

    name: str
    groups: list[ResolvedGroup]
    validation_fraction: float

    def training_texts(self) -> Iterator[str]:
        """The training documents of every group, in cache order (what one shared BPE is trained on)."""
        for group in self.groups:
            yield from training_documents(group, self.validation_fraction)

    def fingerprint(self) -> list[Any]:
        groups = [[g.group.name, g.group.max_bytes, g.fingerprint(), self.validation_fraction] for g in self.groups]
        return [*groups, ["split", SPLIT_RULE]]  # the training documents a tokenizer learns from follow the rule


def resolve_corpus(corpus: dict[str, Any], data_dir: str | Path) -> ResolvedCorpus:
    """Parse and resolve every source group of a corpus config (``conf/corpus/*.yaml``'s ``corpus:``)."""
    name = corpus["name"]
    check_local_corpus(corpus)  # and the cache and decoding settings of every corpus
    groups = corpus.get("groups") or {}
    if not groups:
        raise ConfigError(f"corpus {name!r} names no source groups (corpus.groups); see conf/corpus/ for examples.")
    fraction = float(corpus.get("validation_fraction", 0.02))
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"corpus.validation_fraction={fraction} must be between 0 and 1 (exclusive).")
    decode_errors = str(corpus.get("decode_errors", "strict"))
    resolved = [
        resolve_group(name, SourceGroup.from_config(g, s), Path(data_dir), decode_errors) for g, s in groups.items()
    ]
    return ResolvedCorpus(name, resolved, fraction)


# ---- a local corpus: corpus=local corpus.path=PATH ----------------------------------------------------------

#: the files a directory given as corpus.path contributes, by corpus.format
LOCAL_SUFFIX = {"text": "txt", "jsonl": "jsonl", "wikitext": "raw", "python": "py", "parquet": "parquet"}


def _absolute(path: str) -> str:
    # relative to the current directory, as the user typed it; absolute in the saved config, so an analysis run
    # from elsewhere reads the same files
    return os.path.abspath(os.path.expanduser(path))


def local_pattern(path: str | None, format: str | None) -> str | None:
    """The glob of ``corpus.path``: a file or a glob as given, a directory as every ``corpus.format`` file below it."""
    if path is None:
        return None
    full = _absolute(str(path))
    if not glob.has_magic(full) and os.path.isdir(full):
        return os.path.join(full, "**", f"*.{LOCAL_SUFFIX.get(str(format), '*')}")
    return full


def local_corpus_name(path: str | None) -> str:
    """The name of a local corpus: its folder's name (a glob: the folder it starts from; a file: its stem)."""
    if path is None:
        return "local"
    full = Path(_absolute(str(path)))
    base = glob_root(str(full)) if glob.has_magic(str(full)) else full
    name = base.stem if base.is_file() else base.name
    return re.sub(r"[^\w.-]+", "_", name).strip("._") or "local"  # a run directory's name: no slashes or spaces


def local_path_matches(path: str) -> bool:
    """Whether ``path`` (a file, a directory or a glob) names anything that exists."""
    return bool(glob.glob(_absolute(path), recursive=True))


def local_overrides(path: str) -> list[str]:
    """The overrides composing ``corpus=local`` on ``path``, its format read from the file suffix a file or a glob
    ends with (``docs/*.jsonl``: jsonl; anything else: text). For commands that take a path, not a config."""
    suffixes = {suffix: kind for kind, suffix in LOCAL_SUFFIX.items()}
    kind = suffixes.get(Path(path).suffix.lstrip(".").lower(), "text") if not os.path.isdir(path) else "text"
    return ["corpus=local", f"corpus.path={quoted(path)}", f"corpus.format={kind}"]


def check_local_corpus(corpus: dict[str, Any]) -> None:
    """``corpus=local``: a path, a known format and segmentation, and at least one file, or one sentence saying
    which of them is wrong (before anything is read or built). Every corpus: ``decode_errors`` and ``verify_cache``."""
    check_cache_settings(corpus)
    if "path" not in corpus:
        return
    path, kind, style = corpus.get("path"), corpus.get("format"), corpus.get("segmentation")
    if path is None:
        raise ConfigError("corpus=local needs corpus.path=PATH: a text file, a directory of them, or a glob.")
    if kind not in FORMATS:
        raise ConfigError(f"corpus.format={kind!r} is not a corpus format; allowed: {', '.join(FORMATS)}.")
    if style is not None and style not in STYLES:
        raise ConfigError(f"corpus.segmentation={style!r} is not a segmentation style; allowed: {', '.join(STYLES)}.")
    pattern = local_pattern(path, kind)
    files = LocalSource(pattern, format=kind).files(Path("."))
    if not files:
        directory = pattern != _absolute(str(path))
        what = f"no .{LOCAL_SUFFIX[kind]} file below it" if directory else "no file"
        others = _other_formats(Path(_absolute(str(path))), kind) if directory else ""
        raise ConfigError(
            f"corpus.path={path} matches nothing ({what}; corpus.format={kind})"
            + (f", but it holds {others}" if others else "; give an existing file, directory or glob")
            + "."
        )
    wrong = [(p, w) for p in files if (w := format_mismatch(kind, p)) is not None]
    if wrong:
        suffixes, fix = "/".join(sorted({p.suffix.lower() or "suffix-less" for p, _ in wrong})), wrong[0][1]
        files = f"{len(wrong)} {suffixes} file{'s' if len(wrong) != 1 else ''}"
        if fix == "jsonl":
            why, fix = (
                " (it would train on the JSON syntax itself)",
                "give corpus.format=jsonl to read their text field",
            )
        else:
            why, fix = "", f"give corpus.format={fix}" if fix != "not parquet" else "give the format they are in"
        raise ConfigError(f"corpus.path={path} matches {files}, which corpus.format={kind} cannot read{why}; {fix}.")


def _other_formats(directory: Path, kind: str) -> str:
    """``5 .jsonl files: give corpus.format=jsonl to read them`` for the files of other formats below a directory
    that holds none of ``kind``'s (the most numerous format first), or ''."""
    counts = {}
    for other, suffix in LOCAL_SUFFIX.items():
        if other != kind:
            n = len(LocalSource(os.path.join(directory, "**", f"*.{suffix}")).files(Path(".")))
            if n:
                counts[other] = n
    if not counts:
        return ""
    best = max(counts, key=counts.get)
    n = counts[best]
    return f"{n} .{LOCAL_SUFFIX[best]} file{'s' if n != 1 else ''}: give corpus.format={best} to read them"


def check_cache_settings(corpus: dict[str, Any]) -> None:
    """``corpus.decode_errors`` and ``corpus.verify_cache`` are known values, or one sentence saying which are."""
    decode_errors = corpus.get("decode_errors", "strict")
    if decode_errors not in DECODE_ERRORS:
        raise ConfigError(
            f"corpus.decode_errors={decode_errors!r} is not a decoding policy; allowed: strict (invalid UTF-8 stops "
            f"with the file and byte offset) or replace (read as U+FFFD, counted and logged)."
        )
    verify = corpus.get("verify_cache", "first_use")
    if verify not in VERIFY_CACHE:
        raise ConfigError(
            f"corpus.verify_cache={verify!r} is not a checksum policy; allowed: first_use (once per cache directory "
            f"and process), always (every time it is opened) or never (sizes only)."
        )


# ---- the prepared cache ----------------------------------------------------------------------------------------

#: the per-token coordinates a split exposes; since version 4 they are computed from boundary offsets when read
COORDINATES = ("documents", "paragraphs", "sentences")
#: what the cache stores per split beside the uint16 tokens: ``{split}.{name}.bin``, dtypes in meta.json's ``arrays``
BOUNDARY_ARRAYS = ("document_starts", "document_ordinals", "paragraph_starts", "sentence_starts")
PROGRESS_SECONDS = 5.0  # a long preparation logs a line this often
CHECKSUM = "sha256"  # of each array file, in meta.json's ``files``: hashlib's sha256 ran at 1.7 GB/s here, blake2b 0.75
_CHUNK = 1 << 23  # bytes read at a time when checksumming
#: cache directories whose checksums this process has verified (or written), as (path, meta.json inode, mtime): a
#: directory prepared again by another process is a new entry
_verified: set[tuple[str, int, int]] = set()


class BadCacheError(DataError):
    """A prepared cache directory that cannot be used as it is: ``file`` is the file found bad. ``prepare_group``
    moves the directory aside and prepares it again; loading it directly stops with the message."""

    def __init__(self, directory: Path, file: str, problem: str) -> None:
        self.directory, self.file, self.problem = directory, file, problem
        super().__init__(
            f"prepared cache {directory}: {file} {problem}; delete the directory, or run again (a run moves a bad "
            f"cache aside and prepares it anew)."
        )


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
        return f"{self.documents:,} documents, {self.bytes / 1e6:,.1f} MB{of} in {elapsed:.0f} s, {rate:.1f} MB/s"

    def update(self, n_bytes: int) -> None:
        self.documents, self.bytes = self.documents + 1, self.bytes + n_bytes
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            log.info("preparing %s: %s", self.name, self._line(now))

    def done(self) -> None:
        log.info("prepared %s: %s", self.name, self._line(time.monotonic()))


def prepare_group(
    corpus: str,
    resolved: ResolvedGroup,
    cache_dir: Path,
    validation_fraction: float,
    tokenizer: Tokenizer | None = None,
    verify: str = "first_use",
) -> PreparedGroup:
    """Tokenise a group into the cache (once), and map it. A cache found bad (``load_prepared``: a missing or
    unreadable meta.json, an array of the wrong size, a checksum that differs under ``verify``) is moved aside
    (``_move_aside``) and prepared again; temporary directories of dead preparations are removed."""
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
        "split_rule": SPLIT_RULE,  # which documents are held out (plan_split): another rule, another cache
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    final = cache_dir / f"{corpus}-{group.name}-{key}"
    cache_dir.mkdir(parents=True, exist_ok=True)
    # checked, moved aside and written under the lock: no process reads a directory another is replacing
    with FileLock(str(final) + ".lock"):
        _remove_stale_temporaries(final)
        prepared = None
        if final.exists():
            try:
                prepared = load_prepared(final, group.weight, verify)
            except BadCacheError as bad:
                aside = _move_aside(final)
                log.warning(
                    "prepared cache %s: %s %s; moved it aside to %s and preparing it again",
                    final,
                    bad.file,
                    bad.problem,
                    aside.name,
                )
        if prepared is None:
            _write_group(resolved, final, settings, validation_fraction, tokenizer)
            prepared = load_prepared(final, group.weight, "never")
            _verified.add(_identity(final))  # its checksums were just computed from the files on disk
    if "sha256" not in prepared.meta.get("source_files", {}):  # a cache written before its sources were hashed
        prepared.meta["source_files"] = resolved.summary()
    if prepared.meta.get("split"):  # what the split came out as, whether prepared now or before
        _log_split(f"{corpus}/{group.name}", prepared.meta["split"])
    _log_replaced(f"{corpus}/{group.name}", prepared.meta.get("decode") or {})
    return prepared


def _log_replaced(name: str, decode: dict[str, Any]) -> None:
    """One line, whether prepared now or before: how many invalid UTF-8 sequences ``corpus.decode_errors=replace``
    read as U+FFFD, in how many files (meta.json's ``decode`` counts each file)."""
    replaced, files = int(decode.get("replaced", 0) or 0), dict(decode.get("files") or {})
    if not replaced:
        return
    worst = sorted(files, key=lambda path: -files[path])  # the file with the most replacements is the example
    where = f" in {worst[0]}" if len(worst) == 1 else f" in {named_files(worst, 'of the group')}" if worst else ""
    log.warning(
        "%s: %d invalid UTF-8 sequences read as U+FFFD%s (corpus.decode_errors=replace; meta.json 'decode' counts "
        "each file)",
        name,
        replaced,
        where,
    )


def training_documents(resolved: ResolvedGroup, fraction: float) -> Iterator[str]:
    """The texts of the group's training documents, in cache order (what a bpe tokenizer is trained on)."""
    return (d.text for d in resolved.documents(fraction) if d.split == "train")


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
            paragraphs, sentences = segment(document.text, document.style)  # per byte; a token: its first byte
            writer = writers[document.split]
            writer.add(document.ordinal, tokens, paragraphs[first_bytes], sentences[first_bytes], len(paragraphs))
            progress.update(len(paragraphs))
    finally:
        for split, writer in writers.items():
            arrays[split] = writer.close()
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
        # corpus.decode_errors, and per file how many invalid UTF-8 sequences it replaced (replace only)
        "decode": {
            "policy": resolved.decode_errors,
            "replaced": sum(resolved.replaced.values()),
            "files": dict(resolved.replaced),
        },
    }
    if not resolved.use_hub:  # files that gave no document (empty, blank lines, no text field): counted, listed
        summary["empty_files"] = len(resolved.empty)
        summary["empty_listing"] = resolved.empty[:LISTED_FILES]
        _log_empty(f"{settings['corpus']}/{settings['group']}", summary)
    meta["split"] = _split_record(resolved.plan, fraction, meta["splits"])
    empty = [split for split, writer in writers.items() if writer.count == 0]
    if empty:
        raise ConfigError(
            f"corpus {settings['corpus']!r}, group {settings['group']!r}: the {empty[0]} split is empty "
            f"({meta['splits']}); give more documents (a text file is one document unless corpus.document_start "
            f"splits it) or a larger corpus.validation_fraction."
        )
    (tmp / "meta.json").write_text(json.dumps(meta, indent=2, default=str))
    os.replace(tmp, final)  # atomic: readers see no cache or a complete one (final is absent: see prepare_group)


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


def _log_split(name: str, record: dict[str, Any]) -> None:
    share, fraction = 100 * record["validation_token_share"], record["validation_fraction"]
    if record["rule"] == "tail":
        log.info(
            "%s: one document, split by bytes: its last %.1f%% of the tokens are the validation split "
            "(corpus.validation_fraction=%s)",
            name,
            share,
            fraction,
        )
    else:
        log.info(
            "%s: validation holds %d of %d documents, %.1f%% of the tokens (corpus.validation_fraction=%s)",
            name,
            record["validation_documents"],
            record["documents"],
            share,
            fraction,
        )


def _log_empty(name: str, summary: dict[str, Any]) -> None:
    empty = summary.get("empty_files", 0)
    if empty:
        shown = ", ".join(Path(p).name for p in summary.get("empty_listing", [])[:3])
        more = f" and {empty - 3} more" if empty > 3 else ""
        log.warning(
            "%s: %d of %d files gave no document (empty or blank: %s%s); they are left out",
            name,
            empty,
            summary.get("files", 0),
            shown,
            more,
        )


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


def _identity(directory: Path) -> tuple[str, int, int]:
    stat = (directory / "meta.json").stat()
    return str(directory.resolve()), stat.st_ino, stat.st_mtime_ns


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, as another user's process
    return True


def _remove_stale_temporaries(final: Path) -> None:
    """Remove ``<final>.tmp-<pid>`` directories whose process is gone (a preparation killed midway); called under
    the lock, so a live preparation of this directory cannot be one of them, but a live pid is left alone anyway
    (the lock may not hold across machines sharing the cache, e.g. on NFS). This process's own is stale."""
    for tmp in final.parent.glob(glob.escape(final.name) + ".tmp-*"):
        pid = tmp.name.rsplit(".tmp-", 1)[1]
        if not pid.isdigit() or (int(pid) != os.getpid() and _pid_alive(int(pid))):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        log.info("removed %s, left by a preparation whose process (%s) is no longer running", tmp, pid)


def _move_aside(directory: Path) -> Path:
    """Rename a bad cache directory to ``<directory>.bad-<time>`` and return that path. A rename, not a delete: it
    is instant, a process that still has the old arrays mapped keeps reading them, and the bad files stay for a
    look; an older ``.bad-`` copy of the same directory is removed, so at most one is kept."""
    for old in directory.parent.glob(glob.escape(directory.name) + ".bad-*"):
        shutil.rmtree(old, ignore_errors=True)
    aside = directory.with_name(f"{directory.name}.bad-{time.strftime('%Y%m%d-%H%M%S')}")
    os.replace(directory, aside)
    resolved = str(directory.resolve())
    _verified.difference_update({key for key in _verified if key[0] == resolved})  # an inode may be reused
    return aside


def _map(path: Path, dtype: str, length: int) -> np.ndarray:
    # np.memmap cannot map an empty file (a split without paragraph boundaries has an empty array)
    return np.memmap(path, dtype=dtype, mode="r", shape=(length,)) if length else np.zeros(0, dtype=dtype)


def _read_meta(directory: Path) -> dict[str, Any]:
    path = directory / "meta.json"
    if not path.is_file():
        raise BadCacheError(directory, "meta.json", "is missing (a preparation that did not finish, or a deletion)")
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise BadCacheError(directory, "meta.json", f"cannot be read as JSON ({error})") from None
    if not isinstance(meta, dict):
        raise BadCacheError(directory, "meta.json", f"holds a JSON {type(meta).__name__}, not an object")
    return meta


def _check_files(directory: Path, meta: dict[str, Any], verify: str) -> None:
    """Every array file has the size meta.json records (always: a stat per file), and, unless ``verify`` says
    otherwise, the checksum: ``always``, or ``first_use`` when this process has not verified the directory yet."""
    if not isinstance(meta.get("files"), dict):
        problem = "records no array sizes or checksums (written before they were recorded, or damaged)"
        raise BadCacheError(directory, "meta.json", problem)
    try:
        expected = {
            name: spec
            for split in SPLITS
            for name, spec in _array_files(split, meta["arrays"][split], meta["splits"][split]["tokens"]).items()
        }
        records = meta["files"]
        missing = [name for name in expected if name not in records]
    except (KeyError, TypeError, IndexError, ValueError) as error:
        raise BadCacheError(directory, "meta.json", f"lacks the array layout ({error!r} is missing or wrong)") from None
    if missing:
        raise BadCacheError(directory, "meta.json", f"records no size or checksum of {missing[0]}")
    for name, (dtype, length) in expected.items():
        record, path = records[name], directory / name
        size = path.stat().st_size if path.is_file() else None
        wanted = np.dtype(dtype).itemsize * length
        if size is None:
            raise BadCacheError(directory, name, "is missing")
        if (record.get("dtype"), record.get("length"), record.get("bytes")) != (dtype, length, wanted):
            raise BadCacheError(directory, "meta.json", f"disagrees with itself about {name}")
        if size != wanted:
            raise BadCacheError(directory, name, f"has {size:,} bytes where meta.json says {wanted:,} (truncated?)")
    identity = _identity(directory)
    if verify == "never" or (verify == "first_use" and identity in _verified):
        return
    algorithm = meta.get("checksum", CHECKSUM)
    if algorithm != CHECKSUM:
        raise BadCacheError(directory, "meta.json", f"names the checksum {algorithm!r}, not {CHECKSUM}")
    for name in expected:
        if _digest(directory / name) != records[name].get(CHECKSUM):
            raise BadCacheError(directory, name, f"does not match its {CHECKSUM} checksum in meta.json (damaged?)")
    _verified.add(identity)


def load_prepared(directory: Path, weight: float = 1.0, verify: str = "first_use") -> PreparedGroup:
    """Map a prepared group. A damaged cache raises ``BadCacheError`` naming the bad file (``_check_files``:
    sizes always, checksums per ``verify``, one of ``VERIFY_CACHE``)."""
    meta = _read_meta(directory)
    if meta.get("version") != CACHE_VERSION or "arrays" not in meta:
        raise ConfigError(
            f"{directory} holds prepared data of cache version {meta.get('version')}, and this poslab reads version "
            f"{CACHE_VERSION}: delete it and run again to prepare the data anew."
        )
    _check_files(directory, meta, verify)
    splits = {}
    for split in SPLITS:
        n = meta["splits"][split]["tokens"]
        layout = meta["arrays"][split]
        arrays = {name: _map(directory / f"{split}.{name}.bin", *layout[name]) for name in BOUNDARY_ARRAYS}
        splits[split] = PreparedSplit(
            tokens=np.memmap(directory / f"{split}.tokens.u16", dtype="<u2", mode="r", shape=(n,)),
            documents=Coordinate(n, arrays["document_starts"], arrays["document_ordinals"]),
            paragraphs=Coordinate(n, arrays["paragraph_starts"]),
            sentences=Coordinate(n, arrays["sentence_starts"]),
        )
    return PreparedGroup(meta["group"], weight, directory, meta, splits)


def prepare_corpus(corpus: dict[str, Any], data_dir: str | Path, cache_dir: str | Path) -> list[PreparedGroup]:
    """Resolve and prepare every source group of a corpus config (``conf/corpus/*.yaml``)."""
    resolved = resolve_corpus(corpus, data_dir)
    # one tokenizer for all groups (a shared vocabulary), trained on their training documents
    tokenizer = load_tokenizer(corpus, Path(cache_dir), resolved.fingerprint(), resolved.training_texts)
    fraction, verify = resolved.validation_fraction, str(corpus.get("verify_cache", "first_use"))
    return [
        prepare_group(resolved.name, group, Path(cache_dir), fraction, tokenizer, verify) for group in resolved.groups
    ]


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
            f"({s['train']['documents']:,} / {s['validation']['documents']:,} documents), weight {group.weight}, "
            f"from {describe_sources(group.meta.get('source_files') or {})}"
        )
    return "; ".join(parts)


def describe_sources(sources: dict[str, Any]) -> str:
    """``1 file (wiki.test.raw: 1.3 MB, train+validation (by document)), sha256 1a2b3c4d``, or the hub dataset."""
    if "hub" in sources:
        return f"the hub dataset {sources['hub']}"
    listing = sources.get("listing") or []
    shown = ", ".join(f"{Path(f['path']).name}: {f['bytes'] / 1e6:.1f} MB, {f['split']}" for f in listing[:3])
    more = f", and {sources.get('files', 0) - 3} more" if sources.get("files", 0) > 3 else ""
    count = sources.get("files", 0)
    return (
        f"{count} file{'s' if count != 1 else ''} ({shown}{more}), {sources.get('file_bytes', 0) / 1e6:.1f} MB, "
        f"sha256 {str(sources.get('sha256', '?'))[:8]}"
    )


def data_notes(corpus: str, prepared: list[PreparedGroup]) -> list[str]:
    """One sentence per thing a reader of this corpus's figures must know: training on a test split's files
    (and validating on them too, where a split is cut per document from the same files)."""
    notes = []
    for group in prepared:
        sources = group.meta.get("source_files") or {}
        # is_test_file again: a cache prepared before Python modules were told apart listed test_*.py files too
        trained = [p for p in sources.get("test_files_trained_on", []) if is_test_file(p)]
        if trained:
            notes.append(
                f"corpus {corpus} ({group.name}) trains on {named_files(trained, 'named as test splits')}, a test "
                f"split (its training and validation documents both come from it): these figures are not comparable "
                f"with results published on that test split."
            )
        names = {Path(p).name for p in trained}
        validated = [
            p for p in sources.get("test_files_validated_on", []) if is_test_file(p) and Path(p).name not in names
        ]
        if validated:
            notes.append(
                f"corpus {corpus} ({group.name}) validates on {named_files(validated, 'named as test splits')}, a "
                f"test split."
            )
    return notes
