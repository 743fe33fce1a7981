"""Passkey retrieval (``poslab.lightning_modules.passkey``): a planted model that copies scores 1.0, ones that cannot
score chance within a bound computed from the trials, the trials are seeded and place the phrase exactly twice at
the distance and depth asked for, bad settings are refused with one sentence, and the needle picture renders from
the result dict alone."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from poslab.analysis.passkey_render import plot_passkey, write_passkey_figure
from poslab.analysis.plotting import plt
from poslab.config.passkey_settings import (
    PREFIX,
    PasskeySettings,
    check_filler,
    check_passkey_settings,
    passkey_max_length,
)
from poslab.config.settings import CONF_DIR
from poslab.datamodules.codec import BYTE_VOCAB, decode_bytes, encode_bytes
from poslab.errors import ConfigError
from poslab.lightning_modules.passkey import build_trials, evaluate_passkey, evaluation_ways, score_passkey, way_figures

CONTEXT = 256  # the smallest default distance, 1/8, is 32 tokens: longer than the 24-token phrase
WORDS = ["the", "of", "and", "a", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from"]


def filler_text(n_bytes: int, seed: int = 0) -> np.ndarray:
    """Seeded English-like held-out text, as byte tokens with a document separator now and then."""
    rng = np.random.default_rng(seed)
    pieces, size = [], 0
    while size < n_bytes:
        sentence = " ".join(rng.choice(WORDS, size=int(rng.integers(4, 14)))).capitalize() + ". "
        sentence += "\n\n" if rng.random() < 0.1 else ""
        pieces.append(encode_bytes(sentence))
        if rng.random() < 0.02:
            pieces.append(np.array([256], dtype=np.uint16))  # a document boundary
        size += len(pieces[-1])
    return np.concatenate(pieces)[:n_bytes].astype(np.int64)


FILLER = filler_text(40_000)


def settings(**overrides: Any) -> PasskeySettings:
    return check_passkey_settings(overrides, CONTEXT)


class InductionOracle(nn.Module):
    """A planted copier: the logits at t put all mass on the token that followed the most recent earlier occurrence
    of the n tokens ending at t (an induction head, exactly), looking back at most ``window`` tokens (None: all)."""

    def __init__(self, n: int = len(PREFIX), window: int | None = None) -> None:
        super().__init__()
        self.n, self.window = n, window

    def forward(self, tokens: Tensor, coordinates: dict[str, Tensor] | None = None, score_scale: float = 1.0) -> Any:
        predicted = torch.zeros(tokens.shape, dtype=torch.int64)  # no earlier occurrence: token 0, never a digit
        for b, row in enumerate(tokens.tolist()):
            last: dict[tuple[int, ...], int] = {}
            for t in range(self.n - 1, len(row)):
                gram = tuple(row[t - self.n + 1 : t + 1])
                s = last.get(gram)
                if s is not None and (self.window is None or t - s <= self.window):
                    predicted[b, t] = row[s + 1]
                last[gram] = t
        return SimpleNamespace(logits=nn.functional.one_hot(predicted, BYTE_VOCAB).float())


class DigitGuesser(nn.Module):
    """Cannot copy: knows a digit comes, guesses one (a fixed ``digit``, or uniformly at random from a seeded
    generator)."""

    def __init__(self, digit: int | None = None, seed: int = 0) -> None:
        super().__init__()
        self.digit, self.generator = digit, torch.Generator().manual_seed(seed)

    def forward(self, tokens: Tensor, coordinates: dict[str, Tensor] | None = None, score_scale: float = 1.0) -> Any:
        if self.digit is not None:
            guess = torch.full(tokens.shape, self.digit)
        else:
            guess = torch.randint(0, 10, tokens.shape, generator=self.generator)
        return SimpleNamespace(logits=nn.functional.one_hot(ord("0") + guess, BYTE_VOCAB).float())


def binomial_bound(p: float, n: int, sigmas: float = 5.0) -> float:
    """How far a share of n Bernoulli(p) outcomes may fall from p: ``sigmas`` standard errors."""
    return sigmas * math.sqrt(p * (1 - p) / n)


# ---- scores ------------------------------------------------------------------------------------------------------
def test_a_model_that_copies_retrieves_every_key_at_every_distance_and_depth():
    result = evaluate_passkey(InductionOracle(), FILLER, settings(trials=3), CONTEXT)
    assert np.all(np.asarray(result["exact"]) == 1.0) and np.all(np.asarray(result["digits"]) == 1.0)
    assert result["distances"] == [32, 64, 128, 256, 512, 1024, 2048]
    assert result["chance_digit"] == 0.1 and result["chance_exact"] == 1e-5
    assert result["chance_digit_uniform"] == pytest.approx(1 / 257)


def test_a_copier_that_looks_back_300_tokens_retrieves_up_to_that_distance_only():
    result = evaluate_passkey(InductionOracle(window=300), FILLER, settings(trials=2, depths=[0, 1]), CONTEXT)
    exact = np.asarray(result["exact"])
    near = [i for i, d in enumerate(result["distances"]) if d <= 300]
    assert near == [0, 1, 2, 3]
    assert np.all(exact[near] == 1.0) and np.all(exact[len(near) :] == 0.0)  # the heatmap's x axis is reach


@pytest.mark.parametrize("digit", [None, 7], ids=["random digit", "always 7"])
def test_a_model_that_cannot_copy_scores_chance(digit):
    result = evaluate_passkey(DigitGuesser(digit), FILLER, settings(trials=16), CONTEXT)
    cells = len(result["distances"]) * len(result["depths"])
    digits = float(np.mean(result["digits"]))  # every cell has the same number of digits scored
    scored_digits = cells * result["trials"] * result["key_length"]
    assert abs(digits - 0.1) <= binomial_bound(0.1, scored_digits), (digits, scored_digits)
    # exact: each trial is right with probability 1e-5; among 640, two or more right has probability < 2e-5
    exact_right = round(float(np.sum(result["exact"])) * result["trials"])
    assert exact_right <= 1


def test_exact_match_under_teacher_forcing_is_greedy_decoding(tiny_byte_model):
    """The teacher-forced argmax at the first digit is greedy decoding's first token (nothing after it is read)."""
    model = tiny_byte_model("rope")
    trials = build_trials(FILLER, settings(trials=2, distances=[0.5], depths=[0.5]), CONTEXT)
    tokens = trials.tokens(0, 0)
    first = int(trials.digit_positions(0, 0)[0])
    with torch.no_grad():
        full = model(tokens).logits[:, first - 1].argmax(-1)
        prompt = model(tokens[:, :first]).logits[:, -1].argmax(-1)
    assert torch.equal(full, prompt)


