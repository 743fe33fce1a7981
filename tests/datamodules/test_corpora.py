"""Corpora: byte tokenisation, the prepared cache (rebuild, reuse, concurrency), splits, messages."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from poslab.datamodules.corpora import (
    SEPARATOR,
    LocalSource,
    decode_bytes,
    encode_bytes,
    load_prepared,
    prepare_corpus,
)
from poslab.datamodules.language import LanguageModelDataModule
from poslab.errors import ConfigError, DataError
from poslab.running.builders import build_datamodule, build_module
from tests.conftest import CONF, compose_config, run_train


def write_jsonl(path: Path, texts: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def make_corpus(data_dir: Path, n_docs: int = 60) -> dict:
    """A tiny two-language corpus (English and Chinese documents) in the shared folder layout."""
    write_jsonl(
        data_dir / "en" / "docs.jsonl",
        [f"Document {i}. The quick brown fox {i} jumps.\n\nSecond paragraph {i}." * 3 for i in range(n_docs)],
    )
    zh = data_dir / "zh" / "novel.txt"
    zh.parent.mkdir(parents=True, exist_ok=True)
    zh.write_text(
        "".join(f"第{i}回 标题\n\n" + f"人工智能是计算机科学的一个分支。第{i}段。\n\n" * 2 for i in range(n_docs))
    )
    return {
        "name": "tiny_mix",
        "validation_fraction": 0.2,
        "groups": {
            "en": {"weight": 0.5, "local": [{"pattern": "en/*.jsonl"}]},
            "zh": {
                "weight": 0.5,
                "local": [{"pattern": "zh/*.txt", "format": "text", "document_start": "^第.{1,8}回"}],
            },
        },
    }


@pytest.mark.parametrize(
    "data",
    [b"", b"plain ascii", "中文 and émoji 😀".encode(), b"\xff\xfe\x00\x80invalid \xe4\xb8", bytes(range(256))],
)
def test_byte_tokenisation_round_trips_arbitrary_bytes(data):
    text = data.decode("utf-8", errors="surrogateescape")
    tokens = encode_bytes(text)
    assert tokens.dtype == np.uint16 and len(tokens) == len(data)
    assert decode_bytes(tokens) == data
    assert decode_bytes(np.append(tokens, SEPARATOR)) == data  # the separator is not a byte


def test_prepared_cache_holds_every_document_once_with_its_index(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    en, zh = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    for group, n in ((en, 60), (zh, 60)):
        train, val = group.splits["train"], group.splits["validation"]
        assert group.meta["splits"]["train"]["documents"] + group.meta["splits"]["validation"]["documents"] == n
        assert len(train) > len(val) > 0
        assert train.tokens.dtype == np.uint16 and train.documents.dtype == np.int32
        # each document ends with the separator; document indices are non-decreasing
        assert int(train.tokens[-1]) == SEPARATOR
        assert np.all(np.diff(np.asarray(train.documents)) >= 0)
    text = decode_bytes(np.asarray(zh.splits["train"].tokens)).decode()
    assert "人工智能" in text and text.count("回 标题") == zh.meta["splits"]["train"]["documents"]


def test_validation_documents_never_appear_in_training(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    for group in prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache"):
        train_docs = set(np.unique(np.asarray(group.splits["train"].documents)).tolist())
        val_docs = set(np.unique(np.asarray(group.splits["validation"].documents)).tolist())
        assert val_docs and train_docs and not (train_docs & val_docs)
        val_text = decode_bytes(np.asarray(group.splits["validation"].tokens)).decode()
        train_text = decode_bytes(np.asarray(group.splits["train"].tokens)).decode()
        first_val_doc = val_text.split("\n")[0][:30]
        assert first_val_doc and first_val_doc not in train_text


def test_paragraph_and_sentence_coordinates_are_stored_and_reset_per_document(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    en = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0]
    split = en.splits["train"]
    documents, paragraphs = np.asarray(split.documents), np.asarray(split.paragraphs)
    sentences = np.asarray(split.sentences)
    assert np.all(np.diff(paragraphs) >= 0) and np.all(np.diff(sentences) >= 0)  # cumulative over the split
    starts = np.flatnonzero(np.diff(documents)) + 1
    assert np.all(paragraphs[starts] == paragraphs[starts - 1] + 1)  # a new document starts a new paragraph
    first = slice(0, starts[0])  # document 0: "Document 0. The quick ... jumps.\n\nSecond paragraph 0." x 3
    text = decode_bytes(np.asarray(split.tokens[first])).decode()
    assert paragraphs[first].max() - paragraphs[0] == text.count("\n\n")  # blank lines separate paragraphs
    n_paragraphs = en.meta["splits"]["train"]["paragraphs"]
    assert split.paragraph_density == pytest.approx((n_paragraphs - 1) / (len(split) - 1))


def test_cache_is_reused_when_nothing_changes_and_rebuilt_when_a_setting_or_file_does(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    first = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0].directory
    mtime = (first / "meta.json").stat().st_mtime_ns
    again = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0].directory
    assert again == first and (first / "meta.json").stat().st_mtime_ns == mtime
    changed = prepare_corpus({**corpus, "validation_fraction": 0.3}, tmp_path / "data", tmp_path / "cache")[0]
    assert changed.directory != first
    with open(tmp_path / "data" / "en" / "docs.jsonl", "a") as f:
        f.write(json.dumps({"text": "one more document"}) + "\n")
    grown = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0]
    assert grown.directory not in (first, changed.directory)
    assert grown.meta["splits"]["train"]["documents"] + grown.meta["splits"]["validation"]["documents"] == 61
    # an edit that keeps the file's size and puts its mtime back (cp -p, touch -r) is still another text
    path = tmp_path / "data" / "en" / "docs.jsonl"
    stat, data = path.stat(), path.read_bytes()
    path.write_bytes(data.replace(b"one more document", b"one more DOCUMENT"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    edited = prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")[0]
    assert edited.directory != grown.directory
    assert edited.meta["source_files"] != grown.meta["source_files"]  # the sources' sha256 is the new text's


def _prepare_in_process(args: tuple[dict, str, str]) -> str:
    corpus, data_dir, cache_dir = args
    return str(prepare_corpus(corpus, data_dir, cache_dir)[0].directory)


@pytest.mark.slow
def test_two_processes_preparing_the_same_cache_leave_one_valid_cache(tmp_path):
    corpus = make_corpus(tmp_path / "data", n_docs=400)
    args = (corpus, str(tmp_path / "data"), str(tmp_path / "cache"))
    # forked, not spawned: two processes at once without importing poslab twice (what is tested is the race)
    with multiprocessing.get_context("fork").Pool(2) as pool:
        directories = pool.map(_prepare_in_process, [args, args])
    assert directories[0] == directories[1]
    entries = sorted(p.name for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock"))
    assert len(entries) == 2  # en and zh, no temporary directories left
    prepared = load_prepared(Path(directories[0]))
    assert prepared.meta["splits"]["train"]["documents"] + prepared.meta["splits"]["validation"]["documents"] == 400


def missing_corpus_message(corpus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The refusal of ``corpus`` offline with a data directory that does not exist (``tmp_path / 'nothing'``)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = compose_config([f"corpus={corpus}", "paths.data_dir=" + str(tmp_path / "nothing")], tmp_path)
    with pytest.raises(ConfigError) as info:
        build_datamodule(cfg).setup()
    return str(info.value)


def test_missing_corpus_says_what_was_looked_for_where_and_how_to_provide_it(tmp_path, monkeypatch):
    message = missing_corpus_message("wiki_en_zh", tmp_path, monkeypatch)
    assert "enwiki/*.jsonl" in message and str(tmp_path / "nothing") in message
    assert "POSLAB_DATA_DIR" in message and "wikimedia/wikipedia" in message and "HF_HUB_OFFLINE" in message


def test_missing_files_of_a_group_without_a_hub_copy_do_not_send_the_user_online(tmp_path, monkeypatch):
    """wikitext2_offline's groups have no hub copy: the message says so, and neither tells of a hub to try."""
    message = missing_corpus_message("wikitext2_offline", tmp_path, monkeypatch)
    assert "has no hub copy" in message and str(tmp_path / "nothing") in message
    assert "go online" not in message and "no hub dataset is not" not in message


