"""BiPE (issue 38): the bilevel positions against the authors' ``get_bilevel_ids`` (zhenyuhe00/BiPE,
my_modeling_llama_bipe_rope.py, transcribed verbatim) and a hand example; the ALiBi variant's term is
96 * slope * segment distance (the authors' per-key form after the softmax); causality; a train step."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from poslab.encodings import build_encoding
from poslab.encodings.alibi import paper_slopes
from poslab.encodings.base import ModelShape
from poslab.encodings.bipe import bilevel_positions
from poslab.errors import ConfigError
from poslab.model import ModelConfig, Transformer


def get_bilevel_ids(ids, train_scale=1024):
    """The authors' ``LlamaModel.get_bilevel_ids`` (869: "." and 13: newline in Llama's tokenizer)."""
    sep = torch.where(ids == 869, 1, 0)
    sep[ids == 13] = 1
    pos1 = torch.cumsum(sep, dim=1)
    pos1 = torch.cat([torch.zeros((ids.shape[0], 1), device=ids.device), pos1[:, :-1]], dim=1)
    pos2 = torch.cat([sep, torch.ones((ids.shape[0], 1), device=ids.device)], dim=1).reshape(-1)
    ones = torch.cat([torch.zeros((1), device=ids.device) - 1, torch.argwhere(pos2 == 1)[:, 0]])
    diff = ones[1:] - ones[:-1]
    pos2[pos2 == 1] = diff
    pos2 = -torch.cumsum(torch.cat([torch.zeros((1), device=ids.device), pos2[:-1]]), dim=0)
    pos2 = pos2 + torch.arange(pos2.shape[-1], device=ids.device)
    pos2 = pos2.reshape(ids.shape[0], -1)[:, :-1]
    if train_scale is not None:
        pos2[pos2 >= train_scale] = train_scale - 1
    return pos2.long(), pos1.long()


def test_a_hand_example():
    segment = torch.tensor([[0, 0, 0, 1, 1, 2, 2, 2, 2, 3]])
    intra, seg = bilevel_positions(segment + 5)  # counted within the window
    assert intra.tolist() == [[0, 1, 2, 0, 1, 0, 1, 2, 3, 0]]
    assert seg.tolist() == segment.tolist()


def test_the_positions_are_the_authors():
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 40, (3, 64), generator=generator)
    ids[torch.rand(3, 64, generator=generator) < 0.15] = 869
    ids[torch.rand(3, 64, generator=generator) < 0.05] = 13
    ids[0, -1] = 869  # a separator at the end, one at the start
    ids[1, 0] = 13
    token_ids, position_ids = get_bilevel_ids(ids)
    sep = (ids == 869) | (ids == 13)
    # poslab's sentence coordinate: a separator belongs to the sentence it ends, the next token starts one
    sentence = F.pad(sep.long().cumsum(1)[:, :-1], (1, 0))
    intra, seg = bilevel_positions(sentence)
    assert torch.equal(intra, token_ids) and torch.equal(seg, position_ids)


def test_the_alibi_term_is_slope_times_segment_distance_and_the_authors_after_softmax():
    shape = ModelShape.of(32, 4, 1)
    encoding = build_encoding({"name": "bipe", "inter": "alibi"}, shape, max_length=12)
    segment = torch.tensor([[0, 0, 1, 1, 1, 2, 3, 3, 3, 3, 4, 4]]).float()
    term = encoding.score_term(SimpleNamespace(state=segment), torch.zeros(1, 4, 12, 8), None)
    slopes = 96 * torch.tensor(paper_slopes(4))
    distance = (segment[0, :, None] - segment[0, None, :]).clamp(min=0)
    torch.testing.assert_close(term[0], -slopes[:, None, None] * distance)
    causal = torch.ones(12, 12, dtype=torch.bool).tril()
    theirs = (slopes[:, None, None] * segment[0][None, None, :]).expand(4, 12, 12)  # + slope * seg_k per key
    mine_w = term[0].masked_fill(~causal, float("-inf")).softmax(-1)
    their_w = theirs.masked_fill(~causal, float("-inf")).softmax(-1)
    torch.testing.assert_close(mine_w, their_w)


@pytest.mark.parametrize("inter", ["rope", "alibi"])
def test_causal_and_trains(inter):
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16, n_outputs=16, d_model=32, n_heads=2, n_layers=2, encoding={"name": "bipe", "inter": inter}
    )
    model = Transformer(cfg, max_length=20)
    tokens = torch.randint(0, 16, (2, 20))
    sentence = torch.tensor([[0] * 4 + [1] * 7 + [2] * 9, [3] * 10 + [4] * 10])
    coordinates = {"sentence": sentence, "paragraph": torch.zeros_like(sentence)}
    logits = model(tokens, coordinates).logits
    changed_tokens, changed_sentence = tokens.clone(), sentence.clone()
    changed_tokens[:, 12:] = (tokens[:, 12:] + 1) % 16
    changed_sentence[:, 12:] += 1  # a segment boundary moved after token 11
    again = model(changed_tokens, {"sentence": changed_sentence, "paragraph": torch.zeros_like(sentence)}).logits
    torch.testing.assert_close(again[:, :12], logits[:, :12])
    assert not torch.allclose(again[:, 12:], logits[:, 12:])
    F.cross_entropy(logits[:, :-1].reshape(-1, 16), tokens[:, 1:].reshape(-1)).backward()
    assert model.encoding.table.weight.grad[:10].abs().sum() > 0  # intra indices 0..9 were read
    assert model.encoding.table.weight.grad[10:].abs().sum() == 0


def test_bad_settings_stop_clearly():
    shape = ModelShape.of(32, 2, 2)
    for key, value in (("segment", "document"), ("inter", "t5"), ("intra", "rotary")):
        with pytest.raises(ConfigError, match=f"encoding.{key}='{value}'"):
            build_encoding({"name": "bipe", key: value}, shape, max_length=8)
    with pytest.raises(ConfigError, match="inter=alibi rotates nothing"):
        build_encoding({"name": "bipe", "inter": "alibi", "test_scaling": "yarn", "original_length": 8}, shape, 16)


def test_rope_rotates_by_the_segment_index_and_alibi_rotates_nothing():
    sentence = torch.tensor([[2, 2, 3, 3, 3, 4]])
    coordinates = {"sentence": sentence, "paragraph": torch.zeros_like(sentence)}
    for inter in ("rope", "alibi"):
        cfg = ModelConfig(
            vocab_size=8, n_outputs=8, d_model=16, n_heads=2, n_layers=2, encoding={"name": "bipe", "inter": inter}
        )
        positions = Transformer(cfg, max_length=6)(torch.zeros(1, 6).long(), coordinates, return_positions=True)
        if inter == "rope":
            assert positions.positions[1].tolist() == [[0.0, 0.0, 1.0, 1.0, 1.0, 2.0]]
        else:
            assert positions.positions == [None, None]
