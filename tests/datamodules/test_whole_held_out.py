"""Issue 37, items 1-3: the test after training scores each group's whole held-out split, the same tokens at every
length; results.json states the sample per length (documents, bytes, tokens) and per-document sums; the held-out
documents are split into selection and test, and a test-time way is chosen on selection."""

from __future__ import annotations

import math

import lightning as L
import numpy as np
import pytest

from poslab.datamodules.held_out import held_out_results, select_documents
from poslab.datamodules.language import EvaluationBatches, LanguageModelDataModule
from poslab.errors import ConfigError
from poslab.lightning_modules.language import LanguageModelModule
from poslab.model import ModelConfig
from tests.datamodules.test_local_corpus import text_folder

CONTEXT = 24


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return text_folder(tmp_path_factory.mktemp("whole_held_out"), n=60)


def datamodule(folder, **task) -> LanguageModelDataModule:
    corpus = {"name": "local", "path": str(folder), "format": "text", "validation_fraction": 0.4,
              "groups": {"main": {"weight": 1.0, "local": [{"pattern": f"{folder}/**/*.txt"}]}}}  # fmt: skip
    dm = LanguageModelDataModule("lm", corpus, str(folder), str(folder.parent / "cache"), context_length=CONTEXT,
                                 eval_lengths=[48, 96], val_windows=1, **task)  # fmt: skip
    dm.setup()
    return dm


def scored_positions(batches: EvaluationBatches, length: int) -> list[int]:
    """Every position of the validation split scored at ``length`` (non-overlapping windows), in order."""
    out = []
    for _, n, _, part in batches.items:
        if n == length:
            out.extend(int(s) + 1 + j for s in part.starts for j in range(n))
    return out


def test_the_test_scores_the_whole_split_with_the_same_tokens_at_every_length(folder):
    dm = datamodule(folder)
    plan, split = dm.evaluation, dm.groups[0].splits["validation"]
    tile = math.lcm(*plan.lengths)
    assert plan.lengths == [24, 48, 96] and plan.spans["main"] == (len(split) - 1) // tile * tile
    assert len(split) - 1 - plan.spans["main"] < tile  # the whole split but a remainder shorter than the lcm
    test = EvaluationBatches(dm.groups, plan, sample="test")
    reference = scored_positions(test, 24)
    assert reference == list(range(1, plan.spans["main"] + 1))  # each token once, the first only as context
    for length in plan.lengths:
        assert scored_positions(test, length) == reference
    # a validation during training scores only the val_windows sample, rounded up to the lcm
    assert plan.val_span == tile < plan.spans["main"]
    assert len(scored_positions(EvaluationBatches(dm.groups, plan, sample="validation"), 96)) == tile
    # what the test leaves out is said (results.json's evaluation and data notes)
    evaluation = dm.describe()["evaluation"]
    if len(split) - 1 > plan.spans["main"]:
        assert any("are not scored" in note for note in evaluation["notes"])
        assert not any("are not scored" in note for note in dm.describe()["data_notes"])  # logged, not a warning


def test_the_sample_is_stated_per_length_with_documents_bytes_tokens(folder):
    dm = datamodule(folder)
    split, span = dm.groups[0].splits["validation"], dm.evaluation.spans["main"]
    evaluation = dm.describe()["evaluation"]
    documents = len(np.unique(np.asarray(split.documents)[1 : span + 1]))
    for length in ("24", "48", "96"):
        row = evaluation["sample"][length]
        assert (row["tokens"], row["bytes"], row["documents"]) == (span, span, documents)  # bytes: one a token
        assert row["selection"]["tokens"] + row["test"]["tokens"] == span
        assert row["selection"]["documents"] + row["test"]["documents"] == documents
    held = evaluation["held_out"]["main"]
    assert held["ordinals"] == np.asarray(split.documents.values).tolist() and held["documents"] >= 20
    assert not set(held["selection"]) & set(held["test"]) and len(held["selection"]) == round(held["documents"] / 2)


def test_eval_tokens_is_a_cap_reported_as_a_subsample(folder):
    # no selection split: 192 tokens lie in one test document, which would leave a selection round no window
    # (refused: tests/datamodules/test_held_out_rounds.py)
    dm = datamodule(folder, eval_tokens=192, selection_fraction=0.0)
    assert dm.evaluation.spans == {"main": 192}
    evaluation = dm.describe()["evaluation"]
    assert evaluation["sample"]["96"]["tokens"] == 192 and not evaluation["whole_split"]
    assert any("a subsample: task.eval_tokens=192" in note for note in evaluation["notes"])
    assert any("a subsample: task.eval_tokens=192" in note for note in dm.describe()["data_notes"])


