"""Causality of every coordinate the data pipeline hands a model (``PositionInputs.coordinates``): the paragraph and
sentence indices at byte (or token) ``i`` do not change when the text after ``i`` does (docs/causality.md).

Every segmentation style runs on every fixture (a rule must be causal on any text, not only on its own corpus's):
WikiText-like English with headings, web prose with quotes, abbreviations and non-ASCII whitespace, Python source
with blank, indented blank and trailing-whitespace lines, and a Chinese novel with NBSP indentation and ``。”``.
A text is cut after every byte and continued in other ways: nothing, the original, and probe characters (ASCII and
multi-byte whitespace, punctuation, closing quotes, letters) followed by short tails; a cut inside a multi-byte
character is continued by every probe that shares its first bytes (``\\xa0``/``©``, ``”``/``—``, ``\\u3000``/``。``).
The BPE path: a token's indices (``tokenization.coordinate_bytes``) with the tokens up to ``t`` kept and the text
after them changed. The split stream (documents, cumulative paragraphs and sentences, ``language.windows``): a
document's continuation changed, the windows' coordinates up to the cut unchanged.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from poslab.datamodules.codec import bytes_text, text_bytes
from poslab.datamodules.corpora import prepare_corpus
from poslab.datamodules.language import windows
from poslab.datamodules.segmentation import STYLES, segment
from poslab.datamodules.tokenization import BpeTokenizer, coordinate_bytes, train_bpe
from tests.datamodules.test_corpora import write_jsonl

WIKITEXT = (
    " \n = Valkyria Chronicles III = \n \n"
    " Senjō no Valkyria 3 : Unrecorded Chronicles ( Japanese : 戦場のヴァルキュリア3 ) is a tactical role @-@ "
    "playing video game . It was released in January 2011 !\n"
    " The game began development in 2010 , carrying over a large portion of the work .\n \n"
    " = = Gameplay = = \n \n \n"
    ' As with previous games , the player \'s squad is " Nameless " . Was it ? Yes .\n'
    " = = = Story = = = \n"
    " The war is at 1 @,@ 200 km .\n"
)
WEB = (
    'Dr. Smith arrived at 9 a.m. on Monday. "Is it ready?" she asked.  Nobody answered…\n'
    "The lab (on the third floor) was quiet!\n\n"
    "  \t \n"
    "\xa0\xa0Indented with NBSP. Then an em\u2003space. Café prices rose 3.5% — again.\n\n\n"
    "Quotes “close” here.” Next one’s fine. End.  \n\n"
    "Last paragraph ends without a newline."
)
PYTHON = (
    '"""Tools for parsing."""\n'
    "\n"
    "import os  \n"
    "\n"
    "\n"
    "def parse(line: str) -> list[str]:\n"
    '    """Split a line. Then strip it."""\n'
    "    parts = line.split()\n"
    "    \n"
    "    if not parts:\t\n"
    "        return []  # nothing to do. Really!\n"
    "\n"
    "        \n"
    "    return [p.strip() for p in parts]\n"
    "\n"
    "\n"
    "class Reader:\n"
    "\tdef __init__(self):\n"
    "\t\tself.seen = 0\n"
    "  \n"
    "x = parse('a b')\n"
)
CHINESE = (
    "第一回·宴桃园豪杰三结义  斩黄巾英雄首立功\n\n"
    "\xa0\xa0\xa0\xa0滚滚长江东逝水，浪花淘尽英雄。是非成败转头空。\n\n"
    "\xa0\xa0\xa0\xa0——调寄《临江仙》\n\n"
    "\u3000\u3000玄德曰：“吾乃汉室宗亲。”张飞曰：“何不早言！”遂同入村店中饮酒？\n"
    "\xa0\xa0\xa0\xa0话说天下大势，分久必合，合久必分。\n\n"
)
TEXTS = {"wikitext": WIKITEXT, "web": WEB, "python": PYTHON, "chinese": CHINESE}
#: continuations: classes of characters a rule may look at (whitespace ASCII and not, sentence ends, closers, text)
PROBES = [" ", "\t", "\n", "x", "A", "#", ".", "!", '"', ")", "=", "\xa0", "©", "é", "\u2003", "”", "’", "—", "…"]
PROBES += ["\u3000", "。", "、", "」", "《", "！", "）", "，", "？", "他", "😀"]
TAILS = ["", " ", "\n", "\n\n", "y", " y", "\n\ny", "\n    y", "\n \n", "。他", ". Y", "”他"]


def cut_character(data: bytes, k: int) -> bytes:
    """The first bytes of the character that ``k`` cuts in two (``b""`` at a character boundary)."""
    lead = k - 1
    while lead > 0 and 0x80 <= data[lead] < 0xC0:
        lead -= 1
    size = 1 if k == 0 or data[lead] < 0xC0 else 2 if data[lead] < 0xE0 else 3 if data[lead] < 0xF0 else 4
    return data[lead:k] if lead + size > k else b""


def continuations(data: bytes, k: int) -> list[bytes]:
    """Other texts sharing ``data[:k]``: the original, and probe characters completing the character cut at ``k``
    (every probe at a character boundary), each followed by a tail; nothing, at a character boundary."""
    partial = cut_character(data, k)
    probes = [p.encode() for p in PROBES if p.encode().startswith(partial) and len(p.encode()) > len(partial)]
    texts = [data] + ([data[:k]] if not partial else [])
    for j, probe in enumerate(probes):
        texts.append(data[:k] + probe[len(partial) :] + TAILS[(k + j) % len(TAILS)].encode())
    return texts


def leaks(text: str, style: str) -> list[tuple[int, str]]:
    """``(k, continuation)`` for each cut after which a continuation changes an index at a byte before ``k``."""
    data = text_bytes(text)
    full = np.stack(segment(text, style))
    found = []
    for k in range(1, len(data)):
        for other in continuations(data, k):
            got = np.stack(segment(bytes_text(other), style))
            if not np.array_equal(got[:, :k], full[:, :k]):
                found.append((k, bytes_text(other[k:])))
                break
    return found


def test_the_continuations_tell_apart_characters_that_share_their_first_bytes():
    data = "a\n\n\xa0b".encode()
    k = data.index(b"\xc2") + 1  # after NBSP's first byte: continued as NBSP, as "©", as "é"? (not: another lead)
    completed = {bytes_text(t[k - 1 :])[:1] for t in continuations(data, k)}
    assert completed == {"\xa0", "©"}
    data = "。他".encode()  # 。 is E3 80 82; U+3000, 、, 」 and 《 share E3 80
    assert {bytes_text(t)[0] for t in continuations(data, 2)} == {"\u3000", "。", "、", "」", "《"}
    assert cut_character(data, 2) == data[:2] and cut_character(data, 3) == cut_character(data, 0) == b""
    assert len(continuations(b"ab", 2)) == len(PROBES) + 2  # a character boundary: every probe, and nothing


@pytest.mark.parametrize("text", list(TEXTS))
@pytest.mark.parametrize("style", list(STYLES))
def test_every_index_at_a_byte_depends_on_no_later_byte(style, text):
    assert leaks(TEXTS[text], style) == []


def test_the_check_finds_a_rule_that_reads_ahead(monkeypatch):
    """The check is not vacuous: a code line starting at its indentation (as before version 5) reads ahead, and
    so does a start marked on a multi-byte character's first byte."""
    import poslab.datamodules.segmentation as segmentation

    def indentation_starts(text: str) -> list[int]:
        return [o for o, line in segmentation._lines(text) if line.strip()][1:]

    monkeypatch.setattr(segmentation, "_code_line_starts", indentation_starts)
    assert (PYTHON.encode().index(b"    parts") + 1, "") in leaks(PYTHON, "code")
    monkeypatch.undo()

    def first_byte_indices(starts, lengths):
        marks = np.zeros(len(lengths), dtype=np.int32)
        marks[sorted(set(starts))] = 1
        return np.repeat(np.cumsum(marks, dtype=np.int32), lengths)

    monkeypatch.setattr(segmentation, "_indices", first_byte_indices)
    found = leaks(CHINESE, "lines")
    assert found and all(CHINESE.encode()[k - 1] >= 0x80 for k, _ in found)  # only inside multi-byte characters


