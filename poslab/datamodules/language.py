"""Language modelling on a prepared corpus: random training windows, fixed validation windows.

Training batch i is a pure function of (seed, i), like the synthetic tasks:
each row picks a source group with probability proportional to its weight
(``wiki_en_zh``: 1/2 English, 1/2 Chinese bytes, whatever the groups' sizes),
then a uniformly random window of ``context_length + 1`` tokens in that
group's training split. Validation windows are evenly spaced over each group's
validation split, ``val_windows`` per group, the same for every run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from poslab.datamodules.codec import BYTE_VOCAB
from poslab.datamodules.corpora import (
    PreparedGroup,
    PreparedSplit,
    check_local_corpus,
    data_notes,
    describe,
    prepare_corpus,
)
from poslab.datamodules.synthetic import assign_rank, batch_generator
from poslab.datamodules.tokenization import check_tokenizer
from poslab.errors import ConfigError

log = logging.getLogger("poslab")


def window(split: PreparedSplit, start: int, length: int) -> dict[str, Tensor]:
    """One window: its tokens and their paragraph and sentence indices (relative to the window's first).

    The indices are made here from the boundary offsets the cache stores (``Coordinate.relative``: two binary
    searches and a cumulative count over the boundaries inside the window), not read per token."""
    stop = start + length
    return {
        "tokens": torch.from_numpy(np.asarray(split.tokens[start:stop], dtype=np.int64)),
        "paragraph": torch.from_numpy(split.paragraphs.relative(start, stop)),
        "sentence": torch.from_numpy(split.sentences.relative(start, stop)),
    }


def windows(split: PreparedSplit, starts: np.ndarray, length: int) -> dict[str, Tensor]:
    """Many windows of one split at once, ``[len(starts), length]`` each: the same values as ``window`` row by
    row, cut with one gather of the tokens and one vectorised count of the boundaries for the whole batch."""
    starts = np.asarray(starts, dtype=np.int64)
    positions = starts[:, None] + np.arange(length)
    return {
        "tokens": torch.from_numpy(np.asarray(split.tokens[positions], dtype=np.int64)),
        "paragraph": torch.from_numpy(split.paragraphs.relative_windows(starts, length)),
        "sentence": torch.from_numpy(split.sentences.relative_windows(starts, length)),
    }


def stack(windows: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    return {key: torch.stack([w[key] for w in windows]) for key in windows[0]}


class TrainingWindows(IterableDataset):
    def __init__(self, groups: list[PreparedGroup], batch_size: int, context_length: int, seed: int) -> None:
        self.groups, self.batch_size, self.length, self.seed = groups, batch_size, context_length + 1, seed
        for group in groups:  # torch.randint would fail on the first batch with an opaque message
            n = len(group.splits["train"])
            if n < self.length:
                raise ConfigError(
                    f"group {group.name!r}: the train split has {n} tokens, fewer than one training window of "
                    f"{self.length} (task.context_length={context_length} + 1); lower task.context_length, lower "
                    f"corpus.validation_fraction or give the corpus more data."
                )
        weights = torch.tensor([g.weight for g in groups], dtype=torch.float64)
        self.probabilities = weights / weights.sum()
        self.start, self.rank, self.world_size = 0, 0, 1

    def batch(self, index: int) -> dict[str, Tensor]:
        """Global batch ``index``: ``tokens`` ``[B, T + 1]`` and their ``paragraph`` / ``sentence`` indices."""
        generator = batch_generator(self.seed, index)
        choice = torch.multinomial(self.probabilities, self.batch_size, replacement=True, generator=generator)
        groups = np.asarray(choice.tolist(), dtype=np.int64)
        starts = np.empty(self.batch_size, dtype=np.int64)
        for row, g in enumerate(groups.tolist()):  # the draws, row by row, as before: the same batches
            split = self.groups[g].splits["train"]
            starts[row] = int(torch.randint(0, len(split) - self.length + 1, (1,), generator=generator))
        batch: dict[str, Tensor] = {}
        for g in np.unique(groups).tolist():  # then the cut, one group's rows at a time
            rows = np.flatnonzero(groups == g)
            for key, values in windows(self.groups[g].splits["train"], starts[rows], self.length).items():
                batch.setdefault(key, torch.empty((self.batch_size, self.length), dtype=torch.int64))[rows] = values
        return batch

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        rows = slice(
            self.rank * (self.batch_size // self.world_size), (self.rank + 1) * (self.batch_size // self.world_size)
        )
        index = self.start
        while True:
            yield {key: value[rows] for key, value in self.batch(index).items()}
            index += 1


class ValidationWindows(Dataset):
    def __init__(self, groups: list[PreparedGroup], per_group: int, context_length: int) -> None:
        self.items: list[tuple[int, int]] = []  # (group, start)
        self.groups, self.length = groups, context_length + 1
        for g, group in enumerate(groups):
            n = len(group.splits["validation"])
            if n < self.length:
                raise ConfigError(
                    f"group {group.name!r}: the validation split has {n} tokens, fewer than one validation window of "
                    f"{self.length} (task.context_length={context_length} + 1); lower task.context_length, raise "
                    f"corpus.validation_fraction or give the corpus more data."
                )
            starts = np.linspace(0, n - self.length, num=min(per_group, n - self.length + 1)).astype(int)
            self.items += [(g, int(s)) for s in starts]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        g, start = self.items[i]
        return window(self.groups[g].splits["validation"], start, self.length)


class RankShard(Sampler[int]):
    """Indices ``rank, rank + world, ...`` of ``n``: the ranks' shares are disjoint and cover every index once
    (unequal by at most one; no padding)."""

    def __init__(self, n: int, rank: int = 0, world: int = 1) -> None:
        self.n, self.rank, self.world = n, rank, world

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, self.n, self.world))

    def __len__(self) -> int:
        return len(range(self.rank, self.n, self.world))


class LanguageModelDataModule(L.LightningDataModule):
    def __init__(
        self,
        name: str,
        corpus: dict[str, Any],
        data_dir: str,
        cache_dir: str,
        context_length: int = 512,
        batch_size: int = 32,
        val_windows: int = 64,
        eval_batch_size: int = 32,
        val_every_n_steps: int = 500,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if context_length < 2:
            raise ConfigError(f"task.context_length={context_length} must be at least 2.")
        self.corpus, self.data_dir, self.cache_dir = dict(corpus), data_dir, cache_dir
        self.context_length, self.batch_size = int(context_length), int(batch_size)
        self.val_windows, self.eval_batch_size, self.seed = int(val_windows), int(eval_batch_size), seed
        self.val_every_n_steps = int(val_every_n_steps)
        check_tokenizer(self.corpus)  # a bad tokenizer setting stops here, before any data is read
        check_local_corpus(self.corpus)  # corpus=local: a path matching nothing stops here too
        self.groups: list[PreparedGroup] = []
        self.train_windows: TrainingWindows | None = None
        self.validation: ValidationWindows | None = None

    @property
    def max_length(self) -> int:
        return self.context_length

    @property
    def train_length(self) -> int:
        """The length trained on: the context (what settings tied to the training length take)."""
        return self.context_length

    def describe(self) -> dict[str, Any]:
        return {
            "corpus": self.corpus["name"],
            "context_length": self.context_length,
            "groups": {g.name: g.meta["splits"] for g in self.groups},
            # how each group was split (rule, fraction asked for, documents and share of tokens held out)
            "split": {g.name: g.meta.get("split") for g in self.groups},
            # what each group was read from: file count and bytes (python_code: and the Python version)
            "sources": {g.name: g.meta.get("source_files") for g in self.groups},
            # what a reader of the figures must know about the data (e.g. trained on a test split): one line each
            "data_notes": data_notes(self.corpus["name"], self.groups),
        }

    @property
    def vocab_size(self) -> int:
        """257 for bytes; a bpe vocabulary is known once the tokenizer is trained (so this prepares the corpus)."""
        if self.corpus.get("tokenizer", "bytes") == "bytes":
            return BYTE_VOCAB
        self.setup()
        return int(self.groups[0].meta["vocab_size"])

    @property
    def num_classes(self) -> int:
        return self.vocab_size

    @property
    def bytes_per_token(self) -> float:
        """UTF-8 bytes per token over the validation splits (1 for bytes): converts loss per token to bits per byte."""
        if self.corpus.get("tokenizer", "bytes") == "bytes":
            return 1.0
        self.setup()
        tokens = sum(g.meta["splits"]["validation"]["tokens"] for g in self.groups)
        return sum(g.meta["splits"]["validation"]["bytes"] for g in self.groups) / max(1, tokens)

    def module_arguments(self) -> dict[str, Any]:
        return {"bytes_per_token": self.bytes_per_token}

    @property
    def paragraph_density(self) -> float:
        """Paragraph boundaries per token in the training data, weighted as training samples the groups."""
        self.setup()
        total = sum(g.weight for g in self.groups)
        return sum(g.weight * g.splits["train"].paragraph_density for g in self.groups) / total

    def trainer_arguments(self) -> dict[str, Any]:
        # training windows are endless: validate by steps, not by epochs
        # and each rank's validation windows come from RankShard, not from a DistributedSampler
        return {
            "val_check_interval": self.val_every_n_steps,
            "check_val_every_n_epoch": None,
            "use_distributed_sampler": False,
        }

    def prepare_data(self) -> None:
        self.prepare()  # on one process per node (Lightning); the other ranks map the cache in setup

    def setup(self, stage: str | None = None) -> None:  # idempotent: also called for corpus statistics
        self.prepare()
        if self.train_windows is None or self.validation is None:
            self.train_windows = TrainingWindows(self.groups, self.batch_size, self.context_length, self.seed)
            self.validation = ValidationWindows(self.groups, self.val_windows, self.context_length)
        assign_rank(self.train_windows, self.trainer, self.batch_size)

    def prepare(self) -> list[PreparedGroup]:
        """The corpus prepared (or its cache mapped) once per datamodule, by whichever hook asks first: Lightning
        calls ``prepare_data`` at every entry (fit, then test) and ``setup`` after it, and each call of
        ``prepare_corpus`` logs the split and the data's warnings again (three times a job, before)."""
        if not self.groups:
            self.groups = prepare_corpus(self.corpus, self.data_dir, self.cache_dir)
            log.info("corpus %s: %s", self.corpus["name"], describe(self.groups))
            for note in data_notes(self.corpus["name"], self.groups):
                log.warning("note: %s", note)
        return self.groups

    def train_dataloader(self) -> DataLoader:
        self.train_windows.start = self.trainer.global_step if self.trainer is not None else 0
        return DataLoader(self.train_windows, batch_size=None)

    def val_dataloader(self) -> DataLoader:
        # each DDP rank evaluates its own windows, none twice (Lightning's DistributedSampler would pad the last
        # rank with repeated windows); the losses are reduced weighted by tokens, as one process computes them
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)
        shard = RankShard(len(self.validation), rank, world)
        return DataLoader(self.validation, batch_size=self.eval_batch_size, sampler=shard)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()