def test_the_selection_split_is_by_document_disjoint_half_and_stable_under_its_seed():
    ordinals = np.arange(100, 300, 2)
    mask = select_documents("main", ordinals, 0.5, seed=0)
    assert mask.sum() == 50  # half, and the rest the test split (a mask: disjoint by construction)
    assert np.array_equal(mask, select_documents("main", ordinals, 0.5, seed=0))  # stable
    assert not np.array_equal(mask, select_documents("main", ordinals, 0.5, seed=1))  # seeded
    assert not np.array_equal(mask, select_documents("other", ordinals, 0.5, seed=0))
    assert select_documents("main", ordinals, 0.0, seed=0).sum() == 0
    assert select_documents("main", np.array([3, 7]), 0.9, seed=0).sum() == 1  # at least one test document
    for fraction in (0.5, 0.6, 0.9):  # one document: all test, as the log says, whatever the fraction
        assert select_documents("main", np.array([3]), fraction, seed=0).sum() == 0
    with pytest.raises(ConfigError, match="task.selection_fraction=1"):
        LanguageModelDataModule("lm", {"name": "x", "groups": {}}, ".", ".", selection_fraction=1)


def test_the_chosen_way_is_the_best_on_selection_and_reported_on_test():
    # rows (way, group, document, loss, tokens, bytes): way 1 best on the selection documents, way 2 on the test ones
    selection = {"main": np.array([True, False, True, False])}
    rows = []
    for doc, chosen in enumerate(selection["main"]):
        for way, loss in enumerate([1.0, 0.5 if chosen else 0.9, 0.8 if chosen else 0.1]):
            rows.append([way, 0, doc, loss * 10, 10, 12])
    ways = {8: ["plain"], 16: ["plain", "log_scaled", "test_ntk"]}
    result = held_out_results({8: np.array(rows)[:4:], 16: np.array(rows)}, ways, ["main"], selection, 8)
    row = result["lengths"]["16"]
    assert row["chosen"]["way"] == "log_scaled" and row["test"]["test_ntk"]["loss"] < row["test"]["log_scaled"]["loss"]
    assert row["chosen"]["test"] == row["test"]["log_scaled"]
    assert row["test"]["log_scaled"]["loss"] == pytest.approx(0.9, rel=1e-12)
    assert row["selection"]["log_scaled"]["bpb"] == pytest.approx(0.5 * 10 / 12 / math.log(2), rel=1e-12)
    assert "chosen" not in result["lengths"]["8"] and result["chosen"]["way"] == "log_scaled"
    # no selection document scored (e.g. all past the scored span): nothing is chosen, the test figures stay
    alone = held_out_results({16: np.array(rows)}, {16: ways[16]}, ["main"], {"main": np.zeros(4, bool)}, 8)
    assert "chosen" not in alone["lengths"]["16"] and "chosen" not in alone
    split = alone["lengths"]["16"]
    assert split["selection"]["plain"]["bpb"] is None and split["test"]["plain"]["loss"] == pytest.approx(1.0)


def test_per_document_sums_add_up_to_the_figures_and_the_sample(folder):
    """An untrained rope model tested as train.py tests it after training."""
    dm = datamodule(folder)
    rope = {"name": "rope", "original_length": CONTEXT}
    model = ModelConfig(vocab_size=257, n_outputs=257, n_layers=1, d_model=32, encoding=rope)
    module = LanguageModelModule(model, {"lr": 1e-3}, dm.max_length, **dm.module_arguments())
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.test(module, datamodule=dm, verbose=False)
    held, sample = module.evaluation_results()["held_out"], dm.describe()["evaluation"]["sample"]
    documents = held["documents"]["main"]
    mask = np.array(documents["selection"], dtype=bool)
    for length in ("24", "48", "96"):
        sums = documents["by_length"][length]
        tokens, loss = np.array(sums["tokens"]), np.array(sums["loss"]["plain"])
        assert tokens.sum() == sample[length]["tokens"] and sum(sums["bytes"]) == sample[length]["bytes"]
        assert loss.sum() / tokens.sum() == pytest.approx(module.figures[length]["loss"], rel=1e-6)
        assert tokens[mask].sum() == sample[length]["selection"]["tokens"]
        test = held["lengths"][length]["test"]["plain"]
        assert test["loss"] == pytest.approx(loss[~mask].sum() / tokens[~mask].sum(), rel=1e-9)
    past = held["lengths"]["96"]
    assert set(past["selection"]) == set(past["test"]) >= {"plain", "log_scaled", "test_ntk", "test_yarn"}
    best = min(past["selection"], key=lambda w: past["selection"][w]["bpb"])
    assert past["chosen"]["way"] == best and past["chosen"]["test"] == past["test"][best]
    assert held["fraction"] == 0.5 and held["seed"] == 0


