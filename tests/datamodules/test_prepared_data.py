"""Prepared data at the size of its content: tokens and boundary offsets on disk, per-token coordinates made when
a window is cut, the same values (and batches) as the per-token int32 arrays caches stored before version 4."""

from __future__ import annotations

import copy
import json
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import poslab.datamodules.corpora as corpora
import poslab.datamodules.corpora.writer as corpus_writer
import poslab.datamodules.language as language
from poslab.datamodules.corpora import (
    CACHE_VERSION,
    Coordinate,
    PreparedGroup,
    PreparedSplit,
    corpus_tokenizer,
    load_prepared,
    prepare_corpus,
    resolve_corpus,
)
from poslab.datamodules.language import EvaluationBatches, LanguageModelDataModule, TrainingWindows
from poslab.datamodules.segmentation import segment
from poslab.datamodules.synthetic import batch_generator
from poslab.datamodules.tokenization import coordinate_bytes
from poslab.errors import ConfigError
from tests.conftest import local_corpus
from tests.datamodules.test_corpora import make_corpus, write_jsonl

# ---- the reference: per-token arrays computed the old way (version 3's _SplitWriter), from the segmentation ----


def old_per_token_arrays(corpus: dict, data_dir: Path, tokenizer) -> dict[str, dict[str, dict[str, np.ndarray]]]:
    """``{group: {split: {tokens, documents, paragraphs, sentences}}}`` as version 3 stored them per token."""
    resolved = resolve_corpus(corpus, data_dir)
    out = {}
    for group in resolved.groups:
        parts = {
            s: {k: [] for k in ("tokens", "documents", "paragraphs", "sentences")} for s in ("train", "validation")
        }
        offsets = {s: [0, 0] for s in parts}  # cumulative paragraphs, sentences
        for document in group.documents(resolved.validation_fraction):
            tokens, first_bytes = tokenizer.encode(document.text)
            paragraph, sentence = segment(document.text, document.style)
            at = coordinate_bytes(document.text, first_bytes)  # a token's first character, as far as it holds it
            paragraphs, sentences = paragraph[at], sentence[at]
            n = len(tokens) + 1
            last = (int(paragraphs[-1]), int(sentences[-1])) if len(tokens) else (0, 0)
            split, offset = parts[document.split], offsets[document.split]
            split["tokens"].append(np.append(tokens, tokenizer.separator).astype(np.uint16))
            split["documents"].append(np.full(n, document.ordinal, dtype=np.int32))
            split["paragraphs"].append((np.append(paragraphs, last[0]) + offset[0]).astype(np.int32))
            split["sentences"].append((np.append(sentences, last[1]) + offset[1]).astype(np.int32))
            offset[0] += last[0] + 1
            offset[1] += last[1] + 1
        out[group.group.name] = {s: {k: np.concatenate(v) for k, v in p.items()} for s, p in parts.items()}
    return out


def old_window(split: SimpleNamespace, start: int, length: int) -> dict[str, torch.Tensor]:
    """Version 3's ``language.window``: slices of the per-token arrays."""
    stop = start + length
    out = {"tokens": torch.from_numpy(np.asarray(split.tokens[start:stop], dtype=np.int64))}
    for name, array in (("paragraph", split.paragraphs), ("sentence", split.sentences)):
        values = np.asarray(array[start:stop], dtype=np.int64)
        out[name] = torch.from_numpy(values - values[0])
    return out


def old_batch(windows: TrainingWindows, groups: list[PreparedGroup], index: int) -> dict[str, torch.Tensor]:
    """Version 3's ``TrainingWindows.batch``: the same draws, a window cut row by row from per-token arrays."""
    generator = batch_generator(windows.seed, index)
    choice = torch.multinomial(windows.probabilities, windows.batch_size, replacement=True, generator=generator)
    rows = []
    for g in choice.tolist():
        split = groups[g].splits["train"]
        start = int(torch.randint(0, len(split) - windows.length + 1, (1,), generator=generator))
        rows.append(old_window(split, start, windows.length))
    return {key: torch.stack([w[key] for w in rows]) for key in rows[0]}


