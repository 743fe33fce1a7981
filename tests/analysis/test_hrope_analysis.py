"""The hRoPE analyses: interventions, shuffle, the well, streaming over documents, the CLI on a trained run."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from poslab.analysis.hrope.attention import PairStatistics, pair_statistics
from poslab.analysis.hrope.compute import analyze_documents
from poslab.analysis.hrope.documents import (
    Document,
    boundaries,
    crossing_pairs,
    fake_merge,
    fake_split,
    held_out_documents,
    merge_boundary,
    shuffle_paragraphs,
    split_position,
)
from poslab.analysis.hrope.well import well_from
from poslab.datamodules.corpora import PreparedSplit
from poslab.model import ModelConfig, Transformer
from tests.conftest import compose_config, make_unwritable
from tests.datamodules.test_corpora import write_jsonl


def document(lengths: list[int], sentences_per_paragraph: int = 2, seed: int = 0) -> Document:
    rng = np.random.default_rng(seed)
    paragraph = np.concatenate([np.full(n, p) for p, n in enumerate(lengths)])
    sentence = np.concatenate(
        [p * sentences_per_paragraph + (np.arange(n) * sentences_per_paragraph // n) for p, n in enumerate(lengths)]
    )
    return Document(0, rng.integers(0, 50, len(paragraph)), paragraph, sentence)


def test_fake_merge_and_split_change_only_the_paragraph_index():
    doc = document([5, 7, 4, 6])
    b = merge_boundary(doc.paragraph)
    merged = fake_merge(doc.paragraph, b)
    assert len(boundaries(merged)) == len(boundaries(doc.paragraph)) - 1
    assert merged[b] == merged[b - 1] and np.all(np.diff(merged) >= 0)
    s = split_position(doc.paragraph)
    assert s is not None and doc.paragraph[s] == doc.paragraph[s - 1]  # inside a paragraph
    split = fake_split(doc.paragraph, s)
    assert len(boundaries(split)) == len(boundaries(doc.paragraph)) + 1 and split[s] == split[s - 1] + 1
    # displacement between any two tokens changes by at most one, and only across the manipulated boundary
    for changed, at in ((merged, b), (split, s)):
        before = doc.paragraph[:, None] - doc.paragraph[None, :]
        after = changed[:, None] - changed[None, :]
        side = np.arange(len(changed)) >= at
        crossing = side[:, None] != side[None, :]
        assert np.all(np.abs(after - before)[~crossing] == 0) and np.all(np.abs(after - before)[crossing] == 1)
    with pytest.raises(ValueError, match="not a paragraph boundary"):
        fake_merge(doc.paragraph, 2)
    # an index that steps by 2 at a boundary (no corpus here makes one: documents.py) is still merged there
    assert fake_merge(np.array([0, 0, 2, 2, 3]), 2).tolist() == [0, 0, 0, 0, 1]
    with pytest.raises(ValueError, match="not inside a paragraph"):
        fake_split(doc.paragraph, 5)


def test_interventions_in_the_analysis_leave_tokens_and_sentences_alone():
    """The model sees identical tokens and sentence coordinates; with RoPE (which ignores paragraphs) the
    cross-boundary attention is then exactly unchanged, with hRoPE it moves."""
    docs = [document([6, 9, 5, 8], seed=s) for s in range(3)]
    seen: list[dict[str, torch.Tensor]] = []
    for name, expect_zero in (("rope", True), ("hrope_axial", False)):
        torch.manual_seed(0)
        model = Transformer(
            ModelConfig(vocab_size=50, n_outputs=50, d_model=48, n_heads=2, encoding={"name": name}), 64
        ).eval()

        def recording_forward(tokens, coordinates=None, original=model.forward, **kwargs):
            seen.append({"tokens": tokens.clone(), **{k: v.clone() for k, v in coordinates.items()}})
            return original(tokens, coordinates, **kwargs)

        model.forward = recording_forward
        seen.clear()
        result = analyze_documents(model, iter(docs), batch_size=3, min_pairs=1, bootstrap=50, progress=False)
        base, _shuffled, merged, split = seen  # one batch: original, shuffled, fake-merge, fake-split
        for variant in (merged, split):
            assert torch.equal(variant["tokens"], base["tokens"])
            assert torch.equal(variant["sentence"], base["sentence"])
            assert not torch.equal(variant["paragraph"], base["paragraph"])
        same = result["interventions"]["same_pairs"]
        if expect_zero:
            assert same["merge"].value == 0.0 and same["split"].value == 0.0
        else:
            assert abs(same["merge"].value) > 1e-4 and abs(same["split"].value) > 1e-4
        assert result["documents"] == 3 and np.isfinite(result["depths"]["main"].well.depth)


def test_crossing_pairs_are_the_two_paragraphs_meeting_at_the_boundary():
    paragraph = np.array([0, 0, 1, 1, 1, 2, 2])
    queries, keys = crossing_pairs(paragraph, 5)
    assert queries.tolist() == [5, 6] and keys.tolist() == [2, 3, 4]


def paragraph_pieces(d: Document) -> list[tuple[int, ...]]:
    starts = np.concatenate(([0], boundaries(d.paragraph), [len(d)]))
    return [tuple(d.tokens[a:b]) for a, b in zip(starts[:-1], starts[1:])]


def test_shuffle_keeps_the_multiset_of_paragraphs():
    doc = document([3, 8, 5, 2, 6], seed=1)
    mixed = shuffle_paragraphs(doc, np.random.default_rng(0))
    assert mixed is not None

    def pieces(d: Document) -> Counter:
        return Counter(paragraph_pieces(d))

    assert pieces(mixed) == pieces(doc) and len(mixed) == len(doc)
    assert mixed.n_paragraphs == doc.n_paragraphs and not np.array_equal(mixed.tokens, doc.tokens)
    assert mixed.paragraph[0] == 0 and np.all(np.diff(mixed.paragraph) >= 0)
    assert mixed.sentence[0] == 0 and np.all(np.diff(mixed.sentence) >= 0)
    assert len(np.unique(mixed.sentence)) == len(np.unique(doc.sentence))


def test_the_write_ups_shuffle_keeps_the_first_and_the_truncated_last_paragraph_in_place():
    doc = document([4, 6, 3, 5, 7, 9], seed=2)
    before = paragraph_pieces(doc)
    for seed in range(20):
        mixed = shuffle_paragraphs(doc, np.random.default_rng(seed))
        after = paragraph_pieces(mixed)
        assert after[0] == before[0] and after[-1] == before[-1]  # token 0 and the window's cut-off paragraph
        assert after[1:-1] != before[1:-1] and sorted(after[1:-1]) == sorted(before[1:-1])
        assert mixed.tokens[0] == doc.tokens[0]
    # three paragraphs leave one in the middle: nothing to permute, the document is not used
    assert shuffle_paragraphs(document([4, 6, 3]), np.random.default_rng(0)) is None
    # every paragraph may move when asked (the old test): the first and last do move for some seed
    moved = [paragraph_pieces(shuffle_paragraphs(doc, np.random.default_rng(s), keep_ends=False)) for s in range(20)]
    assert any(p[0] != before[0] for p in moved) and any(p[-1] != before[-1] for p in moved)
    assert shuffle_paragraphs(document([4, 6]), np.random.default_rng(0), keep_ends=False) is not None


def planted_attention(
    lengths: list[int], well: dict[int, float], slope: float = -0.02
) -> tuple[torch.Tensor, Document]:
    """Attention whose log (relative to uniform) is ``0.5 + slope * d + well[k]``: a planted well."""
    doc = document(lengths)
    T = len(doc)
    i, j = np.arange(T)[:, None], np.arange(T)[None, :]
    k = doc.paragraph[:, None] - doc.paragraph[None, :]
    log_relative = 0.5 + slope * (i - j) + np.vectorize(lambda v: well.get(int(v), 0.0))(k)
    return torch.as_tensor(np.exp(log_relative - np.log(i + 1.0)))[None], doc


def test_the_well_of_a_planted_attention_pattern_is_recovered():
    planted = {1: -0.3, 2: -0.6, 3: -0.9, 4: -0.6, 5: -0.3}
    attention, doc = planted_attention([12] * 16, planted)
    stats = pair_statistics(attention, [len(doc)], [doc.paragraph], "linear", max_displacement=10)
    well = well_from(stats, min_pairs=1)
    assert well.location == 3
    # fitted jointly with the trend, the offsets are the planted well exactly, and so is the trend
    assert well.depth == pytest.approx(-0.9, abs=1e-9)
    assert np.allclose(well.residual[:11], [0.0] + [planted.get(k, 0.0) for k in range(1, 11)], atol=1e-9)
    assert np.allclose(well.coefficients, [0.5, -0.02], atol=1e-9)
    # no well planted: a flat residual (the trend explains everything)
    flat, doc = planted_attention([12] * 16, {})
    assert (
        np.nanmax(np.abs(well_from(pair_statistics(flat, [len(doc)], [doc.paragraph], "linear", 10), 1).residual))
        < 1e-9
    )


def test_statistics_are_additive_over_documents_so_batches_do_not_matter():
    docs = [planted_attention([7, 9, 6, 8 + 3 * s], {1: -0.4, 2: -0.2}, slope=-0.01 * s) for s in range(1, 4)]
    length = max(len(d) for _, d in docs)  # one batch right-pads the shorter documents
    padded = [
        torch.nn.functional.pad(a, (0, length - a.shape[-1], 0, length - a.shape[-1]), value=0.5) for a, _ in docs
    ]
    one_by_one = PairStatistics.empty(2, 6)
    for attention, doc in docs:
        one_by_one.extend(pair_statistics(attention, [len(doc)], [doc.paragraph], "linear", 6))
    together = pair_statistics(
        torch.cat(padded), [len(d) for _, d in docs], [d.paragraph for _, d in docs], "linear", 6
    )
    assert np.allclose(one_by_one.xx, together.xx) and np.allclose(one_by_one.xy, together.xy)
    assert well_from(one_by_one, 1).depth == pytest.approx(well_from(together, 1).depth)


def fake_split_arrays(doc_lengths: list[list[int]]) -> PreparedSplit:
    """A prepared split as the cache stores it: cumulative coordinates, a separator closing each document."""
    tokens, documents, paragraphs, sentences = [], [], [], []
    p_offset = s_offset = 0
    for ordinal, lengths in enumerate(doc_lengths):
        doc = document(lengths)
        n = len(doc) + 1
        tokens.append(np.append(doc.tokens, 256))
        documents.append(np.full(n, ordinal))
        paragraphs.append(np.append(doc.paragraph, doc.paragraph[-1]) + p_offset)
        sentences.append(np.append(doc.sentence, doc.sentence[-1]) + s_offset)
        p_offset += doc.paragraph[-1] + 1
        s_offset += doc.sentence[-1] + 1
    return PreparedSplit(*(np.concatenate(a) for a in (tokens, documents, paragraphs, sentences)))


def test_held_out_documents_reset_coordinates_and_skip_single_paragraph_windows():
    split = fake_split_arrays([[10, 10], [30], [5, 5, 5, 5], [20, 3]])
    docs = list(held_out_documents(split, context=12))
    assert [d.ordinal for d in docs] == [0, 2]  # doc 1 has one paragraph; doc 3's window (12 tokens) has one
    for d in docs:
        assert len(d) <= 12 and d.paragraph[0] == 0 and d.sentence[0] == 0
        assert np.all(np.diff(d.paragraph) >= 0) and np.all(np.diff(d.sentence) >= 0)
        assert 256 not in d.tokens
    assert len(list(held_out_documents(split, context=12, limit=1))) == 1


def test_a_corpus_without_paragraphs_gives_a_clear_message():
    split = fake_split_arrays([[20], [30]])
    model = Transformer(ModelConfig(vocab_size=257, n_outputs=257, d_model=16, n_heads=2), 32).eval()
    with pytest.raises(ValueError, match="no \\(or too few\\) paragraph boundaries"):
        analyze_documents(model, held_out_documents(split, context=16), progress=False)


def train_tiny_lm_runs(tmp_path, runs: dict[str, list[str]]) -> None:
    """Tiny language-model runs, 4 steps each, into ``tmp_path / NAME`` (``runs``: name -> overrides, an
    experiment among them) on one small local corpus with paragraphs and sentences, prepared once."""
    from poslab.running.training import run

    data = tmp_path / "data"
    texts = [
        "\n\n".join(f"Paragraph {p} of document {i}. It has words {p * i} here. More text." for p in range(6))
        for i in range(40)
    ]
    write_jsonl(data / "web" / "docs.jsonl", texts)
    for name, overrides in runs.items():
        cfg = compose_config(
            [
                *overrides,
                "corpus=openwebtext",
                f"paths.data_dir={data}",
                f"paths.cache_dir={tmp_path / 'cache'}",
                "corpus.groups.main.local=[{pattern: 'web/*.jsonl'}]",
                "corpus.validation_fraction=0.25",
                "corpus.vocab_size=320",
                "task.context_length=64",
                "task.batch_size=4",
                "task.val_every_n_steps=4",
                "task.val_windows=2",
                "trainer.max_steps=4",
                "~logger",
                "~callbacks",
            ],
            tmp_path / name,
        )
        run(cfg)


@pytest.mark.slow
def test_analyze_hrope_cli_on_trained_runs(tmp_path, capsys):
    """Two tiny runs (hrope_axial and rand_axial) on a corpus with paragraphs, then the whole report."""
    from poslab.cli import main

    train_tiny_lm_runs(tmp_path, {e: [f"experiment={e}_cpu"] for e in ("hrope_axial", "rand_axial")})
    out = tmp_path / "analysis"
    code = main(
        [
            "analyze",
            "hrope",
            str(tmp_path / "hrope_axial"),
            str(tmp_path / "rand_axial"),
            "--output-dir",
            str(out),
            "--documents",
            "6",
            "--min-pairs",
            "5",
            "--bootstrap",
            "50",
        ]
    )
    assert code == 0
    table = (out / "hrope_table.md").read_text()
    assert "| hrope_axial |" in table and "| rand_axial |" in table and "WikiText-2" not in table
    assert "| U* | OpenWebText | OpenWebText: write-up (reference) |" in table  # its value in a labelled column
    assert "warning: 2 of 2 runs rest on fewer than 20 documents" in table  # 6 documents each
    assert "| 4 | 6 | " in table  # steps and documents of each run
    assert (out / "hrope_well.png").stat().st_size > 1000 and (out / "hrope_shuffle.png").is_file()
    small = ["--documents", "4", "--min-pairs", "5", "--bootstrap", "20"]
    # no --output-dir: one run's analysis goes beside it, RUN_DIR/analysis/hrope/
    assert main(["analyze", "hrope", str(tmp_path / "hrope_axial"), *small]) == 0
    assert (tmp_path / "hrope_axial" / "analysis" / "hrope" / "hrope_table.md").read_text().count("| hrope_axial |")
    capsys.readouterr()
    # a run directory nobody can write to: the table, then one message naming the directory and --output-dir
    read_only = tmp_path / "rand_axial"
    make_unwritable(read_only)
    try:
        assert main(["analyze", "hrope", str(read_only), *small]) == 1
    finally:
        read_only.chmod(0o755)
    captured = capsys.readouterr()
    assert "## U*" in captured.out and "| rand_axial |" in captured.out
    message = captured.err.strip().splitlines()
    assert len(message) == 1 and str(read_only / "analysis" / "hrope") in message[0] and "--output-dir" in message[0]
    assert main(["analyze", "hrope", str(tmp_path / "nothing")]) == 2
    # the increments analyses read δ per byte: a BPE run is refused with a message, not analysed as bytes
    assert main(["analyze", "increments", str(tmp_path / "hrope_axial")]) == 2
