"""Analyses of learned position increments: byte categories, the category table, the picture, Chinese word
boundaries. Everything runs on hand-made bytes and planted increments, so no model is needed."""

from __future__ import annotations

import csv
import io
import itertools
import math

import numpy as np
import pytest
import torch

from poslab.analysis.increments import render
from poslab.analysis.increments import text as increments_text
from poslab.analysis.increments.readings import CategoryRow, boundary_auc, category_table, positions_from_deltas
from poslab.analysis.increments.render import (
    category_csv,
    character_label,
    format_category_table,
    plot_positions,
    positions_axis_label,
    positions_figure,
)
from poslab.analysis.increments.text import (
    SEPARATOR,
    SEPARATOR_CHAR,
    byte_categories,
    byte_offsets,
    chinese_gaps,
    decode_characters,
    jieba_word_starts,
)
from poslab.analysis.stats import roc_auc

torch.set_num_threads(1)

ZH = "人工智能是计算机科学的一个分支"  # jieba: 人工智能 / 是 / 计算机科学 / 的 / 一个 / 分支
ZH_WORD_STARTS = {0, 4, 5, 10, 11, 13}
MIXED = "我爱北京天安门，Hello世界。\n他来到了网易杭研大厦"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def cats(data: bytes | list[int]) -> list[str]:
    return byte_categories(list(data)).tolist()


# ----------------------------------------------------------------------------------------------- categories


def test_ascii_categories():
    assert cats(b"hello") == ["en_lower"] * 5
    assert cats(b"HELLO") == ["en_upper"] * 5
    assert cats(b"2024") == ["digit"] * 4
    assert cats(b" \t") == ["space"] * 2
    assert cats(b"\n") == ["newline"]
    assert cats(b".,!?;:-()'\"") == ["punct"] * 11
    assert cats(b"\r\x00\x7f") == ["other"] * 3
    assert cats(b"Hi, 5\n") == ["en_upper", "en_lower", "punct", "space", "digit", "newline"]


def test_every_category_name_is_listed_once_and_has_a_label():
    assert len(set(increments_text.CATEGORIES)) == len(increments_text.CATEGORIES) == 9
    assert set(increments_text.CATEGORY_LABELS) == set(increments_text.CATEGORIES)


def test_chinese_lead_bytes_and_their_two_continuation_bytes():
    data = ZH.encode("utf-8")
    assert len(data) == 3 * len(ZH)
    assert cats(data) == ["zh_lead", "zh_cont", "zh_cont"] * len(ZH)


def test_invalid_and_non_chinese_utf8_is_other():
    assert cats(b"\xff\xe4\x41") == ["other", "zh_lead", "en_upper"]  # a truncated lead is still a lead
    assert cats("é€😀".encode()) == ["other"] * (2 + 3 + 4)  # other lead bytes and their continuations
    assert cats(b"\x80\xbf") == ["other", "other"]  # continuation bytes with no lead
    assert cats("中".encode() + b"\x80") == ["zh_lead", "zh_cont", "zh_cont", "other"]  # one too many
    # the separator ends a sequence: the byte after it is a stray continuation
    assert cats([0xE4, 0xB8, SEPARATOR, 0xAD]) == ["zh_lead", "zh_cont", "other", "other"]


def test_categories_accept_a_torch_tensor():
    assert byte_categories(torch.tensor(list(b"aA"))).tolist() == ["en_lower", "en_upper"]


# ----------------------------------------------------------------------------------------------- the table


def planted() -> tuple[list[int], np.ndarray]:
    tokens = list(b"aab AB")
    per_byte = {ord("a"): 0.4, ord("b"): 0.6, ord(" "): 1.0, ord("A"): 2.0, ord("B"): 2.0}
    layer0 = np.array([per_byte[t] for t in tokens])
    return tokens, np.stack([layer0, 2 * layer0])


def test_category_table_means_and_ranges_over_byte_values():
    tokens, deltas = planted()
    rows = category_table(tokens, deltas)
    by = {(r.layer, r.category): r for r in rows}
    assert set(by) == {(layer, c) for layer in ("L0", "L1") for c in ("en_lower", "en_upper", "space")}
    lower = by["L0", "en_lower"]
    assert lower.count == 3
    assert lower.mean == pytest.approx((0.4 + 0.4 + 0.6) / 3)  # weighted by occurrences
    assert (lower.range_min, lower.range_max) == pytest.approx((0.4, 0.6))  # over byte values, not occurrences
    upper = by["L0", "en_upper"]
    assert (upper.count, upper.mean, upper.range_min, upper.range_max) == (2, 2.0, 2.0, 2.0)
    assert by["L1", "en_lower"].mean == pytest.approx(2 * lower.mean)
    assert [r.category for r in rows[:3]] == ["en_lower", "en_upper", "space"]  # CATEGORIES order