# ---- trials ------------------------------------------------------------------------------------------------------
def occurrences(row: np.ndarray) -> list[int]:
    data, prefix = decode_bytes(np.minimum(row, 255)), PREFIX.encode()
    found, at = [], data.find(prefix)
    while at >= 0:
        found.append(at)
        at = data.find(prefix, at + 1)
    return found


def test_the_phrase_occurs_exactly_twice_at_the_distance_and_depth_asked_for():
    chosen = settings(trials=4, depth_span=0.5)
    trials = build_trials(FILLER, chosen, CONTEXT)
    span = CONTEXT // 2
    for i, j in trials.cells():
        d, q = chosen.distance_tokens(CONTEXT)[i], chosen.depths[j]
        p = round(q * span)
        tokens = trials.tokens(i, j).numpy()
        assert tokens.shape == (4, p + d + 24)  # the sequence ends with the second phrase
        for row, key, start in zip(tokens, trials.keys, trials.starts):
            assert occurrences(row) == [p, p + d]
            phrase = f"{PREFIX}{''.join(map(str, key))}. ".encode()
            assert decode_bytes(row[p : p + 24]) == phrase == decode_bytes(row[p + d : p + d + 24])
            outside = np.r_[0:p, p + 24 : p + d, p + d + 24 : len(row)]  # the rest is the filler window itself
            assert np.array_equal(row[outside], FILLER[start : start + len(row)][outside])


