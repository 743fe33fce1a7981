"""corpus=local: any file, folder or glob of text is a corpus (train, analyse, name the run after it)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from poslab.datamodules.corpora import local_corpus_name, local_pattern, prepare_corpus
from poslab.errors import ConfigError
from poslab.running.builders import build_datamodule, build_module
from tests.conftest import compose_config, run_train
from tests.datamodules.test_corpora import write_jsonl

SMALL = [  # a model, context and batch small enough for a few CPU seconds
    "model.n_layers=2",
    "model.d_model=48",
    "model.n_heads=2",
    "model.mlp_hidden=96",
    "task.context_length=64",
    "task.batch_size=4",
    "task.val_every_n_steps=5",
    "task.val_windows=2",
    "~logger",
    "~callbacks",
]


def text_folder(root: Path, n: int = 40) -> Path:
    """A folder of .txt files (in a subfolder too), each a document of several paragraphs and sentences."""
    folder = root / "my_notes"
    for i in range(n):
        path = folder / ("deeper" if i % 3 else "") / f"note{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        paragraphs = [f"Note {i}, paragraph {p}. It says {p * i} things. Then it stops." for p in range(5)]
        path.write_text("\n\n".join(paragraphs) + "\n")
    (folder / "ignored.md").write_text("not a .txt file")
    return folder


def local(path: Path | str, *extra: str, tmp_path: Path) -> list[str]:
    # validation_fraction: enough held-out documents in small folders (and for the hRoPE analyses)
    cache = f"paths.cache_dir={tmp_path / 'cache'}"
    return ["corpus=local", f"corpus.path={path}", cache, "corpus.validation_fraction=0.3", *extra]


@pytest.mark.slow
def test_a_folder_of_text_trains_hrope_axial_names_the_run_and_is_analysed(tmp_path):
    from poslab.cli import main
    from poslab.running.training import run

    folder = text_folder(tmp_path)
    run_dir = tmp_path / "run"
    cfg = compose_config(
        [*local(folder, "encoding=hrope_axial", "trainer.max_steps=5", tmp_path=tmp_path), *SMALL], run_dir
    )
    assert cfg.corpus.name == "my_notes" and cfg.name == "lm_my_notes_hrope_axial"
    results = run(cfg)
    assert np.isfinite(results["figures"]["val_loss"]) and results["steps"] == 5
    saved = json.loads((run_dir / "results.json").read_text())
    assert saved["corpus"] == "my_notes" and saved["config"]["corpus"]["name"] == "my_notes"
    # every .txt below the folder is one document; the .md file is not the format
    groups = saved["groups"]["main"]
    assert groups["train"]["documents"] + groups["validation"]["documents"] == 40
    assert saved["sources"]["main"]["files"] == 40
    assert saved["config"]["corpus"]["groups"]["main"]["local"][0]["pattern"] == str(folder / "**" / "*.txt")
    # paragraphs and sentences come from the default segmentation (blank lines): 5 paragraphs a document
    assert groups["train"]["paragraphs"] == 5 * groups["train"]["documents"]
    out = tmp_path / "an"
    small = ["--documents", "6", "--min-pairs", "5", "--bootstrap", "20"]
    assert main(["analyze", "hrope", str(run_dir), "--output-dir", str(out), *small]) == 0
    assert "| hrope_axial |" in (out / "hrope_table.md").read_text()


@pytest.mark.parametrize("encoding", ["none", "rope", "alibi", "hrope_axial", "rand_axial", "period_axial"])
def test_every_encoding_builds_on_a_local_corpus(tmp_path, encoding):
    folder = text_folder(tmp_path, n=20)
    cfg = compose_config([*local(folder, f"encoding={encoding}", tmp_path=tmp_path), *SMALL], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    assert module.model.encoding.name == encoding
    if encoding in ("rand_axial", "period_axial"):  # the density the controls match comes from the folder
        assert datamodule.paragraph_density > 0
        assert module.model.encoding.paragraph_density == pytest.approx(datamodule.paragraph_density)


@pytest.mark.slow
def test_a_path_matching_nothing_stops_train_py_with_one_sentence_and_exit_2(tmp_path):
    result = run_train(["corpus=local", "corpus.path=/nonexistent/x", "trainer.max_steps=2"], tmp_path)
    assert result.returncode == 2, result.stderr
    # one sentence, before anything is built (the datamodule checks the path; no Lightning line before it)
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "corpus.path=/nonexistent/x matches nothing" in lines[0], result.stderr
    assert lines[0].count(". ") == 0 and lines[0].endswith(".")
    assert "Traceback" not in result.stderr
    # the run stopped before it trained: the directory Hydra made for it (holding only Hydra's files) is gone
    assert list((tmp_path / "logs").rglob("*")) == [] if (tmp_path / "logs").exists() else True


def test_format_segmentation_and_path_messages(tmp_path):
    folder = text_folder(tmp_path, n=4)
    for extra, fragment in (
        (["corpus.format=xml"], "corpus.format='xml' is not a corpus format; allowed: jsonl, text"),
        (["corpus.segmentation=chapters"], "corpus.segmentation='chapters' is not a segmentation style"),
        (["corpus.format=jsonl"], f"corpus.path={folder} matches nothing (no .jsonl file below it"),
    ):
        with pytest.raises(ConfigError, match=fragment.replace("(", r"\(").replace(".", r"\.")):
            build_datamodule(compose_config([*local(folder, *extra, tmp_path=tmp_path), *SMALL], tmp_path)).setup()
    with pytest.raises(ConfigError, match="corpus=local needs corpus.path=PATH"):
        build_datamodule(compose_config(["corpus=local", *SMALL], tmp_path)).setup()


def test_files_jsonl_globs_and_document_starts(tmp_path, monkeypatch):
    folder = text_folder(tmp_path, n=12)
    # a glob: only the subfolder's files; the name is the folder the glob starts from
    cfg = compose_config(local(f"{folder}/deeper/*.txt", tmp_path=tmp_path), tmp_path)
    corpus = OmegaConf.to_container(cfg.corpus, resolve=True)
    assert corpus["name"] == "deeper"
    (group,) = prepare_corpus(corpus, tmp_path, tmp_path / "cache")
    assert group.meta["source_files"]["files"] == 8
    # one file: named by its stem, split into documents at each line matching corpus.document_start
    book = tmp_path / "book.txt"
    book.write_text("".join(f"Chapter {i}\n\nIt was a day. Another one.\n\nThe end of {i}.\n" for i in range(30)))
    cfg = compose_config(local(book, "corpus.document_start='^Chapter '", tmp_path=tmp_path), tmp_path)
    corpus = OmegaConf.to_container(cfg.corpus, resolve=True)
    (group,) = prepare_corpus(corpus, tmp_path, tmp_path / "cache")
    assert corpus["name"] == "book" and sum(s["documents"] for s in group.meta["splits"].values()) == 30
    # jsonl, a relative path (from the current directory), and the wikitext segmentation asked for by name
    write_jsonl(tmp_path / "web" / "a.jsonl", [f"Line one {i}.\nLine two {i}.\n" for i in range(20)])
    monkeypatch.chdir(tmp_path)
    cfg = compose_config(local("web", "corpus.format=jsonl", "corpus.segmentation=wikitext", tmp_path=tmp_path))
    corpus = OmegaConf.to_container(cfg.corpus, resolve=True)
    assert corpus["groups"]["main"]["local"][0]["pattern"] == str(tmp_path / "web" / "**" / "*.jsonl")
    (group,) = prepare_corpus(corpus, tmp_path, tmp_path / "cache")
    train = group.meta["splits"]["train"]
    assert train["paragraphs"] == 2 * train["documents"]  # wikitext: every line a paragraph


def test_local_names_and_patterns(tmp_path):
    (tmp_path / "a b" / "c").mkdir(parents=True)
    (tmp_path / "a b" / "c" / "x.txt").write_text("x")
    assert local_corpus_name(str(tmp_path / "a b")) == "a_b"
    assert local_corpus_name(str(tmp_path / "a b" / "c" / "x.txt")) == "x"
    assert local_corpus_name(str(tmp_path / "a b" / "**" / "*.txt")) == "a_b"
    assert local_corpus_name(None) == "local"
    assert local_pattern(str(tmp_path / "a b"), "python") == str(tmp_path / "a b" / "**" / "*.py")
    assert local_pattern(str(tmp_path / "a b" / "c" / "x.txt"), "text") == str(tmp_path / "a b" / "c" / "x.txt")


def test_analyze_corpus_takes_a_path(tmp_path, capsys):
    from poslab.cli import main

    folder = text_folder(tmp_path, n=10)
    argv = ["analyze", "corpus", str(folder), "--split", "all", "--no-embeddings", "--documents", "5"]
    assert main([*argv, "--output-dir", str(tmp_path / "out")]) == 0
    assert "my_notes 5 documents / 25 paragraphs" in capsys.readouterr().out
    stats = json.loads((tmp_path / "out" / "corpus_statistics.json").read_text())["statistics"]
    assert stats["my_notes"]["length_mean_bytes"] > 0


def test_a_run_names_the_files_it_read_and_says_when_it_trains_on_a_test_split(tmp_path, capsys):
    """Provenance: every file's path, size, sha256 and split in results.json; a file named as a test split that
    feeds training is said in one line at start, beside the figures, in results.json and in report losses."""
    import hashlib

    from poslab.cli import main
    from poslab.running.training import run

    folder = tmp_path / "books"
    folder.mkdir()
    texts = {**{f"chapter{k}.txt": 20 for k in range(12)}, "novel.test.txt": 20}
    for name, n in texts.items():
        (folder / name).write_text("\n\n".join(f"Part {i}. It was {name} once. Then {i}." for i in range(n)))
    cfg = compose_config([*local(folder, "trainer.max_steps=2", tmp_path=tmp_path), *SMALL], tmp_path / "run")
    results = run(cfg)
    listing = {Path(f["path"]).name: f for f in results["sources"]["main"]["listing"]}
    for name in texts:
        data = (folder / name).read_bytes()
        assert listing[name]["bytes"] == len(data) and listing[name]["sha256"] == hashlib.sha256(data).hexdigest()
        assert listing[name]["split"] == "train+validation (by document)"
    (note,) = results["data_notes"]
    assert "trains on novel.test.txt, a test split" in note and "chapter" not in note
    saved = json.loads((tmp_path / "run" / "results.json").read_text())
    assert saved["data_notes"] == [note]
    assert main(["report", "losses", str(tmp_path / "run"), "--output-dir", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "| trained on a test split (see below) |" in out and f"data: {note}" in out


def test_a_segmentation_set_in_the_config_prepares_its_own_cache(tmp_path):
    """The paragraph and sentence coordinates are in the prepared cache: another corpus.segmentation must not reuse
    the cache of the first (it once did: the key left the style out)."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(10):  # paragraphs by blank lines, each of two lines
        (folder / f"n{i}.txt").write_text("".join(f"Line a {p}.\nLine b {p}.\n\n" for p in range(3)))
    prepared = {}
    for style in ("blank_lines", "lines"):
        cfg = compose_config(local(folder, f"corpus.segmentation={style}", tmp_path=tmp_path), tmp_path)
        (group,) = prepare_corpus(OmegaConf.to_container(cfg.corpus, resolve=True), tmp_path, tmp_path / "cache")
        prepared[style] = group
    blank, lines = prepared["blank_lines"], prepared["lines"]
    assert blank.meta["splits"]["train"]["paragraphs"] * 2 == lines.meta["splits"]["train"]["paragraphs"]
    assert blank.directory != lines.directory
