"""Small corpora split predictably: at least one held-out document whenever there are two or more, a single
document split by bytes (its tail, as nanoGPT), validation_fraction the share of tokens as nearly as documents
allow, and the log, meta.json and results.json (datamodule.describe) saying what came out."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from poslab.datamodules.corpora import SPLIT_BY_BYTES, decode_bytes, prepare_corpus
from poslab.running.builders import build_datamodule
from tests.conftest import compose_config


def folder_of(tmp_path: Path, sizes: list[int]) -> Path:
    folder = tmp_path / "small"
    folder.mkdir()
    for i, size in enumerate(sizes):
        sentence = f"File {i} says a thing. "
        (folder / f"f{i:02d}.txt").write_text((sentence * (size // len(sentence) + 1))[:size])
    return folder


def corpus_of(path: Path, tmp_path: Path, *extra: str) -> dict:
    cfg = compose_config(
        ["corpus=local", f"corpus.path={path}", f"paths.cache_dir={tmp_path / 'cache'}", *extra], tmp_path
    )
    return OmegaConf.to_container(cfg.corpus, resolve=True)


def shares(group) -> tuple[int, int, float]:
    s = group.meta["splits"]
    return (
        s["train"]["documents"],
        s["validation"]["documents"],
        s["validation"]["tokens"] / (s["train"]["tokens"] + s["validation"]["tokens"]),
    )


@pytest.mark.parametrize("n, fraction", [(2, 0.05), (3, 0.05), (3, 0.34), (15, 0.05), (15, 0.2)])
def test_two_or_more_documents_always_hold_one_out_and_never_all(tmp_path, n, fraction):
    folder = folder_of(tmp_path, [2000] * n)
    corpus = corpus_of(folder, tmp_path, f"corpus.validation_fraction={fraction}")
    (group,) = prepare_corpus(corpus, tmp_path, tmp_path / "cache")
    train, validation, share = shares(group)
    assert train + validation == n and validation >= 1 and train >= 1
    # as nearly as documents allow: no other whole number of these equal documents comes closer to the fraction
    assert abs(validation - fraction * n) <= 0.5 or validation == 1


def test_validation_fraction_is_the_share_of_tokens_as_nearly_as_documents_allow(tmp_path, caplog):
    sizes = [300, 5000, 800, 12000, 1500, 700, 2500, 4000, 900, 3300, 600, 7000, 1200, 2000, 450]
    folder = folder_of(tmp_path, sizes)
    with caplog.at_level(logging.INFO, logger="poslab"):
        (group,) = prepare_corpus(
            corpus_of(folder, tmp_path, "corpus.validation_fraction=0.2"), tmp_path, tmp_path / "c"
        )
    train, validation, share = shares(group)
    assert 1 <= validation < 15 and abs(share - 0.2) < 0.02, (validation, share)
    assert group.meta["split"]["rule"] == "documents"
    assert group.meta["split"]["validation_token_share"] == pytest.approx(share)
    said = [
        r.getMessage() for r in caplog.records if "validation" in r.getMessage() and "of the tokens" in r.getMessage()
    ]
    assert said and f"{validation} of 15 documents" in said[0] and f"{100 * share:.1f}%" in said[0], said
    # the same files give the same split (a fresh cache)
    (again,) = prepare_corpus(corpus_of(folder, tmp_path, "corpus.validation_fraction=0.2"), tmp_path, tmp_path / "d")
    assert again.meta["split"] == group.meta["split"]


def test_a_single_document_is_split_by_bytes_its_tail_held_out(tmp_path, caplog):
    book = tmp_path / "book.txt"
    book.write_text("".join(f"Line {i} of the one long document, ünïcode too.\n" for i in range(2000)))
    cfg = compose_config(
        [
            "corpus=local",
            f"corpus.path={book}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "corpus.validation_fraction=0.1",
            "task.context_length=32",
            "task.val_windows=2",
        ],
        tmp_path,
    )
    datamodule = build_datamodule(cfg)
    with caplog.at_level(logging.INFO, logger="poslab"):
        datamodule.setup()
    (group,) = datamodule.groups
    train, validation, share = shares(group)
    assert (train, validation) == (1, 1) and abs(share - 0.1) < 0.005
    head = decode_bytes(np.asarray(group.splits["train"].tokens)).decode()
    tail = decode_bytes(np.asarray(group.splits["validation"].tokens)).decode()
    assert head + tail == book.read_text()  # the tail, in order: nothing lost or repeated
    split = datamodule.describe()["split"]["main"]  # what results.json records
    assert split["rule"] == "tail" and split["validation_fraction"] == 0.1
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "one document" in said and "split by bytes" in said
    assert "/main: 1 document," in said  # its tail is not a second document
    (listed,) = group.meta["source_files"]["listing"]
    assert listed["split"] == SPLIT_BY_BYTES  # not "by document"
