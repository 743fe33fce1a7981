"""The synthetic tasks as a LightningDataModule: training batches, evaluation sets and their shares under DDP. The
tasks themselves (their registry, rules and settings) are ``poslab.datamodules.tasks``.

Training batch ``i`` is a pure function of ``(seed, i)``, its length too when
``train_lengths`` asks for lengths drawn per batch: resuming at step
``i`` resumes the data exactly, and under DDP every rank slices its rows out of
the same global batch, so the data is the same whatever the number of
processes. Evaluation sets are fresh sequences from their own fixed seed, one
set per length, independent of the training seed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import lightning as L
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset, Sampler

from poslab.config.settings import root_defaults, yaml_defaults
from poslab.datamodules.tasks import Task, validated_task
from poslab.errors import ConfigError

#: the selection sets' seed is the evaluation seed plus this: sequences of their own, never a test set's
SELECTION_SEED_OFFSET = 1_000_003
#: batch i of a run with seed s draws from generator seed ``s x TRAIN_SEED_STRIDE + i`` (``batch_generator``)
TRAIN_SEED_STRIDE = 1_000_003


def training_batches_drawn(trainer: L.Trainer | None) -> int:
    """Where a (resumed) training stream goes on: the batches the module drew so far (``batches_drawn``: its steps
    and its skipped non-finite ones), 0 without a trainer."""
    if trainer is None:
        return 0
    return int(getattr(trainer.lightning_module, "batches_drawn", trainer.global_step))


def assign_rank(batches: IterableDataset, trainer: L.Trainer | None, batch_size: int) -> None:
    """Tell a global-batch dataset which rows are this process's (DDP ranks slice one global batch)."""
    if trainer is None:
        return
    world = trainer.world_size
    if batch_size % world:
        raise ConfigError(f"task.batch_size={batch_size} is not divisible by the {world} processes.")
    batches.rank, batches.world_size = trainer.global_rank, world


class RankShard(Sampler[int]):
    """Indices ``rank, rank + world, ...`` of ``n``: the ranks' shares are disjoint and cover every index once
    (unequal by at most one; no padding: Lightning's DistributedSampler would repeat items, counted twice).

    ``stand_in``: a rank that ``n`` leaves without an index (``n < world``) gets one stand-in, the index
    ``n + rank % n``, which its dataset makes a copy of item ``rank % n`` that scores nothing
    (``EvaluationBatches``): Lightning refuses a rank an empty dataloader, and with it would skip that rank's
    epoch-end hooks, where the others wait for it to join their all-gather."""

    def __init__(self, n: int, rank: int = 0, world: int = 1, stand_in: bool = False) -> None:
        self.n, self.rank, self.world, self.stand_in = n, rank, world, stand_in

    def indices(self) -> range:
        share = range(self.rank, self.n, self.world)
        if not share and self.stand_in and self.n:
            return range(self.n + self.rank % self.n, self.n + self.rank % self.n + 1)
        return share

    def __iter__(self) -> Iterator[int]:
        return iter(self.indices())

    def __len__(self) -> int:
        return len(self.indices())


def trainer_rank(trainer: L.Trainer | None) -> tuple[int, int]:
    """(rank, world size) of a datamodule's trainer; (0, 1) without one. A Trainer of several processes that
    would put its own sampler over ``RankShard`` (Lightning wraps a custom sampler in a DistributedSampler of its
    indices) would score a part of each rank's share: refused."""
    if trainer is None:
        return 0, 1
    connector = getattr(trainer, "_accelerator_connector", None)
    if trainer.world_size > 1 and getattr(connector, "use_distributed_sampler", False):
        raise ConfigError(
            f"a Trainer of {trainer.world_size} processes with use_distributed_sampler=True would shard each "
            f"rank's evaluation share again and score only part of it; allowed: a Trainer built with the "
            f"datamodule's trainer_arguments() (use_distributed_sampler=False), as train.py builds it."
        )
    return trainer.global_rank, trainer.world_size


def check_evaluation_shares(eval_size: int, world: int) -> None:
    """Every DDP rank needs a sequence of each evaluation set (``RankShard``: Lightning refuses a rank an empty
    dataloader); checked against the trainer's own world size (``trainer.devices=auto`` or -1 is counted only
    there)."""
    if eval_size < world:
        raise ConfigError(
            f"task.eval_size={eval_size} gives some of the {world} processes no evaluation sequence; allowed: "
            f"task.eval_size of at least {world} (one sequence per process), or fewer processes (trainer.devices)."
        )


