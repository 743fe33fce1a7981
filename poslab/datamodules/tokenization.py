"""Tokenizers of the prepared cache: ``bytes`` (the default) and ``bpe`` (a byte-level BPE trained on the corpus).

Both map a document to token ids and, per token, the offset of its first UTF-8 byte. A token's paragraph and
sentence are those of its first character, read at that character's last byte (``coordinate_bytes``;
``segmentation.segment`` works per byte and marks a unit's start on its first character's last byte), or of the
byte before the next token where the token holds only part of that character: so the coordinates of the
hierarchical encodings exist for either tokenizer and a token's depend on no later token (a byte token takes its
own byte's).

``bpe`` trains a byte-level BPE (the ``tokenizers`` library, GPT-2's pre-tokenizer, ``vocab_size`` symbols
including the document separator ``<|sep|>``, id 0) on the *training* documents of every source group of the
corpus, once: the tokenizer file is cached under ``cache_dir/tokenizers/`` keyed by the corpus's sources and
settings, written atomically under a file lock like the token cache. Vocabularies stay below 65,536 so the
token array keeps its ``uint16`` format.

``token_bytes()``: the UTF-8 bytes each token id stands for, which bits per byte divides by (the bytes of exactly
the scored tokens). The document separator counts as one byte with either tokenizer, as the cache's byte counts
have it (``corpora.writer``): with the byte tokenizer every token is one byte, and bits per byte is the loss in
bits per token.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from poslab.config.settings import TOKENIZERS, corpus_setting
from poslab.datamodules.codec import BYTE_VOCAB, SEPARATOR, decode_text, encode_bytes, utf8_lengths
from poslab.datamodules.locking import removed_lock
from poslab.errors import ConfigError

BPE_SEPARATOR = "<|sep|>"
MAX_VOCAB = 65536  # the token array is uint16


class Tokenizer:
    """Encodes text to ``uint16`` ids with per-token first-byte offsets."""

    name: str = "bytes"
    vocab_size: int = BYTE_VOCAB
    separator: int = SEPARATOR  # codec.SEPARATOR; a BPE has its own

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        """``(ids uint16 [N], first_byte int64 [N])``: every byte is a token."""
        ids = encode_bytes(text)
        return ids, np.arange(len(ids), dtype=np.int64)

    def decode(self, ids: Iterable[int]) -> str:
        return decode_text(ids)

    def token_bytes(self) -> np.ndarray:
        """``int64 [vocab_size]``: the UTF-8 bytes of each token id; 1 for every byte and for the separator."""
        return np.ones(self.vocab_size, dtype=np.int64)

    def fingerprint(self) -> str:
        return "bytes"


class BpeTokenizer(Tokenizer):
    name = "bpe"
    separator = 0

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        self.path = path
        self.hf = HFTokenizer.from_file(str(path))
        # a literal "<|sep|>" in a text is text: never the separator (which the writer appends by id), else the
        # model would see a false document boundary and bits/byte count its 7 bytes as 1
        self.hf.encode_special_tokens = True
        self.vocab_size = self.hf.get_vocab_size()
        self.separator = self.hf.token_to_id(BPE_SEPARATOR)

    def encode(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        encoding = self.hf.encode(text, add_special_tokens=False)
        ids = np.asarray(encoding.ids, dtype=np.uint16)
        # offsets are in characters; a byte-level token inside a multi-byte character starts at that character
        char_starts = np.asarray([start for start, _ in encoding.offsets], dtype=np.int64)
        byte_of_char = np.concatenate(([0], np.cumsum(utf8_lengths(text))))
        return ids, byte_of_char[np.minimum(char_starts, len(text))]

    def decode(self, ids: Iterable[int]) -> str:
        return self.hf.decode([int(i) for i in ids if int(i) != self.separator])

    def token_bytes(self) -> np.ndarray:
        """``int64 [vocab_size]``: the UTF-8 bytes of each token id. A byte-level BPE spells a token with one
        character of its 256-character alphabet per byte, so its bytes are its length; the separator, the one
        special token, counts as one byte."""
        from tokenizers import pre_tokenizers

        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        lengths = np.ones(self.vocab_size, dtype=np.int64)
        for token, i in self.hf.get_vocab().items():
            if i == self.separator:
                continue
            if not set(token) <= alphabet:
                raise ValueError(f"{self.path}: bpe token {token!r} is not spelled in the byte-level alphabet.")
            lengths[i] = len(token)
        return lengths

    def fingerprint(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()[:16]


def coordinate_bytes(text: str, first_bytes: np.ndarray) -> np.ndarray:
    """Per token, the byte whose paragraph and sentence indices it takes: the last byte of its first character, or
    the byte before the next token where the token ends inside that character (a byte token, a byte-level BPE
    token holding part of a character, which ``BpeTokenizer.encode`` gives that character's first byte). Never a
    byte after the token, so a token's indices depend on no later token (``segmentation``: causal per byte);
    0 for a first token that ends inside the first character."""
    lengths = utf8_lengths(text)
    char_last = np.cumsum(lengths) - 1  # each character's last byte
    first = np.asarray(first_bytes, dtype=np.int64)
    own = char_last[np.searchsorted(char_last, first)] if len(first) else first  # of the character holding it
    token_last = np.append(first[1:], int(lengths.sum()))[: len(first)] - 1
    return np.maximum(np.minimum(own, token_last), 0)


def check_tokenizer(corpus: dict[str, Any]) -> tuple[str, int | None]:
    kind = corpus_setting(corpus, "tokenizer")  # one built by hand may leave it out
    if kind not in TOKENIZERS:
        raise ConfigError(f"corpus.tokenizer={kind!r} is not available; allowed: {', '.join(TOKENIZERS)}.")
    if kind == "bytes":
        return kind, None
    size = corpus.get("vocab_size")
    if isinstance(size, bool) or not isinstance(size, int) or not 300 <= size <= MAX_VOCAB:
        raise ConfigError(
            f"corpus.vocab_size={size!r}: the bpe tokenizer needs a vocabulary size between 300 (the 256 bytes, the "
            f"separator and some merges) and {MAX_VOCAB} (token ids are stored as uint16)."
        )
    return kind, size


def train_bpe(texts: Iterable[str], vocab_size: int, path: Path) -> None:
    """Train a byte-level BPE on ``texts`` and write it to ``path`` (atomically)."""
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BPE_SEPARATOR],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tokenizer.save(str(tmp))
    os.replace(tmp, path)


def load_tokenizer(
    corpus: dict[str, Any], cache_dir: Path, fingerprint: list[Any], training_texts: Any, code: str
) -> Tokenizer:
    """The corpus's tokenizer; a ``bpe`` one is trained on ``training_texts()`` (an iterable factory) once, keyed by
    the sources, the settings and ``code`` (``corpora.code_version.code_hash``: the code that reads and trains)."""
    kind, vocab_size = check_tokenizer(corpus)
    if kind == "bytes":
        return Tokenizer()
    settings = {"corpus": corpus["name"], "vocab_size": vocab_size, "sources": fingerprint, "version": 1, "code": code}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    path = cache_dir / "tokenizers" / f"{corpus['name']}-bpe{vocab_size}-{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with removed_lock(str(path) + ".lock"):
        if not path.is_file():
            train_bpe(training_texts(), vocab_size, path)
    return BpeTokenizer(path)
