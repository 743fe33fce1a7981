"""The whole model is causal under every registered encoding: the logits at positions ``<= i`` do not change when
the tokens after ``i``, their paragraph and sentence coordinates, or both change (docs/causality.md).

``ENCODINGS`` is iterated, so an encoding registered later is covered without editing this file; a setting the
corpus fills in (``corpus_settings``) takes a stand-in from ``STAND_INS``, and one without a stand-in fails here.
Weights get seeded noise so that parts starting at zero (CoPE's table, the increments' last layer, gates) act.
Encodings that draw at random (``rand_axial``, ``randomized_rope``) run in eval mode, and in training mode with the
module's per-row seeds (what a training step gives them), which fix the draws whatever the tokens.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor

from poslab.encodings import ENCODINGS
from poslab.model import Transformer
from tests.conftest import tiny_model

T = 20
#: a stand-in for each setting the training corpus fills in (``PositionEncoding.corpus_settings``)
STAND_INS: dict[str, Any] = {"paragraph_density": 0.15}
#: settings that take other branches of an encoding's input path (the defaults are tested for every encoding)
VARIANTS = [("rand_axial", {"eval_paragraphs": "random"})]


def registered() -> list[str]:
    return sorted(name for name in ENCODINGS if not name.startswith("test_"))  # other tests' test-only encodings


def model_for(name: str, **settings: Any) -> Transformer:
    stand_ins = {key: STAND_INS[key] for key in ENCODINGS[name].corpus_settings}
    model = tiny_model(name, n_layers=2, max_length=2 * T, **stand_ins, **settings)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def inputs(seed: int) -> tuple[Tensor, dict[str, Tensor]]:
    """Tokens and non-decreasing paragraph and sentence coordinates (a paragraph start is a sentence start)."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 16, (2, T), generator=generator)
    paragraph_step = torch.rand(2, T, generator=generator) < 0.15
    sentence_step = paragraph_step | (torch.rand(2, T, generator=generator) < 0.3)
    paragraph, sentence = paragraph_step.long().cumsum(-1) + 2, sentence_step.long().cumsum(-1) + 5
    return tokens, {"paragraph": paragraph, "sentence": sentence, "row_seed": torch.tensor([[101], [202]])}


def continued(i: int, change: str) -> tuple[Tensor, dict[str, Tensor]]:
    """``inputs(0)`` up to position ``i``, and after it other tokens and/or other (still non-decreasing)
    coordinates, continuing from their values at ``i``."""
    tokens, coordinates = inputs(0)
    other_tokens, other = inputs(1)
    if change in ("tokens", "both"):
        tokens = torch.cat((tokens[:, : i + 1], other_tokens[:, i + 1 :]), dim=1)
    if change in ("coordinates", "both"):
        for key in ("paragraph", "sentence"):
            steps = other[key].diff(dim=1, prepend=other[key][:, :1])
            tail = coordinates[key][:, i : i + 1] + steps[:, i + 1 :].cumsum(-1)
            coordinates[key] = torch.cat((coordinates[key][:, : i + 1], tail), dim=1)
    return tokens, coordinates


def check_causal(model: Transformer, changes: tuple[str, ...] = ("tokens", "coordinates", "both")) -> None:
    with torch.no_grad():
        reference = model(*inputs(0)).logits
        moved = 0
        for change in changes:
            for i in range(T - 1):
                logits = model(*continued(i, change)).logits
                torch.testing.assert_close(logits[:, : i + 1], reference[:, : i + 1], rtol=1e-5, atol=1e-5)
                moved += not torch.allclose(logits[:, i + 1 :], reference[:, i + 1 :], atol=1e-4)
    assert moved >= T - 1  # the changes reach the model: every token change moves the logits after the cut


@pytest.mark.parametrize("name", registered())
def test_the_logits_up_to_i_depend_on_nothing_after_i(name):
    check_causal(model_for(name))


@pytest.mark.parametrize(("name", "settings"), VARIANTS)
def test_variants_of_the_input_path_are_causal(name, settings):
    check_causal(model_for(name, **settings))


@pytest.mark.parametrize("name", [name for name in registered() if ENCODINGS[name].uses_row_seeds])
def test_encodings_that_draw_per_row_are_causal_in_training_mode(name):
    """A training step: the module passes ``row_seed`` and the draws depend on it, not on the tokens."""
    check_causal(model_for(name).train())


def test_the_coordinates_reach_hrope_so_changing_them_after_i_is_seen_after_i():
    """For an encoding that reads them, the coordinate change alone moves the logits after the cut (the check above
    is not vacuous for the coordinates), and for one that does not read them it moves nothing."""
    tokens, coordinates = inputs(0)
    for name, reads in (("hrope_axial", True), ("rope", False)):
        model = model_for(name)
        with torch.no_grad():
            reference = model(tokens, coordinates).logits
            changed = model(*continued(T // 2, "coordinates")).logits
        assert torch.equal(changed[:, : T // 2 + 1], reference[:, : T // 2 + 1])
        assert (not torch.allclose(changed, reference, atol=1e-4)) == reads, name


def test_every_corpus_setting_has_a_stand_in():
    needed = {key for name in registered() for key in ENCODINGS[name].corpus_settings}
    assert needed <= set(STAND_INS), f"add a stand-in for {sorted(needed - set(STAND_INS))}"


def test_the_check_finds_an_encoding_that_reads_ahead(monkeypatch):
    """Not vacuous: hRoPE counting its window's coordinates from the row's *last* value instead of its first
    (a window of the future) fails the check."""
    import poslab.encodings.hrope as hrope

    def from_the_end(inputs, key: str, encoding: str) -> Tensor:
        values = inputs.coordinates[key]
        return values - values[:, -1:]

    monkeypatch.setattr(hrope, "window_coordinate", from_the_end)
    with pytest.raises(AssertionError):
        check_causal(model_for("hrope_axial"), changes=("coordinates",))