def batch_generator(seed: int, index: int) -> torch.Generator:
    """An RNG for batch ``index`` of a run with ``seed``, independent of every other batch."""
    return torch.Generator().manual_seed(seed * TRAIN_SEED_STRIDE + index)


def check_disjoint_streams(seed: int, batches: int, eval_seed: int, lengths: Sequence[int]) -> None:
    """Refuse a run whose training batches would come from the generator seed of one of its evaluation sets: batch
    i is ``batch_generator(seed, i)``, the test set at length L seed ``eval_seed + L`` and its selection set
    ``eval_seed + SELECTION_SEED_OFFSET + L``, so a long enough run (seed 0: from batch 12,377 at the default
    ``eval_seed`` 12345) would train on the very sequences it is tested on."""
    first = seed * TRAIN_SEED_STRIDE
    for name, offset in (("test", 0), ("selection", SELECTION_SEED_OFFSET)):
        for length in lengths:
            index = eval_seed + offset + length - first
            if 0 <= index < batches:
                raise ConfigError(
                    f"seed={seed} with task.eval_seed={eval_seed}: training batch {index} of the run's {batches} "
                    f"would be drawn from generator seed {eval_seed + offset + length}, the {name} set's at length "
                    f"{length}, so the model would train on the sequences it is scored on; allowed: a task.eval_seed "
                    f"whose sets' seeds lie outside the training batches' {first} .. {first + batches - 1} (e.g. "
                    f"task.eval_seed={first + batches}), or another seed."
                )


class TrainingBatches(IterableDataset):
    """Endless training batches; this rank's rows of global batch i, for i = start, start + 1, ...

    With ``lengths = (low, high)`` each batch has its own length, uniform over ``low .. high`` (inclusive) and
    drawn first from the batch's generator, so it too is a function of ``(seed, i)`` alone: every rank makes
    the same global batch, and a resume continues the same lengths. One length per batch: no padding.
    """

    def __init__(
        self, task: Task, batch_size: int, length: int, seed: int, lengths: tuple[int, int] | None = None
    ) -> None:
        self.task, self.batch_size, self.length, self.seed = task, batch_size, length, seed
        self.lengths = lengths
        self.start, self.rank, self.world_size = 0, 0, 1

    def draw_length(self, generator: torch.Generator) -> int:
        """The length of the batch ``generator`` makes: ``length``, or one drawn from ``lengths``. A range of one
        length draws nothing, so it makes the very batches of that fixed length."""
        if self.lengths is None or self.lengths[0] == self.lengths[1]:
            return self.length
        low, high = self.lengths
        return low + int(torch.randint(high - low + 1, (1,), generator=generator))

    def batch_length(self, index: int) -> int:
        """The length of global batch ``index`` (what ``__iter__`` yields for it), without making the batch."""
        return self.draw_length(batch_generator(self.seed, index))

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        rows = self.batch_size // self.world_size
        index = self.start
        while True:
            generator = batch_generator(self.seed, index)
            tokens, targets = self.task.sample(self.batch_size, self.draw_length(generator), generator)
            part = slice(self.rank * rows, (self.rank + 1) * rows)
            yield tokens[part], targets[part]
            index += 1


class EvaluationSet(Dataset):
    """``size`` fixed sequences of one length, from a seed of their own."""

    def __init__(self, task: Task, size: int, length: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed + length)
        self.tokens, self.targets = task.sample(size, length, generator)

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, i: int) -> tuple[Tensor, Tensor]:
        return self.tokens[i], self.targets[i]


#: the settings every synthetic task's YAML takes from ``conf/task/lag.yaml`` (their one home), and the root's
#: (``conf/train.yaml``): what a datamodule made without them takes
SYNTHETIC, ROOT = yaml_defaults("task", "lag"), root_defaults()