def reference_groups(groups: list[PreparedGroup], arrays: dict) -> list[PreparedGroup]:
    """The same groups with version 3's per-token arrays as their splits (what old_window reads)."""
    return [
        PreparedGroup(g.name, g.weight, g.directory, g.meta, {s: OldSplit(**a) for s, a in arrays[g.name].items()})
        for g in groups
    ]


def old_evaluation_batch(groups: list[PreparedGroup], item: tuple) -> dict[str, torch.Tensor]:
    """One batch of ``EvaluationBatches`` (its item: group, length, sliding, windows) cut row by row the old way."""
    group, length, _, part = item
    rows = [old_window(groups[group].splits["validation"], int(s), length + 1) for s in part.starts]
    return {key: torch.stack([w[key] for w in rows]) for key in rows[0]}


class OldSplit(SimpleNamespace):
    def __len__(self) -> int:
        return len(self.tokens)


def code_and_wikitext_corpus(data_dir: Path) -> dict:
    """Python files (code segmentation: lines are sentences) and a WikiText file (headings, one paragraph a line)."""
    for i in range(30):
        body = "".join(f"def f{j}(x):\n    '''Doc. More.'''\n    return x + {j}\n\n\n" for j in range(i % 5 + 1))
        (data_dir / "code").mkdir(parents=True, exist_ok=True)
        (data_dir / "code" / f"m{i}.py").write_text(f"import os\n\n{body}class C{i}:\n    pass\n")
    (data_dir / "wiki").mkdir(parents=True, exist_ok=True)
    (data_dir / "wiki" / "wiki.test.raw").write_text(
        "".join(
            f" = Article {i} = \n \n Text {i} . Second sentence ! \n \n = = Part = = \n 中文句子。又一句！ {i} \n"
            for i in range(40)
        )
    )
    return local_corpus("code_wiki", {"code": (0.5, "code/*.py"), "wiki": (0.5, "wiki/*.raw")})


def assert_same_as_old(dm: LanguageModelDataModule, arrays: dict, monkeypatch, n_batches: int = 25) -> None:
    """Every split's coordinates, spans and density, and every key of training batches and validation windows."""
    for group in dm.groups:
        for name, split in group.splits.items():
            old = arrays[group.name][name]
            assert np.array_equal(np.asarray(split.tokens), old["tokens"])
            for key in ("documents", "paragraphs", "sentences"):
                values = np.asarray(getattr(split, key))
                assert values.dtype == np.int32 and np.array_equal(values, old[key]), (group.name, name, key)
                assert np.array_equal(getattr(split, key)[7:300:3], old[key][7:300:3])
                picks = np.array([0, len(old[key]) - 1, 5, 5, -1])
                assert np.array_equal(getattr(split, key)[picks], old[key][picks])
                assert int(getattr(split, key)[-1]) == int(old[key][-1])
            density = float(old["paragraphs"][-1] - old["paragraphs"][0]) / max(1, len(old["tokens"]) - 1)
            assert split.paragraph_density == density
            starts = np.flatnonzero(np.diff(old["documents"])) + 1
            bounds = [0, *starts.tolist(), len(old["documents"])]
            spans = [(int(old["documents"][a]), a, b) for a, b in zip(bounds[:-1], bounds[1:])]
            assert list(split.document_spans()) == spans
    new_train = [dm.train_windows.batch(i) for i in range(n_batches)]
    evaluation = EvaluationBatches(dm.groups, dm.evaluation)
    cut = ("tokens", "paragraph", "sentence")
    new_val = [{key: evaluation[i][key] for key in cut} for i in range(len(evaluation))]
    reference = reference_groups(dm.groups, arrays)
    with monkeypatch.context() as m:
        m.setattr(language, "window", old_window)
        old_train = [old_batch(dm.train_windows, reference, i) for i in range(n_batches)]
        old_val = [old_evaluation_batch(reference, item) for item in evaluation.items]
    for new, old in zip([*new_train, *new_val], [*old_train, *old_val]):
        assert new.keys() == old.keys() == {"tokens", "paragraph", "sentence"}
        for key in new:
            assert new[key].dtype == old[key].dtype == torch.int64 and torch.equal(new[key], old[key]), key


