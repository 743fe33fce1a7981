"""Hierarchical RoPE and its controls: reduction to RoPE, separable blocks, the controls' densities, messages."""

from __future__ import annotations

import math

import pytest
import torch
from omegaconf import OmegaConf

from poslab.encodings import ModelShape, PositionInputs, build_encoding
from poslab.encodings.rotary import inverse_frequencies
from poslab.errors import ConfigError
from poslab.model import ModelConfig, Transformer
from tests.conftest import compose_config

torch.set_num_threads(1)

SHAPE = ModelShape(d_model=48, n_heads=2, n_layers=2, head_dim=24)
B, T = 2, 24


def model(encoding: str, attention: str = "sdpa", **settings) -> Transformer:
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16, n_outputs=16, n_heads=2, d_model=48, attention=attention, encoding={"name": encoding, **settings}
    )
    return Transformer(cfg, max_length=64).eval()


def same_weights(target: Transformer, source: Transformer) -> Transformer:
    target.load_state_dict(source.state_dict())  # the encodings have no weights: strict loading checks it
    return target


def structure(b: int = B, t: int = T, offset: int = 0) -> dict[str, torch.Tensor]:
    """Paragraphs of 8 tokens, sentences of 3, counted from ``offset`` (as a window inside a document would be)."""
    idx = torch.arange(t).expand(b, t)
    return {"paragraph": idx // 8 + offset, "sentence": idx // 3 + offset}


TOKENS = torch.randint(0, 16, (B, T), generator=torch.Generator().manual_seed(1))
INDEX = {"paragraph": torch.arange(T).expand(B, T), "sentence": torch.arange(T).expand(B, T)}


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_split_frequencies_with_token_index_coordinates_is_rope(pairing):
    rope = model("rope", pairing=pairing)
    hrope = same_weights(model("hrope_axial", pairing=pairing, blocks=[8, 8, 8]), rope)
    assert torch.equal(hrope.encoding.inv_freq, inverse_frequencies(24, 10_000.0))
    expected = rope(TOKENS).logits
    assert torch.allclose(hrope(TOKENS, coordinates=INDEX).logits, expected, atol=1e-5)
    # with the default blocks too (24 -> [8, 8, 8]), and with "full" it is another encoding
    assert hrope.encoding.blocks == model("hrope_axial").encoding.blocks == [8, 8, 8]
    full = same_weights(model("hrope_axial", pairing=pairing, frequencies="full"), rope)
    assert not torch.allclose(full(TOKENS, coordinates=INDEX).logits, expected, atol=1e-3)


def test_only_hrope_reads_the_paragraph_coordinate():
    hrope, rope = model("hrope_axial"), model("rope")
    moved = structure()
    moved["paragraph"] = moved["paragraph"].clone()
    moved["paragraph"][:, 12:] += 1  # a fake split in the middle of the second paragraph
    assert not torch.allclose(hrope(TOKENS, structure()).logits, hrope(TOKENS, moved).logits, atol=1e-4)
    assert torch.equal(rope(TOKENS, structure()).logits, rope(TOKENS, moved).logits)


def test_coordinates_are_counted_within_the_window_and_shared_by_layers():
    hrope = model("hrope_axial")
    out = hrope(TOKENS, structure(), return_positions=True)
    far = hrope(TOKENS, structure(offset=1000), return_positions=True)
    assert torch.equal(out.logits, far.logits)
    positions = far.positions
    assert positions[0].shape == (B, T, 3) and positions[0].dtype == torch.float32
    assert all(p is positions[0] for p in positions)  # one tensor for all layers: one rotation
    assert torch.equal(positions[0][0, :, 0], torch.arange(T).float() // 8)  # paragraph, from 0
    assert torch.equal(positions[0][0, :, 2], torch.arange(T).float())  # token


@pytest.mark.parametrize("frequencies", ["split", "full", "token_first", "interleaved"])
@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_blocks_do_not_mix(frequencies, pairing):
    enc = build_encoding(
        {"name": "hrope_axial", "blocks": [6, 8, 10], "frequencies": frequencies, "pairing": pairing}, SHAPE, 64
    )
    base = torch.rand(B, T, 3) * 50
    bands = [range(0, 3), range(3, 7), range(7, 12)]  # pairs of each block
    for axis, band in enumerate(bands):
        moved = base.clone()
        moved[..., axis] += torch.rand(B, T) * 10 + 1
        changed = (enc.angles(moved) != enc.angles(base)).any(dim=(0, 1))
        assert changed.nonzero().flatten().tolist() == list(band)
    if frequencies == "full":  # each block has its own complete ladder
        assert torch.equal(enc.inv_freq[7:], inverse_frequencies(10, 10_000.0))


@pytest.mark.parametrize("blocks", [[8, 8, 8], [2, 4, 18]])
def test_frequency_allocations_hand_out_ropes_ladder(blocks):
    """split, token_first and interleaved use each rung of RoPE's ladder once; split gives the paragraph block
    the fastest band, token_first the token block; interleaved deals rungs token, sentence, paragraph in turn,
    so every axis spans the spectrum. Pairs stay in their block's place (paragraph pairs first)."""
    ladder = inverse_frequencies(sum(blocks), 10_000.0)
    pairs = [b // 2 for b in blocks]
    bands = {}
    for frequencies in ("split", "token_first", "interleaved"):
        enc = build_encoding({"name": "hrope_axial", "blocks": blocks, "frequencies": frequencies}, SHAPE, 64)
        assert torch.equal(enc.inv_freq.sort().values, ladder.sort().values)  # every rung exactly once
        assert enc.pair_axis.tolist() == [0] * pairs[0] + [1] * pairs[1] + [2] * pairs[2]
        bands[frequencies] = [enc.inv_freq[enc.pair_axis == a] for a in range(3)]
        assert enc.label() == ("hrope_axial" if frequencies == "split" else f"hrope_axial:{frequencies}")
    paragraph, sentence, token = bands["split"]
    assert paragraph.min() > sentence.max() and sentence.min() > token.max() and paragraph.max() == 1.0
    paragraph, sentence, token = bands["token_first"]
    assert token.min() > sentence.max() and sentence.min() > paragraph.max() and token.max() == 1.0
    paragraph, sentence, token = bands["interleaved"]
    assert token.max() == ladder[0] and sentence.max() == ladder[1] and paragraph.max() == ladder[2]
    for band in (paragraph, sentence, token):
        assert torch.all(band[1:] < band[:-1])  # down the spectrum in feature order
    if len(set(pairs)) == 1:  # equal blocks: token, sentence, paragraph take every third rung from 0, 1, 2
        n = pairs[0]
        for start, band in ((0, token), (1, sentence), (2, paragraph)):
            assert torch.equal(band, ladder[start : 3 * n : 3])
    else:  # [2, 4, 18]: a full block is skipped, the others share the rest of the spectrum
        assert torch.equal(paragraph, ladder[2:3]) and torch.equal(sentence, ladder[torch.tensor([1, 4])])


def test_sdpa_and_explicit_attention_agree():
    sdpa = model("hrope_axial", blocks=[4, 8, 12])
    explicit = same_weights(model("hrope_axial", attention="explicit", blocks=[4, 8, 12]), sdpa)
    out = explicit(TOKENS, structure(), return_attention=True)
    assert torch.allclose(sdpa(TOKENS, structure()).logits, out.logits, atol=1e-5)
    assert out.attention[0].shape == (B, 2, T, T)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"blocks": [8, 8, 6]}, r"blocks=\[8, 8, 6\] must be three even positive sizes .* rotated dimension 24"),
        ({"blocks": [7, 9, 8]}, r"blocks=\[7, 9, 8\] must be three even"),
        ({"blocks": [12, 12]}, r"blocks=\[12, 12\]"),
        ({"blocks": [0, 12, 12]}, r"blocks=\[0, 12, 12\]"),
        ({"blocks": [8, 8, 8], "rotary_dim": 12}, r"rotated dimension 12"),
        ({"rotary_dim": 4}, r"rotated dimension 4 is too small for three even blocks"),
        ({"frequencies": "mixed"}, r"frequencies='mixed' is not allowed; allowed: split, full, token_first, interl"),
    ],
)
def test_bad_settings_say_what_is_allowed(settings, message):
    with pytest.raises(ConfigError, match=message):
        build_encoding({"name": "hrope_axial", **settings}, SHAPE, 64)


