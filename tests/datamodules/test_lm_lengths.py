"""Issue 25, item 1: a language model's held-out loss at lengths from its context up (``task.eval_lengths``):
the same tokens scored at every length in non-overlapping and sliding windows, loss by position, test-time ways
on the same weights, figures keyed by length in results.json, and the bad settings refused (item 9)."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from poslab.config.settings import LM_EVAL_MULTIPLES, lm_eval_lengths, max_length
from poslab.datamodules.held_out import non_overlapping, position_bins, sliding
from poslab.datamodules.language import EvaluationBatches, windows
from poslab.errors import ConfigError
from poslab.lightning_modules.base import log_length_scale
from poslab.running.builders import build_datamodule, build_module, load_run_and_data, load_saved_config
from poslab.running.compose import compose_config
from poslab.running.precheck import check_command_line, config_groups
from poslab.running.training import run
from poslab.runs.results import read_results, results_problem
from tests.conftest import run_train
from tests.datamodules.test_corpora import make_corpus
from tests.datamodules.test_local_corpus import text_folder

CONTEXT = 24  # T5's buckets want a training length past 16; 4x is 96
TINY = [
    "model=tiny",
    f"task.context_length={CONTEXT}",
    "task.batch_size=4",
    "task.val_windows=1",
    "task.val_every_n_steps=2",
    "trainer.max_steps=2",
    "~logger",
    "~callbacks",
    "threads=1",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """A folder of 40 small text documents (a dozen held out: about 3,300 bytes), and the cache beside it."""
    return text_folder(tmp_path_factory.mktemp("lm_lengths"))


def lm_config(corpus: Path, run_dir: Path, *extra: str):
    cache = corpus.parent / "cache"  # shared: the folder is prepared once for the module's tests
    local = ["corpus=local", f"corpus.path={corpus}", f"paths.cache_dir={cache}", "corpus.validation_fraction=0.3"]
    return compose_config([*local, *TINY, *extra], run_dir)


@pytest.fixture(scope="module")
def rope_run(corpus, tmp_path_factory) -> tuple[Path, dict]:
    """A trained rope model evaluated at 1x, 2x and 4x over 192 tokens, sliding windows with stride 24 (the
    context), without a selection split: one round, every way on every window (the two rounds: below)."""
    run_dir = tmp_path_factory.mktemp("rope_run")
    settings = ["task.eval_lengths=[48,96]", "task.eval_tokens=192", f"task.eval_stride={CONTEXT}"]
    settings.append("task.selection_fraction=0")
    cfg = lm_config(corpus, run_dir, "encoding=rope", *settings)
    return run_dir, run(cfg)


# ---- every encoding ---------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("encoding", config_groups()["encoding"])
def test_every_encoding_trains_a_language_model_and_reports_finite_figures_at_4x(corpus, tmp_path, encoding):
    cfg = lm_config(corpus, tmp_path, f"encoding={encoding}", "task.eval_lengths=[96]", "save_model=false")
    results = run(cfg)
    figures, held = results["figures"], results["held_out"]["lengths"]["96"]
    assert set(figures) == {"val_loss", "val_bpb", "step", "24", "96"}
    assert figures["val_loss"] == figures["24"]["loss"] and figures["val_bpb"] == figures["24"]["bpb"]
    # the test in two rounds: every way on the selection documents, the plain model and the way chosen there on all
    assert {"plain", "log_scaled"} <= set(held["selection"])
    assert all(math.isfinite(held["selection"][way]["bpb"]) for way in held["selection"])
    chosen = held["chosen"]["way"]
    assert {"loss", "bpb"} <= set(figures["96"]) and (chosen == "plain" or f"bpb_{chosen}" in figures["96"])
    assert held["test"][chosen]["bpb"] is not None
    assert all(math.isfinite(v) for row in (figures["24"], figures["96"]) for v in row.values()), figures
    assert read_results(tmp_path)["figures"]["96"] == figures["96"]  # what a report reads, schema checked


# ---- the windows ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("length", [24, 48, 96])
def test_sliding_windows_with_a_stride_equal_to_the_length_are_the_non_overlapping_ones(length):
    plain, slid = non_overlapping(192, length), sliding(192, length, length)
    assert np.array_equal(plain.starts, slid.starts) and np.array_equal(plain.scored_from, slid.scored_from)


@pytest.mark.slow
def test_a_stride_equal_to_the_length_gives_exactly_the_non_overlapping_figure(rope_run):
    _, results = rope_run
    figures = results["figures"]
    assert figures["24"]["loss_sliding"] == figures["24"]["loss"]  # stride 24 at length 24: the same windows
    assert figures["24"]["bpb_sliding"] == figures["24"]["bpb"]
    for length in ("48", "96"):  # stride 24 < L: overlapping windows, each token with at least L - 24 of context
        assert math.isfinite(figures[length]["loss_sliding"]) and figures[length]["loss_sliding"] > 0
        sample = results["evaluation"]["sample"][length]
        assert sample["windows_sliding"] > sample["windows"]


def scored_tokens(batches: EvaluationBatches, length: int, slid: bool) -> dict[tuple[int, int], int]:
    """(group, position in its validation split) -> token id of every prediction scored at ``length``."""
    scored: dict[tuple[int, int], int] = {}
    for i, (group, n, is_sliding, part) in enumerate(batches.items):
        if n != length or is_sliding != slid:
            continue
        tokens = batches[i]["tokens"]
        for row, (start, first) in enumerate(zip(part.starts.tolist(), part.scored_from.tolist(), strict=True)):
            for j in range(first, length):
                key = (group, start + 1 + j)
                assert key not in scored, f"{key} scored twice at length {length}"
                scored[key] = int(tokens[row, 1 + j])
    return scored


def test_every_length_scores_the_same_tokens_once_in_both_kinds_of_windows(corpus, tmp_path):
    # 192 tokens per group, and a stride that leaves the last sliding window a short step; no selection split (192
    # tokens of one test document would leave a selection round no window: refused, test_held_out_rounds.py)
    settings = ["task.eval_lengths=[48,96]", "task.eval_tokens=192", "task.eval_stride=7", "task.selection_fraction=0"]
    cfg = lm_config(corpus, tmp_path, *settings)
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    plan = datamodule.evaluation
    assert plan.lengths == [24, 48, 96] and plan.spans == {"main": 192}
    batches = EvaluationBatches(datamodule.groups, plan, sliding=True)
    reference = scored_tokens(batches, 24, slid=False)
    assert len(reference) == 192  # count: eval_tokens per group (one group)
    split = datamodule.groups[0].splits["validation"]
    assert all(token == int(split.tokens[position]) for (_, position), token in reference.items())
    for length in plan.lengths:
        for slid in (False, True):
            assert scored_tokens(batches, length, slid) == reference, (length, slid)  # identity, not only count
    # sliding: every window but the first scores predictions made from at least L - stride tokens
    for _, length, is_sliding, part in batches.items:
        later = part.scored_from[part.scored_from > 0] if is_sliding else []
        assert all(first + 1 >= length - 7 + 1 for first in later)


def test_a_batch_holds_about_as_many_tokens_at_every_length(corpus, tmp_path):
    cfg = lm_config(corpus, tmp_path, "task.eval_lengths=[96]", "task.eval_batch_size=2")
    datamodule = build_datamodule(cfg)
    datamodule.setup()
    rows = {item[1]: len(item[3].starts) for item in EvaluationBatches(datamodule.groups, datamodule.evaluation).items}
    assert rows == {24: 2, 96: 1}  # 2 x 24 tokens at 1x; at 4x max(1, 48 // 96)


# ---- loss by position -------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_loss_by_position_curve_averages_back_to_the_overall_loss(rope_run):
    _, results = rope_run
    curves = results["loss_by_position"]
    assert curves["train_length"] == CONTEXT and curves["bins_per_octave"] == 4
    for length, curve in curves["lengths"].items():
        tokens, loss = np.array(curve["tokens"]), np.array(curve["loss"])
        assert curve["start"][:2] == [0, 1] and curve["stop"][0] == 1 and curve["stop"][-1] == int(length)
        assert tokens.sum() == results["evaluation"]["sample"][length]["tokens"]  # every length: the same tokens
        assert (loss * tokens).sum() / tokens.sum() == pytest.approx(results["figures"][length]["loss"], rel=1e-9)


def test_position_bins_start_one_per_position_then_four_per_octave():
    edges = position_bins(96).tolist()
    assert edges[:10] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10] and edges[-1] == 96
    assert position_bins(48).tolist() == [e for e in edges if e < 48] + [48]  # the same edges at every length


# ---- test-time ways on the same weights ----------------------------------------------------------------------------
def direct_loss(module, datamodule, length: int, variant: str | None = None, scale: float | Tensor = 1.0) -> float:
    """The mean loss over the plan's non-overlapping windows at ``length``, computed here, not by the module."""
    total, count = 0.0, 0
    for group in datamodule.groups:
        starts = datamodule.evaluation.non_overlapping(length, group.name).starts
        tokens = windows(group.splits["validation"], starts, length + 1)["tokens"]
        with torch.no_grad():
            if variant is None:
                logits = module.model(tokens[:, :-1], score_scale=scale).logits
            else:
                with module.model.encoding.evaluated_as(variant):
                    logits = module.model(tokens[:, :-1]).logits
        losses = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten(), reduction="none")
        total, count = total + float(losses.double().sum()), count + losses.numel()
    return total / count