# ---- the test in two rounds (docs/evaluation.md, "Two rounds") ---------------------------------------------------
def untrained_rope(dm: LanguageModelDataModule, seed: int = 0) -> LanguageModelModule:
    import torch

    torch.manual_seed(seed)
    rope = {"name": "rope", "original_length": CONTEXT}
    model = ModelConfig(vocab_size=257, n_outputs=257, n_layers=1, d_model=32, encoding=rope)
    return LanguageModelModule(model, {"lr": 1e-3}, dm.max_length, **dm.module_arguments())


def quiet_trainer() -> L.Trainer:
    return L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")


def test_the_rounds_split_every_length_s_windows_by_whether_they_touch_a_selection_document(folder):
    dm = datamodule(folder)
    split, mask = dm.groups[0].splits["validation"], dm.selection["main"]
    assert dm.test_rounds(chooses=True) == ["selection", "test"] and dm.test_rounds(chooses=False) == [None]
    every = EvaluationBatches(dm.groups, dm.evaluation, sample="test")
    rounds = {r: EvaluationBatches(dm.groups, dm.evaluation, sample="test", test_round=r, selection=dm.selection)
              for r in ("selection", "test")}  # fmt: skip
    for length in dm.evaluation.lengths:
        union = sorted(scored_positions(rounds["selection"], length) + scored_positions(rounds["test"], length))
        assert union == scored_positions(every, length)  # a partition: each scored token in one round
        document_of = np.asarray(split.documents)  # each token's held-out document ordinal
        ordinals = list(np.asarray(split.documents.values))
        in_selection = {o for o, chosen in zip(ordinals, mask, strict=True) if chosen}
        for test_round, batches in rounds.items():
            for _, n, _, part in batches.items:
                if n != length:
                    continue
                for start in part.starts:
                    touched = {int(document_of[p]) for p in range(start + 1, start + n + 1)} & in_selection
                    assert bool(touched) == (test_round == "selection"), (length, start)
        assert scored_positions(rounds["test"], length)  # the test round is not empty at any length here


def test_two_rounds_give_the_figures_of_one_round_but_score_the_ways_not_chosen_on_selection_only(folder):
    from poslab.running.training import test

    dm = datamodule(folder)
    one, two = untrained_rope(dm), untrained_rope(dm)  # the same weights
    quiet_trainer().test(one, datamodule=dm, verbose=False)  # one round: every way on every window
    test(quiet_trainer(), two, dm)  # what train.py runs: two rounds, as the datamodule asks
    assert dm.test_round == "test" and two.test_round == "test"
    held_one, held_two = one.held_out, two.held_out
    for length in ("24", "48", "96"):
        assert two.figures[length]["loss"] == pytest.approx(one.figures[length]["loss"], rel=1e-9)
        for way, figure in held_one["lengths"][length]["selection"].items():  # every way on selection: the same
            assert held_two["lengths"][length]["selection"][way]["bpb"] == pytest.approx(figure["bpb"], rel=1e-9)
    past_one, past_two = held_one["lengths"]["96"], held_two["lengths"]["96"]
    chosen = past_two["chosen"]["way"]
    assert chosen == past_one["chosen"]["way"] and held_two["chosen"]["way"] == held_one["chosen"]["way"]
    assert past_two["test"][chosen]["bpb"] == pytest.approx(past_one["test"][chosen]["bpb"], rel=1e-9)
    scored_on_test = {"plain", chosen, held_two["chosen"]["way"]}
    not_chosen = set(past_one["test"]) - scored_on_test
    assert not_chosen and all(past_two["test"][way] is None for way in not_chosen)
    assert all(f"bpb_{way}" not in two.figures["96"] for way in not_chosen)  # no figure on part of the test text
    assert chosen == "plain" or two.figures["96"][f"bpb_{chosen}"] == pytest.approx(
        one.figures["96"][f"bpb_{chosen}"], rel=1e-9
    )
    sums = held_two["documents"]["main"]["by_length"]["96"]["loss"]
    mask = np.array(held_two["documents"]["main"]["selection"], dtype=bool)
    way = sorted(not_chosen)[0]
    assert all(v is None for v, s in zip(sums[way], mask, strict=True) if not s)  # test documents: not all scored
    assert all(v is not None for v, s in zip(sums[way], mask, strict=True) if s)