WIKITEXT_HUB = {"path": "Salesforce/wikitext", "name": "wikitext-2-raw-v1", "split": "train", "field": "text"}


def hub_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load_dataset) -> dict:
    """A group with a hub copy and no local files, online (no HF_HUB_OFFLINE), ``datasets`` standing in as
    ``load_dataset``: no test reaches the network."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=load_dataset))
    local = [{"pattern": "wikitext2/wiki.*.raw", "format": "wikitext"}]
    return {"name": "wikitext2", "validation_fraction": 0.05, "groups": {"main": {"hub": WIKITEXT_HUB, "local": local}}}


def test_a_hub_copy_that_cannot_be_reached_says_where_files_were_looked_for_and_how_to_stop_at_once(
    tmp_path, monkeypatch
):
    """Online but without a network, ``datasets`` retried for about 24 s and ended with its own ConnectionError,
    without poslab's hint of the local path, POSLAB_DATA_DIR and HF_HUB_OFFLINE."""

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'Salesforce/wikitext' on the Hub (LocalEntryNotFoundError)")

    corpus = hub_corpus(tmp_path, monkeypatch, unreachable)
    data = tmp_path / "nothing"
    with pytest.raises(ConfigError) as info:
        prepare_corpus(corpus, data, tmp_path / "cache")
    assert str(info.value) == (
        f"corpus 'wikitext2', source group 'main': no local files matched {data}/wikitext2/wiki.*.raw, and reading "
        f"the hub dataset Salesforce/wikitext (wikitext-2-raw-v1) failed (ConnectionError: Couldn't reach "
        f"'Salesforce/wikitext' on the Hub (LocalEntryNotFoundError)). Put the files there in one of the formats "
        f"jsonl, text, wikitext, parquet, python (e.g. a .jsonl with a 'text' field), or point POSLAB_DATA_DIR "
        f"(paths.data_dir, now {data}) at a directory that has them; on a machine that cannot reach the hub, set "
        f"HF_HUB_OFFLINE=1 so that a run stops here at once."
    )
    assert [p for p in (tmp_path / "cache").iterdir() if not p.name.endswith(".lock")] == []