@pytest.mark.slow
def test_each_test_time_variant_past_the_context_equals_a_direct_computation_on_the_same_weights(rope_run):
    run_dir, results = rope_run
    _, module, datamodule = load_run_and_data(run_dir)
    datamodule.setup()
    variants = module.model.encoding.test_time_variants()
    assert "test_yarn" in variants
    figures = results["figures"]
    assert not any(key.startswith("loss_test_") for key in figures["24"])  # at the context every rule is the identity
    for length in (48, 96):
        row = figures[str(length)]
        for variant in variants:
            assert row[f"loss_{variant}"] == pytest.approx(direct_loss(module, datamodule, length, variant), rel=1e-5)
            assert row[f"bpb_{variant}"] == pytest.approx(row[f"loss_{variant}"] / math.log(2), rel=1e-12)
        scale = log_length_scale(length, CONTEXT)  # one factor per query: max(1, log(t + 1) / log(CONTEXT))
        assert row["loss_log_scaled"] == pytest.approx(direct_loss(module, datamodule, length, scale=scale), rel=1e-5)
        assert row["loss"] == pytest.approx(direct_loss(module, datamodule, length), rel=1e-5)
        assert row["loss_test_linear"] != row["loss"]  # a rule at factor L / 24 changes the model


# ---- several source groups, the sample, the results file -------------------------------------------------------
def test_two_groups_are_reported_each_and_token_weighted_together(tmp_path):
    """English and Chinese held out (an untrained rope model, tested as train.py tests after training)."""
    import lightning as L

    from poslab.datamodules.language import LanguageModelDataModule
    from poslab.lightning_modules.language import LanguageModelModule
    from poslab.model import ModelConfig

    data = tmp_path / "data"
    datamodule = LanguageModelDataModule(
        "lm", make_corpus(data), str(data), str(tmp_path / "cache"), context_length=CONTEXT, eval_lengths=[48]
    )
    rope = {"name": "rope", "original_length": CONTEXT}  # what the YAML fills in: the test-time rules need it
    model = ModelConfig(vocab_size=257, n_outputs=257, n_layers=1, d_model=32, encoding=rope)
    module = LanguageModelModule(model, {"lr": 1e-3}, datamodule.max_length, **datamodule.module_arguments())
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    trainer.test(module, datamodule=datamodule, verbose=False)
    row, evaluation = module.figures["48"], datamodule.describe()["evaluation"]
    # each group's whole held-out split (their sizes differ): the whole is their token-weighted mean
    sample = evaluation["sample"]["48"]
    en, zh = sample["groups"]["en"]["tokens"], sample["groups"]["zh"]["tokens"]
    weighted = (en * row["loss[en]"] + zh * row["loss[zh]"]) / (en + zh)
    assert en != zh and row["loss"] == pytest.approx(weighted, rel=1e-9)
    assert row["bpb[zh]"] == pytest.approx(row["loss[zh]"] / math.log(2), rel=1e-12)  # bytes: one byte a token
    assert {"loss_log_scaled[en]", "bpb_log_scaled[zh]", "loss_test_yarn[zh]"} <= set(row)
    assert set(sample["groups"]) == {"en", "zh"} and sample["tokens"] == en + zh
    assert sample["documents"] == sum(g["documents"] for g in sample["groups"].values()) >= 2
    assert set(module.evaluation_results()["loss_by_position"]["groups"]) == {"en", "zh"}
    assert evaluation["document_boundaries"].startswith("crossed")


