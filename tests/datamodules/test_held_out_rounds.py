"""A small ``task.eval_tokens`` never gives a run without figures: where the test runs in two rounds (a selection
split, a length past the context), a sample that leaves a round no window is refused before training, naming the
value and what would work; and a test (round) with no batch never ends in a results.json that says success."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poslab.datamodules.language import EvaluationBatches, LanguageModelDataModule
from poslab.errors import ConfigError
from tests.conftest import compose_config, run_train, write_word_documents
from tests.test_sized_runs import tiny_lm

#: selection_seed 3 makes the first held-out document of ``corpus`` a selection one, 0 a test one (40 documents of
#: about 1 KB, a quarter held out): a small eval_tokens then leaves the test round, or the selection round, empty
FIRST_IS_SELECTION, FIRST_IS_TEST = 3, 0


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    folder = write_word_documents(tmp_path_factory.mktemp("rounds") / "corpus", paragraphs=1, words=160)
    return {"name": "local", "path": str(folder), "format": "text", "validation_fraction": 0.25,
            "groups": {"main": {"weight": 1.0, "local": [{"pattern": f"{folder}/*.txt"}]}}}  # fmt: skip


def datamodule(corpus: dict, **task) -> LanguageModelDataModule:
    cache = str(Path(corpus["path"]).parent / "cache")
    dm = LanguageModelDataModule("lm", corpus, corpus["path"], cache, context_length=32, eval_lengths=[32, 64],
                                 val_windows=1, **task)  # fmt: skip
    dm.setup()
    return dm


def round_windows(dm: LanguageModelDataModule) -> dict[str, int]:
    """Batches each round of the test scores."""
    return {
        r: len(EvaluationBatches(dm.groups, dm.evaluation, test_round=r, selection=dm.selection))
        for r in ("selection", "test")
    }


@pytest.mark.parametrize(
    ("seed", "empty"),
    [(FIRST_IS_SELECTION, "the test round (test documents only) would score nothing"),
     (FIRST_IS_TEST, "the selection round would score nothing")],
)  # fmt: skip
def test_an_eval_tokens_that_leaves_a_round_empty_is_refused_naming_the_tokens_that_would_do(corpus, seed, empty):
    with pytest.raises(ConfigError, match=r"task\.eval_tokens=128 scores the first 128 held-out tokens") as refused:
        datamodule(corpus, eval_tokens=128, selection_seed=seed)
    message = str(refused.value)
    assert empty in message and "task.selection_fraction=0" in message, message
    needed = int(re.search(r"raise task\.eval_tokens to at least (\d+)", message).group(1))
    assert needed % 64 == 0  # a multiple of every length, as eval_tokens must be
    dm = datamodule(corpus, eval_tokens=needed, selection_seed=seed)  # what it names works: both rounds get windows
    assert dm.test_rounds(chooses=True) == ["selection", "test"] and all(round_windows(dm).values())
    if needed > 64:  # and it is the fewest: one tile less leaves a round empty
        with pytest.raises(ConfigError, match="would score nothing"):
            datamodule(corpus, eval_tokens=needed - 64, selection_seed=seed)


def test_the_same_eval_tokens_runs_in_one_round_without_a_selection_split(corpus):
    dm = datamodule(corpus, eval_tokens=128, selection_seed=FIRST_IS_SELECTION, selection_fraction=0.0)
    assert dm.test_rounds(chooses=True) == [None] and len(EvaluationBatches(dm.groups, dm.evaluation)) > 0
    dm = datamodule(corpus, eval_tokens=128, selection_seed=FIRST_IS_SELECTION, every_way_on_test=True)
    assert dm.test_rounds(chooses=True) == [None]


def test_train_py_refuses_it_before_training_and_leaves_no_run(tmp_path):
    args = tiny_lm(tmp_path, "task.eval_tokens=128", f"task.selection_seed={FIRST_IS_SELECTION}")
    result = run_train(args, tmp_path)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "task.eval_tokens=128 scores the first 128 held-out tokens" in result.stderr
    assert "Traceback" not in result.stderr and "Total length of `DataLoader`" not in result.stderr
    assert not list(tmp_path.glob("logs/**/results.json")) and not list(tmp_path.glob("logs/**/*.ckpt"))


def test_a_test_round_without_a_batch_stops_the_run_without_a_successful_results_json(tmp_path, monkeypatch):
    """The guard behind the refusal: were a round empty all the same, the run stops instead of writing a success
    with its last validation's figures, or none."""
    from poslab.datamodules import language
    from poslab.running.training import run

    monkeypatch.setattr(language, "check_test_rounds", lambda *args: None)  # the refusal above, skipped
    cfg = compose_config(tiny_lm(tmp_path, "task.eval_tokens=128", f"task.selection_seed={FIRST_IS_SELECTION}"),
                         tmp_path / "run")  # fmt: skip
    with pytest.raises(ConfigError, match="the test's test round had no batch to score"):
        run(cfg)
    assert not (tmp_path / "run" / "results.json").exists()