def datamodule(corpus: dict, tmp_path: Path, context_length: int = 40, **settings) -> LanguageModelDataModule:
    dm = LanguageModelDataModule(
        "lm",
        corpus,
        str(tmp_path / "data"),
        str(tmp_path / "cache"),
        context_length=context_length,
        batch_size=16,
        val_windows=24,
        seed=5,
        **{"passkey": {"enabled": False}, **settings},  # batches only: no passkey (it needs bytes; bpe here too)
    )
    dm.setup()
    return dm


@pytest.mark.parametrize("fixture", ["prose", "code_wiki"])
def test_batches_and_coordinates_equal_the_per_token_layout(tmp_path, monkeypatch, fixture):
    corpus = make_corpus(tmp_path / "data") if fixture == "prose" else code_and_wikitext_corpus(tmp_path / "data")
    dm = datamodule(corpus, tmp_path)
    arrays = old_per_token_arrays(corpus, tmp_path / "data", corpus_tokenizer(dm.groups, tmp_path / "cache"))
    assert_same_as_old(dm, arrays, monkeypatch)
    # windows that start at every offset of a stretch crossing several documents, and at the split's very end
    split, old = dm.groups[0].splits["train"], arrays[dm.groups[0].name]["train"]
    for start in [*range(0, 400, 7), len(old["tokens"]) - 41]:
        for key, name in (("paragraph", "paragraphs"), ("sentence", "sentences")):
            cut = language.window(split, start, 41)[key].numpy()
            values = old[name][start : start + 41].astype(np.int64)
            assert np.array_equal(cut, values - values[0])


def test_bpe_batches_equal_the_per_token_layout_also_where_a_token_skips_a_sentence(tmp_path, monkeypatch):
    # with a BPE a token can swallow a whole sentence: "。(。(" is one pretoken (punctuation) where "(。" is a
    # sentence of its own, so the next token's index is two above the last one's
    texts = [f"Short. A. B! Words {i} here.\n\nNext {i}. 甲。(。(丙。(。(丁！\n\nLast {i}. Yes." * 2 for i in range(40)]
    write_jsonl(tmp_path / "data" / "web" / "docs.jsonl", texts)
    corpus = {
        "name": "bpe_web",
        "tokenizer": "bpe",
        "vocab_size": 320,
        "validation_fraction": 0.2,
        "groups": {"main": {"local": [{"pattern": "web/*.jsonl"}]}},
    }
    dm = datamodule(corpus, tmp_path, context_length=24)
    arrays = old_per_token_arrays(corpus, tmp_path / "data", corpus_tokenizer(dm.groups, tmp_path / "cache"))
    assert np.diff(arrays["main"]["train"]["sentences"]).max() >= 2  # the case the repeated offsets are for
    assert_same_as_old(dm, arrays, monkeypatch)