@pytest.mark.slow
def test_the_results_schema_reads_lengths_and_refuses_a_damaged_row(rope_run):
    run_dir, _ = rope_run
    results = json.loads((run_dir / "results.json").read_text())
    assert results_problem(results) is None
    assert results["evaluation"]["lengths"] == [24, 48, 96] and results["evaluation"]["stride"] == CONTEXT
    results["figures"]["96"]["bpb"] = "low"
    assert "figures.96" in (results_problem(results) or "")


def test_the_default_lengths_are_the_multiples_the_held_out_text_holds_with_a_note(corpus, tmp_path):
    import lightning as L

    cfg = lm_config(corpus, tmp_path, "task.context_length=256", "task.eval_batch_size=1")
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)  # built for the declared lengths, before the data is read
    datamodule.setup()
    held_out = len(datamodule.groups[0].splits["validation"])
    expected = [m * 256 for m in LM_EVAL_MULTIPLES if m * 256 + 1 <= held_out]
    assert datamodule.evaluation.lengths == expected and datamodule.evaluation.left_out  # 16 x 256 does not fit
    notes = datamodule.describe()["data_notes"]
    assert any(f"evaluated at lengths {', '.join(map(str, expected))} only" in note for note in notes), notes
    trainer = L.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    with warnings.catch_warnings(record=True) as caught:  # the left-out length's sums are not read: no warning
        warnings.simplefilter("always")
        trainer.validate(module, datamodule=datamodule, verbose=False)
    assert not [w for w in caught if "was called before" in str(w.message)], [str(w.message) for w in caught]
    assert [key for key in module.figures if key.isdigit()] == [str(n) for n in expected]  # what it scored


