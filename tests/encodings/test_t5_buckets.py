"""T5's defaults reach the last bucket in training at every training length (issue 37, item 6): every distance past
``max_distance`` shares that bucket at test time, so training must have updated it; and the defaults are valid
settings however short the training sequences (``task.train_length=16`` was refused, naming a setting the user
never gave)."""

from __future__ import annotations

import pytest
import torch
from transformers.models.t5.modeling_t5 import T5Attention

from poslab.encodings import ModelShape, build_encoding
from poslab.encodings.t5_bias import relative_position_bucket

SHAPE = ModelShape.of(32, 4, 2)
TRAINING_LENGTHS = [*range(2, 70), 100, 127, 128, 129, 200, 256, 500, 512, 1000, 1024, 2048, 4096]


@pytest.mark.parametrize("train_length", TRAINING_LENGTHS)
def test_the_defaults_are_valid_and_training_reaches_the_last_bucket(train_length):
    encoding = build_encoding({"name": "t5_bias"}, SHAPE, max_length=16 * train_length, train_length=train_length)
    buckets, distance = encoding.num_buckets, encoding.max_distance
    assert buckets == min(32, train_length)
    trained = encoding.used_buckets(train_length)
    assert buckets - 1 in trained  # the bucket every farther distance reads at test time
    assert encoding.untrained_at_test(train_length, 16 * train_length) == []
    far = -torch.arange(train_length, 16 * train_length)  # keys past anything training saw
    assert set(relative_position_bucket(far, buckets, distance).tolist()) == {buckets - 1}
    assert encoding.label() == "t5_bias"


@pytest.mark.parametrize("train_length", [16, 20, 40, 128, 300])
def test_the_resolved_buckets_are_transformers(train_length):
    encoding = build_encoding({"name": "t5_bias"}, SHAPE, max_length=4 * train_length, train_length=train_length)
    relative = -torch.arange(4 * train_length)
    expected = T5Attention._relative_position_bucket(
        relative, bidirectional=False, num_buckets=encoding.num_buckets, max_distance=encoding.max_distance
    )
    assert torch.equal(relative_position_bucket(relative, encoding.num_buckets, encoding.max_distance), expected)


def test_an_explicit_pair_that_leaves_buckets_untrained_is_said_at_start():
    # T5's own 32 x 128 at a training length of 32: buckets past distance 31 are never trained
    encoding = build_encoding({"name": "t5_bias", "num_buckets": 32, "max_distance": 128}, SHAPE, 128, train_length=32)
    (said,) = encoding.untrained_at_test(32, 128)
    assert "never in training" in said and "31]" in said
    assert encoding.label() == "t5_bias:32x128"


def test_the_bucket_function_is_transformers_on_random_inputs():
    # any settings validate accepts, keys before and after the query (transformers' relative_position = key - query)
    generator = torch.Generator().manual_seed(37)
    for _ in range(40):
        buckets = int(torch.randint(2, 65, (), generator=generator))
        distance = buckets // 2 + 1 + int(torch.randint(0, 600, (), generator=generator))
        relative = torch.randint(-5000, 50, (257,), generator=generator)
        expected = T5Attention._relative_position_bucket(
            relative, bidirectional=False, num_buckets=buckets, max_distance=distance
        )
        assert torch.equal(relative_position_bucket(relative, buckets, distance), expected), (buckets, distance)
