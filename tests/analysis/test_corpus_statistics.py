"""Corpus-only statistics (``poslab analyze corpus``): documents, the eight quantities, the U* comparison, the CLI."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from poslab.analysis import corpus_statistics as cs
from poslab.analysis.corpus_statistics import (
    QUANTITIES,
    compare_to_ustar,
    corpus_documents,
    corpus_statistics,
    split_paragraphs,
)
from poslab.cli import main
from poslab.datamodules.corpora import is_validation
from tests.conftest import local_corpus

NAMES = [name for name, _, _ in QUANTITIES]


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return path


def first_word_embedder(calls: list[list[str]] | None = None):
    """A fake embedder: one-hot on the paragraph's first word (a, b, c, ... -> e0, e1, e2, ...)."""

    def embed(texts: list[str]) -> np.ndarray:
        if calls is not None:
            calls.append(list(texts))
        out = np.zeros((len(texts), 8))
        for i, text in enumerate(texts):
            out[i, (ord(text.split()[0][0]) - ord("a")) % 8] = 3.0  # not unit length: normalised inside
        return out

    return embed


def test_quantities_are_eight_in_three_constructs():
    assert len(QUANTITIES) == 8
    assert {construct for _, construct, _ in QUANTITIES} == {
        "lexical persistence",
        "paragraph length",
        "embedding coherence",
    }


def test_paragraphs_are_the_segmentation_units_with_their_separators_and_exact_bytes():
    text = "Alpha beta. Gamma.\n\n\nDelta é epsilon.\n\n  Zeta"
    paragraphs = split_paragraphs(text, "blank_lines")
    assert paragraphs == ["Alpha beta. Gamma.\n\n\n", "Delta é epsilon.\n\n  ", "Zeta"]
    assert "".join(paragraphs) == text
    code = "import os\n\n\ndef f():\n    return 1\n\n    # same block? no: blank line\nx = 2\n"
    assert split_paragraphs(code, "code") == [
        "import os\n\n\n",
        "def f():\n    return 1\n\n    ",
        "# same block? no: blank line\nx = 2\n",
    ]
    assert split_paragraphs(" = T = \n \n a b . \n", "wikitext") == [" = T = \n \n ", "a b . \n"]
    # a paragraph is marked on its first character's last byte; the text is cut before that character
    assert split_paragraphs("一。\n\n\xa0\xa0二。", "lines") == ["一。\n\n\xa0\xa0", "二。"]
    stats, counts = corpus_statistics([["é" * 5, "x" * 3]])  # bytes, not characters: 10 and 3
    assert stats["length_mean_bytes"] == pytest.approx(6.5)
    assert counts == {"documents": 1, "paragraphs": 2}


def test_lexical_persistence_is_one_for_repeated_and_zero_for_disjoint_vocabulary():
    same, _ = corpus_statistics([["The cat, the MAT.", "mat cat the", "cat the mat"]] * 3)
    assert same["jaccard_adjacent"] == 1.0 and same["jaccard_gap2"] == 1.0 and same["jaccard_ratio"] == 1.0
    disjoint, _ = corpus_statistics([["alpha beta", "gamma delta", "epsilon zeta"]])
    assert disjoint["jaccard_adjacent"] == 0.0 and disjoint["jaccard_gap2"] == 0.0
    assert math.isnan(disjoint["jaccard_ratio"])  # random pairs share nothing either: no baseline
    blocks, _ = corpus_statistics([["a b", "a b", "c d", "c d"]])  # adjacent 1, 0, 1; two apart 0, 0
    assert blocks["jaccard_adjacent"] == pytest.approx(2 / 3) and blocks["jaccard_gap2"] == 0.0
    assert blocks["jaccard_ratio"] > 1.0  # adjacent paragraphs share more than random ones
    half, _ = corpus_statistics([["self_name x", "self_name y"]])  # identifiers whole: {self_name} of 3 types
    assert half["jaccard_adjacent"] == pytest.approx(1 / 3)
    chinese, _ = corpus_statistics([["人工智能", "人工"]])  # CJK: one character, one word
    assert chinese["jaccard_adjacent"] == pytest.approx(2 / 4)


def test_paragraph_lengths_are_exact_means_over_paragraphs_and_cv_within_documents():
    documents = [["x" * 10, "y" * 30], ["z" * 20, "w" * 20, "v" * 20]]
    stats, counts = corpus_statistics(documents)
    assert counts == {"documents": 2, "paragraphs": 5}
    assert stats["length_mean_bytes"] == pytest.approx(100 / 5)
    assert stats["length_cv"] == pytest.approx((10 / 20 + 0.0) / 2)  # population std 10 over mean 20; then 0
    one, counts = corpus_statistics([["only one paragraph"]])
    assert counts["documents"] == 0 and math.isnan(one["length_mean_bytes"])