def test_the_longest_length_is_what_the_model_is_built_for():
    assert lm_eval_lengths({"context_length": 512}) == [512, 1024, 2048, 4096, 8192]
    assert max_length({"context_length": 512}) == 8192
    assert lm_eval_lengths({"context_length": 512, "eval_lengths": [2048]}) == [512, 2048]  # 1x always
    saved = {"config": {"task": {"name": "lm", "context_length": 64}, "encoding": {"name": "learned"}}}
    old = load_saved_config(saved, Path("model.pt"))  # a model saved before eval_lengths: built for its context
    assert list(old.task.eval_lengths) == [64]


# ---- refused ------------------------------------------------------------------------------------------------------
def one_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert lines[0].startswith("poslab: configuration error: ") and lines[0].endswith("."), lines[0]
    return lines[0]


def everything_under(directory: Path) -> set[str]:
    return {str(p.relative_to(directory)) for p in directory.rglob("*")}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("settings", "fragments", "reads_data"),
    [
        (["task.eval_lengths=[16,64]"], ["task.eval_lengths=[16, 64]", "below task.context_length=24 (16)"], False),
        (["task.eval_lengths=[24,6144]"], ["task.eval_lengths=[24, 6144] need 6145", "group 'main' has only"], True),
    ],
    ids=["below the context", "longer than the held-out text"],
)
def test_train_py_refuses_lengths_in_one_sentence_with_exit_2_and_leaves_nothing(
    tmp_path, settings, fragments, reads_data
):
    """Below the context: refused before anything is written. Longer than the held-out text: found from the
    data, inside the job, whose directory (and the log directory Hydra made) the refusal removes; the prepared
    cache stays, for the next run."""
    corpus = text_folder(tmp_path)
    before = everything_under(tmp_path)
    args = ["corpus=local", f"corpus.path={corpus}", f"paths.cache_dir={tmp_path / 'cache'}"]
    done = run_train([*args, "corpus.validation_fraction=0.3", *TINY[:-3], *settings], tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    message = one_line(done.stderr)
    assert all(fragment in message for fragment in fragments), message
    left = everything_under(tmp_path) - before
    assert all(path.split("/")[0] == "cache" for path in left) and (bool(left) == reads_data), sorted(left)


@pytest.mark.parametrize(
    ("settings", "fragment"),
    [
        (["task.eval_lengths=[]"], "task.eval_lengths=[] gives no evaluation length"),
        (["task.eval_lengths=[32,100]"], "below task.context_length=64 (32)"),
        (["task.eval_tokens=1000"], "task.eval_tokens=1000 is not a multiple of 1024"),
        (["task.eval_lengths=[96,128]", "task.eval_tokens=256"], "256 is not a multiple of 384, the least"),
        (["task.eval_stride=65"], "task.eval_stride=65 is longer than the shortest evaluation length 64"),
        (["-m", "task.eval_stride=8,100"], "task.eval_stride=100"),  # one bad job: the multirun starts none
    ],
)
def test_the_command_line_check_refuses_bad_evaluation_settings(capsys, settings, fragment):
    with pytest.raises(SystemExit) as stopped:
        check_command_line(["corpus=wikitext2", "task.context_length=64", *settings])
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and fragment in err[0], err


def test_more_evaluation_tokens_than_the_held_out_text_holds_are_refused_naming_the_room(corpus, tmp_path):
    cfg = lm_config(corpus, tmp_path, "task.eval_lengths=[96]", "task.eval_tokens=96000")
    with pytest.raises(
        ConfigError,
        match=r"task.eval_tokens=96000 needs 96001 held-out tokens in every source "
        r"group, but group 'main' has only \d+ validation tokens; allowed: task.eval_tokens up to \d+ "
        r"\(a multiple of 96, which every evaluation length divides\), or null: the whole split\.",
    ):
        build_datamodule(cfg).setup()


def test_good_settings_pass_the_check():
    for settings in (
        [],
        ["task.eval_lengths=[128,256]", "task.eval_stride=16", "task.eval_tokens=512"],
        ["task.eval_lengths=[64]"],
    ):
        check_command_line(["corpus=wikitext2", "task.context_length=64", *settings])