# ---- tokens: the BPE path ----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> BpeTokenizer:
    path = tmp_path_factory.mktemp("bpe") / "bpe.json"
    train_bpe(list(TEXTS.values()) * 3, 400, path)
    return BpeTokenizer(path)


def token_indices(text: str, style: str, first_bytes: np.ndarray) -> np.ndarray:
    """``[2, tokens]``: each token's paragraph and sentence, as the cache writer takes them."""
    return np.stack(segment(text, style))[:, coordinate_bytes(text, first_bytes)]


@pytest.mark.parametrize("text", list(TEXTS))
def test_a_bpe_tokens_indices_depend_on_no_later_token(bpe, text):
    """Tokens ``0 .. t`` kept, the text after them changed (tokenised on its own): their indices stay."""
    data = text_bytes(TEXTS[text])
    ids, first = bpe.encode(TEXTS[text])
    assert len(ids) < 0.8 * len(data)  # merges: tokens of several bytes, the case where the choice of byte matters
    ends = np.append(first[1:], len(data))
    checked = 0
    for style in STYLES:
        full = token_indices(TEXTS[text], style, first)
        for t in range(len(ids)):
            k = int(ends[t])
            if k == len(data) or (t + 1 < len(ids) and first[t + 1] == first[t]):
                continue  # token t ends inside a character (the next holds the rest of it)
            for tail in (*TAILS, "\xa0z", "\u3000他", "    \n"):
                other = bytes_text(data[:k]) + tail
                _, rest = bpe.encode(tail)
                first_other = np.concatenate((first[: t + 1], rest + k)).astype(np.int64)
                got = token_indices(other, style, first_other)
                assert np.array_equal(got[:, : t + 1], full[:, : t + 1]), (style, t, tail)
                checked += 1
    assert checked > 100