def test_embedding_coherence_with_a_fake_embedder_in_small_batches():
    documents = [["a one", "a two", "b three"], ["c four", "c five"]]
    calls: list[list[str]] = []
    stats, _ = corpus_statistics(documents, first_word_embedder(calls), batch_size=2)
    assert stats["cosine_adjacent"] == pytest.approx((0.5 + 1.0) / 2)
    assert stats["cosine_document"] == pytest.approx((1 / 3 + 1.0) / 2)
    assert stats["cosine_adjacent_excess"] == pytest.approx(0.75 - 0.0)  # nothing shared across documents
    assert len(calls) == 2  # embedded in batches as documents arrive
    at_once, _ = corpus_statistics(documents, first_word_embedder(), batch_size=1000)
    assert at_once == pytest.approx(stats, nan_ok=True)
    without, _ = corpus_statistics(documents)
    assert all(math.isnan(without[name]) for name in cs.EMBEDDING_QUANTITIES)
    assert not any(math.isnan(without[name]) for name in NAMES if name not in cs.EMBEDDING_QUANTITIES)


def test_embedded_paragraphs_are_stripped_truncated_and_capped_per_document():
    calls: list[list[str]] = []
    corpus_statistics([["  a" + "x" * 50 + "\n\n", *[f"b{i}" for i in range(9)]]], first_word_embedder(calls),
                      max_chars=10, max_paragraphs=4)  # fmt: skip
    assert calls == [["a" + "x" * 9, "b0", "b1", "b2"]]


def test_ordering_comparison_counts_agreeing_pairs_in_the_better_direction():
    ustar = {"code": -0.77, "wiki": -0.48, "web": -0.31}
    nan = float("nan")

    def stats(values: dict[str, float]) -> dict[str, dict[str, float]]:
        return {c: {name: values[c] if name == "jaccard_adjacent" else nan for name in NAMES} for c in ustar}

    def row(values: dict[str, float]) -> dict:
        return compare_to_ustar(stats(values), ustar)[0]

    deeper = row({"code": 3.0, "wiki": 2.0, "web": 1.0})
    assert (deeper["direction"], deeper["agree"], deeper["pairs"], deeper["same_order"]) == (
        "higher = deeper",
        3,
        3,
        True,
    )
    assert deeper["verdict"] == "not testable"  # one measurement per corpus: no interval (docs/verdicts.md)
    shallower = row({"code": 1.0, "wiki": 2.0, "web": 3.0})
    assert (shallower["direction"], shallower["agree"], shallower["same_order"]) == ("higher = shallower", 3, True)
    swapped = row({"code": 3.0, "wiki": 1.0, "web": 2.0})  # code right, the other two swapped
    assert (swapped["agree"], swapped["pairs"], swapped["same_order"]) == (2, 3, False)
    assert swapped["disagreeing"] == ["wiki/web"]
    tied = row({"code": 1.0, "wiki": 1.0, "web": 1.0})
    assert (tied["agree"], tied["same_order"]) == (0, False)
    missing = row({"code": 2.0, "wiki": nan, "web": 1.0})  # not compared: no order of all three to set beside U*'s
    assert (missing["agree"], missing["pairs"], missing["same_order"], missing["verdict"]) == (1, 1, None, None)
    assert missing["missing"] == ["wiki"] and missing["disagreeing"] == []
    rows = compare_to_ustar(stats({"code": 3.0, "wiki": 2.0, "web": 1.0}), ustar)
    assert [r["quantity"] for r in rows] == NAMES and all(r["agree"] is None for r in rows[1:])
    only_two = compare_to_ustar(stats({"code": 3.0, "wiki": 2.0, "web": 1.0}), {"code": -0.7, "web": -0.3})[0]
    assert (only_two["agree"], only_two["pairs"]) == (1, 1)


def tiny_corpus(data: Path) -> dict:
    texts = [f"Doc {i} para one cat.\n\nDoc {i} para two cat." for i in range(40)] + ["single paragraph"]
    write_jsonl(data / "a" / "docs.jsonl", texts)
    write_jsonl(data / "b" / "docs.jsonl", [f"B {i}.\n\nB {i} again." for i in range(10)])
    return local_corpus("tiny", {"a": (0.75, "a/*.jsonl"), "b": (0.25, "b/*.jsonl")})