@pytest.mark.parametrize("name", ["rand_axial", "period_axial"])
def test_controls_need_a_paragraph_density(name):
    with pytest.raises(ConfigError, match="set encoding.paragraph_density or let the corpus fill it in"):
        build_encoding({"name": name}, SHAPE, 64)
    for bad in (0, 1, 1.5, -0.1, True, "0.1"):
        with pytest.raises(ConfigError, match="strictly between 0 and 1"):
            build_encoding({"name": name, "paragraph_density": bad}, SHAPE, 64)
    if name == "rand_axial":
        with pytest.raises(ConfigError, match="eval_paragraphs='fixed' is not allowed; allowed: real, random"):
            build_encoding({"name": name, "paragraph_density": 0.1, "eval_paragraphs": "fixed"}, SHAPE, 64)


def test_missing_coordinate_says_the_corpus_must_provide_it():
    with pytest.raises(ConfigError, match="no 'paragraph' coordinate: the corpus must provide paragraph and sentence"):
        model("hrope_axial")(TOKENS)
    with pytest.raises(ConfigError, match="no 'sentence' coordinate"):
        model("hrope_axial")(TOKENS, {"paragraph": INDEX["paragraph"]})
    # the controls need the sentence index (and rand_axial in evaluation the real paragraph index)
    with pytest.raises(ConfigError, match="rand_axial.*no 'sentence' coordinate"):
        model("rand_axial", paragraph_density=0.1).train()(TOKENS, {"paragraph": INDEX["paragraph"]})
    with pytest.raises(ConfigError, match="rand_axial.*no 'paragraph' coordinate"):
        model("rand_axial", paragraph_density=0.1)(TOKENS, {"sentence": INDEX["sentence"]})
    model("period_axial", paragraph_density=0.1)(TOKENS, {"sentence": INDEX["sentence"]})  # no paragraph needed


