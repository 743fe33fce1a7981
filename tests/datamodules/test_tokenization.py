"""Tokenizers of the prepared cache: bytes and a corpus-trained byte-level BPE (cached), with per-token coordinates."""

from __future__ import annotations

import numpy as np
import pytest

from poslab.datamodules.corpora import corpus_tokenizer, prepare_corpus
from poslab.datamodules.segmentation import segment
from poslab.datamodules.tokenization import BpeTokenizer, Tokenizer, check_tokenizer, coordinate_bytes
from poslab.errors import ConfigError
from tests.datamodules.test_corpora import write_jsonl

TEXTS = [
    "\n\n".join(
        f"Paragraph {p} of document {i}. The tokenizer learns merges here. Déjà vu {p}! 中文句子。第二句。"
        for p in range(4)
    )
    for i in range(30)
]


def bpe_corpus(data_dir, vocab_size: int = 320) -> dict:
    write_jsonl(data_dir / "web" / "docs.jsonl", TEXTS)
    return {
        "name": "tiny_web",
        "tokenizer": "bpe",
        "vocab_size": vocab_size,
        "validation_fraction": 0.2,
        "groups": {"main": {"local": [{"pattern": "web/*.jsonl"}]}},
    }


def test_bpe_is_trained_on_the_corpus_round_trips_and_is_cached(tmp_path):
    corpus = bpe_corpus(tmp_path / "data")
    cache = tmp_path / "cache"
    groups = prepare_corpus(corpus, tmp_path / "data", cache)
    (path,) = sorted((cache / "tokenizers").glob("*.json"))
    tokenizer = corpus_tokenizer(groups, cache)
    assert isinstance(tokenizer, BpeTokenizer) and tokenizer.vocab_size <= 320
    assert groups[0].meta["vocab_size"] == tokenizer.vocab_size and groups[0].meta["tokenizer"] == "bpe"
    for text in (TEXTS[0], "unseen wörds 😀 and \n\n code()"):
        ids, _ = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text
    # a literal separator in a text is text (the writer appends the separator by id): no false document boundary,
    # and its 7 bytes counted as 7
    ids, _ = tokenizer.encode("a <|sep|> b")
    assert tokenizer.separator not in ids.tolist() and tokenizer.token_bytes()[ids].sum() == len("a <|sep|> b")
    split = groups[0].splits["train"]
    assert int(split.tokens.max()) < tokenizer.vocab_size
    separators = np.flatnonzero(np.asarray(split.tokens) == tokenizer.separator)
    assert len(separators) == len(np.unique(split.documents)) and separators[-1] == len(split) - 1
    meta = groups[0].meta["splits"]["train"]
    assert meta["bytes"] / meta["tokens"] > 1.5  # merges happened: fewer tokens than bytes
    # cached: preparing again reuses the tokenizer file; another vocabulary size trains another one
    mtime = path.stat().st_mtime_ns
    prepare_corpus(corpus, tmp_path / "data", cache)
    assert path.stat().st_mtime_ns == mtime and len(list((cache / "tokenizers").glob("*.json"))) == 1
    prepare_corpus({**corpus, "vocab_size": 300}, tmp_path / "data", cache)
    assert len(list((cache / "tokenizers").glob("*.json"))) == 2


def test_a_bpe_token_carries_the_coordinates_of_its_first_character(tmp_path):
    groups = prepare_corpus(bpe_corpus(tmp_path / "data"), tmp_path / "data", tmp_path / "cache")
    tokenizer = corpus_tokenizer(groups, tmp_path / "cache")
    text = TEXTS[3]
    ids, first_bytes = tokenizer.encode(text)
    paragraph, sentence = segment(text, "blank_lines")
    assert np.all(np.diff(first_bytes) > 0) and first_bytes[0] == 0
    at = coordinate_bytes(text, first_bytes)
    assert np.all(at >= first_bytes) and np.all(at < np.append(first_bytes[1:], len(paragraph)))  # inside the token
    token_paragraph, token_sentence = paragraph[at], sentence[at]
    assert np.all(np.diff(token_paragraph) >= 0) and token_paragraph[-1] == 3
    # every paragraph start in bytes is the first byte of some token: boundaries survive tokenisation
    starts = np.flatnonzero(np.diff(paragraph)) + 1
    assert set(starts.tolist()) <= set(first_bytes.tolist())
    # "第二句" starts a sentence: segment marks it on the last of 第's three bytes, its token takes it from its first
    for start in (i for i in range(len(text)) if text.startswith("第二句", i)):
        first = len(text[:start].encode())
        assert sentence[first + 2] == sentence[first] + 1
        assert token_sentence[first_bytes.tolist().index(first)] == sentence[first + 2]
    assert len(np.flatnonzero(np.diff(sentence))) == 4 * 5 - 1 and text.count("第二句") == 4
    # the stored split: coordinates non-decreasing within a document, reset (relative) per document
    split = groups[0].splits["train"]
    documents = np.asarray(split.documents)
    for ordinal in np.unique(documents)[:5]:
        rows = np.flatnonzero(documents == ordinal)
        p = np.asarray(split.paragraphs[rows])
        assert np.all(np.diff(p) >= 0) and p[-1] - p[0] == 3


def test_bytes_tokenizer_is_one_token_per_byte():
    ids, first = Tokenizer().encode("aé中")
    assert ids.tolist() == list("aé中".encode()) and first.tolist() == list(range(6))


@pytest.mark.parametrize(
    "corpus, message",
    [
        ({"tokenizer": "wordpiece"}, "allowed: bytes, bpe"),
        ({"tokenizer": "bpe"}, "vocab_size=None"),
        ({"tokenizer": "bpe", "vocab_size": 100_000}, "uint16"),
    ],
)
def test_bad_tokenizer_settings_say_what_is_allowed(corpus, message):
    with pytest.raises(ConfigError, match=message):
        check_tokenizer({"name": "x", **corpus})