def test_trials_are_seeded_and_reproducible():
    first, again = build_trials(FILLER, settings(seed=3), CONTEXT), build_trials(FILLER, settings(seed=3), CONTEXT)
    other = build_trials(FILLER, settings(seed=4), CONTEXT)
    assert np.array_equal(first.starts, again.starts) and np.array_equal(first.keys, again.keys)
    assert all(torch.equal(first.tokens(i, j), again.tokens(i, j)) for i, j in first.cells())
    assert not np.array_equal(first.keys, other.keys)
    assert set(np.unique(first.keys)) <= set(range(10))


def test_filler_holding_the_phrase_is_drawn_again():
    filler = FILLER.copy()
    planted = encode_bytes(PREFIX + "99999. ").astype(np.int64)
    for at in range(0, 20_000, 1000):  # the first half holds the phrase every thousand bytes
        filler[at : at + len(planted)] = planted
    trials = build_trials(filler, settings(trials=8, distances=[0.125, 1]), CONTEXT)
    for i, j in trials.cells():
        assert all(len(occurrences(row)) == 2 for row in trials.tokens(i, j).numpy())


def test_rows_per_pass_do_not_change_the_score():
    chosen = settings(trials=3, distances=[0.25, 2], depths=[0, 1])
    trials = build_trials(FILLER, chosen, CONTEXT)
    wide = score_passkey(InductionOracle(window=200), trials, max_tokens=10**6)
    narrow = score_passkey(InductionOracle(window=200), trials, max_tokens=1)
    assert wide == narrow


# ---- the real model: coordinates and test-time ways ----------------------------------------------------------------
@pytest.fixture
def tiny_byte_model():
    from poslab.model import ModelConfig, Transformer

    def build(encoding: str, **encoding_settings: Any) -> Transformer:
        torch.manual_seed(0)
        cfg = ModelConfig(
            vocab_size=BYTE_VOCAB, n_outputs=BYTE_VOCAB, n_layers=1, n_heads=2, d_model=24,
            encoding={"name": encoding, **encoding_settings},
        )  # fmt: skip
        return Transformer(cfg, max_length=CONTEXT)

    return build


