"""Settings tied to the training length (FIRE's threshold, T5's max_distance, CoPE's max_pos) and to the longest
length (a learned table's rows): what a null fills in, what the run records, and what evaluation reads untrained."""

from __future__ import annotations

import json

import pytest
import torch

from poslab.encodings import ModelShape, build_encoding
from poslab.running.builders import build_datamodule, build_module
from poslab.running.training import run
from tests.conftest import compose_config, fit_quietly

LENGTHS = ["task.train_length=32", "task.eval_lengths=[32,64,128,256]", "task.batch_size=16"]
FAST = ["debug=small", "~logger", "~callbacks"]


def trained(tmp_path, encoding: str, *overrides: str, steps: int = 20):
    """A module with ``encoding`` on lag, trained ``steps`` steps at length 32, and its datamodule."""
    cfg = compose_config([f"encoding={encoding}", *LENGTHS, *FAST, *overrides], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    return module, datamodule


def causal_inputs(fire, length: int) -> torch.Tensor:
    """FIRE's MLP inputs over every (t, s <= t) of a sequence of ``length``."""
    with torch.no_grad():
        x = fire.normalised_distance(length, torch.device("cpu"))
    return x[torch.ones(length, length, dtype=torch.bool).tril()]


def test_fire_inputs_at_every_test_length_stay_inside_what_training_showed(tmp_path):
    module, datamodule = trained(tmp_path, "fire")
    encoding = module.model.encoding
    assert encoding.resolved_settings["threshold"] == 16  # half the training length
    fit_quietly(module, datamodule, steps=20)  # the threshold is learned: check with the trained one
    fire = encoding.fire[0]
    seen = causal_inputs(fire, 32)
    for length in (64, 128, 256):
        inputs = causal_inputs(fire, length)
        assert inputs.min() >= 0 and inputs.max() <= seen.max() + 1e-3, length
    assert encoding.untrained_at_test(32, 256) == []


def test_fire_at_the_papers_512_extrapolates_and_says_so(tmp_path):
    module, _ = trained(tmp_path, "fire", "encoding.threshold=512.0")
    fire = module.model.encoding.fire[0]
    assert causal_inputs(fire, 32).max() == pytest.approx(0.357, abs=1e-3)  # the referee's figures
    assert causal_inputs(fire, 256).max() == pytest.approx(0.829, abs=1e-3)
    notes = module.model.encoding.untrained_at_test(32, 256)  # one per layer: each layer's FIRE extrapolates
    assert len(notes) == len(module.model.encoding.fire) and notes[0].startswith("layer 0's FIRE")
    assert "up to 0.357 in training" in notes[0] and "0.829 at length 256" in notes[0]


def changed_buckets(tmp_path, *overrides: str) -> tuple[set[int], set[int], object]:
    """(buckets whose table row training changed, buckets evaluation at 256 uses, the encoding)."""
    module, datamodule = trained(tmp_path, "t5_bias", *overrides)
    encoding = module.model.encoding
    before = encoding.table.detach().clone()
    fit_quietly(module, datamodule, steps=10)
    changed = (encoding.table.detach() != before).any(dim=1)
    return set(torch.nonzero(changed).flatten().tolist()), encoding.used_buckets(256), encoding


def test_t5_every_bucket_evaluation_uses_was_updated_in_training(tmp_path):
    updated, used, encoding = changed_buckets(tmp_path)
    assert encoding.max_distance == 31  # the largest training distance, in the last bucket (test_t5_buckets.py)
    assert used <= updated
    assert encoding.untrained_at_test(32, 256) == []


def test_t5_at_its_papers_128_leaves_buckets_at_their_initial_values(tmp_path):
    updated, used, encoding = changed_buckets(tmp_path, "encoding.num_buckets=32", "encoding.max_distance=128")
    assert used - updated == set(range(22, 32))  # first used at distance 35: never at 32 tokens
    (note,) = encoding.untrained_at_test(32, 256)
    assert "[22, 23, 24, 25, 26, 27, 28, 29, 30, 31]" in note


@pytest.mark.parametrize(
    ("encoding", "key", "null", "explicit"),
    [("fire", "threshold", 16, 7.0), ("t5_bias", "max_distance", 31, 64), ("cope", "max_pos", 33, 16)],
)
def test_a_null_takes_the_training_length_and_an_explicit_value_is_kept(encoding, key, null, explicit, tmp_path):
    module, _ = trained(tmp_path, encoding)
    assert module.model.encoding.resolved_settings[key] == null
    module, _ = trained(tmp_path, encoding, f"encoding.{key}={explicit}")
    assert module.model.encoding.resolved_settings[key] == explicit


def test_the_training_length_not_the_longest_fills_them():
    shape = ModelShape.of(32, 2, 2)
    fire = build_encoding({"name": "fire"}, shape, 256, train_length=64)
    learned = build_encoding({"name": "learned"}, shape, 256, train_length=64)
    assert fire.resolved_settings["threshold"] == 32 and learned.resolved_settings["max_positions"] == 256
    assert build_encoding({"name": "fire"}, shape, 256).resolved_settings["threshold"] == 128  # no run: the longest


@pytest.mark.parametrize(
    ("encoding", "fragment"),
    [
        ("learned", "learned position rows 32..255"),
        ("cope", "CoPE counts past 32 (max_pos=33) share the last row"),
    ],
)
def test_results_json_records_resolved_settings_and_what_evaluation_reads_untrained(encoding, fragment, tmp_path):
    cfg = compose_config([f"encoding={encoding}", *LENGTHS, *FAST, "trainer.max_steps=2"], tmp_path)
    run(cfg)
    written = json.loads((tmp_path / "results.json").read_text())
    key = {"learned": "max_positions", "cope": "max_pos"}[encoding]
    assert written["config"]["encoding"][key] is None  # the config says null ...
    assert written["encoding_settings"][key] == {"learned": 256, "cope": 33}[encoding]  # ... this ran
    assert any(fragment in note for note in written["untrained_at_test"])


def test_cope_rows_past_the_training_length_are_named_when_max_pos_is_larger():
    cope = build_encoding({"name": "cope", "max_pos": 100}, ModelShape.of(32, 2, 2), 256, train_length=32)
    notes = cope.untrained_at_test(32, 256)
    assert any("rows 33..99" in note for note in notes) and any("past 99" in note for note in notes)


def test_period_axials_paragraph_index_past_training_is_named():
    shape = ModelShape.of(64, 4, 2)
    period = build_encoding({"name": "period_axial", "paragraph_density": 1 / 32}, shape, 256, train_length=32)
    (note,) = period.untrained_at_test(32, 256)
    assert "reaches 7 at length 256 but at most 0 in training" in note
    assert period.untrained_at_test(64, 64) == []


def test_randomized_rope_samples_below_2048_unless_the_run_is_longer():
    shape = ModelShape.of(32, 2, 2)
    assert build_encoding({"name": "randomized_rope"}, shape, 256).resolved_settings["max_position"] == 2048
    assert build_encoding({"name": "randomized_rope"}, shape, 8192).resolved_settings["max_position"] == 8192
    explicit = {"name": "randomized_rope", "max_position": 4096}
    assert build_encoding(explicit, shape, 256).resolved_settings["max_position"] == 4096
