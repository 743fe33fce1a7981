"""Log-length scaling per query position (Chiang & Cholak, 2022): the factors, and the model computing them."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.lightning_modules.base import LOG_SCALED, log_length_scale, logits_in_way
from poslab.model import ModelConfig, Transformer


def tiny(encoding: str, attention: str = "explicit") -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16, n_outputs=16, n_heads=2, d_model=32, attention=attention, encoding={"name": encoding}
    )
    return Transformer(cfg, max_length=64)


@pytest.mark.parametrize(("length", "train_length"), [(1, 16), (16, 16), (40, 16), (100, 7)])
def test_each_query_is_scaled_by_the_log_of_the_keys_it_sees(length, train_length):
    got = log_length_scale(length, train_length)
    expected = [max(1.0, math.log(t + 1) / math.log(train_length)) for t in range(length)]
    assert got.dtype == torch.float32 and got.shape == (length,)
    assert got.tolist() == pytest.approx(expected, rel=1e-6)
    assert torch.all(got[:train_length] == 1.0)  # as many keys as training showed, or fewer: as trained
    assert torch.all(got[train_length:].diff() > 0)  # past it, each query by its own count: increasing


def test_the_last_query_takes_the_window_factor_and_the_others_less():
    scale = log_length_scale(64, 16)
    assert float(scale[-1]) == pytest.approx(math.log(64) / math.log(16), rel=1e-6)  # the old rule's one factor
    assert float(scale[31]) == pytest.approx(math.log(32) / math.log(16), rel=1e-6)


@pytest.mark.parametrize("encoding", ["rope", "alibi"])
def test_row_t_of_the_weights_is_the_softmax_of_its_scores_times_its_own_factor(encoding):
    """The first layer's weights at query ``t`` under the per-query factors equal those of a model whose every score
    is times that query's factor (one number): each row takes its own factor, and only that."""
    model, T = tiny(encoding), 40
    tokens = torch.randint(0, 16, (2, T), generator=torch.Generator().manual_seed(1))
    scale = log_length_scale(T, 16)
    with torch.no_grad():
        per_query = model(tokens, score_scale=scale, return_attention=True).attention[0]
        for t in (0, 15, 16, 27, 39):
            one = model(tokens, score_scale=float(scale[t]), return_attention=True).attention[0]
            assert torch.allclose(per_query[:, :, t], one[:, :, t], atol=1e-6), t
        plain = model(tokens, return_attention=True).attention[0]
    assert torch.allclose(per_query[:, :, :16], plain[:, :, :16], atol=1e-6)  # within the training length: plain
    assert not torch.allclose(per_query[:, :, 16:], plain[:, :, 16:], atol=1e-3)


@pytest.mark.parametrize("attention", ["sdpa", "explicit"])
def test_the_log_scaled_way_is_the_plain_model_within_the_training_length(attention):
    model = tiny("rope", attention)
    tokens = torch.randint(0, 16, (2, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        plain = logits_in_way(model, tokens, None, None, train_length=16)
        scaled = logits_in_way(model, tokens, None, LOG_SCALED, train_length=16)
        longer = logits_in_way(model, tokens, None, LOG_SCALED, train_length=8)
    assert torch.allclose(plain, scaled, atol=1e-6)
    assert torch.allclose(plain[:, :8], longer[:, :8], atol=1e-6)  # causal: the first 8 queries are unscaled
    assert not torch.allclose(plain[:, 8:], longer[:, 8:], atol=1e-4)