def test_hub_rows_without_the_text_field_name_the_dataset_field_and_keys(tmp_path, monkeypatch):
    rows = lambda *args, **kwargs: iter([{"content": "a document", "id": 1}])
    corpus = hub_corpus(tmp_path, monkeypatch, rows)
    with pytest.raises(DataError) as info:
        prepare_corpus(corpus, tmp_path / "nothing", tmp_path / "cache")
    assert str(info.value) == (
        "hub dataset Salesforce/wikitext (wikitext-2-raw-v1): its rows have no 'text' field (their keys: 'content', "
        "'id'); set the group's hub field to the column holding the text."
    )


@pytest.mark.slow
def test_train_py_with_a_missing_corpus_exits_with_the_message(tmp_path):
    result = run_train(["corpus=openwebtext", f"paths.data_dir={tmp_path}", "trainer.max_steps=2"], tmp_path)
    assert result.returncode != 0
    assert "no local files matched" in result.stderr and "Traceback" not in result.stderr


def test_stdlib_code_corpus_finds_python_files():
    files = LocalSource("{stdlib}/json/*.py", format="python").files(Path("/nonexistent"))
    assert any(p.name == "decoder.py" for p in files)


@pytest.mark.slow
def test_python_code_is_the_standard_library_only_without_tests_unless_asked(tmp_path):
    import sysconfig

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    cfg = compose_config(["corpus=python_code"], tmp_path)
    (source,) = OmegaConf.to_container(cfg.corpus, resolve=True)["groups"]["main"]["local"]
    files = LocalSource(**source).files(Path("/nonexistent"))
    folders = {part for p in files for part in p.relative_to(stdlib).parts[:-1]}
    assert not folders & {"site-packages", "dist-packages", "test", "tests", "idle_test"}
    assert any(p.name == "decoder.py" for p in files) and 300 < len(files) < 3000
    with_tests = compose_config(["corpus=python_code", "corpus.include_tests=true"], tmp_path)
    (source,) = OmegaConf.to_container(with_tests.corpus, resolve=True)["groups"]["main"]["local"]
    test_files = LocalSource(**source).files(Path("/nonexistent"))
    assert len(test_files) > len(files) and not {
        part for p in test_files for part in p.relative_to(stdlib).parts[:-1]
    } & {"site-packages", "dist-packages"}


def test_a_fake_site_packages_inside_stdlib_is_left_out_and_meta_records_version_and_files(tmp_path, monkeypatch):
    import platform
    import sysconfig

    lib = tmp_path / "lib"
    for name in ("json/decoder.py", "site-packages/thirdparty/x.py", "dist-packages/y.py", "test/test_z.py"):
        (lib / name).parent.mkdir(parents=True, exist_ok=True)
        (lib / name).write_text(f"# {name}\n\ndef f():\n    return 1\n" * 20)
    (lib / "os.py").write_text("import sys\n\n\ndef g():\n    pass\n" * 20)
    monkeypatch.setattr(sysconfig, "get_paths", lambda: {"stdlib": str(lib)})
    source = {"pattern": "{stdlib}/**/*.py", "format": "python", "include_tests": False}
    corpus = {"name": "code", "validation_fraction": 0.5, "groups": {"main": {"local": [source]}}}
    (group,) = prepare_corpus(corpus, tmp_path, tmp_path / "cache")
    read = (lib / "json/decoder.py", lib / "os.py")
    expected = {"files": 2, "file_bytes": sum(p.stat().st_size for p in read)}
    sources = group.meta["source_files"]
    expected["python_version"] = platform.python_version()
    assert {k: sources[k] for k in expected} == expected
    # each file read: its path, size, content hash and the split it feeds (cut per document here)
    assert sorted((f["path"], f["bytes"], f["sha256"], f["split"]) for f in sources["listing"]) == sorted(
        (str(p), p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest(), "train+validation (by document)")
        for p in read
    )
    assert sources["test_files_trained_on"] == []  # test/test_z.py is left out with the test packages
    meta = json.loads((group.directory / "meta.json").read_text())
    assert meta["source_files"] == group.meta["source_files"]


