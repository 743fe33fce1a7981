"""ALiBi's default slopes are the paper's ``get_slopes`` for every head count (issue 37, item 6), not ``2^(-8h/H)``
where H is not a power of two."""

from __future__ import annotations

import math

import pytest
import torch

from poslab.encodings import ModelShape
from poslab.encodings.alibi import AlibiEncoding, paper_slopes


def get_slopes(n):
    """ofirpress/attention_with_linear_biases, fairseq/models/transformer.py, verbatim (the reference)."""

    def get_slopes_power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    else:
        closest_power_of_2 = 2 ** math.floor(math.log2(n))
        return (
            get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2]
        )


@pytest.mark.parametrize("heads", range(1, 17))
def test_the_default_slopes_are_the_authors(heads):
    assert paper_slopes(heads) == pytest.approx(get_slopes(heads), rel=1e-12)


@pytest.mark.parametrize("heads", [6, 12])
def test_a_model_of_6_or_12_heads_gets_the_authors_slopes_not_the_plain_series(heads):
    encoding = AlibiEncoding(ModelShape.of(heads * 8, heads, 1), slopes=None)
    torch.testing.assert_close(encoding.slopes, torch.tensor(get_slopes(heads)), rtol=1e-6, atol=0)
    plain = [2.0 ** (-8.0 * h / heads) for h in range(1, heads + 1)]
    assert not torch.allclose(encoding.slopes, torch.tensor(plain))  # where the two differ
    bias = encoding.score_bias(5, torch.device("cpu"))
    assert bias[2, 4, 1].item() == pytest.approx(-3 * get_slopes(heads)[2], rel=1e-6)
