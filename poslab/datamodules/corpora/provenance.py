"""What a group was read from (its files, their bytes and sha256, the split each feeds, files named as test
splits), and the sentences a run's description and notes say about it."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from poslab.datamodules.corpora.coordinates import PreparedGroup
from poslab.datamodules.corpora.sources import LocalSource

LISTED_FILES = 20  # files listed one by one in meta.json and results.json; a larger group shows its first ones
SPLIT_BY_DOCUMENT = "train+validation (by document)"  # a source not pinned to a split feeds both, per document
SPLIT_BY_BYTES = "train+validation (by bytes: its tail held out)"  # a group of one document (SplitPlan "tail")


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


def describe(prepared: list[PreparedGroup]) -> str:
    """One line per group (a console line under ~200 characters: the files beyond the first are counted, not
    named; results.json's ``sources`` lists them)."""
    parts = []
    for group in prepared:
        s = group.meta["splits"]
        parts.append(
            f"{group.name}: {s['train']['tokens']:,} train / {s['validation']['tokens']:,} validation tokens "
            f"({s['train']['documents']:,} / {s['validation']['documents']:,} documents), weight {group.weight}, "
            f"from {short_sources(group.meta.get('source_files') or {})}"
        )
    return "\n".join(parts)


def short_sources(sources: dict[str, Any]) -> str:
    """``wiki.test.raw, 1.3 MB, sha256 1a2b3c4d`` (one file) or ``40 files, 0.5 MB, sha256 ...``: the console's."""
    if "hub" in sources:
        return f"the hub dataset {sources['hub']}"
    listing, count = sources.get("listing") or [], sources.get("files", 0)
    what = Path(listing[0]["path"]).name if count == 1 and listing else f"{count} files"
    return f"{what}, {sources.get('file_bytes', 0) / 1e6:.1f} MB, sha256 {str(sources.get('sha256', '?'))[:8]}"


def describe_sources(sources: dict[str, Any], shown: int = 3) -> str:
    """``1 file (wiki.test.raw: 1.3 MB, train+validation (by document)), sha256 1a2b3c4d``, or the hub dataset;
    the first ``shown`` files named, the others counted."""
    if "hub" in sources:
        return f"the hub dataset {sources['hub']}"
    listing = sources.get("listing") or []
    named = ", ".join(f"{Path(f['path']).name}: {f['bytes'] / 1e6:.1f} MB, {f['split']}" for f in listing[:shown])
    more = f", and {sources.get('files', 0) - shown} more" if sources.get("files", 0) > shown else ""
    count = sources.get("files", 0)
    return (
        f"{count} file{'s' if count != 1 else ''} ({named}{more}), {sources.get('file_bytes', 0) / 1e6:.1f} MB, "
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
