"""The corpus statistics' outputs pinned: the table, CSV and JSON of ``poslab analyze corpus`` on the small corpora
of ``test_corpus_statistics``, compared with the files under ``tests/golden/corpus_statistics/`` written before
the analysis was split into compute and render (the random same-document pairs of ``jaccard_ratio`` included:
the same seed gives the same pairs). ``POSLAB_WRITE_GOLDEN=1`` writes them again."""

from __future__ import annotations

import pytest

from poslab.analysis import corpus_statistics as cs
from poslab.cli import main

from .test_corpus_statistics import cli_corpora, first_word_embedder
from .test_hrope_pinned import golden

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