def test_documents_follow_the_corpus_split_groups_and_paragraph_minimum(tmp_path):
    corpus = tiny_corpus(tmp_path)
    only_a = {**corpus, "groups": {"a": corpus["groups"]["a"]}}
    validation = [d[0] for d in corpus_documents(only_a, tmp_path, split="validation")]
    train = [d[0] for d in corpus_documents(only_a, tmp_path, split="train")]
    expected = [f"Doc {i} para one cat.\n\n" for i in range(40) if is_validation("a", i, 0.25)]
    assert validation == expected and 0 < len(validation) < 40
    assert len(validation) + len(train) == 40  # the one-paragraph document is left out of both
    assert not set(validation) & set(train)
    mixed = list(corpus_documents(corpus, tmp_path, split="all", max_documents=8))
    assert [d[0].startswith("B") for d in mixed].count(True) == 2  # weights 3:1
    assert len(list(corpus_documents(corpus, tmp_path, split="all"))) == 50
    with pytest.raises(ValueError, match="split"):
        list(corpus_documents(corpus, tmp_path, split="test"))


def cli_corpora(root: Path, monkeypatch) -> None:
    webtext = [f"Story {i} begins with a river.\n\nThe river {i} runs on.\n\nAnd then a mountain." for i in range(12)]
    write_jsonl(root / "webtext" / "web.jsonl", webtext)
    (root / "wikitext2").mkdir()
    (root / "wikitext2" / "wiki.test.raw").write_text(
        "".join(f" = Article {i} = \n \n Cats sleep a lot . \n \n Cats also eat . \n \n" for i in range(12))
    )
    monkeypatch.setenv("POSLAB_DATA_DIR", str(root))
    monkeypatch.setenv("POSLAB_LOG_DIR", str(root / "logs"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_cli_writes_tables_and_plot_with_the_writeups_ustar(tmp_path, monkeypatch, capsys):
    cli_corpora(tmp_path, monkeypatch)
    monkeypatch.setattr(cs, "load_embedder", lambda: first_word_embedder())  # no model in tests
    out = tmp_path / "out"
    code = main(
        [
            "analyze",
            "corpus",
            "openwebtext",
            "wikitext2",
            "--documents",
            "5",
            "--split",
            "all",
            "--output-dir",
            str(out),
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0
    assert "the write-up's hrope_axial seed table" in printed and "wikitext2 -0.48" in printed
    assert "openwebtext 5 documents / 15 paragraphs" in printed and "wikitext2 5 documents / 15 paragraphs" in printed
    assert "| lexical persistence | jaccard_adjacent |" in printed and "probability 2/2! = 1." in printed
    for suffix in ("md", "csv", "json", "png"):
        assert (out / f"corpus_statistics.{suffix}").stat().st_size > 0
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # atomic writes leave no temporaries
    with open(out / "corpus_statistics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["quantity"] for r in rows] == NAMES
    assert all(r["pairs"] == "1" and r["agree"] in ("0", "1") for r in rows)
    summary = json.loads((out / "corpus_statistics.json").read_text())
    assert summary["ustar"] == {"wikitext2": -0.48, "openwebtext": -0.31}
    assert summary["statistics"]["wikitext2"]["length_mean_bytes"] > 0


def test_cli_without_embeddings_with_given_ustar_and_the_default_output_dir(tmp_path, monkeypatch, capsys):
    cli_corpora(tmp_path, monkeypatch)
    monkeypatch.setattr(cs, "load_embedder", lambda: pytest.fail("--no-embeddings must not load a model"))
    argv = ["analyze", "corpus", "openwebtext", "wikitext2", "--split", "all", "--no-embeddings"]
    assert main([*argv, "--ustar", "openwebtext=0.5", "wikitext2=-1"]) == 0
    printed = capsys.readouterr().out
    assert "U* from --ustar: openwebtext +0.50, wikitext2 -1.00" in printed and "not computed" in printed
    assert "openwebtext 12 documents" in printed
    rows = json.loads((tmp_path / "logs" / "analysis" / "corpus" / "corpus_statistics.json").read_text())["rows"]
    assert all(r["agree"] is None for r in rows if r["construct"] == "embedding coherence")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nosuchcorpus"], "python_code"),
        (["openwebtext", "--ustar", "openwebtext"], "NAME=VALUE"),
        (["openwebtext", "--ustar", "wikitext2=-0.5"], "not among the corpora"),
    ],
)
def test_cli_bad_arguments_exit_2_with_one_message(tmp_path, monkeypatch, capsys, argv, message):
    cli_corpora(tmp_path, monkeypatch)
    assert main(["analyze", "corpus", *argv, "--no-embeddings", "--output-dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("poslab: ") and message in error and len(error.strip().splitlines()) == 1
    if argv == ["nosuchcorpus"]:
        assert all(name in error for name in ("openwebtext", "wikitext2", "wiki_en_zh")) and "synthetic" not in error


def test_the_packaged_sentence_model_loads_offline_and_separates_meanings(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embed = cs.load_embedder()
    vectors = embed(["The cat sat on the mat.", "The cat sat on the mat.", "Quarterly bank revenue fell sharply."])
    cosine = vectors @ vectors.T
    assert cosine[0, 1] == pytest.approx(1.0, abs=1e-4)
    assert cosine[0, 2] < 0.5


def test_from_with_ustar_compares_the_summarys_statistics_again(tmp_path, monkeypatch, capsys):
    cli_corpora(tmp_path, monkeypatch)
    out, again = tmp_path / "out", tmp_path / "again"
    argv = ["analyze", "corpus", "openwebtext", "wikitext2", "--split", "all", "--no-embeddings"]
    assert main([*argv, "--output-dir", str(out)]) == 0
    written = json.loads((out / "corpus_statistics.json").read_text())
    capsys.readouterr()
    monkeypatch.setenv("POSLAB_DATA_DIR", str(tmp_path / "gone"))  # --from reads no corpus
    summary = str(out / "corpus_statistics.json")
    flipped = {c: -v for c, v in written["ustar"].items()}  # the opposite order: every agreement flips
    ustar = [f"{c}={v}" for c, v in flipped.items()]
    assert main(["analyze", "corpus", "--from", summary, "--ustar", *ustar, "--output-dir", str(again)]) == 0
    printed = capsys.readouterr().out
    assert "U* from --ustar: " in printed and "openwebtext +0.31" in printed and "wikitext2 +0.48" in printed
    redrawn = json.loads((again / "corpus_statistics.json").read_text())
    assert redrawn["statistics"] == written["statistics"] and redrawn["ustar"] == flipped
    before = {r["quantity"]: r for r in written["rows"]}
    ordered = [r for r in redrawn["rows"] if before[r["quantity"]]["agree"] == 1]  # one pair, not tied
    assert ordered  # the fixture's corpora differ in the length and lexical quantities
    for row in ordered:  # the flipped U* reverses the direction that agrees with the pair
        assert row["agree"] == 1 and row["direction"] != before[row["quantity"]]["direction"]
    assert main(["analyze", "corpus", "--from", summary, "--ustar", "python_code=-1"]) == 2
    assert "not among the corpora openwebtext, wikitext2" in capsys.readouterr().err


def test_the_report_gives_no_verdict_word_without_an_interval_and_counts_no_missing_value(tmp_path):
    """The review's item 4: "reproduces yes/no" on point values was a verdict without an interval ("no" the
    wording docs/verdicts.md forbids), and a quantity missing a corpus printed "no" and was counted as compared."""
    from poslab.analysis.corpus_render import render_corpora

    ustar = {"code": -0.77, "wiki": -0.48, "web": -0.31}
    stats = {c: {name: float(i) for i, name in enumerate(NAMES)} for c in ustar}
    stats["code"] = {name: 10.0 for name in NAMES}
    stats["web"]["cosine_adjacent"] = float("nan")
    counts = {c: {"documents": 100, "paragraphs": 900} for c in ustar}
    summary = {"split": "all", "documents": 100, "counts": counts, "ustar": ustar, "statistics": stats}
    summary |= {"rows": compare_to_ustar(stats, ustar), "corpora": list(ustar), "ustar_source": "test"}
    report = render_corpora(cs.no_nan({**summary, "embeddings": True}), tmp_path).report
    assert "reproduce" not in report.lower()
    assert "of 7 quantities compared" in report and "Not compared, no value for every corpus with a U*: " in report
    cosine = next(line for line in report.splitlines() if "| cosine_adjacent |" in line)
    assert cosine.endswith("| 1 of 1 (no value: web) | n/a | n/a | n/a |")
    rows = [line for line in report.splitlines() if line.startswith(("| lexical", "| paragraph", "| embedding"))]
    verdicts = [line.rstrip(" |").rsplit("| ", 1)[-1] for line in rows if line != cosine]
    assert len(verdicts) == 7 and set(verdicts) == {"not testable (no interval)"}


def test_weighted_figures_are_those_of_the_documents_repeated():
    """A bootstrap replicate reweights documents: its figures must be the figures of the stream in which each
    document appears as often as its weight says (the random same-document pairs made deterministic: two-paragraph
    documents, and three-paragraph ones whose pairs all share one word of three)."""
    documents = [
        ["apple pie is sweet", "banana bread is dense too"],
        ["cherry tart", "apple cherry banana tart"],
        ["apple banana", "apple cherry", "banana cherry"],
        ["dates figs plums", "dates kiwi", "figs kiwi plums dates now"],
        ["eel soup", "fish soup and eel", "fish eel"],
    ]
    weights = np.array([3.0, 0.0, 1.0, 2.0, 1.0])
    stats = cs.accumulate(documents, first_word_embedder(), batch_size=4)
    weighted = {name: value[0] for name, value in stats.weighted(weights[None, :]).items()}
    repeated = [d for d, w in zip(documents, weights) for _ in range(int(w))]
    expected, _ = corpus_statistics(repeated, first_word_embedder(), batch_size=4)
    assert set(weighted) == set(NAMES)
    for name in NAMES:
        assert weighted[name] == pytest.approx(expected[name], rel=1e-12, abs=1e-12), name
    figures, _ = corpus_statistics(documents, first_word_embedder())
    assert stats.result() == pytest.approx(figures, rel=1e-12)


def random_documents(rng: np.random.Generator, count: int, words: tuple[int, int]) -> list[list[str]]:
    """Documents of 2-6 paragraphs of ``words`` (low, high) words each from one small vocabulary."""
    vocabulary = [f"{chr(97 + i % 26)}{i}" for i in range(60)]
    return [
        [" ".join(rng.choice(vocabulary, size=rng.integers(*words))) for _ in range(rng.integers(2, 7))]
        for _ in range(count)
    ]


def test_pairs_of_corpora_read_over_documents_in_order_against_or_not_resolved():
    """Two corpora drawn alike do not separate on any quantity; one with paragraphs three times as long separates
    on length, in U*'s order or against it as the direction says; every figure lies inside its interval."""
    rng = np.random.default_rng(11)
    corpora = {
        "short_a": random_documents(rng, 60, (5, 15)),
        "short_b": random_documents(rng, 60, (5, 15)),
        "long": random_documents(rng, 60, (30, 45)),
    }
    estimates, counts = {}, {}
    for seed, (name, documents) in enumerate(corpora.items()):
        stats = cs.accumulate(documents, first_word_embedder())
        estimates[name], counts[name] = stats.document_replicates(replicates=500, seed=seed), {"documents": 60}
    for values in estimates.values():
        for estimate in values.values():
            assert estimate.interval[0] < estimate.value < estimate.interval[1]
    differences = cs.corpus_differences(estimates, counts)
    figures = {c: {name: e.value for name, e in values.items()} for c, values in estimates.items()}
    ustar = {"short_a": -0.3, "short_b": -0.5, "long": -0.9}  # the long paragraphs with the deepest well
    rows = {r["quantity"]: r for r in compare_to_ustar(figures, ustar, differences)}
    length = {r["pair"]: r["reading"] for r in rows["length_mean_bytes"]["pair_readings"]}
    assert rows["length_mean_bytes"]["direction"] == "higher = deeper"
    assert length == {"short_a/short_b": cs.UNRESOLVED, "short_a/long": cs.IN_ORDER, "short_b/long": cs.IN_ORDER}
    assert rows["length_mean_bytes"]["order_over_documents"] == cs.UNRESOLVED  # the alike pair holds 0
    assert all(r["pair_readings"][0]["reading"] == cs.UNRESOLVED for r in rows.values())  # alike: never separated
    assert {r["verdict"] for r in rows.values()} == {cs.POST_HOC}
    reversed_ustar = {"short_a": -0.9, "short_b": -0.5, "long": -0.3}  # long shallowest: the direction flips
    flipped = {r["quantity"]: r for r in compare_to_ustar(figures, reversed_ustar, differences)}
    assert flipped["length_mean_bytes"]["direction"] == "higher = shallower"
    assert [r["reading"] for r in flipped["length_mean_bytes"]["pair_readings"]][1:] == [cs.IN_ORDER] * 2


def test_a_pair_whose_interval_has_no_width_is_said_degenerate_never_in_order():
    figures = {"a": {name: 1.0 for name in NAMES}, "b": {name: 2.0 for name in NAMES}}
    differences = {name: {"a/b": {"difference": -1.0, "interval": [-1.0, -1.0]}} for name in NAMES}
    row = compare_to_ustar(figures, {"a": -0.9, "b": -0.1}, differences)[0]
    assert row["pair_readings"][0]["reading"] == cs.DEGENERATE
    assert row["order_over_documents"] == cs.UNRESOLVED