def test_category_table_accepts_one_row_torch_and_names():
    tokens, deltas = planted()
    rows = category_table(torch.tensor(tokens), torch.tensor(deltas[0], dtype=torch.bfloat16), ["shared"])
    assert {r.layer for r in rows} == {"shared"}
    with pytest.raises(ValueError):
        category_table(tokens, deltas[:, :-1])


def test_format_category_table_prints_the_writeup_lines():
    tokens, deltas = planted()
    text = format_category_table(category_table(tokens, deltas))
    assert text.splitlines() == [
        "Learned Increment δ (L0)",
        "English (lowercase) 0.40–0.60 (mean 0.47)",
        "Space and tab 1.00–1.00 (mean 1.00)",
        "English (uppercase) 2.00–2.00 (mean 2.00)",
        "Learned Increment δ (L1)",
        "English (lowercase) 0.80–1.20 (mean 0.93)",
        "Space and tab 2.00–2.00 (mean 2.00)",
        "English (uppercase) 4.00–4.00 (mean 4.00)",
    ]


def test_category_csv_round_trips():
    tokens, deltas = planted()
    rows = category_table(tokens, deltas / 3)  # floats that need all their digits
    written = category_csv(rows)
    assert written.splitlines()[0] == "layer,category,count,mean,range_min,range_max"
    read = [
        CategoryRow(
            r["layer"], r["category"], int(r["count"]), *(float(r[k]) for k in ("mean", "range_min", "range_max"))
        )
        for r in csv.DictReader(io.StringIO(written))
    ]
    assert read == rows


# ----------------------------------------------------------------------------------------------- characters


def test_decode_characters_spans_and_bad_bytes():
    assert decode_characters(list("人A".encode())) == [("人", 0, 2), ("A", 3, 3)]
    assert decode_characters(list(b"\xff\xe4\x41")) == [("\ufffd", 0, 0), ("\ufffd", 1, 1), ("A", 2, 2)]
    assert decode_characters(list(b"\xe4\xb8A")) == [("\ufffd", 0, 0), ("\ufffd", 1, 1), ("A", 2, 2)]
    assert [c for c, _, _ in decode_characters(list(b"\xc0\xaf"))] == ["\ufffd", "\ufffd"]  # overlong '/'
    assert decode_characters([ord("a"), SEPARATOR]) == [("a", 0, 0), (SEPARATOR_CHAR, 1, 1)]
    chars = decode_characters(list(MIXED.encode()))
    assert "".join(c for c, _, _ in chars) == MIXED
    assert [first for _, first, _ in chars] == byte_offsets(MIXED)


def test_byte_offsets():
    assert byte_offsets("a人b") == [0, 1, 4]
    assert byte_offsets("") == []


def test_positions_are_running_sums():
    assert positions_from_deltas([1.0, 0.5, 2.0]).tolist() == [[1.0, 1.5, 3.5]]


def test_chinese_is_drawn_as_code_points_without_a_cjk_font(monkeypatch):
    monkeypatch.setattr(render, "cjk_font_path", lambda: None)
    assert character_label("人") == ("U+4EBA", None, True)
    assert character_label("a") == ("a", None, False)
    assert character_label("\n")[0] == "↵"


@pytest.mark.parametrize("text", ["Artificial intelligence is a branch of computer science.", ZH + "。\n"])
def test_plot_positions_writes_a_png(tmp_path, text):
    tokens = list(text.encode())
    deltas = np.where(byte_categories(tokens) == "zh_lead", 2.0, 0.8)
    positions = positions_from_deltas(np.stack([deltas, 1.5 * deltas]))
    path = plot_positions(text, tokens, positions, tmp_path / "positions.png", title="example")
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert path.stat().st_size > 1000


def test_plot_positions_without_a_cjk_font_and_with_bad_bytes(tmp_path, monkeypatch):
    monkeypatch.setattr(render, "cjk_font_path", lambda: None)
    tokens = list("分支 $5".encode()) + [0xFF, SEPARATOR]
    text = "分支 $5\ufffd" + SEPARATOR_CHAR
    path = plot_positions(text, tokens, positions_from_deltas(np.ones(len(tokens))), tmp_path / "p.png")
    assert path.read_bytes().startswith(PNG_MAGIC)
    with pytest.raises(ValueError):
        plot_positions("not the text", tokens, np.ones((1, len(tokens))), tmp_path / "q.png")


