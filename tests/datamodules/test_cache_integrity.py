"""Issue 11 (4): the prepared cache checks itself and repairs what is bad; data files that cannot be read say which
file and where; a split shorter than one window says what to change. Each test shows the call (or command), the
exception or exit status, the message, and what is on disk afterwards."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from poslab.datamodules import corpora
from poslab.datamodules.corpora import BadCacheError, load_prepared, prepare_corpus
from poslab.datamodules.corpora import cache as prepared_cache  # its verified set and checksum, patched here
from poslab.datamodules.language import LanguageModelDataModule
from poslab.errors import ConfigError, DataError, PoslabError
from tests.conftest import run_train


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def web_corpus(data: Path, n_docs: int = 40, **settings) -> dict:
    write_jsonl(
        data / "web" / "docs.jsonl", [f"Document {i}. A sentence.\n\nAnother paragraph {i}." for i in range(n_docs)]
    )
    return {
        "name": "web",
        "validation_fraction": 0.2,
        "groups": {"main": {"local": [{"pattern": "web/*.jsonl"}]}},
        **settings,
    }


def cache_entries(cache: Path) -> list[str]:
    """What is in the cache directory, lock files aside; ``.bad-<time>`` suffixes shortened to ``.bad``."""
    names = [p.name for p in cache.iterdir() if not p.name.endswith(".lock")]
    return sorted(n.split(".bad-")[0] + ".bad" if ".bad-" in n else n for n in names)


@pytest.fixture(autouse=True)
def new_process(monkeypatch):
    """Each test starts as a fresh process would: no cache directory verified yet."""
    monkeypatch.setattr(prepared_cache, "_verified", set())


@pytest.fixture
def prepared(tmp_path):
    corpus = web_corpus(tmp_path / "data")
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    return corpus, group


def prepare_again(corpus: dict, tmp_path: Path) -> corpora.PreparedGroup:
    prepared_cache._verified.clear()  # a new process: the first use of the directory checks the checksums
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    return group


# ---- meta.json records every array's size and checksum ----------------------------------------------------------


def test_meta_json_records_each_array_size_dtype_length_and_checksum(prepared):
    _, group = prepared
    files = group.meta["files"]
    on_disk = sorted(p.name for p in group.directory.iterdir() if p.name != "meta.json")
    assert sorted(files) == on_disk and group.meta["checksum"] == "sha256"
    tokens = files["train.tokens.u16"]
    assert tokens["dtype"] == "<u2" and tokens["length"] == group.meta["splits"]["train"]["tokens"]
    assert tokens["bytes"] == 2 * tokens["length"] == (group.directory / "train.tokens.u16").stat().st_size
    assert len(tokens["sha256"]) == 64


# ---- a bad cache is moved aside and prepared again, with one log line naming the file ----------------------------


def test_zeroed_token_bytes_fail_the_checksum_and_the_cache_is_moved_aside_and_prepared_again(
    prepared, tmp_path, caplog
):
    corpus, group = prepared
    tokens = group.directory / "train.tokens.u16"
    good = tokens.read_bytes()
    with open(tokens, "r+b") as f:  # same size, zeroed content: only a checksum sees it
        f.seek(100)
        f.write(bytes(200))
    with pytest.raises(BadCacheError, match=r"train\.tokens\.u16 does not match its sha256 checksum in meta\.json"):
        load_prepared(group.directory, verify="always")
    with caplog.at_level(logging.WARNING, logger="poslab"):
        repaired = prepare_again(corpus, tmp_path)
    assert repaired.directory == group.directory and (repaired.directory / "train.tokens.u16").read_bytes() == good
    lines = [r.getMessage() for r in caplog.records if "moved it aside" in r.getMessage()]
    assert len(lines) == 1 and "train.tokens.u16 does not match its sha256 checksum" in lines[0], lines
    assert cache_entries(tmp_path / "cache") == [group.directory.name, group.directory.name + ".bad"]
    (aside,) = (tmp_path / "cache").glob("*.bad-*")
    assert (aside / "train.tokens.u16").read_bytes()[100:300] == bytes(200)  # the bad copy is kept for a look


def test_a_truncated_array_names_the_file_and_a_run_prepares_the_cache_again(prepared, tmp_path, caplog):
    corpus, group = prepared
    path = group.directory / "validation.sentence_starts.bin"
    size = path.stat().st_size
    os.truncate(path, size - 4)
    with pytest.raises(BadCacheError) as info:
        load_prepared(group.directory, verify="never")  # sizes are checked even without checksums
    assert str(info.value) == (
        f"prepared cache {group.directory}: validation.sentence_starts.bin has {size - 4:,} bytes where meta.json "
        f"says {size:,} (truncated?); delete the directory, or run again (a run moves a bad cache aside and prepares "
        f"it anew)."
    )
    with caplog.at_level(logging.WARNING, logger="poslab"):
        repaired = prepare_again(corpus, tmp_path)
    assert (repaired.directory / "validation.sentence_starts.bin").stat().st_size == size
    assert any("validation.sentence_starts.bin has" in r.getMessage() for r in caplog.records)
    assert cache_entries(tmp_path / "cache") == [group.directory.name, group.directory.name + ".bad"]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("delete", "meta.json is missing"),
        ("garbage", "meta.json cannot be read as JSON"),
        ("list", "meta.json holds a JSON list, not an object"),
        ("no files", "meta.json records no array sizes or checksums"),
        ("bad length", "meta.json lacks the array layout"),
    ],
)
def test_a_bad_or_missing_meta_json_names_it_and_every_rerun_repairs_once(prepared, tmp_path, damage, message):
    corpus, group = prepared
    meta_path = group.directory / "meta.json"
    meta = json.loads(meta_path.read_text())
    if damage == "delete":  # before: prepared again, then os.replace failed with 'Directory not empty' every time
        meta_path.unlink()
    elif damage == "garbage":
        meta_path.write_text('{"version": 4, "splits": ')
    elif damage == "list":
        meta_path.write_text("[]")
    elif damage == "no files":  # a version 4 cache written before sizes and checksums were recorded
        del meta["files"]
        meta_path.write_text(json.dumps(meta))
    else:
        meta["splits"]["train"]["tokens"] = "many"
        meta_path.write_text(json.dumps(meta))
    if damage in ("delete", "garbage", "list"):
        with pytest.raises(BadCacheError, match=message):
            load_prepared(group.directory)
    for _ in range(2):  # the first rerun repairs the cache, the second just uses it
        repaired = prepare_again(corpus, tmp_path)
        assert json.loads((repaired.directory / "meta.json").read_text())["files"] == group.meta["files"]
    assert cache_entries(tmp_path / "cache") == [group.directory.name, group.directory.name + ".bad"]


def test_only_the_latest_bad_copy_of_a_directory_is_kept(prepared, tmp_path):
    corpus, group = prepared
    for _ in range(3):
        (group.directory / "meta.json").unlink()
        prepare_again(corpus, tmp_path)
    assert cache_entries(tmp_path / "cache") == [group.directory.name, group.directory.name + ".bad"]


def test_checksums_are_computed_on_first_use_per_process_always_or_never_as_corpus_verify_cache_says(
    prepared, tmp_path, monkeypatch
):
    corpus, group = prepared
    digests: list[str] = []
    digest = prepared_cache._digest
    monkeypatch.setattr(prepared_cache, "_digest", lambda path: digests.append(path.name) or digest(path))
    n_files = len(group.meta["files"])
    prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")  # this process wrote it: already verified
    assert digests == []
    prepared_cache._verified.clear()  # another process: its first use checks every file, its later uses none
    for _ in range(3):
        prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert len(digests) == n_files
    for _ in range(2):
        prepare_corpus({**corpus, "verify_cache": "always"}, tmp_path / "data", tmp_path / "cache")
    assert len(digests) == 3 * n_files
    prepared_cache._verified.clear()
    prepare_corpus({**corpus, "verify_cache": "never"}, tmp_path / "data", tmp_path / "cache")
    assert len(digests) == 3 * n_files
    os.truncate(group.directory / "train.tokens.u16", 10)  # sizes are checked under never too
    repaired = prepare_corpus({**corpus, "verify_cache": "never"}, tmp_path / "data", tmp_path / "cache")[0]
    assert (repaired.directory / "train.tokens.u16").stat().st_size == group.meta["files"]["train.tokens.u16"]["bytes"]


def test_unknown_verify_cache_and_decode_errors_values_are_refused_with_the_allowed_ones(tmp_path):
    corpus = web_corpus(tmp_path / "data")
    with pytest.raises(ConfigError, match=r"corpus.verify_cache='sometimes' .* allowed: first_use .*, always .*never"):
        prepare_corpus({**corpus, "verify_cache": "sometimes"}, tmp_path / "data", tmp_path / "cache")
    with pytest.raises(ConfigError, match=r"corpus.decode_errors='ignore' .* allowed: strict .* or replace"):
        LanguageModelDataModule("lm", {**corpus, "decode_errors": "ignore"}, str(tmp_path / "data"), str(tmp_path))
    assert not (tmp_path / "cache").exists()


# ---- temporary directories of dead preparations -------------------------------------------------------------------


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid  # reaped: no such process now (pids are not reused this fast)


def test_temporary_directories_of_dead_processes_are_removed_and_those_of_live_ones_kept(prepared, tmp_path, caplog):
    corpus, group = prepared
    cache = tmp_path / "cache"
    dead, live = dead_pid(), os.getppid()
    for pid in (dead, live):
        tmp = cache / f"{group.directory.name}.tmp-{pid}"
        tmp.mkdir()
        (tmp / "train.tokens.u16").write_bytes(bytes(1000))
    with caplog.at_level(logging.INFO, logger="poslab"):
        prepare_corpus(corpus, tmp_path / "data", cache)
    assert cache_entries(cache) == sorted([group.directory.name, f"{group.directory.name}.tmp-{live}"])
    assert any(f".tmp-{dead}" in r.getMessage() and "no longer running" in r.getMessage() for r in caplog.records)


def test_a_failed_preparation_leaves_no_temporary_directory(tmp_path):
    data = tmp_path / "data"
    corpus = web_corpus(data)
    with open(data / "web" / "docs.jsonl", "a") as f:
        f.write('{"text": "unterminated\n')
    with pytest.raises(DataError):
        prepare_corpus(corpus, data, tmp_path / "cache")
    assert cache_entries(tmp_path / "cache") == []


def web_corpus_with_line(tmp_path: Path, n_docs: int, index: int, line: str) -> tuple[Path, dict, Path, list[str]]:
    """``web_corpus`` of ``n_docs`` documents under ``tmp_path/data`` with its JSONL line ``index`` replaced by
    ``line``: the data folder, the corpus, the file and its lines (to edit further)."""
    data = tmp_path / "data"
    corpus = web_corpus(data, n_docs=n_docs)
    path = data / "web" / "docs.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines[index] = line
    path.write_text("".join(lines))
    return data, corpus, path, lines


# ---- data files: malformed JSON lines, invalid UTF-8 ---------------------------------------------------------------


def test_a_malformed_jsonl_line_names_the_file_and_line(tmp_path):
    data, corpus, path, lines = web_corpus_with_line(tmp_path, 5, 2, '{"id": 2, "text": "broken\n')
    with pytest.raises(DataError) as info:
        prepare_corpus(corpus, data, tmp_path / "cache")
    assert str(info.value) == (
        f"{path}, line 3: not valid JSON (Invalid control character at column 26); each non-blank line of a "
        f"JSONL file must be one JSON object."
    )
    path.write_text('{"text": "fine"}\n[1, 2]\n')
    with pytest.raises(DataError, match=r"docs\.jsonl, line 2: a JSON list, not an object"):
        prepare_corpus(corpus, data, tmp_path / "cache")
    path.write_text('{"text": 7}\n')
    with pytest.raises(DataError, match=r"docs\.jsonl, line 1: the 'text' field is a JSON int, not a string"):
        prepare_corpus(corpus, data, tmp_path / "cache")


def test_a_jsonl_row_without_the_text_field_names_the_file_line_field_and_its_keys(tmp_path):
    """A wrong field name read every row as an empty document and ended in 'the train split is empty ... give more
    documents'; a row that lacks the field (a partial mismatch) was dropped silently. A present but empty (or null)
    field stays an empty document."""
    data, corpus, path, lines = web_corpus_with_line(
        tmp_path, 6, 4, '{"id": 4, "content": "the text under another key"}\n'
    )
    with pytest.raises(DataError) as info:
        prepare_corpus(corpus, data, tmp_path / "cache")
    assert str(info.value) == (
        f"{path}, line 5: the row has no 'text' field (its keys: 'id', 'content'); point the source's field "
        f"(corpus.field for corpus=local) at the key holding the text."
    )
    assert cache_entries(tmp_path / "cache") == []
    lines[4], lines[5] = '{"id": 4, "text": ""}\n', '{"id": 5, "text": null}\n'
    path.write_text("".join(lines))
    (group,) = prepare_corpus(corpus, data, tmp_path / "cache")
    assert sum(split["documents"] for split in group.meta["splits"].values()) == 4


def test_a_lone_surrogate_escape_stops_strict_at_its_line_and_replace_reads_it_as_u_fffd_counted(tmp_path):
    """Scraped text often holds half a UTF-16 pair as a JSON escape (an emoji cut in two). It stopped the
    preparation with a bare UnicodeEncodeError (\ud83d), or went in as the raw byte 0xFF under strict (\udcff, the
    codec's escaped byte), with nothing replaced."""
    data, corpus, path, lines = web_corpus_with_line(
        tmp_path, 10, 3, '{"id": 3, "text": "cut emoji \\ud83d here, escaped \\udcff byte."}\n'
    )
    with pytest.raises(DataError) as info:
        prepare_corpus(corpus, data, tmp_path / "cache")
    assert str(info.value) == (
        f"{path}, line 4: the 'text' field holds a lone surrogate escape (\\ud83d at character 10), half of a "
        f"UTF-16 pair such as an emoji cut in two, which no UTF-8 text can hold; fix the line, or set "
        f"corpus.decode_errors=replace to read each lone surrogate as U+FFFD (counted and logged)."
    )
    assert cache_entries(tmp_path / "cache") == []
    lines[3] = '{"id": 3, "text": "escaped \\udcff byte."}\n'
    path.write_text("".join(lines))
    with pytest.raises(DataError, match=r"line 4: the 'text' field holds a lone surrogate escape \(\\udcff at"):
        prepare_corpus(corpus, data, tmp_path / "cache")
    lines[3] = '{"id": 3, "text": "cut emoji \\ud83d here, escaped \\udcff byte, a pair \\ud83d\\ude00."}\n'
    path.write_text("".join(lines))
    (group,) = prepare_corpus({**corpus, "decode_errors": "replace"}, data, tmp_path / "cache")
    assert group.meta["decode"] == {"policy": "replace", "replaced": 2, "files": {str(path): 2}}
    text = b"".join(corpora.decode_bytes(np.asarray(s.tokens)) for s in group.splits.values())
    assert "cut emoji \ufffd here, escaped \ufffd byte, a pair \U0001f600.".encode() in text and b"\xff" not in text


@pytest.mark.slow
def test_train_py_with_a_malformed_jsonl_line_exits_2_with_one_message_and_leaves_no_cache(tmp_path):
    path = write_jsonl(tmp_path / "docs" / "a.jsonl", [f"Document {i}. " * 20 for i in range(30)])
    with open(path, "a") as f:
        f.write("{not json}\n")
    cache = tmp_path / "cache"
    args = ["corpus=local", f"corpus.path={path}", "corpus.format=jsonl", f"paths.cache_dir={cache}"]
    result = run_train([*args, "trainer.max_steps=1", "task.context_length=16"], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"{path}, line 31: not valid JSON (Expecting property name enclosed in double quotes" in result.stderr
    assert "Traceback" not in result.stderr
    assert not cache.exists() or [p.name for p in cache.iterdir() if ".tmp-" in p.name] == []


BAD = b"caf\xe9"  # Latin-1 'café': 0xE9 followed by 'n' is not UTF-8


@pytest.mark.parametrize(
    ("name", "source", "content", "offset", "line"),
    [
        ("docs.jsonl", {}, b'{"text": "one"}\n{"text": "' + BAD + b'n"}\n', 29, 2),
        ("notes.txt", {"format": "text"}, b"First line.\n\nSecond " + BAD + b"n line.\n", 23, 3),
        ("wiki.test.raw", {"format": "wikitext"}, b" = Title = \n\n Body " + BAD + b"n .\n", 22, 3),
        ("module.py", {"format": "python"}, b"# " + BAD + b"n\nx = 1\n", 5, 1),
    ],
)
def test_invalid_utf8_under_strict_names_the_file_and_byte_offset_in_every_format(
    tmp_path, name, source, content, offset, line
):
    path = tmp_path / "data" / "files" / name
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert content[offset] == 0xE9
    corpus = {
        "name": "mixed",
        "validation_fraction": 0.3,
        "groups": {"main": {"local": [{"pattern": f"files/{name}", **source}]}},
    }
    with pytest.raises(DataError) as info:
        prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")  # strict is the default
    assert str(info.value) == (
        f"{path} is not valid UTF-8 at byte offset {offset} (line {line}: invalid continuation byte); convert the "
        f"file to UTF-8, or set corpus.decode_errors=replace to read each invalid sequence as U+FFFD (counted and "
        f"logged)."
    )
    assert cache_entries(tmp_path / "cache") == []


def test_decode_errors_replace_counts_per_file_logs_and_records_a_total_in_meta_json(tmp_path, caplog):
    data = tmp_path / "data"
    corpus = web_corpus(data, n_docs=30)
    (data / "web" / "latin1.jsonl").write_bytes(b'{"text": "' + BAD + b"n " + BAD + b'n"}\n')
    (data / "web" / "notes.jsonl").write_bytes(b'{"text": "clean \xef\xbf\xbd text"}\n')  # a real U+FFFD: not counted
    with pytest.raises(DataError, match="latin1.jsonl is not valid UTF-8 at byte offset 13"):
        prepare_corpus(corpus, data, tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger="poslab"):
        (group,) = prepare_corpus({**corpus, "decode_errors": "replace"}, data, tmp_path / "cache")
    latin1 = str(data / "web" / "latin1.jsonl")
    assert group.meta["decode"] == {"policy": "replace", "replaced": 2, "files": {latin1: 2}}
    assert [r.getMessage() for r in caplog.records] == [
        f"web/main: 2 invalid UTF-8 sequences or lone surrogates read as U+FFFD in {latin1} "
        f"(corpus.decode_errors=replace; meta.json 'decode' counts each file)"
    ]
    text = b"".join(corpora.decode_bytes(np.asarray(s.tokens)) for s in group.splits.values())
    assert b"caf\xef\xbf\xbdn" in text  # each invalid byte is one U+FFFD
    (data / "web" / "latin1.jsonl").unlink()  # once the files are clean, strict and replace give the same text
    (strict,) = prepare_corpus(corpus, data, tmp_path / "cache")
    (replace,) = prepare_corpus({**corpus, "decode_errors": "replace"}, data, tmp_path / "cache")
    assert strict.directory != replace.directory  # but not the same cache: a replace cache never serves strict
    assert strict.meta["decode"] == {"policy": "strict", "replaced": 0, "files": {}}
    assert strict.meta["files"]["train.tokens.u16"] == replace.meta["files"]["train.tokens.u16"]


def test_a_utf8_character_cut_by_the_reading_chunk_is_not_an_error(tmp_path):
    from poslab.datamodules.codec import first_invalid_utf8

    path = tmp_path / "big.txt"
    path.write_bytes(b"a" * ((1 << 20) - 1) + "é".encode() + b"ok\n" + b"line\n\xff")
    assert first_invalid_utf8(path) == ((1 << 20) + 1 + 3 + 5, 3, "invalid start byte")


# ---- a split shorter than one window -----------------------------------------------------------------------------


def test_a_training_split_shorter_than_one_window_says_which_and_what_to_change(tmp_path):
    data = tmp_path / "data"
    write_jsonl(data / "train" / "a.jsonl", ["Short."])  # 7 tokens with the separator
    write_jsonl(data / "valid" / "b.jsonl", ["A longer validation document. " * 10])
    corpus = {
        "name": "tiny",
        "validation_fraction": 0.1,
        "groups": {
            "main": {"local": [{"pattern": "train/*", "split": "train"}, {"pattern": "valid/*", "split": "validation"}]}
        },
    }
    dm = LanguageModelDataModule("lm", corpus, str(data), str(tmp_path / "cache"), context_length=32)
    with pytest.raises(ConfigError) as info:  # before: RuntimeError in torch.randint at the first batch
        dm.setup()
        dm.train_windows.batch(0)
    assert isinstance(info.value, PoslabError) and str(info.value) == (
        "group 'main': the train split has 7 tokens, fewer than one training window of 33 "
        "(task.context_length=32 + 1); lower task.context_length, lower corpus.validation_fraction or give the "
        "corpus more data."
    )
