"""The data settings mean what they say (issue 24, item 7): ``corpus=python_code corpus.include_tests=true`` reads a
Latin-1 test module by ``corpus.decode_errors`` like any other file, Python test modules (``test_*.py``) are not a
corpus's test split, and each data warning prints once per job, in one line. Every corpus here is a small folder
the test makes itself."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from tests.conftest import compose_config, run_train

LATIN1 = b'# -*- coding: latin-1 -*-\nNAME = "caf\xe9"\n\n\ndef name():\n    return NAME\n'
TINY_LM = [  # a model, context and batch small enough for a few CPU seconds
    "model=tiny",
    "task.context_length=16",
    "task.eval_lengths=[16,32]",  # what the tiny held-out text holds: no note about left-out default lengths
    "task.batch_size=2",
    "task.eval_batch_size=2",
    "task.val_windows=2",
    "task.val_every_n_steps=2",
    "trainer.max_steps=3",
    "corpus.validation_fraction=0.2",
]


def python_tree(root: Path) -> Path:
    """A small standard-library-like tree: modules, a test package with a Latin-1 test module (as CPython's own
    test/encoded_modules), and an empty module."""
    src = root / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "test").mkdir()
    for i in range(8):
        (src / "pkg" / f"mod{i}.py").write_text(f"import os\n\n\ndef f{i}(x):\n    return x + {i}\n\n\nY = f{i}(1)\n")
    (src / "pkg" / "empty.py").write_text("")
    (src / "test" / "test_ok.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    (src / "test" / "test_latin.py").write_bytes(LATIN1)
    return src


def python_code(src: Path, cache: Path, *extra: str) -> list[str]:
    """``corpus=python_code corpus.include_tests=true`` with its {stdlib} source pointed at ``src``."""
    source = f"[{{pattern:'{src}/**/*.py',format:python,include_tests:${{corpus.include_tests}}}}]"
    return ["corpus=python_code", "corpus.include_tests=true", f"corpus.groups.main.local={source}",
            f"paths.cache_dir={cache}", *TINY_LM, *extra]  # fmt: skip


@pytest.mark.slow
def test_include_tests_with_a_latin1_test_module_stops_under_strict_naming_the_file(tmp_path):
    """strict (the default): the Latin-1 test module stops the command with one sentence naming it, exit status 2,
    and no run directory left (a test module follows decode_errors like any other file)."""
    src = python_tree(tmp_path)
    done = run_train(python_code(src, tmp_path / "cache"), tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("poslab: configuration error: ") and "Traceback" not in done.stderr
    assert f"{src / 'test' / 'test_latin.py'} is not valid UTF-8 at byte offset" in message
    assert "corpus.decode_errors=replace" in message
    assert not (tmp_path / "logs").exists()


@pytest.mark.slow
def test_include_tests_with_a_latin1_test_module_under_replace_is_counted_once_and_no_test_split(tmp_path):
    """replace: the invalid byte is read as U+FFFD and counted, said once in the job's console; the test modules are
    code (tests of a program), so the run has no "trains on a test split" note."""
    src = python_tree(tmp_path)
    # one evaluation round (no selection split): the tiny held-out text is one document
    replace = python_code(src, tmp_path / "cache", "corpus.decode_errors=replace", "task.selection_fraction=0")
    done = run_train(replace, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    console = done.stdout + done.stderr
    replaced = [line for line in console.splitlines() if "invalid UTF-8 sequences" in line]
    assert len(replaced) == 1, replaced
    assert (
        "1 invalid UTF-8 sequences or lone surrogates read as U+FFFD in " in replaced[0]
        and "test_latin.py" in replaced[0]
    )
    assert "test split" not in console
    (results_path,) = (tmp_path / "logs" / "runs").glob("*/results.json")
    results = json.loads(results_path.read_text())
    notes = [n for n in results["data_notes"] if not n.startswith("the held-out text is")]  # a tiny corpus
    assert results["status"] == "success" and notes == []
    sources = results["sources"]["main"]
    assert sources["files"] == 11 and sources["test_files_trained_on"] == []  # test/ is read: include_tests
    assert sources["empty_files"] == 1  # empty.py: counted (and logged)
    (meta_path,) = (tmp_path / "cache").glob("python_code-main-*/meta.json")
    decode = json.loads(meta_path.read_text())["decode"]
    assert decode == {"policy": "replace", "replaced": 1, "files": {str(src / "test" / "test_latin.py"): 1}}


def test_python_test_modules_are_not_a_test_split_but_data_files_named_so_are():
    from poslab.datamodules.corpora import data_notes, is_test_file

    assert not any(is_test_file(p) for p in ("test_os.py", "tests/test_x.pyi", "lib/test/test-data.py"))
    assert all(is_test_file(p) for p in ("wiki.test.raw", "test.jsonl", "x-test-00.parquet", "novel.test.txt"))

    class Group:  # a cache prepared before Python modules were told apart listed them as test files
        name = "main"
        meta = {"source_files": {"test_files_trained_on": ["/l/test/test_os.py", "/l/test/test_re.py"]}}

    assert data_notes("python_code", [Group()]) == []  # type: ignore[list-item]


def many_files_corpus(root: Path) -> Path:
    """Text files: 30 named as a test split (as a folder of a data set's test shards), a Latin-1 file, an empty
    one, and ordinary ones."""
    folder = root / "shards"
    folder.mkdir()
    for i in range(30):
        (folder / f"part-test-{i:03d}.txt").write_text(f"Shard {i}. It reads well.\n\nA second paragraph {i}.\n")
    for i in range(10):
        (folder / f"chapter{i}.txt").write_text(f"Chapter {i}. Some text here.\n\nMore of chapter {i}.\n" * 3)
    (folder / "accents.txt").write_bytes(b"Un caf\xe9 cr\xe8me.\n\nEncore un caf\xe9.\n")
    (folder / "blank.txt").write_text("\n\n")
    return folder


def test_each_data_warning_prints_once_per_job_in_one_line(tmp_path, caplog):
    """A whole job (prepare_data, setup, training, then test's prepare_data again): the split, the replacements,
    the empty file and the test-split note are each said once, and no line lists the 30 files."""
    from poslab.running.training import run

    folder = many_files_corpus(tmp_path)
    overrides = ["corpus=local", f"corpus.path={folder}", f"paths.cache_dir={tmp_path / 'cache'}",
                 "corpus.decode_errors=replace", "~logger", "~callbacks", *TINY_LM]  # fmt: skip
    with caplog.at_level(logging.INFO, logger="poslab"):
        results = run(compose_config(overrides, tmp_path / "run"))
    lines = [r.getMessage() for r in caplog.records if r.name == "poslab"]
    said = {
        "split": [m for m in lines if re.search(r"validation holds \d+ of \d+ documents", m)],
        "replaced": [m for m in lines if "invalid UTF-8 sequences" in m],
        "empty": [m for m in lines if "gave no document" in m],
        "test split": [m for m in lines if "a test split" in m],
    }
    assert {key: len(found) for key, found in said.items()} == dict.fromkeys(said, 1), said
    warnings = [r.getMessage() for r in caplog.records if r.name == "poslab" and r.levelno >= logging.WARNING]
    assert len(warnings) == len(set(warnings)), warnings  # no warning twice
    assert all("\n" not in m and len(m) < 400 for m in warnings), [len(m) for m in warnings]
    (note,) = results["data_notes"]
    assert "trains on 30 files named as test splits (e.g. part-test-000.txt)" in note, note
    assert "accents.txt" in said["replaced"][0] and "blank.txt" in said["empty"][0]


@pytest.mark.slow
@pytest.mark.parametrize("split", ["train", "validation"])
def test_a_context_longer_than_a_split_is_refused_in_one_sentence_and_leaves_no_directory(tmp_path, split):
    """A context that outruns the corpus (the training split, or only the validation split, shorter than one window)
    is found from the data, inside the job: one sentence naming task.context_length, exit status 2, and the
    directory Hydra made removed."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for i in range(10):  # 10 documents of ~300 bytes: 2 held out at 0.2
        (folder / f"doc{i}.txt").write_text(f"Document {i}. " * 25)
    context = 4096 if split == "train" else 1000  # the training split has ~2,400 tokens, validation ~600
    args = ["corpus=local", f"corpus.path={folder}", f"paths.cache_dir={tmp_path / 'cache'}", *TINY_LM,
            f"task.context_length={context}", "task.eval_lengths=null"]  # fmt: skip
    done = run_train(args, tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("poslab: configuration error: ") and "Traceback" not in done.stderr
    assert f"the {split} split has " in message and f"task.context_length={context} + 1" in message, message
    assert not (tmp_path / "logs").exists()