# ----------------------------------------------------------------------------------------------- ROC-AUC


def test_roc_auc_by_hand():
    assert roc_auc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert roc_auc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([0.5, 0.5, 0.5, 0.5], [0, 1, 0, 1]) == 0.5
    assert roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == 0.75  # 3 of 4 pairs won
    assert roc_auc([0.1, 0.5, 0.5, 0.9], [0, 1, 0, 1]) == 0.875  # (1 + 0.5 + 2) / 4, the tie counts half
    assert math.isnan(roc_auc([0.1, 0.2], [1, 1]))


def test_roc_auc_matches_counting_pairs():
    rng = np.random.default_rng(0)
    scores = rng.integers(0, 5, size=40).astype(float)  # many ties
    labels = rng.integers(0, 2, size=40)
    pos, neg = scores[labels == 1], scores[labels == 0]
    pairs = [1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg)]
    assert roc_auc(scores, labels) == pytest.approx(sum(pairs) / len(pairs))


# ----------------------------------------------------------------------------------------------- boundaries


def test_chinese_gaps_skip_punctuation_and_english():
    at, labels = chinese_gaps(ZH)
    assert at.tolist() == [3 * k for k in range(1, len(ZH))]
    assert labels.tolist() == [int(k in ZH_WORD_STARTS) for k in range(1, len(ZH))]
    at, labels = chinese_gaps(MIXED, hmm=True)
    assert len(at) == 6 + 1 + 9  # 我爱北京天安门 | 世界 | 他来到了网易杭研大厦
    offsets = byte_offsets(MIXED)
    assert offsets[MIXED.index("世") + 1] in at.tolist() and offsets[MIXED.index("H")] not in at.tolist()
    # jieba's HMM joins the unknown word 杭研; without it 研 starts a word
    yan = at.tolist().index(offsets[MIXED.index("研")])
    assert labels[yan] == 1 - chinese_gaps(MIXED, hmm=False)[1][yan] == 0


def test_boundary_auc_on_planted_increments():
    text = ZH + "，" + MIXED
    tokens = list(text.encode())
    offsets = byte_offsets(text)
    starts = jieba_word_starts(text)
    boundary = np.zeros(len(tokens), dtype=bool)
    boundary[[offsets[k] for k in starts]] = True
    cats = byte_categories(tokens)
    high_at_starts = np.where(boundary, 3.0, 1.0)
    high_at_starts[cats == "zh_cont"] = 5.0  # continuation bytes are not what is scored
    aucs = boundary_auc(text, tokens, torch.tensor(np.stack([high_at_starts, 4.0 - high_at_starts])))
    assert aucs == pytest.approx([1.0, 0.0])
    assert boundary_auc(text, tokens, np.ones(len(tokens))) == [0.5]


def test_boundary_auc_is_nan_with_one_class_and_checks_tokens():
    assert math.isnan(boundary_auc("北京", list("北京".encode()), np.ones(6))[0])  # one word, no boundary
    with pytest.raises(ValueError):
        boundary_auc("北京", list("南京".encode()), np.ones(6))


def test_the_positions_picture_of_plain_rope_labels_its_axis_with_the_token_index():
    """`analyze increments` on a plain RoPE run: its positions are the token index (counted, δ = 1), and the picture's
    x axis says so; only an encoding that learns its positions (increments) has an axis of learned positions."""
    from poslab.analysis.plotting import plt

    text = "Position in attention."
    tokens = list(text.encode("utf-8"))
    rope = positions_figure(
        text,
        tokens,
        positions_from_deltas(np.ones((1, len(tokens)))),
        layer_names=["shared"],
        position_label=positions_axis_label(learned=False, unit_steps=True),
    )
    label = rope.axes[-1].get_xlabel()
    assert "token index" in label and "learned" not in label, label
    learned = positions_figure(
        text,
        tokens,
        positions_from_deltas(np.full((1, len(tokens)), 0.7)),
        position_label=positions_axis_label(learned=True, unit_steps=False),
    )
    assert learned.axes[-1].get_xlabel().startswith("learned position"), learned.axes[-1].get_xlabel()
    assert not positions_axis_label(learned=False, unit_steps=False).startswith("learned position")
    plt.close(rope)
    plt.close(learned)