class SyntheticDataModule(L.LightningDataModule):
    def __init__(
        self,
        name: str,
        vocab_size: int,
        train_length: int,
        eval_lengths: list[int],
        batch_size: int = SYNTHETIC["batch_size"],
        eval_size: int = SYNTHETIC["eval_size"],
        eval_batch_size: int = SYNTHETIC["eval_batch_size"],
        eval_seed: int = SYNTHETIC["eval_seed"],
        eval_ways: str = SYNTHETIC["eval_ways"],
        seed: int = ROOT["seed"],
        train_lengths: Sequence[int] | None = SYNTHETIC["train_lengths"],
        **settings: Any,
    ) -> None:
        """A setting not given (a datamodule made in Python, an older run's config) takes its YAML value
        (``SYNTHETIC``, ``ROOT``). ``settings``: the task's own (lag's ``k``, flip_flop's probabilities, counting's
        ``num_variables``).
        ``train_lengths``: null (every training batch at ``train_length``) or ``[low, high]``, each batch's length
        drawn from it; ``train_length`` must then be ``high``, and stays the longest length trained on."""
        super().__init__()
        # the task's settings, checked by the one function the config check also calls (poslab.running.checks)
        self.task, self.train_lengths = validated_task(
            name, vocab_size, train_length, eval_lengths, train_lengths, eval_ways, **settings
        )
        self.train_length, self.eval_lengths = int(train_length), [int(n) for n in eval_lengths]
        self.batch_size, self.eval_size, self.eval_batch_size = batch_size, eval_size, eval_batch_size
        self.eval_seed, self.seed, self.eval_ways = eval_seed, seed, str(eval_ways)
        self.train_batches = TrainingBatches(self.task, batch_size, self.train_length, seed, self.train_lengths)
        self.eval_sets: list[EvaluationSet] = []  # the test sets, one per evaluation length
        self.selection_sets: list[EvaluationSet] = []  # one per length past training (``selection_lengths``)
        self.vocab_size, self.num_classes = self.task.vocab_size, self.task.num_classes

    @property
    def max_length(self) -> int:
        return max([self.train_length, *self.eval_lengths])

    @property
    def paragraph_density(self) -> float:
        """Paragraph starts per token, for an encoding that takes it from the data (rand_axial, period_axial): a
        generated sequence is one paragraph, so one start per training sequence, of the mean training length."""
        if self.train_lengths is None:
            return 1.0 / self.train_length
        return 2.0 / sum(self.train_lengths)  # lengths uniform over low .. high: their mean is (low + high) / 2

    def describe(self) -> dict[str, Any]:
        """What results.json records of the data: ``train_length`` is the longest length trained on, and
        ``train_lengths`` the range drawn from (null: every batch at ``train_length``)."""
        lengths = list(self.train_lengths) if self.train_lengths is not None else None
        return {"train_length": self.train_length, "train_lengths": lengths, "eval_lengths": self.eval_lengths}

    def trainer_arguments(self) -> dict[str, Any]:
        # each rank's evaluation sequences come from RankShard, not from a DistributedSampler (which pads)
        return {"use_distributed_sampler": False}

    def module_arguments(self) -> dict[str, Any]:
        return {
            "train_length": self.train_length,
            "eval_lengths": self.eval_lengths,
            "task": self.task,
            "plain_only": self.eval_ways == "plain",
        }

    def setup(self, stage: str | None = None) -> None:
        assign_rank(self.train_batches, self.trainer, self.batch_size)
        check_evaluation_shares(self.eval_size, trainer_rank(self.trainer)[1])
        if self.trainer is not None:  # the batches it will draw (a datamodule used alone draws as asked)
            trained = int(self.trainer.max_steps) * int(self.trainer.accumulate_grad_batches)
            check_disjoint_streams(self.train_batches.seed, trained, self.eval_seed, self.eval_lengths)
        if not self.eval_sets:
            self.eval_sets = [EvaluationSet(self.task, self.eval_size, n, self.eval_seed) for n in self.eval_lengths]
            # a second set per length past training, from another seed: test-time rules are chosen on it and
            # reported on the test set, so the choice is not made on the figures it reports
            seed = self.eval_seed + SELECTION_SEED_OFFSET
            self.selection_sets = [EvaluationSet(self.task, self.eval_size, n, seed) for n in self.selection_lengths]

    @property
    def selection_lengths(self) -> list[int]:
        """The evaluation lengths past the training length, which also get a selection set (``test_dataloader``
        gives the test sets first, then these)."""
        return [n for n in self.eval_lengths if n > self.train_length]

    def train_dataloader(self) -> DataLoader:
        # Batch i depends only on (seed, i): after a resume, continue at the restored step.
        self.train_batches.start = training_batches_drawn(self.trainer)
        return DataLoader(self.train_batches, batch_size=None)

    def test_dataloader(self) -> list[DataLoader]:
        # each DDP rank scores its own sequences, none twice (the metrics sum over ranks, as one process counts)
        rank, world = trainer_rank(self.trainer)
        return [
            DataLoader(s, batch_size=self.eval_batch_size, sampler=RankShard(len(s), rank, world))
            for s in [*self.eval_sets, *self.selection_sets]
        ]
