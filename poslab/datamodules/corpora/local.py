"""A local corpus, ``corpus=local corpus.path=PATH`` (``conf/corpus/local.yaml``), and the checks of every corpus's
settings before anything is read.

``corpus=local`` is one group ``main`` whose one local source is PATH: a file, a directory (every file of
``corpus.format`` below it) or a glob; ``local_pattern`` and ``local_corpus_name`` turn PATH into that source's glob
and the corpus's name (OmegaConf resolvers, registered by ``poslab.running.resolvers``, so the run directory and the
saved
config say what was trained on).
"""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path
from typing import Any

from poslab.config.overrides import quoted
from poslab.config.settings import FORMATS, VERIFY_CACHE, expand_path, with_corpus_defaults
from poslab.datamodules.codec import DECODE_ERRORS
from poslab.datamodules.corpora.sources import LocalSource, check_group_weights, format_mismatch, glob_root
from poslab.datamodules.segmentation import STYLES
from poslab.errors import ConfigError

#: the files a directory given as corpus.path contributes, by corpus.format
LOCAL_SUFFIX = {"text": "txt", "jsonl": "jsonl", "wikitext": "raw", "python": "py", "parquet": "parquet"}


def _absolute(path: str) -> str:
    # relative to the current directory, as the user typed it; absolute in the saved config, so an analysis run
    # from elsewhere reads the same files
    # (``~`` and ``$VAR``/``${VAR}`` expanded as in every path setting: ``poslab.config.settings.expand_path``)
    return os.path.abspath(expand_path("corpus.path", path))


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
    which of them is wrong (before anything is read or built). Every corpus: ``decode_errors``, ``verify_cache`` and
    the groups' weights."""
    check_cache_settings(corpus)
    check_group_weights(corpus)
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
    files = LocalSource(pattern, format=kind, extensionless=True).files(Path("."))
    if not files:
        directory = pattern != _absolute(str(path))
        what = f"no .{LOCAL_SUFFIX[kind]} file below it" if directory else "no file"
        what += " nor a file without an extension" if directory and kind == "text" else ""
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
    corpus = with_corpus_defaults(corpus)  # one built by hand may leave the shared settings out
    decode_errors = corpus["decode_errors"]
    if decode_errors not in DECODE_ERRORS:
        raise ConfigError(
            f"corpus.decode_errors={decode_errors!r} is not a decoding policy; allowed: strict (invalid UTF-8 stops "
            f"with the file and byte offset) or replace (read as U+FFFD, counted and logged)."
        )
    verify = corpus["verify_cache"]
    if verify not in VERIFY_CACHE:
        raise ConfigError(
            f"corpus.verify_cache={verify!r} is not a checksum policy; allowed: first_use (once per cache directory "
            f"and process), always (every time it is opened) or never (sizes only)."
        )
