"""corpus=local reads data in the format they are in: a file whose extension names a structured format (jsonl,
parquet) under another declared corpus.format stops the run with one sentence naming the format to give; a
folder of another format's files says which corpus.format reads them; empty files are counted and logged."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from poslab.datamodules.corpora import SourceGroup, decode_bytes, prepare_corpus, resolve_group
from poslab.errors import ConfigError, DataError
from poslab.running.builders import build_datamodule
from tests.conftest import compose_config, run_train
from tests.datamodules.test_corpora import write_jsonl


def jsonl_folder(root: Path, files: int = 4, per_file: int = 10) -> Path:
    folder = root / "wiki"
    for f in range(files):
        texts = [f"Anarchism {f}-{i} is a political philosophy.\n\nIt says {i} things." for i in range(per_file)]
        write_jsonl(folder / f"part{f}.jsonl", texts)
    return folder


def local(path: Path | str, tmp_path: Path, *extra: str) -> dict:
    cfg = compose_config(
        ["corpus=local", f"corpus.path={path}", f"paths.cache_dir={tmp_path / 'cache'}", *extra], tmp_path
    )
    return OmegaConf.to_container(cfg.corpus, resolve=True)


def test_a_jsonl_glob_under_the_default_text_format_stops_naming_corpus_format_jsonl(tmp_path):
    folder = jsonl_folder(tmp_path)
    cfg = compose_config(["corpus=local", f"corpus.path={folder}/*.jsonl"], tmp_path)
    with pytest.raises(ConfigError, match=r"4 \.jsonl files.*corpus\.format=jsonl") as error:
        build_datamodule(cfg)
    assert str(error.value).count(". ") == 0 and str(error.value).endswith(".")
    assert not (tmp_path / "cache").exists()


def test_a_folder_of_jsonl_under_the_default_format_points_at_corpus_format_jsonl(tmp_path):
    folder = jsonl_folder(tmp_path)
    cfg = compose_config(["corpus=local", f"corpus.path={folder}"], tmp_path)
    with pytest.raises(ConfigError, match=r"no \.txt file below it.*4 \.jsonl files.*corpus\.format=jsonl"):
        build_datamodule(cfg)


def test_a_declared_format_the_files_contradict_stops_in_every_corpus(tmp_path):
    jsonl_folder(tmp_path, files=1)
    group = SourceGroup.from_config("main", {"local": [{"pattern": "wiki/*.jsonl", "format": "text"}]})
    with pytest.raises(ConfigError, match=r"part0\.jsonl.*format=text.*jsonl"):
        resolve_group("named", group, tmp_path, "strict")
    (tmp_path / "notes.txt").write_text("plain text")
    group = SourceGroup.from_config("main", {"local": [{"pattern": "notes.txt", "format": "parquet"}]})
    with pytest.raises(ConfigError, match=r"notes\.txt.*format=parquet"):
        resolve_group("named", group, tmp_path, "strict")
    # auto (the named corpora's default) reads each file by its extension; text formats take any other extension
    for pattern, kind in (("wiki/*.jsonl", "auto"), ("notes.txt", "wikitext"), ("notes.txt", "python")):
        resolve_group(
            "named",
            SourceGroup.from_config("main", {"local": [{"pattern": pattern, "format": kind}]}),
            tmp_path,
            "strict",
        )


@pytest.mark.slow
def test_train_py_on_a_jsonl_glob_under_text_exits_2_with_one_sentence_and_leaves_nothing(tmp_path):
    folder = jsonl_folder(tmp_path)
    args = ["corpus=local", f"corpus.path={folder}/*.jsonl", "trainer.max_steps=2", f"paths.cache_dir={tmp_path}/cache"]
    result = run_train(args, tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "corpus.format=jsonl" in lines[0], result.stderr
    assert not (tmp_path / "cache").exists()
    assert list((tmp_path / "logs").rglob("*")) == [] if (tmp_path / "logs").exists() else True


def test_with_corpus_format_jsonl_the_documents_are_the_text_field(tmp_path):
    folder = jsonl_folder(tmp_path)
    (group,) = prepare_corpus(local(f"{folder}/*.jsonl", tmp_path, "corpus.format=jsonl"), tmp_path, tmp_path / "c")
    splits = group.meta["splits"]
    assert splits["train"]["documents"] + splits["validation"]["documents"] == 40
    text = decode_bytes(np.asarray(group.splits["train"].tokens)).decode()
    assert text.startswith("Anarchism") and '{"' not in text


def test_empty_files_are_counted_logged_and_recorded(tmp_path, caplog):
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(6):
        (folder / f"n{i}.txt").write_text(f"Note {i}. It says things.\n\nA second paragraph.\n" * 5)
    (folder / "empty.txt").write_text("")
    (folder / "blank.txt").write_text("\n  \n")
    with caplog.at_level(logging.INFO, logger="poslab"):
        (group,) = prepare_corpus(local(folder, tmp_path, "corpus.validation_fraction=0.4"), tmp_path, tmp_path / "c")
    sources = group.meta["source_files"]
    assert sources["files"] == 8 and sources["empty_files"] == 2
    assert sorted(Path(p).name for p in sources["empty_listing"]) == ["blank.txt", "empty.txt"]
    assert any("2 of 8 files" in r.getMessage() and "no document" in r.getMessage() for r in caplog.records)
    caplog.clear()  # the same corpus again, from its cache: the line is said again, once
    with caplog.at_level(logging.INFO, logger="poslab"):
        prepare_corpus(local(folder, tmp_path, "corpus.validation_fraction=0.4"), tmp_path, tmp_path / "c")
    assert [r.getMessage() for r in caplog.records if "no document" in r.getMessage()] == [
        m for m in [r.getMessage() for r in caplog.records] if "2 of 8 files" in m
    ]
    assert sum("2 of 8 files" in r.getMessage() for r in caplog.records) == 1


def test_a_split_left_empty_by_files_without_documents_names_those_files(tmp_path):
    """The 'files gave no document' warning came only after a successful write: when every file gave none, the
    refusal of the empty split did not say which."""
    folder = tmp_path / "data" / "notes"
    folder.mkdir(parents=True)
    (folder / "empty.txt").write_text("")
    (folder / "blank.txt").write_text("\n  \n")
    corpus = {"name": "notes", "validation_fraction": 0.3, "groups": {"main": {"local": [{"pattern": "notes/*.txt"}]}}}
    with pytest.raises(ConfigError) as info:
        prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert str(info.value) == (
        "corpus 'notes', group 'main': the train split is empty (train: 0 documents, 0 tokens; validation: 0 "
        "documents, 0 tokens); 2 of 2 files gave no document (empty or blank: blank.txt, empty.txt); give more "
        "documents (a text file is one document unless corpus.document_start splits it) or a larger "
        "corpus.validation_fraction."
    )
    assert [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_a_parquet_file_without_the_text_column_or_of_another_type_names_the_file_column_and_what_it_has(tmp_path):
    """A wrong column stopped with a bare IndexError, a column of numbers with an AttributeError."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "data" / "pq" / "a.parquet"
    path.parent.mkdir(parents=True)
    corpus = {"name": "pq", "validation_fraction": 0.3, "groups": {"main": {"local": [{"pattern": "pq/*.parquet"}]}}}
    texts = [f"Document {i}. It says things.\n\nA second paragraph." for i in range(6)]
    pq.write_table(pa.table({"id": list(range(6)), "content": texts}), path)
    fix = "point the source's field (corpus.field for corpus=local) at the column holding the text."
    with pytest.raises(DataError) as info:
        prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert str(info.value) == f"{path}: no column 'text' (its columns: 'id', 'content'); {fix}"
    pq.write_table(pa.table({"text": list(range(6))}), path)
    with pytest.raises(DataError) as info:
        prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert str(info.value) == f"{path}: the column 'text' holds int64 values, not strings (its columns: 'text'); {fix}"
    assert [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), path)  # strings, dictionary-encoded
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert sum(split["documents"] for split in group.meta["splits"].values()) == 6
