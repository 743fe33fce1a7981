"""The version of the code that prepares data: a hash of the source of every module whose code decides what a
prepared cache (and a trained BPE tokenizer) holds, part of both keys beside ``cache.CACHE_VERSION``.

``CACHE_VERSION`` is set by hand and was not bumped by two commits that changed prepared output (a5ea022,
segmentation's sentence ends; c672c8e, BPE ``encode_special_tokens``): a stale cache was silently reused. With
``code_hash`` in the key, any edit of a listed module prepares the data anew (a comment or docstring included:
cheap against a stale cache). A module added to the preparation path must be listed in ``HASHED`` or, with the
reason, in ``NOT_HASHED``: ``tests/datamodules/test_prepared_data.py`` walks the imports of ``cache`` and fails on
a module in neither.

The installed versions of the third-party libraries in ``LIBRARIES`` are hashed in too: their code shapes the data
as much as poslab's (another ``tokenizers`` may train another BPE from the same text), and an upgrade edits no poslab
source.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util

#: the modules whose code decides the prepared data, each with why: their sources are hashed into the cache key
HASHED = {
    "poslab.datamodules.codec": "text to bytes and back, and how invalid UTF-8 or a lone surrogate is read",
    "poslab.datamodules.segmentation": "the paragraph and sentence boundaries of every document",
    "poslab.datamodules.tokenization": "token ids, a token's coordinate byte, how a BPE is trained and encodes",
    "poslab.datamodules.corpora.sources": "which files a source matches, in what order, their format and style",
    "poslab.datamodules.corpora.documents": "the readers (a file's documents) and which are held out",
    "poslab.datamodules.corpora.resolution": "a group's documents in cache order, its byte cap, each one's split",
    "poslab.datamodules.corpora.writer": "the arrays and meta.json written for a group",
    "poslab.datamodules.corpora.coordinates": "the boundary arrays the writer writes and how they read back",
}

#: modules the preparation path imports whose code does not decide the data, each with why (a ``.``-ending name:
#: the package, every module below it)
NOT_HASHED = {
    "poslab.datamodules.corpora.cache": "names the key (settings, CACHE_VERSION, this hash) and maps the arrays",
    "poslab.datamodules.corpora.code_version": "this list: a change of what is hashed changes the hash by itself",
    "poslab.datamodules.corpora.local": "checks settings and names corpus=local's files: the files are in the key",
    "poslab.datamodules.corpora.provenance": "describes the sources read (meta.json's source_files), not the arrays",
    "poslab.datamodules.locking": "a file lock: who writes a cache, not what",
    "poslab.errors": "exception types",
    "poslab.config.": "settings, their defaults and allowed values: the values a preparation uses are in the key",
}


#: the third-party distributions whose code shapes the prepared data, each with why: their installed versions are
#: hashed into the cache key (numpy only stores the arrays, and is not listed)
LIBRARIES = {
    "tokenizers": "trains the BPE and encodes every document with it",
    "datasets": "reads a hub source's documents (load_dataset)",
}


def installed_version(distribution: str) -> str:
    """The installed version of ``distribution``, or ``"absent"``: a library installed later (or removed) is then
    a change of version too."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def module_source(name: str) -> bytes:
    """The source file of module ``name``, as bytes (read, not imported): what ``code_hash`` hashes."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"{name} (listed in code_version.HASHED) has no source file")
    with open(spec.origin, "rb") as f:
        return f.read()


def code_hash() -> str:
    """16 hex digits of a sha256 over the ``HASHED`` modules' names and sources, then the ``LIBRARIES``' names and
    installed versions, each in name order."""
    digest = hashlib.sha256()
    for name in sorted(HASHED):
        source = module_source(name)
        digest.update(f"{name}\0{len(source)}\0".encode())
        digest.update(source)
    for name in sorted(LIBRARIES):  # names and lengths delimit each entry: no two lists hash alike
        version = installed_version(name)
        digest.update(f"{name}\0{len(version)}\0{version}".encode())
    return digest.hexdigest()[:16]