class Recording(nn.Module):
    """Wraps a model: records the coordinates and keyword arguments of each forward pass."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.encoding, self.calls = model, model.encoding, []

    def forward(self, tokens: Tensor, coordinates: dict[str, Tensor] | None = None, **kwargs: Any) -> Any:
        rule = getattr(self.encoding, "test_scaling", None)  # the RoPE rule in force during this pass
        self.calls.append((tokens, coordinates, kwargs, rule))
        return self.model(tokens, coordinates, **kwargs)


def test_a_hierarchical_encoding_gets_coordinates_with_each_phrase_inside_one_sentence(tiny_byte_model):
    model = Recording(tiny_byte_model("hrope_axial"))
    chosen = settings(trials=2, distances=[0.25], depths=[0.5])

    def source(starts: np.ndarray, length: int) -> dict[str, Tensor]:  # a boundary every 10 tokens
        index = torch.arange(length).expand(len(starts), length) // 10
        return {"paragraph": index // 5, "sentence": index}

    result = evaluate_passkey(model, FILLER, chosen, CONTEXT, coordinates=source)
    ((tokens, coordinates, _, _),) = model.calls
    p, d = 128, 64
    for name in ("paragraph", "sentence"):
        values = coordinates[name]
        assert torch.all(values[:, 1:] >= values[:, :-1])  # still non-decreasing
        for start in (p, p + d):
            assert torch.all(values[:, start : start + 24] == values[:, start : start + 1])
    assert 0.0 <= result["digits"][0][0] <= 1.0

    model = Recording(tiny_byte_model("hrope_axial"))
    evaluate_passkey(model, FILLER, chosen, CONTEXT)  # no source: zeros, as the synthetic tasks give
    assert all(torch.all(values == 0) for values in model.calls[0][1].values())


def test_each_way_scores_the_same_trials_under_its_own_rule(tiny_byte_model):
    model = Recording(tiny_byte_model("rope", original_length=CONTEXT))
    ways = evaluation_ways(model, CONTEXT)
    assert set(ways) == {"log_scaled", *model.encoding.test_time_variants()}
    assert {"test_linear", "test_yarn"} <= set(ways)
    chosen = settings(trials=2, distances=[0.25, 4], depths=[0])
    result = evaluate_passkey(model, FILLER, chosen, CONTEXT, ways=ways)
    assert set(result["ways"]) == set(ways)
    assert len(model.calls) == 2 * (1 + len(ways))  # one pass per cell and way: the trials cut once per cell
    assert chosen.forward_tokens(CONTEXT) == chosen.trials * sum(map(sum, result["sequence_lengths"]))
    by_way: dict[str, list] = {}
    for tokens, _, kwargs, rule in model.calls:
        by_way.setdefault(rule if rule != "none" else str(sorted(kwargs)), []).append((tokens.shape[1], kwargs))
    lengths = [88, 1048]  # p + d + m
    assert [n for n, _ in by_way["linear"]] == lengths  # evaluated_as("test_linear") around the pass
    scales = [kwargs["score_scale"] for n, kwargs in by_way["['score_scale']"]]
    for n, scale in zip(lengths, scales, strict=True):  # one factor per query: max(1, log(t + 1) / log(L_train))
        expected = [max(1.0, math.log(t + 1) / math.log(CONTEXT)) for t in range(n)]
        assert scale.tolist() == pytest.approx(expected, rel=1e-6)
    assert model.encoding.test_scaling == "none"  # the rule is undone after each pass
    # at 88 tokens, within the training length, every RoPE rule and the log-length scale (1 at every query there)
    # are the identity: the same figures as plain
    for name in ways:
        assert result["ways"][name]["exact"][0] == result["exact"][0]
        assert result["ways"][name]["digits"][0] == result["digits"][0]
    assert way_figures(result, "test_yarn")["exact"] == result["ways"]["test_yarn"]["exact"]


def test_the_model_is_left_in_the_mode_it_was_in(tiny_byte_model):
    model = tiny_byte_model("rope")
    model.train()
    evaluate_passkey(model, FILLER, settings(trials=1, distances=[0.125], depths=[0]), CONTEXT)
    assert model.training


# ---- refusals ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("given", "said"),
    [
        ({"distances": [0.05]}, "task.passkey.distances has 0.05 (x task.context_length=256 = 13 tokens), shorter"),
        ({"distances": [0]}, "shorter than the 24-token phrase"),
        ({"distances": []}, "task.passkey.distances=[] must be a non-empty list of numbers"),
        ({"distances": [1, 1.0001]}, "gives the same distance in tokens twice"),
        ({"depths": [0, 1.5]}, "task.passkey.depths has 1.5, outside [0, 1]"),
        ({"depths": [-0.1]}, "outside [0, 1]"),
        ({"depths": [0.5, 0.5]}, "has a depth twice"),
        ({"trials": 0}, "task.passkey.trials=0 must be a whole number of at least 1"),
        ({"trials": 2.5}, "task.passkey.trials=2.5 must be a whole number"),
        ({"key_length": 0}, "task.passkey.key_length=0 must be a whole number from 1 to 20"),
        ({"seed": -1}, "task.passkey.seed=-1 must be a whole number from 0"),
        ({"depth_span": 0}, "task.passkey.depth_span=0 must be a finite number greater than 0"),
        ({"enabled": "yes"}, "task.passkey.enabled='yes' must be true or false"),
        ({"distance": [1]}, "task.passkey.distance is not a passkey setting; allowed: enabled, distances"),
    ],
)
def test_each_bad_setting_is_refused_with_one_sentence(given, said):
    with pytest.raises(ConfigError) as caught:
        check_passkey_settings(given, CONTEXT)
    message = str(caught.value)
    assert said in message and message.endswith(".") and "\n" not in message, message


def test_a_tokenizer_other_than_bytes_is_refused_unless_passkey_is_off():
    with pytest.raises(ConfigError, match=r"only the byte tokenizer.*corpus.tokenizer=bytes or task.passkey.enabled"):
        check_passkey_settings({}, CONTEXT, tokenizer="bpe")
    assert not check_passkey_settings({"enabled": False}, CONTEXT, tokenizer="bpe").enabled


def test_held_out_text_shorter_than_the_longest_trial_is_refused():
    chosen = settings()
    assert chosen.max_length(CONTEXT) == 256 + 2048 + 24
    check_filler(chosen, CONTEXT, 2328)
    with pytest.raises(ConfigError, match=r"the held-out text \(wikitext2\) has 2327 tokens, fewer than the longest"):
        check_filler(chosen, CONTEXT, 2327, "wikitext2")
    with pytest.raises(ConfigError, match="fewer than the longest passkey trial of 2328"):
        build_trials(FILLER[:2000], chosen, CONTEXT)


def test_the_defaults_are_the_yamls_and_null_distances_the_issue_s_grid():
    """Settings left out take conf/task/lm.yaml's values (their one home); its null distances mean 1/8 .. 8."""
    yaml = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "task" / "lm.yaml").passkey)
    chosen = check_passkey_settings(None, 512)
    assert chosen.distances == (0.125, 0.25, 0.5, 1, 2, 4, 8) and yaml["distances"] is None
    assert chosen.depths == tuple(yaml["depths"]) and chosen.trials == yaml["trials"]
    assert chosen.key_length == yaml["key_length"] == 5 and chosen.phrase_length == 24
    assert check_passkey_settings({"trials": 2}, 512) == replace(chosen, trials=2)
    assert check_passkey_settings({"depths": None}, 512).depths == (0, 0.25, 0.5, 0.75, 1)  # null: five depths


