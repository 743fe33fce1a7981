"""The corpus statistics' outputs pinned: the table, CSV and JSON of ``poslab analyze corpus`` on the small corpora
of ``test_corpus_statistics``, compared with the files under ``tests/golden/corpus_statistics/`` written before
the analysis was split into compute and render (the random same-document pairs of ``jaccard_ratio`` included:
the same seed gives the same pairs). ``POSLAB_WRITE_GOLDEN=1`` writes them again."""

from __future__ import annotations

import json
import shutil

import pytest

from poslab.analysis import corpus_statistics as cs
from poslab.cli import main
from tests.analysis.test_corpus_statistics import cli_corpora, first_word_embedder
from tests.analysis.test_hrope_pinned import golden

OUTPUTS = ("corpus_statistics.md", "corpus_statistics.csv", "corpus_statistics.json")


@pytest.mark.parametrize(
    "name, options",
    [
        ("embeddings", ["--documents", "5"]),
        ("given_ustar", ["--no-embeddings", "--ustar", "openwebtext=0.5", "wikitext2=-1"]),
    ],
)
def test_analyze_corpus_writes_the_pinned_files(tmp_path, monkeypatch, capsys, name, options):
    cli_corpora(tmp_path, monkeypatch)
    monkeypatch.setattr(cs, "load_embedder", lambda: first_word_embedder())  # no model in tests
    out = tmp_path / "out"
    argv = ["analyze", "corpus", "openwebtext", "wikitext2", "--split", "all", *options, "--output-dir", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    for filename in OUTPUTS:
        golden(f"../corpus_statistics/{name}/{filename}", (out / filename).read_bytes().decode())
    assert (out / "corpus_statistics.md").read_text() in printed


@pytest.mark.slow
def test_the_files_render_again_from_the_summary_alone(tmp_path, monkeypatch, capsys):
    """``poslab analyze corpus --from corpus_statistics.json``: the same files, byte for byte (the figure
    included), with the corpora gone and no embedder to load."""
    cli_corpora(tmp_path, monkeypatch)
    monkeypatch.setattr(cs, "load_embedder", lambda: first_word_embedder())
    out = tmp_path / "out"
    argv = ["analyze", "corpus", "openwebtext", "wikitext2", "--split", "all", "--documents", "5"]
    assert main([*argv, "--output-dir", str(out)]) == 0
    computed = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(computed) == {*OUTPUTS, "corpus_statistics.png"}
    for corpus in ("webtext", "wikitext2"):
        shutil.rmtree(tmp_path / corpus)
    monkeypatch.setattr(cs, "load_embedder", lambda: pytest.fail("--from must not load the embedder"))
    monkeypatch.setattr(cs, "corpus_documents", lambda *a, **k: pytest.fail("--from must not read a corpus"))
    capsys.readouterr()
    again = tmp_path / "again"
    assert main(["analyze", "corpus", "--from", str(out / "corpus_statistics.json"), "--output-dir", str(again)]) == 0
    assert {p.name: p.read_bytes() for p in again.iterdir()} == computed
    assert computed["corpus_statistics.md"].decode() in capsys.readouterr().out


def test_from_needs_a_summary_this_analysis_wrote(tmp_path, capsys):
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"split": "all", "rows": []}))  # written before --from: no corpora
    assert main(["analyze", "corpus", "--from", str(old)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "corpus_statistics.json" in error[0] and "corpora" in error[0]
    assert main(["analyze", "corpus"]) == 2
    assert "CORPUS" in capsys.readouterr().err