@pytest.mark.slow
def test_a_text_corpus_selects_a_language_model_size_unless_model_or_an_experiment_says_otherwise(tmp_path):
    for corpus in ("wikitext2", "python_code", "openwebtext", "wiki_en_zh", "wikitext2_offline"):
        cfg = compose_config([f"corpus={corpus}", "encoding=hrope_axial"], tmp_path)
        assert (cfg.model.n_layers, cfg.model.n_heads, cfg.model.d_model) == (4, 4, 128)  # model/hrope_cpu
    assert compose_config([], tmp_path).model.d_model == 64  # the synthetic tasks keep the tiny model
    assert compose_config(["corpus=wikitext2", "model=byte"], tmp_path).model.d_model == 256
    assert compose_config(["corpus=wikitext2", "model=tiny"], tmp_path).model.n_layers == 2
    layer = compose_config(["experiment=increments_layer"], tmp_path)
    assert (layer.corpus.name, layer.model.n_layers, layer.model.d_model) == ("wiki_en_zh", 6, 256)  # model/byte
    hrope = compose_config(["experiment=hrope_axial", "corpus=wikitext2"], tmp_path)
    assert (hrope.model.n_layers, hrope.model.d_model) == (8, 512)  # model/hrope


def test_lm_batches_are_windows_of_the_corpus_drawn_by_group_weight(tmp_path):
    corpus = make_corpus(tmp_path / "data")
    corpus["groups"]["en"]["weight"], corpus["groups"]["zh"]["weight"] = 0.9, 0.1
    dm = LanguageModelDataModule(
        "lm",
        corpus,
        str(tmp_path / "data"),
        str(tmp_path / "cache"),
        context_length=16,
        batch_size=400,
        val_windows=4,
        seed=3,
    )
    dm.setup()
    batch = dm.train_windows.batch(0)["tokens"]
    assert batch.shape == (400, 17) and batch.dtype == torch.int64
    assert torch.equal(batch, dm.train_windows.batch(0)["tokens"])
    assert not torch.equal(batch, dm.train_windows.batch(1)["tokens"])
    chinese_rows = sum(bool(((row >= 0xE4) & (row <= 0xE9)).any()) for row in batch)
    assert 10 < chinese_rows < 90  # about 10% of 400 rows come from the zh group
    # a validation's sample: 16 x 16 tokens per group, scored at 1, 2, 4, 8 and 16 x the context (the test: the
    # whole held-out split, tests/datamodules/test_whole_held_out.py)
    assert dm.evaluation.lengths == [16, 32, 64, 128, 256] and dm.evaluation.val_span == 256
    assert dm.val_dataloader().dataset[0]["tokens"].shape == (16, 17)
    coordinates = dm.train_windows.batch(0)
    for name in ("paragraph", "sentence"):  # relative to each window's start, never decreasing
        assert torch.all(coordinates[name][:, 0] == 0) and torch.all(coordinates[name].diff(dim=1) >= 0)
    assert coordinates["paragraph"].max() > 0 and torch.all(coordinates["sentence"] >= coordinates["paragraph"])


