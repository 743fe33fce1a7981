"""The word-boundary readings of `poslab analyze increments`: two scores per gap, the in-sample ceilings, and
the split of the held-out Chinese text by source. Planted increments and small prepared corpora built here;
no model is needed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from poslab.analysis.increments.held_out import gaps_within_windows, held_out_chinese, validation_source_kinds
from poslab.analysis.increments.readings import (
    ALL_SOURCES,
    boundary_rows,
    boundary_summary,
    boundary_table,
    gap_ceilings,
    gap_scores,
    source_kind,
)
from poslab.analysis.increments.render import boundary_csv, format_boundary_table
from poslab.analysis.increments.text import byte_categories, chinese_gaps
from poslab.analysis.stats import best_auc_given, roc_auc
from poslab.datamodules.corpora import decode_bytes, prepare_corpus
from poslab.errors import DataError
from tests.datamodules.test_corpora import write_jsonl

ZH = "人工智能是计算机科学的一个分支"  # jieba: 人工智能 / 是 / 计算机科学 / 的 / 一个 / 分支
WIKI = "北京是中国的首都。"  # only in the Wikipedia documents of the fixture below
NOVEL = "人工智能是计算机科学的一个分支。"  # only in its novel's chapters


def planted_text() -> tuple[str, list[int], np.ndarray, np.ndarray]:
    text = ZH + "，" + ZH[::-1] + "。" + ZH
    at, labels = chinese_gaps(text)
    return text, list(text.encode()), at, labels


# ----------------------------------------------------------------------------------------------- two scores


def test_a_signal_only_in_continuation_bytes_is_found_by_the_sum_not_the_lead_byte():
    text, tokens, at, labels = planted_text()
    deltas = np.ones(len(tokens))  # lead bytes know nothing of the words
    deltas[at + 1] = np.where(labels == 1, 3.0, 1.0)  # a word start shows in the first continuation byte only
    deltas[at + 2] = np.where(labels == 1, 0.5, 1.0)  # and less in the second: the sum still goes up
    scores = gap_scores(tokens, deltas, at)
    assert roc_auc(scores["char"][0], labels) == 1.0
    assert roc_auc(scores["lead"][0], labels) == 0.5
    rows = boundary_table(tokens, np.stack([deltas, np.ones(len(tokens))]), at, labels)
    auc = {(r.reading, r.layer): r.auc for r in rows}
    assert (auc["char", "L0"], auc["lead", "L0"]) == (1.0, 0.5)
    assert auc["char", "L1"] == auc["lead", "L1"] == 0.5  # constant δ: chance


def test_the_scores_read_the_next_characters_bytes():
    text, tokens, at, _ = planted_text()
    deltas = np.arange(len(tokens), dtype=float)
    scores = gap_scores(tokens, deltas, at)
    assert scores["lead"][0].tolist() == at.tolist()
    assert scores["char"][0].tolist() == (3 * at + 3).tolist()  # at + (at + 1) + (at + 2)
    assert set(byte_categories(tokens)[at].tolist()) == {"zh_lead"}


def test_gap_offsets_must_sit_between_two_three_byte_characters():
    tokens = list("a人工".encode())
    with pytest.raises(ValueError, match="three-byte"):
        gap_scores(tokens, np.ones(len(tokens)), [1])  # no character before 人
    with pytest.raises(ValueError, match="no room"):
        gap_scores(tokens, np.ones(len(tokens)), [6])  # past the end


# ----------------------------------------------------------------------------------------------- ceilings


def test_best_auc_given_a_key_by_hand():
    # key 1: boundaries 1, 1, 0 (rate 2/3); key 2: 1, 0, 0, 0 (rate 1/4). Ordered by rate, of the 3 x 4
    # (boundary, non-boundary) pairs key 1's 2 boundaries beat key 2's 3 non-boundaries (6 pairs), pairs
    # inside a key tie (2 x 1 + 1 x 3 pairs, half each: 2.5), key 2's boundary loses to key 1's non-boundary:
    # (6 + 2.5) / 12
    keys, labels = [1, 1, 1, 2, 2, 2, 2], [1, 1, 0, 1, 0, 0, 0]
    assert best_auc_given(keys, labels) == pytest.approx(8.5 / 12)
    assert roc_auc([2, 2, 2, 1, 1, 1, 1], labels) == pytest.approx(8.5 / 12)  # the same ordering, by hand
    assert roc_auc([1, 1, 1, 2, 2, 2, 2], labels) == pytest.approx(3.5 / 12)  # the other one
    assert best_auc_given([5] * 7, labels) == 0.5  # one key value: nothing to order
    assert best_auc_given([[1, 2], [1, 2], [1, 3], [1, 3]], [1, 1, 0, 0]) == 1.0  # a key per row
    assert math.isnan(best_auc_given([1, 2], [1, 1]))


def test_no_function_of_the_key_beats_the_ceiling():
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 6, size=300)
    labels = (rng.random(300) < np.array([0.1, 0.3, 0.35, 0.5, 0.6, 0.9])[keys]).astype(int)
    ceiling = best_auc_given(keys, labels)
    for _ in range(200):
        assert roc_auc(rng.normal(size=6)[keys], labels) <= ceiling + 1e-12
    assert ceiling > 0.7


def test_the_lead_byte_ceiling_of_characters_sharing_one_lead_byte_is_chance():
    # U+4E00..U+4FFF all start with E4: no function of the lead byte tells their gaps apart
    text = "一丁七万丈三上下不与丐丑专且世丘丙业丛东丝"
    at, labels = chinese_gaps(text)
    assert 0 < labels.sum() < len(labels)
    ceilings = gap_ceilings(list(text.encode()), at, labels)
    assert ceilings["lead_byte"] == 0.5
    assert ceilings["next_character"] >= ceilings["lead_byte"]


def test_ceilings_by_hand():
    # 是 (E6 98 AF), 人 (E4 BA BA), 个 (E4 B8 AA); planted labels: a word starts at 人 after 是 and at 是
    text = "是人个人是人个人"
    at, _ = chinese_gaps(text)
    labels = np.array([1, 0, 0, 1, 1, 0, 0])  # next: 人 个 人 是 人 个 人; previous: 是 人 个 人 是 人 个
    ceilings = gap_ceilings(list(text.encode()), at, labels)
    # lead byte: E6 (1 gap, a start) above E4 (2 starts of 6): 4 pairs won, 2 x 4 tied, of 3 x 4
    assert ceilings["lead_byte"] == pytest.approx((4 + 0.5 * 8) / 12)
    # next character: 是 (1 of 1) > 人 (2 of 4) > 个 (0 of 2): 4 + 0.5 x 4 + 4 of 12
    assert ceilings["next_character"] == pytest.approx((4 + 2 + 4) / 12)
    # previous character and lead byte: (是, E4) and (人, E6) are starts, (人, E4) and (个, E4) are not
    assert ceilings["previous_character_and_lead_byte"] == 1.0
    rows = boundary_table(list(text.encode()), np.ones(3 * len(text)), at, labels)
    assert {r.reading: r.values for r in rows if not r.layer} == {
        "lead_byte": 2,  # E4, E6
        "next_character": 3,  # 人, 个, 是
        "previous_character_and_lead_byte": 4,
    }
    assert {r.values for r in rows if r.layer} == {None}
    assert "| all | 7 | 3 | 0.667 (2) | 0.833 (3) | 1.000 (4) |" in format_boundary_table(rows)


def test_a_byte_only_score_at_the_lead_byte_reaches_at_most_the_lead_byte_ceiling():
    text, tokens, at, labels = planted_text()
    rates = {b: labels[np.asarray(tokens)[at] == b].mean() for b in set(np.asarray(tokens)[at].tolist())}
    deltas = np.array([rates.get(b, 1.0) for b in tokens])  # δ a function of the byte: the best such one
    rows = boundary_table(tokens, deltas, at, labels, layer_names=["shared"])
    by = {(r.reading, r.layer): r.auc for r in rows}
    assert by["lead", "shared"] == pytest.approx(by["lead_byte", ""])
    assert by["char", "shared"] <= by["next_character", ""] + 1e-12


# ----------------------------------------------------------------------------------------------- the table


def test_boundary_table_splits_the_gaps_by_source():
    text, tokens, at, labels = planted_text()
    sources = np.where(np.arange(len(at)) < 10, "novels", "wikipedia")
    deltas = np.where(np.isin(np.arange(len(tokens)), at[labels == 1]), 2.0, 1.0)
    deltas[at[10:]] = 1.0  # the Wikipedia gaps carry no signal
    rows = boundary_table(tokens, deltas, at, labels, sources)
    assert list(dict.fromkeys(r.subset for r in rows)) == ["wikipedia", "novels", ALL_SOURCES]  # report order
    summary = boundary_summary(rows)
    assert summary["novels"]["gaps"] == 10 and summary["wikipedia"]["gaps"] == len(at) - 10
    assert summary[ALL_SOURCES]["gaps"] == len(at)
    assert summary["novels"]["word_starts"] == labels[:10].sum()
    assert summary[ALL_SOURCES]["word_starts"] == labels.sum()
    assert summary["novels"]["auc"]["lead"]["L0"] == 1.0
    assert summary["wikipedia"]["auc"]["lead"]["L0"] == 0.5
    assert 0.5 < summary[ALL_SOURCES]["auc"]["lead"]["L0"] < 1.0
    assert summary["novels"]["ceilings"]["lead_byte"] == pytest.approx(
        gap_ceilings(tokens, at[:10], labels[:10])["lead_byte"]
    )
    text_table = format_boundary_table(rows)
    assert "| novels | 10 | " in text_table and "| L0 | 0.500 | " in text_table
    assert "wikipedia: lead | wikipedia: char | novels: lead" in text_table
    csv_lines = boundary_csv(rows).splitlines()
    assert csv_lines[0] == "subset,reading,layer,gaps,word_starts,auc,values"
    assert f"novels,lead_byte,,10,{labels[:10].sum()}," in boundary_csv(rows)
    assert len(csv_lines) == 1 + 3 * (2 + 3)  # per subset: two scores of one layer, three ceilings


def test_boundary_table_without_sources_and_a_subset_of_one_class():
    text, tokens, at, labels = planted_text()
    rows = boundary_table(tokens, np.ones(len(tokens)), at, labels)
    assert {r.subset for r in rows} == {ALL_SOURCES}
    one_class = np.where(labels == 1, "wikipedia", "novels")
    summary = boundary_summary(boundary_table(tokens, np.ones(len(tokens)), at, labels, one_class))
    assert summary["wikipedia"]["auc"]["lead"]["L0"] is None  # undefined: no non-boundary there
    assert "| – |" in format_boundary_table(boundary_table(tokens, np.ones(len(tokens)), at, labels, one_class))
    with pytest.raises(ValueError, match="sources"):
        boundary_table(tokens, np.ones(len(tokens)), at, labels, one_class[:-1])


def test_the_boundary_rows_come_back_from_the_summary_json():
    text, tokens, at, labels = planted_text()
    one_class = np.where(labels == 1, "wikipedia", "novels")  # an undefined AUC (NaN, written as null) in each
    deltas = np.stack([np.arange(len(tokens)) % 7 / 3, np.ones(len(tokens))])
    rows = boundary_table(tokens, deltas, at, labels, one_class)
    back = boundary_rows(json.loads(json.dumps(boundary_summary(rows))))
    assert [repr(r) for r in back] == [repr(r) for r in rows]  # repr: NaN equal to NaN, floats to every digit
    assert any(math.isnan(r.auc) for r in back)


def test_source_kind_rule():
    assert source_kind("/data/zhwiki/zhwiki_sample_simplified.jsonl", "jsonl") == "wikipedia"
    assert source_kind("wikimedia/wikipedia", "hub") == "wikipedia"
    assert source_kind("/data/zh_novels/三国演义.txt", "text") == "novels"
    assert source_kind("/data/zh/news.jsonl", "jsonl") == "other"


def test_gaps_within_windows_drop_a_character_cut_by_a_window():
    # windows of 8 tokens start at 0, 8, 16: a character whose bytes include one of them is left out
    at = np.array([3, 6, 9, 12, 15])
    assert gaps_within_windows(at, 18, 8).tolist() == [True, False, True, True, False]


# ----------------------------------------------------------------------------------------------- sources


def two_source_corpus(data_dir):
    write_jsonl(data_dir / "zh" / "zhwiki_tiny.jsonl", [f"{WIKI}第{i}条。\n\n{WIKI}" for i in range(20)])
    novel = data_dir / "zh" / "novel.txt"
    novel.write_text("".join(f"第{i}回 标题\n\n{NOVEL}第{i}段。\n\n{NOVEL}\n\n" for i in range(40)))
    return {
        "name": "tiny_zh",
        "validation_fraction": 0.2,
        "groups": {
            "zh": {
                "local": [
                    {"pattern": "zh/*.jsonl"},
                    {"pattern": "zh/*.txt", "format": "text", "document_start": "^第.{1,8}回"},
                ]
            }
        },
    }


def test_each_held_out_document_gets_the_source_of_its_file(tmp_path):
    corpus = two_source_corpus(tmp_path / "data")
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    kinds, files = validation_source_kinds(corpus, tmp_path / "data", group)
    assert sorted(files.values()) == ["novels", "wikipedia"]
    split = group.splits["validation"]
    seen = set()
    for ordinal, start, stop in split.document_spans():
        document = decode_bytes(np.asarray(split.tokens[start:stop])).decode()
        assert kinds[ordinal] == ("wikipedia" if WIKI in document else "novels"), document
        seen.add(kinds[ordinal])
    assert seen == {"wikipedia", "novels"}  # the fixture holds out documents of both

    text, byte_kinds, documents = held_out_chinese(split, kinds, max_bytes=10**9)
    assert text == decode_bytes(np.asarray(split.tokens)).decode()  # the text held_out_text gives
    assert len(byte_kinds) == len(text.encode())
    wiki = bytes(np.frombuffer(text.encode(), dtype=np.uint8)[byte_kinds == "wikipedia"]).decode()
    assert wiki and set(wiki.replace(WIKI, "")) <= set("第条。0123456789\n")  # only Wikipedia's text
    assert NOVEL not in wiki
    assert sum(documents.values()) == group.meta["splits"]["validation"]["documents"]
    at, labels = chinese_gaps(text)
    summary = boundary_summary(
        boundary_table(list(text.encode()), np.ones(len(text.encode())), at, labels, byte_kinds[at])
    )
    assert summary["wikipedia"]["gaps"] + summary["novels"]["gaps"] == summary[ALL_SOURCES]["gaps"] == len(at)
    assert summary["wikipedia"]["gaps"] > 0 and summary["novels"]["gaps"] > 0


def test_held_out_text_cut_at_max_bytes_keeps_its_sources(tmp_path):
    corpus = two_source_corpus(tmp_path / "data")
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    kinds, _ = validation_source_kinds(corpus, tmp_path / "data", group)
    split = group.splits["validation"]
    text, byte_kinds, documents = held_out_chinese(split, kinds, max_bytes=100)
    assert text == decode_bytes(np.asarray(split.tokens[:100])).decode("utf-8", errors="ignore")
    assert len(byte_kinds) == len(text.encode()) and sum(documents.values()) >= 1


def test_changed_files_stop_the_split_by_source_with_one_message(tmp_path):
    corpus = two_source_corpus(tmp_path / "data")
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    write_jsonl(tmp_path / "data" / "zh" / "zhwiki_tiny.jsonl", [f"{WIKI}{i}" for i in range(20)])  # shorter
    with pytest.raises(DataError, match="cannot tell which source") as error:
        validation_source_kinds(corpus, tmp_path / "data", group)
    assert "--zh-text" in str(error.value) and "\n" not in str(error.value)


def test_a_prepared_cache_is_not_changed_by_the_split(tmp_path):
    corpus = two_source_corpus(tmp_path / "data")
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    before = {p.name: p.stat().st_mtime_ns for p in group.directory.iterdir()}
    validation_source_kinds(corpus, tmp_path / "data", group)
    assert {p.name: p.stat().st_mtime_ns for p in group.directory.iterdir()} == before
