"""Real corpora: where documents come from, and the prepared (tokenised, memory-mapped) cache.

A corpus is one or more source groups, each with a weight and its sources (local files, else the Hugging Face hub);
a group is prepared once into a cache directory of token and boundary arrays. The modules, from the bottom up:

- ``sources``: a corpus config's source groups and their sources, as configured.
- ``documents``: the documents of a file or a hub stream, and which are held out for validation (``plan_split``).
- ``local``: ``corpus=local corpus.path=PATH``, the checks of corpus settings, and the resolvers (and the Hydra
  callback registering them) that name a local corpus.
- ``provenance``: what a group was read from (files, bytes, sha256, test splits), and what a run says about it.
- ``resolution``: a corpus config resolved to what each group is read from, and its documents with their splits.
- ``coordinates``: per-token document, paragraph and sentence indices from boundary offsets; prepared splits.
- ``writer``: writing a group into a cache directory (streamed, logged, checksummed).
- ``cache``: preparing a group once under a lock, mapping it, and checking its integrity.
- ``code_version``: the modules whose source decides the prepared data, hashed into the cache key.

Every name other modules use is re-exported here (``from poslab.datamodules.corpora import prepare_corpus``).
Importing the package registers the corpus=local resolvers (``local``).
"""

from poslab.datamodules.codec import SEPARATOR, decode_bytes, encode_bytes  # the byte codec, re-exported for its users
from poslab.datamodules.corpora.cache import (
    CACHE_VERSION,
    BadCacheError,
    corpus_tokenizer,
    load_prepared,
    prepare_corpus,
    prepare_group,
)
from poslab.datamodules.corpora.coordinates import (
    BOUNDARY_ARRAYS,
    COORDINATES,
    Coordinate,
    PreparedGroup,
    PreparedSplit,
)
from poslab.datamodules.corpora.documents import (
    SPLIT_RULE,
    WIKITEXT_TITLE,
    CorpusDocument,
    SplitPlan,
    document_draw,
    hub_documents,
    is_validation,
    local_documents,
    plan_split,
    tail_cut,
)
from poslab.datamodules.corpora.local import (
    LOCAL_SUFFIX,
    check_cache_settings,
    check_local_corpus,
    local_corpus_name,
    local_overrides,
    local_path_matches,
    local_pattern,
)
from poslab.datamodules.corpora.provenance import (
    LISTED_FILES,
    PYTHON_SUFFIXES,
    SPLIT_BY_BYTES,
    SPLIT_BY_DOCUMENT,
    data_notes,
    describe,
    describe_sources,
    file_sha256,
    is_test_file,
    named_files,
    split_of,
)
from poslab.datamodules.corpora.resolution import (
    ResolvedCorpus,
    ResolvedGroup,
    resolve_corpus,
    resolve_group,
    training_documents,
)
from poslab.datamodules.corpora.sources import (
    DEFAULT_SEGMENTATION,
    NOT_STDLIB,
    SPLITS,
    STDLIB,
    STRUCTURED_SUFFIXES,
    TEST_PACKAGES,
    HubSource,
    LocalSource,
    SourceGroup,
    format_mismatch,
    glob_root,
    hub_is_offline,
)
from poslab.datamodules.corpora.writer import (
    CHECKSUM,
    PROGRESS_SECONDS,
)

__all__ = [
    "BOUNDARY_ARRAYS",
    "BadCacheError",
    "CACHE_VERSION",
    "CHECKSUM",
    "COORDINATES",
    "Coordinate",
    "CorpusDocument",
    "DEFAULT_SEGMENTATION",
    "HubSource",
    "LISTED_FILES",
    "LOCAL_SUFFIX",
    "LocalSource",
    "NOT_STDLIB",
    "PROGRESS_SECONDS",
    "PYTHON_SUFFIXES",
    "PreparedGroup",
    "PreparedSplit",
    "ResolvedCorpus",
    "ResolvedGroup",
    "SEPARATOR",
    "SPLITS",
    "SPLIT_BY_BYTES",
    "SPLIT_BY_DOCUMENT",
    "SPLIT_RULE",
    "STDLIB",
    "STRUCTURED_SUFFIXES",
    "SourceGroup",
    "SplitPlan",
    "TEST_PACKAGES",
    "WIKITEXT_TITLE",
    "check_cache_settings",
    "check_local_corpus",
    "corpus_tokenizer",
    "data_notes",
    "decode_bytes",
    "describe",
    "describe_sources",
    "document_draw",
    "encode_bytes",
    "file_sha256",
    "format_mismatch",
    "glob_root",
    "hub_documents",
    "hub_is_offline",
    "is_test_file",
    "is_validation",
    "load_prepared",
    "local_corpus_name",
    "local_documents",
    "local_overrides",
    "local_path_matches",
    "local_pattern",
    "named_files",
    "plan_split",
    "prepare_corpus",
    "prepare_group",
    "resolve_corpus",
    "resolve_group",
    "split_of",
    "tail_cut",
    "training_documents",
]
