"""A corpus config's source groups and their sources, as configured (``conf/corpus/*.yaml``'s ``groups``).

A corpus is one or more *source groups* (e.g. ``en`` and ``zh`` for ``wiki_en_zh``), each with a weight (its share
of training windows) and its sources: local files under ``paths.data_dir`` (``POSLAB_DATA_DIR``) tried first
(``LocalSource``), then the Hugging Face hub through ``datasets`` when online (``HubSource``). ``resolution`` says
which of them a group is actually read from.
"""

from __future__ import annotations

import fnmatch
import glob
import math
import os
import sysconfig
from dataclasses import dataclass, field
from dataclasses import field as dataclass_field  # LocalSource has a setting named `field`
from pathlib import Path
from typing import Any

from poslab.config.settings import FORMATS
from poslab.datamodules.segmentation import STYLES
from poslab.errors import ConfigError

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
    # jsonl: a field whose equal values are one unit of the train/held-out split (enwiki's title: an article kept in
    # several dumps is held out whole or trained on whole, never both); None: each document its own unit
    split_key: str | None = None
    exclude: list[str] = dataclass_field(default_factory=list)  # directory names (shell patterns) to skip
    include_tests: bool = True  # False: skip test packages (TEST_PACKAGES directories)
    # text in a directory (a pattern ending */*.txt): files without an extension are text too (README, LICENSE,
    # a folder of letters); corpus=local sets it, named corpora list their files exactly
    extensionless: bool = False

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
        names = glob.glob(str(full), recursive=True)
        if self.extensionless and self.format == "text" and str(full).endswith("*.txt"):
            names += [n for n in glob.glob(str(full)[: -len(".txt")], recursive=True) if not Path(n).suffix]
        files = []
        for name in names:
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
    segmentation: str = "blank_lines"  # DEFAULT_HUB_SEGMENTATION


DEFAULT_HUB_SEGMENTATION = HubSource.segmentation


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
            if source.split_key is not None and source.format not in ("jsonl", "auto"):
                raise ConfigError(
                    f"corpus source {source.pattern!r} has split_key={source.split_key!r} but format="
                    f"{source.format!r}; a split key is a JSONL field: allowed with format jsonl (or auto on .jsonl)."
                )
            if source.split not in ("both", *SPLITS):
                raise ConfigError(
                    f"corpus source {source.pattern!r} has split={source.split!r}; allowed: both, train, validation."
                )
        hub = settings.pop("hub", None)
        return cls(name=name, local=local, hub=HubSource(**hub) if hub else None, **settings)


def hub_is_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false", "False") or os.environ.get(
        "HF_DATASETS_OFFLINE", "0"
    ) not in ("0", "", "false", "False")


def check_group_weights(corpus: dict[str, Any]) -> None:
    """Every source group's ``weight`` (its share of the training windows) is a number above 0, or one sentence
    saying which is not: 0 would silently never train the group, and a negative one fails inside the sampler."""
    for name, settings in (corpus.get("groups") or {}).items():
        weight = (settings or {}).get("weight", SourceGroup.weight)
        number = isinstance(weight, (int, float)) and not isinstance(weight, bool)
        if not (number and math.isfinite(weight) and weight > 0):
            raise ConfigError(
                f"corpus {corpus.get('name')!r}, source group {name!r}: weight={weight!r}; a group's weight is its "
                f"share of the training windows (each row picks a group in proportion to the weights), so it must "
                f"be a number above 0 (e.g. 1.0, or 0.5 for half); to leave a group out, remove it from corpus.groups."
            )