def test_a_token_reads_its_indices_inside_itself():
    text = "a 他。\n\n\xa0b😀"
    lengths = [len(c.encode()) for c in text]
    first = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    assert coordinate_bytes(text, first).tolist() == (np.cumsum(lengths) - 1).tolist()  # tokens = characters
    assert coordinate_bytes(text, np.arange(len(text.encode()))).tolist() == list(range(len(text.encode())))
    # a byte-level BPE token holding part of 他 (offsets of the character, as BpeTokenizer gives them): the byte
    # before the next token, never past it
    assert coordinate_bytes("他x", np.array([0, 0, 3])).tolist() == [0, 2, 3]
    assert coordinate_bytes("", np.zeros(0, dtype=np.int64)).tolist() == []


# ---- the split stream and its windows -----------------------------------------------------------------------------
NAMES = (("train", "train"), ("valid", "validation"))  # whole files to each split: documents in file order


def stream(data_dir: Path, cache: Path, documents: list[str], tokenizer: str = "bytes") -> dict[str, np.ndarray]:
    """Documents, paragraphs and sentences of a one-split stream of ``documents`` (in order), cut as a window."""
    write_jsonl(data_dir / "train.jsonl", documents)
    write_jsonl(data_dir / "valid.jsonl", ["held out"])
    sources = [{"pattern": f"{name}.jsonl", "split": split, "segmentation": "code"} for name, split in NAMES]
    corpus = {
        "name": "causal",
        "tokenizer": tokenizer,
        "validation_fraction": 0.1,
        "groups": {"main": {"local": sources}},
    }
    (group,) = prepare_corpus(corpus, data_dir, cache)
    split = group.splits["train"]
    window = {k: v.numpy()[0] for k, v in windows(split, np.array([0]), len(split)).items()}
    return {"documents": np.asarray(split.documents), **window}


def test_the_stream_of_documents_and_its_windows_depend_on_no_later_token(tmp_path):
    """The coordinates in a training window, built through the cache (documents, cumulative indices, a new
    document's bump at its first token) with the second document continued in other ways after each cut."""
    first, second = WEB[:120], PYTHON
    full = stream(tmp_path / "d0", tmp_path / "c0", [first, second])
    offset = len(text_bytes(first)) + 1  # the separator
    cuts = list(range(1, len(text_bytes(second)), 13))
    for i, k in enumerate(cuts):
        for tail in ("", "\n    \n", "    y = 1\n"):
            other = bytes_text(text_bytes(second)[:k]) + tail
            got = stream(tmp_path / f"d{i}{len(tail)}", tmp_path / "c", [first, other])
            n = offset + k
            for name in ("documents", "paragraph", "sentence", "tokens"):
                assert np.array_equal(got[name][:n], full[name][:n]), (k, tail, name)
    assert full["documents"][offset] == full["documents"][0] + 1 and full["paragraph"][offset] > 0