def test_the_cache_stores_tokens_and_boundaries_only_at_about_two_bytes_a_token(tmp_path):
    sentence = "The committee met on a Tuesday to discuss the long list of proposals before it. "
    texts = [(sentence * 4 + "\n\n") * 5 + f"Document {i} ends here." for i in range(80)]  # ~80-byte sentences
    write_jsonl(tmp_path / "data" / "web" / "docs.jsonl", texts)
    corpus = {"name": "web", "validation_fraction": 0.2, "groups": {"main": {"local": [{"pattern": "web/*.jsonl"}]}}}
    (group,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert group.meta["version"] == CACHE_VERSION == 5
    files = sorted(p.name for p in group.directory.iterdir() if p.name != "meta.json")
    assert files == sorted(f"{s}.{n}" for s in ("train", "validation") for n in ("tokens.u16", *BOUNDARY_FILES))
    tokens = sum(s["tokens"] for s in group.meta["splits"].values())
    on_disk = sum(p.stat().st_size for p in group.directory.iterdir() if p.name != "meta.json")
    assert on_disk / tokens <= 2.1  # was 14: uint16 + 3 x int32 per token
    for split, stats in group.meta["splits"].items():
        layout = group.meta["arrays"][split]
        assert layout["paragraph_starts"] == ["<u4", stats["paragraphs"] - 1]  # one per paragraph after the first
        assert layout["document_starts"] == ["<u4", stats["documents"]]
        assert layout["document_ordinals"] == ["<i4", stats["documents"]]
        expected = 2 * stats["tokens"] + 4 * sum(length for _, length in layout.values())
        assert expected == sum((group.directory / f).stat().st_size for f in files if f.startswith(split + "."))


BOUNDARY_FILES = [f"{name}.bin" for name in corpora.BOUNDARY_ARRAYS]


def test_a_cache_of_the_old_layout_is_prepared_again_and_loading_it_directly_says_so(tmp_path):
    corpus = make_corpus(tmp_path / "data", n_docs=20)
    first = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0]
    old = tmp_path / "cache" / "old-layout"
    old.mkdir()
    meta = {**first.meta, "version": 3, "coordinates": ["documents", "paragraphs", "sentences"]}
    del meta["arrays"]
    (old / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(ConfigError, match="cache version 3, and this poslab reads version 5: delete it"):
        load_prepared(old)
    # the version is part of the cache key: a version 3 directory is never picked up, the data are prepared anew
    assert first.directory.name != old.name and load_prepared(first.directory).meta["version"] == 5


def test_a_long_preparation_logs_documents_and_bytes_as_it_goes(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(corpus_writer, "PROGRESS_SECONDS", 0.0)
    corpus = make_corpus(tmp_path / "data", n_docs=10)
    with caplog.at_level(logging.INFO, logger="poslab"):
        prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("preparing tiny_mix/en")]
    assert len(lines) == 10 and "10 documents" in lines[-1] and "MB/s" in lines[-1] and "MB of files" in lines[-1]
    assert any(r.getMessage().startswith("prepared tiny_mix/zh: 10 documents") for r in caplog.records)


def test_a_coordinate_indexes_like_the_per_token_array_it_stands_for():
    rng = np.random.default_rng(0)
    steps = rng.choice([0, 0, 0, 0, 1, 1, 2, 5], size=500)
    counts = (3 + np.cumsum(steps)).astype(np.int32)  # starts above 0, jumps above 1
    lookup = np.repeat(rng.permutation(40), rng.integers(1, 25, size=40)).astype(np.int32)
    for values, kind in ((counts, False), (lookup, True)):
        c = Coordinate.from_values(values, lookup=kind)
        assert len(c) == len(values) and np.array_equal(np.asarray(c), values) and np.asarray(c).dtype == np.int32
        assert int(c[0]) == values[0] and int(c[-1]) == values[-1] and int(c[17]) == values[17]
        for key in (slice(3, 90), slice(None, None, 7), slice(-50, None), slice(10, 10), np.array([4, 4, 0, -2])):
            assert np.array_equal(c[key], values[key])
        assert np.array_equal(c[values > values[100]], values[values > values[100]])
        for start in range(0, len(values) - 30, 11):
            assert np.array_equal(c.relative(start, start + 30), values[start : start + 30] - values[start])
        with pytest.raises(IndexError):
            c[len(values)]
    with pytest.raises(ValueError, match="never decreases"):
        Coordinate.from_values(np.array([0, 2, 1]))


def test_a_split_built_from_per_token_arrays_is_the_split_the_cache_would_store():
    tokens = np.array([5, 6, 256, 7, 8, 9, 256], dtype=np.uint16)
    documents, paragraphs = np.array([0, 0, 0, 3, 3, 3, 3]), np.array([0, 1, 1, 2, 2, 3, 3])
    split = PreparedSplit(tokens, documents, paragraphs, paragraphs)
    assert list(split.document_spans()) == [(0, 0, 3), (3, 3, 7)]
    assert split.paragraph_density == 3 / 6 and split.paragraphs.relative(2, 6).tolist() == [0, 1, 1, 2]
    with pytest.raises(ValueError, match="entries for 7 tokens"):
        PreparedSplit(tokens, documents[:3], paragraphs, paragraphs)


def test_a_cache_prepared_with_the_segmentation_before_version_5_is_never_reused(tmp_path, monkeypatch):
    """Version 4 caches hold code coordinates that read ahead (docs/causality.md): the version is part of the cache
    key, so preparing again makes a new directory, and loading a version 4 directory directly says so."""
    corpus = make_corpus(tmp_path / "data", n_docs=20)
    monkeypatch.setattr(corpora.cache, "CACHE_VERSION", 4)
    old = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0]
    monkeypatch.undo()
    new = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0]
    assert old.meta["version"] == 4 and new.meta["version"] == CACHE_VERSION == 5
    assert old.directory != new.directory and old.directory.exists()
    with pytest.raises(ConfigError, match="cache version 4, and this poslab reads version 5: delete it"):
        load_prepared(old.directory)