@pytest.mark.parametrize("weight", [0, -0.5, float("nan"), "half", True])
def test_a_group_weight_that_is_not_a_number_above_zero_is_refused_before_any_data_is_read(tmp_path, weight):
    """0 silently never trained the group; a negative weight failed inside torch.multinomial at the first batch."""
    corpus = make_corpus(tmp_path / "data")
    corpus["groups"]["zh"]["weight"] = weight
    message = (
        f"corpus 'tiny_mix', source group 'zh': weight={weight!r}; a group's weight is its share of the training "
        f"windows (each row picks a group in proportion to the weights), so it must be a number above 0 (e.g. 1.0, "
        f"or 0.5 for half); to leave a group out, remove it from corpus.groups."
    )
    with pytest.raises(ConfigError) as info:
        LanguageModelDataModule("lm", corpus, str(tmp_path / "data"), str(tmp_path / "cache"), context_length=16)
    assert str(info.value) == message
    with pytest.raises(ConfigError) as info:
        prepare_corpus(corpus, tmp_path / "data", tmp_path / "cache")
    assert str(info.value) == message
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
def test_every_corpus_and_lm_experiment_composes(tmp_path):
    for corpus in sorted(p.stem for p in (CONF / "corpus").glob("*.yaml")):
        cfg = compose_config([f"corpus={corpus}"], tmp_path)
        assert cfg.task.name == ("lag" if corpus == "synthetic" else "lm")
    for experiment in ("increments_rope", "increments_shared", "increments_layer", "increments_layer_cpu"):
        cfg = compose_config([f"experiment={experiment}"], tmp_path)
        assert cfg.corpus.name == "wiki_en_zh" and cfg.model.n_layers == 6


def test_byte_model_has_the_writeups_parameter_count(tmp_path):
    from poslab.model import ModelConfig, Transformer

    cfg = compose_config(["experiment=increments_rope"], tmp_path)
    model = Transformer(ModelConfig(vocab_size=257, n_outputs=257, encoding={"name": "rope"}, **cfg.model), 512)
    # 6 x (attention 4 x 256^2 + SwiGLU 3 x 256 x 1024 + two RMSNorm gains) + embeddings and head 2 x 257 x 256
    # + final norm = 6,426,368: the "6.42M" (the write-up's "~6.4M")
    assert model.num_parameters() == 6 * (4 * 256**2 + 3 * 256 * 1024 + 2 * 256) + 2 * 257 * 256 + 256 == 6_426_368


def test_tiny_language_model_run_trains_validates_and_saves(tmp_path):
    data = tmp_path / "data"
    make_corpus(data)
    (data / "wikitext2").mkdir()
    (data / "wikitext2" / "wiki.test.raw").write_text(
        "".join(
            f" = Article {i} = \n \n Some text about {i} . \n \n = = Section = = \n More text {i} . \n"
            for i in range(40)
        )
    )
    cfg = compose_config(
        [
            "corpus=wikitext2",
            f"paths.data_dir={data}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "model=tiny",  # a corpus selects model/hrope_cpu; the tiny model keeps this test fast
            "model.d_model=32",
            "model.n_heads=2",
            "task.context_length=32",
            "task.batch_size=4",
            "task.val_every_n_steps=5",
            "task.val_windows=4",
            "trainer.max_steps=10",
            "~logger",
            "~callbacks",
            "encoding=rope",
        ],
        tmp_path,
    )
    from poslab.running.training import run

    results = run(cfg)
    assert results["figures"]["val_bpb"] == pytest.approx(results["figures"]["val_loss"] / np.log(2))
    assert 0 < results["figures"]["val_loss"] < np.log(257) + 1
    assert (tmp_path / "model.pt").is_file() and (tmp_path / "results.json").is_file()
    from poslab.running.builders import load_run

    loaded_cfg, module = load_run(tmp_path)
    assert loaded_cfg.corpus.name == "wikitext2" and module.model.encoding.name == "rope"
    build_module(loaded_cfg, build_datamodule(loaded_cfg))
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
    assert os.environ.get("HF_HUB_OFFLINE") == "1"


@pytest.mark.parametrize("encoding", ["hrope_axial", "rand_axial", "period_axial"])
def test_hierarchical_encodings_train_on_a_corpus_with_its_paragraph_density(tmp_path, encoding):
    from poslab.running.training import run

    data = tmp_path / "data"
    make_corpus(data)
    cfg = compose_config(
        [
            f"encoding={encoding}",
            "corpus=openwebtext",
            f"paths.data_dir={data}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "corpus.groups.main.local=[{pattern: 'en/*.jsonl'}]",
            "corpus.validation_fraction=0.2",
            "model=tiny",
            "model.d_model=48",
            "model.n_heads=2",
            "task.context_length=32",
            "task.batch_size=4",
            "task.val_every_n_steps=5",
            "task.val_windows=2",
            "trainer.max_steps=5",
            "~logger",
            "~callbacks",
        ],
        tmp_path,
    )
    results = run(cfg)
    assert np.isfinite(results["figures"]["val_loss"])
    density = results["config"]["encoding"].get("paragraph_density")
    from poslab.running.builders import load_run

    _, module = load_run(tmp_path)
    if encoding != "hrope_axial":  # filled from the corpus: about one boundary per paragraph's bytes
        assert (
            module.model.encoding.paragraph_density == pytest.approx(build_datamodule(cfg).paragraph_density)
            and density is None
        )
