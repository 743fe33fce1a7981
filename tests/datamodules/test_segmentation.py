"""Paragraph and sentence coordinates per byte: hand-made documents in each style, exact indices at chosen bytes."""

from __future__ import annotations

import numpy as np
import pytest

from poslab.datamodules.segmentation import STYLES, boundary_density, segment
from poslab.errors import ConfigError


def at(text: str, needle: str, occurrence: int = 0) -> int:
    """Byte offset of the ``occurrence``-th ``needle`` in ``text``."""
    data, start = text.encode(), -1
    for _ in range(occurrence + 1):
        start = data.index(needle.encode(), start + 1)
    return start


def check_invariants(text: str, paragraph: np.ndarray, sentence: np.ndarray) -> None:
    n = len(text.encode())
    for index in (paragraph, sentence):
        assert index.dtype == np.int32 and index.shape == (n,)
        assert index[0] == 0
        assert np.all(np.diff(index) >= 0) and np.all(np.diff(index) <= 1)
    # a paragraph start is always a sentence start
    assert np.all(np.diff(sentence)[np.diff(paragraph) > 0] == 1)


def check_coordinates(text: str, style: str, expect: dict) -> tuple[np.ndarray, np.ndarray]:
    """``segment(text, style)`` holds the invariants and, at the first byte of each needle (``needle`` or
    ``(needle, occurrence)``), the expected (paragraph, sentence); the two indices."""
    paragraph, sentence = segment(text, style)
    check_invariants(text, paragraph, sentence)
    for key, expected in expect.items():
        needle, occurrence = key if isinstance(key, tuple) else (key, 0)
        i = at(text, needle, occurrence)
        assert (paragraph[i], sentence[i]) == expected, needle
    return paragraph, sentence


WIKITEXT = (
    " \n = Robert Boulter = \n \n"
    " Robert Boulter is an English actor . He had a guest role in 2000 .\n"
    " He was cast in 2005 !\n \n"
    " = = Career = = \n \n \n"
    " In 2000 Boulter had a role of 1 @.@ 5 hours .\n"
)


def test_wikitext_lines_headings_and_blank_lines():
    expect = {
        (" \n", 0): (0, 0),  # leading blank line: paragraph 0
        ("= Robert", 0): (0, 0),
        ("Robert Boulter is", 0): (1, 1),
        ("He had", 0): (1, 2),
        (" .\n", 0): (1, 2),  # the newline ending a paragraph belongs to it
        ("He was cast", 0): (2, 3),  # a new line: a new paragraph without a blank line
        ("!\n \n", 0): (2, 3),
        ("\n \n", 1): (2, 3),  # the blank " " line attaches to the paragraph before it
        ("= = Career", 0): (3, 4),
        ("\n \n \n", 0): (3, 4),
        ("In 2000", 0): (4, 5),
        ("@.@ 5", 0): (4, 5),  # "@.@" is no sentence end
    }
    paragraph, sentence = check_coordinates(WIKITEXT, "wikitext", expect)
    assert (paragraph[-1], sentence[-1]) == (4, 5)


WEB = "Hello there. How are you?\nStill paragraph one!\n\n  \nNew paragraph, e.g. this.\n\nLast one.  \n\n"


def test_blank_lines_paragraphs_and_sentences():
    expect = {
        "Hello": (0, 0),
        "How": (0, 1),
        "Still": (0, 2),  # a single newline does not end a paragraph
        "!\n\n": (0, 2),
        "  \n": (0, 2),  # the blank lines belong to the paragraph they end
        "New": (1, 3),
        "e.g.": (1, 3),  # "e.g." is followed by a space after its last dot only
        "this": (1, 4),  # ... which is a rule, not a parser: abbreviations split
        "Last": (2, 5),
    }
    paragraph, sentence = check_coordinates(WEB, "blank_lines", expect)
    assert (paragraph[-1], sentence[-1]) == (2, 5)  # trailing whitespace stays with the last sentence


CHINESE = "第一回\n\n    话说天下大势，分久必合。“周末七国！”及秦灭之后？又并入于汉\n\n    建宁二年。\n"


@pytest.mark.parametrize("style", ["blank_lines", "lines"])
def test_chinese_sentence_ends_need_no_whitespace(style):
    expect = {  # at each needle's first character, read in full (its last byte)
        "回": (0, 0),
        "    话": (0, 0),  # a paragraph's indentation is part of the separator before it
        "话说": (1, 1),
        "分久": (1, 1),
        "“周末": (1, 2),
        "！”": (1, 2),
        "”及": (1, 2),  # the closing quote stays with its sentence
        "及秦": (1, 3),
        "又并": (1, 4),
        "建宁": (2, 5),
    }
    paragraph, sentence = segment(CHINESE, style)
    check_invariants(CHINESE, paragraph, sentence)
    assert len(paragraph) == len(CHINESE.encode())  # per byte: three bytes per character here
    for needle, expected in expect.items():
        i = at(CHINESE, needle) + len(needle[0].encode()) - 1
        assert (paragraph[i], sentence[i]) == expected, needle
    # a unit starts on its first character's last byte: before it, "”" and "及" (both 3 bytes) are not told apart
    for needle, before, start in (("话说", (0, 0), (1, 1)), ("及秦", (1, 2), (1, 3)), ("建宁", (1, 4), (2, 5))):
        i = at(CHINESE, needle)
        assert [(paragraph[j], sentence[j]) for j in (i, i + 1, i + 2)] == [before, before, start], needle


CODE = "import os\n\n\ndef f(x):\n    return x\n\n    # same block? no: a blank line\nclass A:\n    pass\n"


def test_code_blocks_and_lines():
    expect = {
        "import": (0, 0),
        "\n\n\n": (0, 0),
        "def": (1, 1),
        "    return": (1, 1),  # a line's indentation is part of the separator before it, as in prose
        "return": (1, 2),
        "    # same": (1, 2),  # ... whether an indented line is blank is known only at its end
        "# same": (2, 3),
        "class": (2, 4),
        "    pass": (2, 4),
        "pass": (2, 5),
    }
    check_coordinates(CODE, "code", expect)


def test_bytes_of_surrogate_escaped_and_astral_text():
    text = "a😀b. c" + b"\xff".decode("utf-8", errors="surrogateescape")
    paragraph, sentence = segment(text, "blank_lines")
    assert len(paragraph) == len(text.encode("utf-8", errors="surrogateescape")) == 10
    assert list(sentence) == [0] * 8 + [1, 1]


@pytest.mark.parametrize("style", list(STYLES))
def test_every_style_handles_empty_and_blank_documents(style):
    for text in ("", "\n\n", "one line"):
        paragraph, sentence = segment(text, style)
        assert len(paragraph) == len(sentence) == len(text.encode())
        assert not paragraph.any() and not sentence.any()


def test_unknown_style_lists_the_allowed_ones():
    with pytest.raises(
        ConfigError, match="unknown segmentation style 'paragraphs'.*blank_lines, wikitext, lines, code"
    ):
        segment("text", "paragraphs")


def test_boundary_density():
    docs = [segment(WEB, "blank_lines")[0], segment(WIKITEXT, "wikitext")[0]]
    expected = (2 + 4) / (len(WEB.encode()) + len(WIKITEXT.encode()))
    assert boundary_density(docs) == pytest.approx(expected)
    assert boundary_density([np.zeros(10, dtype=np.int32)]) == 0.0
    with pytest.raises(ValueError):
        boundary_density([])
