"""Synthetic sequence tasks of the where_am_i write-up, as a LightningDataModule.

- ``lag``: at every position output the token ``k`` back (the first ``k``
  positions have no answer and are not scored).
- ``seen``: at every position, has this token appeared earlier? (binary,
  every position scored).

Tokens are uniform over the vocabulary. Training batch ``i`` is a pure
function of ``(seed, i)``: resuming at step ``i`` resumes the data exactly, and
under DDP every rank slices its rows out of the same global batch, so the
data is the same whatever the number of processes. Evaluation sets are fresh
sequences from their own fixed seed, one set per length, independent of the
training seed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset

from poslab.errors import ConfigError

IGNORE = -100  # target value of unscored positions (cross_entropy's ignore_index)


def lag_targets(tokens: Tensor, k: int) -> Tensor:
    targets = torch.full_like(tokens, IGNORE)
    targets[:, k:] = tokens[:, :-k]
    return targets


def seen_targets(tokens: Tensor) -> Tensor:
    """1 where the token occurred at an earlier position of its sequence, else 0."""
    same = tokens[:, :, None] == tokens[:, None, :]  # [B, t, s]
    earlier = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=tokens.device).tril(-1)
    return (same & earlier).any(dim=-1).long()


@dataclass
class SyntheticTask:
    """What a synthetic task needs: its vocabulary, its classes, and the rule that makes targets."""

    name: str
    vocab_size: int
    k: int = 3

    TASKS = ("lag", "seen")

    def __post_init__(self) -> None:
        if self.name not in self.TASKS:
            raise ConfigError(f"unknown synthetic task {self.name!r}; allowed: {', '.join(self.TASKS)}.")
        if self.vocab_size < 2:
            raise ConfigError(f"task.vocab_size={self.vocab_size} must be at least 2.")
        if self.name == "lag" and self.k < 1:
            raise ConfigError(f"task.k={self.k} must be a positive lag (the write-up uses 3).")

    @property
    def num_classes(self) -> int:
        return self.vocab_size if self.name == "lag" else 2

    def targets(self, tokens: Tensor) -> Tensor:
        return lag_targets(tokens, self.k) if self.name == "lag" else seen_targets(tokens)

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        tokens = torch.randint(0, self.vocab_size, (batch_size, length), generator=generator)
        return tokens, self.targets(tokens)


def assign_rank(batches: IterableDataset, trainer: L.Trainer | None, batch_size: int) -> None:
    """Tell a global-batch dataset which rows are this process's (DDP ranks slice one global batch)."""
    if trainer is None:
        return
    world = trainer.world_size
    if batch_size % world:
        raise ConfigError(f"task.batch_size={batch_size} is not divisible by the {world} processes.")
    batches.rank, batches.world_size = trainer.global_rank, world


def batch_generator(seed: int, index: int) -> torch.Generator:
    """An RNG for batch ``index`` of a run with ``seed``, independent of every other batch."""
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


class TrainingBatches(IterableDataset):
    """Endless training batches; this rank's rows of global batch i, for i = start, start + 1, ..."""

    def __init__(self, task: SyntheticTask, batch_size: int, length: int, seed: int) -> None:
        self.task, self.batch_size, self.length, self.seed = task, batch_size, length, seed
        self.start, self.rank, self.world_size = 0, 0, 1

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        rows = self.batch_size // self.world_size
        index = self.start
        while True:
            tokens, targets = self.task.sample(self.batch_size, self.length, batch_generator(self.seed, index))
            part = slice(self.rank * rows, (self.rank + 1) * rows)
            yield tokens[part], targets[part]
            index += 1


class EvaluationSet(Dataset):
    """``size`` fixed sequences of one length, from a seed of their own."""

    def __init__(self, task: SyntheticTask, size: int, length: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed + length)
        self.tokens, self.targets = task.sample(size, length, generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.tokens[i], self.targets[i]


class SyntheticDataModule(L.LightningDataModule):
    def __init__(
        self,
        name: str,
        vocab_size: int,
        train_length: int,
        eval_lengths: list[int],
        batch_size: int = 64,
        eval_size: int = 256,
        eval_batch_size: int = 256,
        eval_seed: int = 12_345,
        k: int = 3,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.task = SyntheticTask(name, vocab_size, k)
        self.train_length, self.eval_lengths = int(train_length), [int(n) for n in eval_lengths]
        self.batch_size, self.eval_size, self.eval_batch_size = batch_size, eval_size, eval_batch_size
        self.eval_seed, self.seed = eval_seed, seed
        self.train_batches = TrainingBatches(self.task, batch_size, self.train_length, seed)
        self.eval_sets: list[EvaluationSet] = []
        self.vocab_size, self.num_classes = self.task.vocab_size, self.task.num_classes

    @property
    def max_length(self) -> int:
        return max([self.train_length, *self.eval_lengths])

    def describe(self) -> dict[str, Any]:
        return {"train_length": self.train_length, "eval_lengths": self.eval_lengths}

    def trainer_arguments(self) -> dict[str, Any]:
        return {}

    def module_arguments(self) -> dict[str, Any]:
        return {"train_length": self.train_length, "eval_lengths": self.eval_lengths}

    def setup(self, stage: str | None = None) -> None:
        assign_rank(self.train_batches, self.trainer, self.batch_size)
        if not self.eval_sets:
            self.eval_sets = [EvaluationSet(self.task, self.eval_size, n, self.eval_seed) for n in self.eval_lengths]

    def train_dataloader(self) -> DataLoader:
        # Batch i depends only on (seed, i): after a resume, continue at the restored step.
        self.train_batches.start = self.trainer.global_step if self.trainer is not None else 0
        return DataLoader(self.train_batches, batch_size=None)

    def test_dataloader(self) -> list[DataLoader]:
        return [DataLoader(s, batch_size=self.eval_batch_size) for s in self.eval_sets]