def test_documents_of_one_split_key_are_held_out_or_trained_on_whole(tmp_path):
    """enwiki keeps some articles from two dumps (2016 and 2020 "Algeria"): by document, one version could be held
    out and the other trained on. With ``split_key: title`` every title is on one side only; without it the same
    files split by document, as before."""
    from poslab.datamodules.corpora.resolution import resolve_group
    from poslab.datamodules.corpora.sources import SourceGroup

    rows = [{"title": f"Article {i % 40}", "text": f"Version {i // 40} of article {i % 40}. " * (5 + i % 7)}
            for i in range(120)]  # fmt: skip
    (tmp_path / "wiki").mkdir()
    (tmp_path / "wiki" / "a.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    titles = [row["title"] for row in rows]
    sides = {}
    for key in ("title", None):
        source = {"pattern": "wiki/*.jsonl", **({"split_key": key} if key else {})}
        group = resolve_group("fixture", SourceGroup.from_config("main", {"local": [source]}), tmp_path, "strict")
        plan = group.split_plan(0.2)
        held = {titles[o] for o in plan.held}
        trained = {titles[o] for o in range(len(rows)) if o not in plan.held}
        sides[key] = (held, trained)
        assert 0.1 < len(plan.held) / len(rows) < 0.3  # about the fraction asked
    assert sides["title"][0] and not sides["title"][0] & sides["title"][1]  # no title on both sides
    assert sides[None][0] & sides[None][1]  # by document, some titles are on both
    with pytest.raises(ConfigError, match="split_key='title' but format='text'"):
        SourceGroup.from_config("main", {"local": [{"pattern": "x/*.txt", "format": "text", "split_key": "title"}]})


# ---- the code version in the cache key ----------------------------------------------------------------------------

#: a web corpus of the JSONL files under ``web/``, tokenized by a small BPE (trained, so its key holds the code too)
BPE_WEB_CORPUS = {
    "name": "web",
    "tokenizer": "bpe",
    "vocab_size": 300,
    "validation_fraction": 0.3,
    "groups": {"main": {"local": [{"pattern": "web/*.jsonl"}]}},
}


def test_a_change_of_a_listed_modules_source_prepares_the_data_and_trains_the_bpe_anew(tmp_path, monkeypatch):
    """a5ea022 changed segmentation's sentence ends and c672c8e the BPE's encoding of special tokens, and neither
    bumped CACHE_VERSION: the stale caches were reused. The source of the modules that decide the data is hashed
    into the cache key and the tokenizer's, so an edit of one (here segmentation's source) prepares anew."""
    from poslab.datamodules.corpora import code_version

    write_jsonl(tmp_path / "data" / "web" / "a.jsonl", [f"第{i}段。他说：“好。” Doc {i}. End." for i in range(8)])
    corpus = copy.deepcopy(BPE_WEB_CORPUS)
    (first,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert first.meta["code"] == code_version.code_hash()
    assert set(code_version.HASHED) >= {
        "poslab.datamodules.segmentation",
        "poslab.datamodules.tokenization",
        "poslab.datamodules.codec",
        "poslab.datamodules.corpora.documents",
        "poslab.datamodules.corpora.writer",
    }
    real = code_version.module_source
    edited = lambda name: real(name) + (b"\n# edited\n" if name == "poslab.datamodules.segmentation" else b"")
    monkeypatch.setattr(code_version, "module_source", edited)
    (second,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert second.meta["code"] != first.meta["code"] and second.directory != first.directory
    tokenizers = sorted(p.name for p in (tmp_path / "cache" / "tokenizers").glob("*.json"))
    assert len(tokenizers) == 2  # the BPE is trained again under the new code too
    monkeypatch.undo()
    (again,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert again.directory == first.directory  # the same code finds its cache


def test_another_tokenizers_version_prepares_the_data_and_trains_the_bpe_anew(tmp_path, monkeypatch):
    """The third-party libraries that shape the data (``tokenizers`` trains and applies the BPE, ``datasets`` reads
    a hub source) change no poslab source when upgraded: their installed versions are hashed into both keys, so a
    cache prepared under another ``tokenizers`` is not read as this one's."""
    from poslab.datamodules.corpora import code_version

    assert set(code_version.LIBRARIES) >= {"tokenizers", "datasets"}
    assert code_version.installed_version("poslab-no-such-distribution") == "absent"
    write_jsonl(tmp_path / "data" / "web" / "a.jsonl", [f"Doc {i}. A sentence. End." for i in range(8)])
    corpus = copy.deepcopy(BPE_WEB_CORPUS)
    (first,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    real = code_version.installed_version
    monkeypatch.setattr(code_version, "installed_version", lambda n: "0.0-other" if n == "tokenizers" else real(n))
    (second,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert second.meta["code"] != first.meta["code"] and second.directory != first.directory
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*.json"))) == 2  # the BPE is trained again too
    monkeypatch.setattr(code_version, "installed_version", lambda n: "absent" if n == "datasets" else real(n))
    assert code_version.code_hash() not in {first.meta["code"], second.meta["code"]}  # not installed: a version too
    monkeypatch.undo()
    (again,) = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert again.directory == first.directory  # the same versions find their cache


def _poslab_imports(name: str) -> set[str]:
    """The poslab modules ``name``'s source imports (at the top or inside a function), read from its syntax."""
    import ast
    import importlib.util

    def is_module(dotted: str) -> bool:
        parent = importlib.util.find_spec(dotted.rpartition(".")[0])
        return bool(parent and parent.submodule_search_locations and importlib.util.find_spec(dotted))

    found = set()
    for node in ast.walk(ast.parse(Path(importlib.util.find_spec(name).origin).read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {node.module} | {
                f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}")
            }
    return {module for module in found if module.startswith("poslab.")}


def test_every_module_the_preparation_path_imports_is_hashed_or_says_why_not():
    """A module added to the preparation path later must join ``code_version.HASHED`` (its code decides the data)
    or ``NOT_HASHED`` (with the reason): this walks the imports from ``cache`` and names any module in neither."""
    from poslab.datamodules.corpora import code_version

    listed = {**code_version.HASHED, **code_version.NOT_HASHED}
    covered = lambda module: module in listed or any(p.endswith(".") and module.startswith(p) for p in listed)
    seen, todo, missing = set(), ["poslab.datamodules.corpora.cache"], []
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        if not covered(module):
            missing.append(module)
        if module in code_version.HASHED or module in code_version.NOT_HASHED:  # a package listed whole: not walked
            todo += sorted(_poslab_imports(module) - seen)
    assert missing == [], f"list these in poslab/datamodules/corpora/code_version.py (HASHED or NOT_HASHED): {missing}"
    assert seen >= set(code_version.HASHED)  # each hashed module is on the path (a stale entry is an error too)
    assert all(len(code_version.module_source(name)) > 0 for name in code_version.HASHED)
