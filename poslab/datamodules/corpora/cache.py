"""The prepared cache: a group tokenised once into a directory (``prepare_group``), mapped (``load_prepared``),
and checked when opened.

``prepare_group`` writes (``writer``) into a temporary directory and renames it into place under a file lock, so
parallel jobs preparing the same data leave one valid cache. A cache is checked when opened (sizes always, checksums
per ``corpus.verify_cache``), and a bad one is moved aside and prepared again. docs/prepared_data.md: the layout, the
integrity checks and their figures.
"""

from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from poslab.config.settings import with_corpus_defaults
from poslab.datamodules.corpora.code_version import code_hash
from poslab.datamodules.corpora.coordinates import BOUNDARY_ARRAYS, Coordinate, PreparedGroup, PreparedSplit
from poslab.datamodules.corpora.documents import SPLIT_RULE
from poslab.datamodules.corpora.provenance import named_files
from poslab.datamodules.corpora.resolution import ResolvedGroup, resolve_corpus
from poslab.datamodules.corpora.sources import SPLITS
from poslab.datamodules.corpora.writer import CHECKSUM, _array_files, _digest, _write_group, log_empty
from poslab.datamodules.locking import removed_lock
from poslab.datamodules.tokenization import BpeTokenizer, Tokenizer, load_tokenizer
from poslab.errors import ConfigError, DataError

log = logging.getLogger("poslab")

CACHE_VERSION = 5  # 2: paragraph and sentence coordinates; 3: tokenizers (bytes, bpe), bytes per split;
# 4: boundary offsets instead of per-token int32 coordinates (14 -> ~2.1 bytes a token); 5: causal segmentation
# (a code line starts at its first non-blank, a unit on its first character's last byte: docs/causality.md). The key
# also holds code_version.code_hash(), the source of the modules that decide the data: a code change needs no bump
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
        "code": code_hash(),  # the preparing code's version (code_version.HASHED): another code, another cache
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
    with removed_lock(str(final) + ".lock"):
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
    log_empty(f"{corpus}/{group.name}", prepared.meta.get("source_files") or {})
    return prepared


def _log_replaced(name: str, decode: dict[str, Any]) -> None:
    """One line, whether prepared now or before: how many invalid UTF-8 sequences (and lone surrogate escapes of a
    JSONL string) ``corpus.decode_errors=replace`` read as U+FFFD, in how many files (meta.json's ``decode`` counts
    each file)."""
    replaced, files = int(decode.get("replaced", 0) or 0), dict(decode.get("files") or {})
    if not replaced:
        return
    worst = sorted(files, key=lambda path: -files[path])  # the file with the most replacements is the example
    where = f" in {worst[0]}" if len(worst) == 1 else f" in {named_files(worst, 'of the group')}" if worst else ""
    log.warning(
        "%s: %d invalid UTF-8 sequences or lone surrogates read as U+FFFD%s (corpus.decode_errors=replace; "
        "meta.json 'decode' counts each file)",
        name,
        replaced,
        where,
    )


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
    corpus = with_corpus_defaults(corpus)  # one built by hand may leave the shared settings out
    resolved = resolve_corpus(corpus, data_dir)
    # one tokenizer for all groups (a shared vocabulary), trained on their training documents
    tokenizer = load_tokenizer(corpus, Path(cache_dir), resolved.fingerprint(), resolved.training_texts, code_hash())
    fraction, verify = resolved.validation_fraction, str(corpus["verify_cache"])
    return [
        prepare_group(resolved.name, group, Path(cache_dir), fraction, tokenizer, verify) for group in resolved.groups
    ]


def corpus_tokenizer(prepared: list[PreparedGroup], cache_dir: str | Path) -> Tokenizer:
    """The tokenizer a prepared corpus was written with (to decode its tokens)."""
    meta = prepared[0].meta
    if meta.get("tokenizer", "bytes") == "bytes":  # a cache from before bpe records no tokenizer: bytes
        return Tokenizer()

    fingerprint = meta["tokenizer_fingerprint"]
    for path in sorted((Path(cache_dir) / "tokenizers").glob("*.json")):
        tokenizer = BpeTokenizer(path)
        if tokenizer.fingerprint() == fingerprint:
            return tokenizer
    raise ConfigError(f"the bpe tokenizer {fingerprint} of {prepared[0].directory} is no longer in {cache_dir}.")
