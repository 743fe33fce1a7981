"""A corpus config resolved: each source group to what it is actually read from (local files or the hub), and its
documents with the split each belongs to (``ResolvedGroup.documents``, the one place that says so)."""

from __future__ import annotations

import hashlib
import logging
import platform
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poslab.config.settings import FORMATS, with_corpus_defaults
from poslab.datamodules.codec import byte_length
from poslab.datamodules.corpora.documents import (
    SPLIT_RULE,
    CorpusDocument,
    SplitPlan,
    hub_documents,
    is_validation,
    jsonl_rows,
    local_documents,
    plan_split,
    split_units,
    tail_cut,
)
from poslab.datamodules.corpora.local import check_local_corpus
from poslab.datamodules.corpora.provenance import LISTED_FILES, file_sha256, is_test_file, split_of
from poslab.datamodules.corpora.sources import (
    DEFAULT_HUB_SEGMENTATION,
    STDLIB,
    LocalSource,
    SourceGroup,
    format_mismatch,
    hub_is_offline,
)
from poslab.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass
class ResolvedGroup:
    """What a group will actually be read from: local files (with their sources) or the hub."""

    group: SourceGroup
    files: list[tuple[LocalSource, Path]]
    use_hub: bool
    decode_errors: str  # corpus.decode_errors: invalid UTF-8 stops (strict) or is replaced and counted
    replaced: dict[str, int] = field(default_factory=dict)  # file -> invalid sequences replaced, in the last pass
    empty: list[str] = field(default_factory=list)  # files that gave no document (empty, blank), in the last pass
    plan: SplitPlan | None = None  # the split of the last pass (documents)
    corpus: str = ""  # the corpus's name and the data directory looked in: a hub that fails says where to put files
    data_dir: Path = Path(".")

    def fingerprint(self) -> list[Any]:
        # a segmentation style set in the config decides the paragraph and sentence coordinates the cache holds:
        # in the key (the default, a function of the format, keeps the key it had before it was)
        if self.use_hub:
            hub = self.group.hub
            styled = [] if hub.segmentation == DEFAULT_HUB_SEGMENTATION else [hub.segmentation]
            return ["hub", hub.path, hub.name, hub.split, hub.field, hub.max_bytes, *styled]
        files = [
            # ctime too: an edit that keeps a file's size and mtime (cp -p, touch -r) still moves its ctime, which
            # no user call sets, so the cache (and the sources' sha256 it recorded) is never reused for other text
            [str(p), p.stat().st_size, p.stat().st_mtime_ns, p.stat().st_ctime_ns, s.split, s.format, s.field]
            + [s.document_start]
            + ([] if s.segmentation is None else [s.segmentation])
            + ([] if s.split_key is None else [["split_key", s.split_key]])
            for s, p in self.files
        ]
        # replace can give other text than strict (which stops instead): its caches are its own; strict's keep
        # the key they had before the setting existed (the code hash in the cache key, code_version, retires the
        # caches of the older, lenient reader anyway: docs/prepared_data.md)
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

    def _texts(self) -> Iterator[tuple[str, str, str, str | None]]:
        """(split pin, segmentation style, text, split key) for every document, in a fixed order."""
        if self.use_hub:
            hub = self.group.hub
            try:
                yield from (("both", hub.segmentation, text, None) for text in hub_documents(hub))
            except OSError as error:  # no network (ConnectionError), no such dataset, an HTTP error: the hub's
                raise hub_failed(self.corpus, self.group, self.data_dir, error) from None
            return
        self.replaced.clear()  # counted afresh on every pass over the files
        self.empty.clear()
        for source, path in self.files:
            style = source.segmentation_style(path)
            count = 0
            if source.split_key is not None:  # checked to be JSONL (SourceGroup.from_config)
                rows = jsonl_rows(path, source.field, self.decode_errors, self.replaced, source.split_key)
            else:
                rows = ((text, None) for text in local_documents(source, path, self.decode_errors, self.replaced))
            for text, key in rows:
                count += 1
                yield source.split, style, text, None if key is None else f"{source.pattern}:{key}"
            if not count:
                self.empty.append(str(path))

    def _capped(self) -> Iterator[tuple[int, str, str, str, str | None]]:
        """(ordinal, split pin, style, text, split key) up to the group's byte cap (the document that reaches it is
        the last)."""
        total, cap = 0, self.group.max_bytes
        for ordinal, (pin, style, text, key) in enumerate(self._texts()):
            yield ordinal, pin, style, text, key
            total += byte_length(text)
            if cap is not None and total >= cap:
                return

    def split_plan(self, validation_fraction: float) -> SplitPlan:
        """The split of the group's documents (``plan_split``): a first pass over local files for their sizes; the
        hub's stream keeps the per-document draw."""
        if self.use_hub:
            return SplitPlan("hash")
        sizes, keys = {}, {}
        for ordinal, pin, _, text, key in self._capped():
            if pin == "both":
                sizes[ordinal], keys[ordinal] = byte_length(text), key
        units = split_units(keys) if any(key is not None for key in keys.values()) else None
        return plan_split(self.group.name, sizes, validation_fraction, units)

    def documents(self, validation_fraction: float) -> Iterator[CorpusDocument]:
        """Every document of the group with its split, in cache order, up to the group's byte cap (``max_bytes``:
        the document that reaches it is the last). The one place that says which document is in which split
        (``split_plan``; ``self.plan`` is the last one used). A group of one document gives two pieces: its head
        (training) and its tail (validation, the next ordinal after the group's last)."""
        plan = self.plan = self.split_plan(validation_fraction)
        last = -1
        for ordinal, pin, style, text, _ in self._capped():
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