def test_the_longest_passkey_sequence_of_a_task_config():
    """What a learned table and a memory estimate must cover: 9 contexts and the phrase by default, none when off."""
    assert passkey_max_length({"context_length": 512, "passkey": {}}) == 512 + 8 * 512 + 24
    assert passkey_max_length({"context_length": 512, "passkey": {"enabled": False}}) == 0
    assert passkey_max_length({"context_length": 512}) == 0
    assert passkey_max_length({"context_length": 512, "passkey": {"distances": [1], "depth_span": 0.5}}) == 792


def test_the_settings_check_imports_no_torch():
    """``poslab.config.passkey_settings`` is checked before anything runs, as ``poslab.config.settings`` is: light, no
    torch."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])  # this checkout's poslab, whatever is installed
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    code = "import sys, poslab.config.passkey_settings; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root, env=env)
    assert done.stdout.strip() == "False"


# ---- the picture -------------------------------------------------------------------------------------------------
def test_the_heatmap_renders_from_the_result_dict_alone(tmp_path):
    result = evaluate_passkey(InductionOracle(window=300), FILLER, settings(trials=1, depths=[0, 1]), CONTEXT)
    stored = json.loads(json.dumps(result))  # what results.json holds: plain JSON, no model
    path = write_passkey_figure({"rope": stored, "alibi": stored}, tmp_path / "passkey.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fig = plot_passkey(stored)
    heatmap, bar = fig.axes
    assert [t.get_text() for t in heatmap.get_xticklabels()] == ["1/8", "1/4", "1/2", "1", "2", "4", "8"]
    assert "exact match" in bar.get_ylabel()
    (line,) = heatmap.get_lines()  # the training context: before 1x, where d + m first exceeds L
    assert line.get_xdata()[0] == pytest.approx(-0.5)
    plt.close(fig)


def test_a_way_an_encoding_lacks_is_a_panel_that_says_so():
    chosen = settings(trials=1, distances=[0.5, 1], depths=[0])
    stored = json.loads(json.dumps(evaluate_passkey(InductionOracle(), FILLER, chosen, CONTEXT)))
    with_way = {**stored, "ways": {"test_yarn": {"exact": [[0.5], [0.0]], "digits": [[0.6], [0.1]]}}}
    fig = plot_passkey({"rope": with_way, "alibi": stored}, way="test_yarn")
    notes = [t.get_text() for t in fig.axes[1].texts]
    assert any("not evaluated as test_yarn" in note for note in notes), notes
    plt.close(fig)


def test_the_call_the_language_module_makes_on_a_prepared_validation_split(tmp_path, tiny_byte_model):
    """The held-out stream and its coordinates as the datamodule holds them: ``split.tokens`` (uint16, a memory
    map) and ``windows(split, starts, length)`` for the paragraph and sentence indices an hrope model reads."""
    from functools import partial

    from poslab.datamodules.corpora import prepare_corpus
    from poslab.datamodules.language import windows
    from tests.datamodules.test_corpora import make_corpus

    (english, _) = prepare_corpus(make_corpus(tmp_path / "data", 120), tmp_path / "data", tmp_path / "cache")
    split, context = english.splits["validation"], 64
    chosen = check_passkey_settings({"distances": [0.5, 1, 2], "depths": [0, 1], "trials": 2}, context)
    check_filler(chosen, context, len(split.tokens), english.name)
    model = Recording(tiny_byte_model("hrope_axial"))
    result = evaluate_passkey(model, split.tokens, chosen, context, coordinates=partial(windows, split))
    assert np.asarray(result["exact"]).shape == (3, 2) and result["filler_tokens"] == len(split.tokens)
    tokens, coordinates, _, _ = model.calls[0]
    first = build_trials(split.tokens, chosen, context)
    real = windows(split, first.starts, tokens.shape[1])["sentence"]
    assert real.max() > 0  # the text has sentence boundaries here: the indices read are not zeros
    assert torch.equal(coordinates["sentence"][:, :24], real[:, :1].expand(-1, 24))  # the phrase at depth 0
    assert torch.equal(coordinates["sentence"][:, 24:32], real[:, 24:32])  # then the text's own indices


# ---- wired into the language-model runs (task=lm) ------------------------------------------------------------------
def tiny_lm_args(corpus: Path, cache: Path) -> list[str]:
    """A tiny language model at context 16 on a local folder, two steps, one passkey trial per cell."""
    return [
        "corpus=local",
        f"corpus.path={corpus}",
        f"paths.cache_dir={cache}",
        "corpus.validation_fraction=0.3",
        "model=tiny",
        "encoding=rope",
        "task.context_length=16",
        "task.batch_size=4",
        "task.val_windows=1",
        "task.val_every_n_steps=2",
        "task.eval_lengths=[32]",
        "trainer.max_steps=2",
        "save_model=false",
        "task.passkey.trials=1",
    ]


def test_a_language_model_run_writes_its_passkey_grid_with_chance(tmp_path):
    """The default distances a 16-token context holds (1.5 x 16 = 24, the phrase: from 2x; to 8x), three depths, every
    test-time way; results.json's ``passkey`` the grid the heatmap reads, passing the results-file check."""
    from poslab.running.compose import compose_config
    from poslab.running.training import run
    from poslab.runs.results import read_results
    from tests.datamodules.test_local_corpus import text_folder

    corpus = text_folder(tmp_path / "data")
    run(compose_config([*tiny_lm_args(corpus, tmp_path / "cache"), "~logger", "~callbacks"], tmp_path / "run"))
    passkey = read_results(tmp_path / "run")["passkey"]
    assert passkey["distance_multiples"] == [2.0, 4.0, 8.0]
    assert passkey["depths"] == [0.0, 0.5, 1.0] and passkey["trials"] == 1
    grid = np.asarray(passkey["exact"])
    assert grid.shape == (3, 3) and ((grid >= 0) & (grid <= 1)).all()
    assert np.asarray(passkey["digits"]).shape == (3, 3)
    assert passkey["chance_exact"] == 1e-5 and passkey["chance_digit"] == 0.1
    assert {"log_scaled", "test_linear", "test_yarn"} <= set(passkey["ways"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ("task.passkey.trials=0", "task.passkey.trials=0 must be a whole number of at least 1"),
        ("task.passkey.distances=[0.5]", "task.passkey.distances has 0.5 (x task.context_length=16 = 8 tokens)"),
    ],
)
def test_train_py_refuses_bad_passkey_settings_up_front_with_exit_2(tmp_path, setting, fragment):
    from tests.conftest import run_train
    from tests.datamodules.test_local_corpus import text_folder

    args = [*tiny_lm_args(text_folder(tmp_path / "data"), tmp_path / "cache"), "~logger", "~callbacks", setting]
    done = run_train(args, tmp_path, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert fragment in done.stderr
    assert not (tmp_path / "cache").exists()  # refused before any data is read


def test_held_out_text_too_short_leaves_default_distances_out_with_a_note_and_refuses_named_ones():
    from poslab.config.passkey_settings import fit_filler

    defaults = check_passkey_settings({"depths": [0, 1]}, 16)  # 1x16 of filler + up to 16x16 + the 24-token phrase
    fitted, note = fit_filler(defaults, {}, 16, 120, "group 'main'")  # room for 80
    assert fitted.distances == (2.0, 4.0) and "distances up to 4 x the context only" in note
    off, note = fit_filler(defaults, {}, 16, 40, "group 'main'")
    assert not off.enabled and "holds no trial" in note
    named = check_passkey_settings({"distances": [2, 16]}, 16)
    with pytest.raises(ConfigError, match="has 100 tokens, fewer than the longest passkey trial"):
        fit_filler(named, {"distances": [2, 16]}, 16, 100, "group 'main'")
    assert fit_filler(named, {"distances": [2, 16]}, 16, 10_000, "group 'main'") == (named, None)


def test_passkey_at_every_validation_keeps_the_copying_curve_by_step(tmp_path):
    """``task.passkey.at_validation``: each validation scores the plain model (the distances within one context, or
    all where the context holds none, depth 0) and results.json's ``passkey_by_step`` keeps one entry per
    validation, in [0, 1]; off by default (the run above writes none)."""
    from poslab.running.compose import compose_config
    from poslab.running.training import run
    from poslab.runs.results import read_results
    from tests.datamodules.test_local_corpus import text_folder

    corpus = text_folder(tmp_path / "data")
    args = [*tiny_lm_args(corpus, tmp_path / "cache"), "trainer.max_steps=4", "task.passkey.at_validation=true"]
    run(compose_config([*args, "~logger", "~callbacks"], tmp_path / "run"))
    curve = read_results(tmp_path / "run")["passkey_by_step"]
    assert [entry["step"] for entry in curve] == [2, 4]
    for entry in curve:
        assert entry["distances"] == [32, 64, 128] and len(entry["exact_by_distance"]) == 3  # 2x .. 8x of 16
        assert 0.0 <= entry["exact"] <= 1.0 and 0.0 <= entry["digits"] <= 1.0


def test_training_windows_hold_planted_pairs_at_the_fraction_asked_and_are_unchanged_at_zero():
    """``task.passkey.train_fraction``: about that share of rows holds one key twice, each phrase whole, inside the
    window, its coordinates those of the token it starts on; at 0 the windows are the ones drawn without it."""
    from poslab.config.passkey_settings import PREFIX
    from poslab.datamodules.passkey_phrases import phrase_tokens, plant_pairs

    torch.manual_seed(0)
    tokens = torch.randint(97, 123, (400, 129))  # letters: no digit, no phrase by chance
    paragraph = torch.arange(129).repeat(400, 1) // 40
    batch = {"tokens": tokens.clone(), "paragraph": paragraph.clone()}
    plant_pairs(batch, 0.0, 5, torch.Generator().manual_seed(1))
    assert torch.equal(batch["tokens"], tokens) and torch.equal(batch["paragraph"], paragraph)
    plant_pairs(batch, 0.25, 5, torch.Generator().manual_seed(1))
    prefix = torch.from_numpy(phrase_tokens(np.zeros((1, 5)))[0, : len(PREFIX)])
    planted = 0
    for row in range(400):
        starts = [s for s in range(129 - 24 + 1) if torch.equal(batch["tokens"][row, s : s + len(PREFIX)], prefix)]
        if not starts:
            assert torch.equal(batch["tokens"][row], tokens[row])
            continue
        planted += 1
        first, second = starts
        assert second - first >= 24
        assert torch.equal(batch["tokens"][row, first : first + 24], batch["tokens"][row, second : second + 24])
        assert (batch["paragraph"][row, second : second + 24] == paragraph[row, second]).all()
    assert 70 <= planted <= 130  # 100 expected


def test_train_fraction_is_refused_out_of_range_on_a_context_too_short_or_with_a_bpe():
    from poslab.config.passkey_settings import check_passkey_settings

    with pytest.raises(ConfigError, match=r"train_fraction=1.5 must be a number from 0"):
        check_passkey_settings({"train_fraction": 1.5}, 128)
    with pytest.raises(ConfigError, match=r"task.context_length=32 cannot hold; allowed: a context of at least 47"):
        check_passkey_settings({"train_fraction": 0.1}, 32)
    with pytest.raises(ConfigError, match=r"only the byte tokenizer"):
        check_passkey_settings({"train_fraction": 0.1, "enabled": False}, 128, tokenizer="gpt2")
    assert check_passkey_settings({"train_fraction": 0.1}, 128).train_fraction == 0.1


@pytest.mark.parametrize(
    ("given", "context", "said"),
    [
        ({"warmup_steps": -1}, 128, r"warmup_steps=-1 must be a whole number of at least 0"),
        ({"warmup_steps": True}, 128, r"warmup_steps=True must be a whole number"),
        ({"warmup_steps": 2.5}, 128, r"warmup_steps=2.5 must be a whole number"),
        ({"warmup_steps": 10}, 32, r"warmup_steps=10 plants two 24-token phrases .* at least 47, or warmup_steps=0"),
    ],
)
def test_a_bad_copying_warmup_is_refused(given, context, said):
    from poslab.config.passkey_settings import check_passkey_settings

    with pytest.raises(ConfigError, match=said):
        check_passkey_settings(given, context)


def test_the_copying_warmup_plants_a_pair_in_every_window_of_its_batches_then_the_fraction(tmp_path):
    """``task.passkey.warmup_steps``: global batches below it hold a pair in every row; from it on, the rows hold
    pairs at ``train_fraction`` (0 here: the windows drawn without any planting, the same as a run without it)."""
    from poslab.config.passkey_settings import PREFIX
    from poslab.datamodules.corpora.coordinates import PreparedGroup, PreparedSplit
    from poslab.datamodules.language import TrainingWindows
    from poslab.datamodules.passkey_phrases import phrase_tokens

    letters = np.random.default_rng(0).integers(97, 123, 5000).astype(np.uint16)  # no digit, no phrase by chance
    zeros = np.zeros(len(letters), dtype=np.int64)
    split = PreparedSplit(letters, zeros, zeros, zeros)
    groups = [PreparedGroup("letters", 1.0, tmp_path, {}, {"train": split})]
    warm = TrainingWindows(groups, 8, 128, seed=3, passkey_fraction=0.0, key_length=5, passkey_warmup=2)
    plain = TrainingWindows(groups, 8, 128, seed=3, passkey_fraction=0.0, key_length=5, passkey_warmup=0)
    prefix = torch.from_numpy(phrase_tokens(np.zeros((1, 5)))[0, : len(PREFIX)])

    def phrases(row: torch.Tensor) -> int:
        return sum(torch.equal(row[s : s + len(PREFIX)], prefix) for s in range(len(row) - len(PREFIX) + 1))

    for index in (0, 1):
        assert [phrases(row) for row in warm.batch(index)["tokens"]] == [2] * 8
    for index in (2, 3):
        assert torch.equal(warm.batch(index)["tokens"], plain.batch(index)["tokens"])
