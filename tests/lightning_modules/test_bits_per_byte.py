"""Bits per byte: the scored tokens' loss in bits over the UTF-8 bytes of exactly those tokens."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from poslab.datamodules.codec import BYTE_VOCAB, SEPARATOR
from poslab.datamodules.corpora import corpus_tokenizer
from poslab.datamodules.language import EvaluationBatches, LanguageModelDataModule
from poslab.datamodules.tokenization import Tokenizer
from poslab.lightning_modules.language import LanguageModelModule
from poslab.model import ModelConfig
from tests.datamodules.test_tokenization import TEXTS, bpe_corpus

CONTEXT = 16


def module_for(vocab_size: int, groups: dict[str, float], train_length: int = CONTEXT) -> LanguageModelModule:
    torch.manual_seed(0)
    model = ModelConfig(vocab_size=vocab_size, n_outputs=vocab_size, n_layers=1, d_model=16, n_heads=2)
    return LanguageModelModule(model, {"lr": 1e-3}, 2 * train_length, train_length, [2 * train_length], groups)


def token_losses(module: LanguageModelModule, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        logits = module.model(tokens[:, :-1]).logits
    return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten(), reduction="none").view(
        len(tokens), -1
    )


def test_bits_per_byte_divides_by_the_bytes_of_the_scored_tokens_by_hand():
    """One window of 8 predictions, tokens of 1 to 4 bytes, the first 3 predictions unscored: bits per byte is the 5
    scored losses / ln 2 / those 5 targets' bytes, not / (5 x the group's mean bytes per token)."""
    module = module_for(8, {"main": 2.5}, train_length=8)
    tokens = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 1]])
    token_bytes = torch.tensor([1, 3, 1, 2, 4, 1, 3, 2])  # bytes of ids 0..7
    batch = {
        "tokens": tokens,
        "group": torch.tensor(0),
        "sliding": torch.tensor(False),
        "scored_from": torch.tensor([3]),  # predictions 3..7 scored: targets 4, 5, 6, 7, 1 (ids)
        "bytes": token_bytes[tokens],
    }
    module.evaluation_step(batch)
    module.report()
    scored_loss = float(token_losses(module, tokens)[0, 3:].double().sum())
    scored_bytes = 4 + 1 + 3 + 2 + 3  # the bytes of targets 4, 5, 6, 7, 1
    row = module.figures["8"]
    assert row["loss"] == pytest.approx(scored_loss / 5, rel=1e-6)
    assert row["bpb"] == pytest.approx(scored_loss / math.log(2) / scored_bytes, rel=1e-6)
    assert abs(row["bpb"] - scored_loss / math.log(2) / (5 * 2.5)) > 0.01  # the old rule: the group's mean


def test_the_bytes_scored_are_counted_once_whatever_the_draws():
    """Randomized positions average ``eval_draws`` draws, each scoring every token: the figures' ``bytes`` (the
    sample a report states) are the bytes scored once, not once a draw (bits per byte sums both over the draws)."""
    torch.manual_seed(0)
    rows = {}
    for draws in (1, 3):
        encoding = {"name": "randomized_rope", "eval_draws": draws}
        model = ModelConfig(vocab_size=8, n_outputs=8, n_layers=1, d_model=16, n_heads=2, encoding=encoding)
        module = LanguageModelModule(model, {"lr": 1e-3}, 16, 16, [16], {"main": 1.0})
        tokens = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7, 0, 1]])
        batch = {"tokens": tokens, "group": torch.tensor(0), "sliding": torch.tensor(False),
                 "scored_from": torch.tensor([0]), "bytes": torch.ones_like(tokens)}  # fmt: skip
        module.evaluation_step(batch)
        module.report()
        rows[draws] = module.figures["16"]
    assert module.draws == 3
    assert rows[1]["bytes"] == rows[3]["bytes"] == 16


def test_a_batch_without_bytes_takes_its_group_s_mean_and_bytes_give_bits_per_token():
    module = module_for(BYTE_VOCAB, {"main": 1.0}, train_length=8)
    tokens = torch.randint(0, BYTE_VOCAB, (2, 9), generator=torch.Generator().manual_seed(0))
    batch = {"tokens": tokens, "group": torch.tensor(0), "sliding": torch.tensor(False), "scored_from": torch.zeros(2)}
    module.evaluation_step(batch)
    module.report()
    row = module.figures["8"]
    assert row["bpb"] == pytest.approx(row["loss"] / math.log(2), rel=1e-12)


def test_the_byte_tokenizer_counts_every_token_and_the_separator_as_one_byte():
    token_bytes = Tokenizer().token_bytes()
    assert token_bytes.shape == (BYTE_VOCAB,) and np.all(token_bytes == 1) and token_bytes[SEPARATOR] == 1


def test_bpe_token_bytes_add_up_to_each_text_s_utf8_bytes(tmp_path):
    datamodule = bpe_datamodule(tmp_path)
    tokenizer = corpus_tokenizer(datamodule.groups, tmp_path / "cache")
    token_bytes = tokenizer.token_bytes()
    assert token_bytes[tokenizer.separator] == 1  # the separator: one byte, as the cache's byte counts have it
    for text in (TEXTS[0], "unseen wörds 😀 中文 and \n\n code()"):
        ids, _ = tokenizer.encode(text)
        assert int(token_bytes[ids].sum()) == len(text.encode("utf-8"))
        assert len(set(token_bytes[ids].tolist())) >= 3  # unequal lengths: the fixture tests something
    split = datamodule.groups[0].splits["validation"]
    stats = datamodule.groups[0].meta["splits"]["validation"]
    assert int(token_bytes[np.asarray(split.tokens)].sum()) == stats["bytes"]  # the cache's count, separators too


def bpe_datamodule(tmp_path) -> LanguageModelDataModule:
    data = tmp_path / "data"
    corpus = bpe_corpus(data)
    datamodule = LanguageModelDataModule(
        "lm", corpus, str(data), str(tmp_path / "cache"), context_length=CONTEXT, eval_lengths=[32],
        passkey={"enabled": False},
    )  # fmt: skip
    datamodule.setup()
    return datamodule


def test_bpe_bits_per_byte_of_an_evaluation_equals_a_direct_computation(tmp_path):
    """Every evaluation batch of a bpe corpus scored by the module; the figure recomputed here from the model's
    losses and each scored target's byte length read off the vocabulary (one byte-level character per byte)."""
    datamodule = bpe_datamodule(tmp_path)
    tokenizer = corpus_tokenizer(datamodule.groups, tmp_path / "cache")
    vocabulary = tokenizer.hf.get_vocab()
    length_of = {i: (1 if i == tokenizer.separator else len(token)) for token, i in vocabulary.items()}
    module = module_for(tokenizer.vocab_size, datamodule.group_bytes_per_token())
    loss, tokens, scored_bytes = 0.0, 0, 0
    for batch in EvaluationBatches(datamodule.groups, datamodule.evaluation, token_bytes=datamodule.token_bytes):
        module.evaluation_step(batch)
        if batch["tokens"].shape[1] - 1 != CONTEXT:
            continue
        losses = token_losses(module, batch["tokens"]).double()
        for row, first in enumerate(batch["scored_from"].tolist()):
            targets = batch["tokens"][row, 1 + first :].tolist()
            loss += float(losses[row, first:].sum())
            tokens += len(targets)
            scored_bytes += sum(length_of[t] for t in targets)
    module.report()
    row = module.figures[str(CONTEXT)]
    assert row["loss"] == pytest.approx(loss / tokens, rel=1e-6)
    assert row["bpb"] == pytest.approx(loss / math.log(2) / scored_bytes, rel=1e-6)
    assert scored_bytes / tokens > 1.5  # merges: the scored tokens hold several bytes each