def unique_files(corpus: str, files: list[tuple[LocalSource, Path]]) -> list[tuple[LocalSource, Path]]:
    """Each file once, by its real path (a symlink, or a pattern and a folder both matching it, would read it
    twice and weigh it double), with a warning naming it: the first source that reaches it keeps it."""
    seen: dict[Path, Path] = {}
    kept = []
    for source, path in files:
        real = path.resolve()
        if real in seen:
            log.warning(
                "corpus %r: %s is reached twice (as %s and as %s); it is read once", corpus, real, seen[real], path
            )
            continue
        seen[real] = path
        kept.append((source, path))
    return kept


def resolve_group(corpus: str, group: SourceGroup, data_dir: Path, decode_errors: str) -> ResolvedGroup:
    files = unique_files(corpus, [(source, path) for source in group.local for path in source.files(data_dir)])
    for source, path in files:
        wrong = format_mismatch(source.format, path)
        if wrong is not None:
            fix = f"set its format to {wrong} (or auto)" if wrong != "not parquet" else "give it a format it is in"
            raise ConfigError(
                f"corpus {corpus!r}, source {source.pattern!r}: {path} is a {path.suffix or 'suffix-less'} file, "
                f"which format={source.format} cannot read as it is; {fix}."
            )
    where = {"decode_errors": decode_errors, "corpus": corpus, "data_dir": data_dir}
    if files:
        return ResolvedGroup(group, files, use_hub=False, **where)
    if group.hub is not None and not hub_is_offline():
        return ResolvedGroup(group, [], use_hub=True, **where)
    if group.hub is not None:  # offline, or the hub would have been used above
        hub = f"the hub dataset {describe_hub(group)} was not tried (HF_HUB_OFFLINE is set)"
        online = ", or go online (unset HF_HUB_OFFLINE) so that `datasets` can fetch the hub copy"
    else:
        hub, online = "this source group has no hub copy", ""
    raise not_found(corpus, group, data_dir, hub, online)


def describe_hub(group: SourceGroup) -> str:
    hub = group.hub
    return f"{hub.path} ({hub.name})" if hub.name else hub.path


def not_found(corpus: str, group: SourceGroup, data_dir: Path, hub: str, online: str) -> ConfigError:
    """A group with no local files, and what happened to its hub copy (``hub``): where the files were looked for,
    the formats, and POSLAB_DATA_DIR; ``online`` ends the sentence (going online, or HF_HUB_OFFLINE)."""
    looked = ", ".join(str(data_dir / s.pattern) for s in group.local) or "(no local patterns)"
    return ConfigError(
        f"corpus {corpus!r}, source group {group.name!r}: no local files matched {looked}, and {hub}. Put the "
        f"files there in one of the formats {', '.join(FORMATS)} (e.g. a .jsonl with a 'text' field), or point "
        f"POSLAB_DATA_DIR (paths.data_dir, now {data_dir}) at a directory that has them{online}."
    )


def hub_failed(corpus: str, group: SourceGroup, data_dir: Path, error: OSError) -> ConfigError:
    """``not_found`` for a hub copy that was tried and failed (offline without HF_HUB_OFFLINE set, after the
    retries of ``datasets``; a dataset that is not there): the error in brief, and HF_HUB_OFFLINE=1 to stop at once."""
    reason = " ".join(str(error).split())[:200] or "no message"
    hub = f"reading the hub dataset {describe_hub(group)} failed ({type(error).__name__}: {reason})"
    online = "; on a machine that cannot reach the hub, set HF_HUB_OFFLINE=1 so that a run stops here at once"
    return not_found(corpus, group, data_dir, hub, online)


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
    corpus = with_corpus_defaults(corpus)  # one built by hand may leave the shared settings out
    name = corpus["name"]
    check_local_corpus(corpus)  # and the cache and decoding settings of every corpus
    groups = corpus.get("groups") or {}
    if not groups:
        raise ConfigError(f"corpus {name!r} names no source groups (corpus.groups); see conf/corpus/ for examples.")
    fraction = float(corpus["validation_fraction"])
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"corpus.validation_fraction={fraction} must be between 0 and 1 (exclusive).")
    decode_errors = str(corpus["decode_errors"])
    resolved = [
        resolve_group(name, SourceGroup.from_config(g, s), Path(data_dir), decode_errors) for g, s in groups.items()
    ]
    return ResolvedCorpus(name, resolved, fraction)


def training_documents(resolved: ResolvedGroup, fraction: float) -> Iterator[str]:
    """The texts of the group's training documents, in cache order (what a bpe tokenizer is trained on)."""
    return (d.text for d in resolved.documents(fraction) if d.split == "train")