def boundaries(paragraph: torch.Tensor) -> torch.Tensor:
    return paragraph.diff(dim=-1)


def test_rand_axial_samples_fresh_boundaries_at_the_density_in_training():
    density, b, t = 0.05, 16, 512
    enc = build_encoding({"name": "rand_axial", "paragraph_density": density}, SHAPE, t)
    tokens = torch.zeros(b, t, dtype=torch.long)
    inputs = PositionInputs.from_tokens(tokens, structure(b, t))
    first = enc.positions(None, inputs)[..., 0]
    second = enc.positions(None, inputs)[..., 0]
    assert not torch.equal(first, second)  # resampled every forward pass
    for paragraph in (first, second):
        assert (paragraph[:, 0] == 0).all() and set(boundaries(paragraph).unique().tolist()) <= {0.0, 1.0}
        n = b * (t - 1)  # Bernoulli draws: one per token after the first
        rate = boundaries(paragraph).sum().item() / n
        assert abs(rate - density) < 4 * math.sqrt(density * (1 - density) / n)
    # sentence and token coordinates are the real ones
    assert torch.equal(enc.positions(None, inputs)[..., 1:], model_free_positions(b, t)[..., 1:])


def model_free_positions(b: int, t: int) -> torch.Tensor:
    idx = torch.arange(t).float().expand(b, t)
    return torch.stack((idx // 8, idx // 3, idx), dim=-1)


def test_rand_axial_in_evaluation_is_reproducible():
    real = build_encoding({"name": "rand_axial", "paragraph_density": 0.1}, SHAPE, 64).eval()
    inputs = PositionInputs.from_tokens(TOKENS, structure())
    assert torch.equal(real.positions(None, inputs), model_free_positions(B, T))  # the real paragraphs
    random = build_encoding(
        {"name": "rand_axial", "paragraph_density": 0.1, "eval_paragraphs": "random"}, SHAPE, 64
    ).eval()
    first, second = random.positions(None, inputs), random.positions(None, inputs)
    assert torch.equal(first, second) and not torch.equal(first, model_free_positions(B, T))
    # and the whole model gives the same output twice in evaluation, but not in training
    rand = model("rand_axial", paragraph_density=0.2)
    assert torch.equal(rand(TOKENS, structure()).logits, rand(TOKENS, structure()).logits)
    rand.train()
    assert not torch.equal(rand(TOKENS, structure()).logits, rand(TOKENS, structure()).logits)


@pytest.mark.parametrize("training", [True, False])
def test_period_axial_grid_has_the_exact_density(training):
    enc = build_encoding({"name": "period_axial", "paragraph_density": 0.1}, SHAPE, 64).train(training)
    assert enc.period == 10
    inputs = PositionInputs.from_tokens(torch.zeros(3, 100, dtype=torch.long), structure(3, 100))
    paragraph = enc.positions(None, inputs)[..., 0]
    assert torch.equal(paragraph, (torch.arange(100) // 10).float().expand(3, 100))
    assert boundaries(paragraph).sum(dim=-1).tolist() == [9.0, 9.0, 9.0]  # 100 tokens: 10 paragraphs
    assert boundaries(paragraph).nonzero()[:, 1].remainder(10).eq(9).all()  # each boundary right before t % 10 == 0


@pytest.mark.parametrize("name", ["hrope_axial", "rand_axial", "period_axial"])
def test_yaml_defaults_build(name):
    # composed as train.py composes it: the YAML inherits base, pairing, rotary_dim and the scaling rules
    # (encoding/shared/rotary), original_length resolved from the task
    settings = OmegaConf.to_container(compose_config([f"encoding={name}"]).encoding, resolve=True)
    assert settings["name"] == name
    if "paragraph_density" in settings:
        settings["paragraph_density"] = 0.02  # what the corpus fills in
    enc = build_encoding(settings, SHAPE, 64)
    assert enc.blocks == [8, 8, 8] and enc.frequencies == "split" and enc.label() == name
