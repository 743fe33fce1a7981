"""Synthetic sequence tasks, as a LightningDataModule: a small registry, one class per task.

- ``lag``: at every position output the token ``k`` back (the first ``k``
  positions have no answer and are not scored).
- ``seen``: at every position, has this token appeared earlier? (binary,
  every position scored).
- ``copy``: a random prefix, a separator, the prefix again; predict each next
  token of the copy.
- ``associative_recall``: key-value pairs, then every key queried once
  (Zoology's MQAR); predict each queried key's value.
- ``flip_flop``: (instruction, bit) pairs (Liu et al., 2023); at each read,
  predict the bit of the most recent write.
- ``counting``: programs of ``x = 0 ;``, ``x ++;`` and ``pass;``, then
  ``print x`` (CoPE's Counting task, Golovneva et al., 2024); predict x's value.

The length defines the instance: the same rule makes a sequence of any length
from a task's minimum on (trained at 32, evaluated at 64 to 256), and the
tasks whose instance grows (copy's prefix, the number of pairs, reads and
statements) grow with it. Unscored positions have the target ``IGNORE``.

Training batch ``i`` is a pure function of ``(seed, i)``: resuming at step
``i`` resumes the data exactly, and under DDP every rank slices its rows out of
the same global batch, so the data is the same whatever the number of
processes. Evaluation sets are fresh sequences from their own fixed seed, one
set per length, independent of the training seed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

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


# ---- the registry ----------------------------------------------------------------------------------------------
TASKS: dict[str, type[Task]] = {}


def register(cls: type[Task]) -> type[Task]:
    TASKS[cls.name] = cls
    return cls


@dataclass
class Task:
    """A synthetic task: its settings are the dataclass's fields, ``vocab_size`` (token ids
    ``0 .. vocab_size - 1``) first. ``sample`` makes ``(tokens, targets)``, both ``[batch, length]``, targets in
    ``0 .. num_classes - 1`` at scored positions and ``IGNORE`` elsewhere."""

    name: ClassVar[str]
    #: why a sequence cannot be shorter than ``min_length``, for the message
    shortest: ClassVar[str]

    vocab_size: int

    def __post_init__(self) -> None:
        self.validate()

    @property
    def min_length(self) -> int:
        return 2

    @property
    def num_classes(self) -> int:
        raise NotImplementedError

    def validate(self, lengths: Sequence[int] = ()) -> None:
        """The settings, and (given) every length the task will make sequences of."""
        for length in lengths:
            if length < self.min_length:
                raise ConfigError(
                    f"length {length} is too short for task {self.name!r}, whose shortest sequence is "
                    f"{self.min_length} ({self.shortest}); allowed: task.train_length and task.eval_lengths "
                    f">= {self.min_length}."
                )

    def check_vocabulary(self, needed: int, holds: str) -> None:
        if self.vocab_size < needed:
            raise ConfigError(
                f"task.vocab_size={self.vocab_size} is too small for task {self.name!r}: its tokens ({holds}) "
                f"need {needed}; allowed: vocab_size >= {needed}."
            )

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        """``[batch, length]`` random tokens of the task's form."""
        raise NotImplementedError

    def targets(self, tokens: Tensor) -> Tensor:
        """The rule: the target of every position of ``tokens`` (a sequence of the task's form)."""
        raise NotImplementedError

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        tokens = self.draw(batch_size, length, generator)
        return tokens, self.targets(tokens)


@register
@dataclass
class Lag(Task):
    """At every position, the token ``k`` back; tokens uniform over the vocabulary."""

    name: ClassVar[str] = "lag"
    shortest: ClassVar[str] = "k positions without an answer, then one with"
    k: int = 3

    def validate(self, lengths: Sequence[int] = ()) -> None:
        if self.vocab_size < 2:
            raise ConfigError(f"task.vocab_size={self.vocab_size} must be at least 2.")
        if self.k < 1:
            raise ConfigError(f"task.k={self.k} must be a positive lag (the write-up uses 3).")
        super().validate(lengths)

    @property
    def min_length(self) -> int:
        return self.k + 1

    @property
    def num_classes(self) -> int:
        return self.vocab_size

    def targets(self, tokens: Tensor) -> Tensor:
        return lag_targets(tokens, self.k)

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, self.vocab_size, (batch_size, length), generator=generator)


@register
@dataclass
class Seen(Task):
    """At every position, 1 if its token occurred earlier in the sequence; tokens uniform over the vocabulary."""

    name: ClassVar[str] = "seen"
    shortest: ClassVar[str] = "a first token, then one that may repeat it"

    def validate(self, lengths: Sequence[int] = ()) -> None:
        if self.vocab_size < 2:
            raise ConfigError(f"task.vocab_size={self.vocab_size} must be at least 2.")
        super().validate(lengths)

    @property
    def num_classes(self) -> int:
        return 2

    def targets(self, tokens: Tensor) -> Tensor:
        return seen_targets(tokens)

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, self.vocab_size, (batch_size, length), generator=generator)


@register
@dataclass
class Copy(Task):
    """``x_1 .. x_n SEP x_1 .. x_n [PAD]`` with ``n = (length - 1) // 2`` and ``x_i`` uniform over the
    ``vocab_size - 2`` content tokens; an even length ends with one ``PAD``. Language-model style: the target at
    position ``t`` is the token at ``t + 1`` where that token is in the copy, so the separator's position
    predicts ``x_1`` and the copy's ``x_i`` predicts ``x_{i+1}``: ``n`` scored positions, ``n .. 2n - 1``.

    Ids: content ``0 .. vocab_size - 3`` (also the classes), ``SEP = vocab_size - 2``, ``PAD = vocab_size - 1``.
    """

    name: ClassVar[str] = "copy"
    shortest: ClassVar[str] = "one token, the separator, its copy"

    @property
    def separator(self) -> int:
        return self.vocab_size - 2

    @property
    def padding(self) -> int:
        return self.vocab_size - 1

    @property
    def min_length(self) -> int:
        return 3

    @property
    def num_classes(self) -> int:
        return self.vocab_size - 2

    def validate(self, lengths: Sequence[int] = ()) -> None:
        self.check_vocabulary(4, "at least 2 content tokens, the separator and the padding")
        super().validate(lengths)

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        n = (length - 1) // 2
        prefix = torch.randint(0, self.num_classes, (batch_size, n), generator=generator)
        tokens = torch.full((batch_size, length), self.padding, dtype=torch.long)
        tokens[:, :n], tokens[:, n], tokens[:, n + 1 : 2 * n + 1] = prefix, self.separator, prefix
        return tokens

    def targets(self, tokens: Tensor) -> Tensor:
        n = (tokens.shape[1] - 1) // 2
        targets = torch.full_like(tokens, IGNORE)
        targets[:, n : 2 * n] = tokens[:, n + 1 : 2 * n + 1]  # the next token, where it is in the copy
        return targets


@register
@dataclass
class AssociativeRecall(Task):
    """Multi-query associative recall (Zoology's MQAR; Arora et al., 2023, "Zoology: Measuring and Improving
    Recall in Efficient Language Models", after H3's associative recall): ``P = length // 4`` pairs
    ``k_1 v_1 .. k_P v_P`` (distinct keys, values uniform), then a tail of ``length - 2P`` positions in which
    every key is queried once, in random order, at random positions; the rest of the tail is a blank token.
    The target at a query's position is its key's value (a next-token model's answer, the value's class).
    ``P = length // 4`` is the most pairs Zoology's ``multiquery_ar`` allows at a length (its ``4P <= length``).

    The vocabulary splits as Zoology's does: keys ``0 .. K - 1`` with ``K = (vocab_size - 1) // 2``, values
    ``K .. vocab_size - 2`` (class = id - K), blank ``vocab_size - 1``. Where poslab differs from Zoology's
    ``multiquery_ar``: values are drawn with replacement (not distinct), query positions are uniform over the
    tail (not power-law gaps at even offsets) and the tail's other positions are the blank (not random tokens).
    """

    name: ClassVar[str] = "associative_recall"
    shortest: ClassVar[str] = "one key-value pair and a tail of 2 holding its query"

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - 1) // 2

    @property
    def blank(self) -> int:
        return self.vocab_size - 1

    @property
    def min_length(self) -> int:
        return 4

    @property
    def num_classes(self) -> int:
        return self.vocab_size - 1 - self.num_keys

    @staticmethod
    def pairs(length: int) -> int:
        return length // 4

    def validate(self, lengths: Sequence[int] = ()) -> None:
        self.check_vocabulary(5, "at least 2 keys, 2 values and the blank")
        super().validate(lengths)
        if lengths and self.num_keys < self.pairs(max(lengths)):
            longest, needed = max(lengths), self.pairs(max(lengths))
            raise ConfigError(
                f"task.vocab_size={self.vocab_size} gives {self.num_keys} distinct keys, but the longest length "
                f"{longest} holds {needed} key-value pairs (length // 4), each with its own key; allowed: "
                f"vocab_size >= {2 * needed + 1}."
            )

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        pairs, tail = self.pairs(length), length - 2 * self.pairs(length)
        keys = torch.rand(batch_size, self.num_keys, generator=generator).argsort(dim=1)[:, :pairs]  # distinct
        values = torch.randint(self.num_keys, self.vocab_size - 1, (batch_size, pairs), generator=generator)
        query_at = 2 * pairs + torch.rand(batch_size, tail, generator=generator).argsort(dim=1)[:, :pairs]
        tokens = torch.full((batch_size, length), self.blank, dtype=torch.long)
        tokens[:, 0 : 2 * pairs : 2], tokens[:, 1 : 2 * pairs : 2] = keys, values
        return tokens.scatter_(1, query_at, keys)

    def targets(self, tokens: Tensor) -> Tensor:
        pairs = self.pairs(tokens.shape[1])
        keys, values, tail = tokens[:, 0 : 2 * pairs : 2], tokens[:, 1 : 2 * pairs : 2], tokens[:, 2 * pairs :]
        pair = (tail[:, :, None] == keys[:, None, :]).long().argmax(dim=-1)  # [B, tail]: the queried key's pair
        answers = torch.where(tail != self.blank, values.gather(1, pair) - self.num_keys, IGNORE)
        return torch.cat([torch.full_like(tokens[:, : 2 * pairs], IGNORE), answers], dim=1)


@register
@dataclass
class FlipFlop(Task):
    """Flip-flop language modelling, FFL(p) (Liu et al., 2023, "Exposing Attention Glitches with Flip-Flop
    Language Modeling", NeurIPS): ``length // 2`` pairs (instruction, bit), instructions i.i.d. write / ignore /
    read with probabilities (p_write, p_ignore, p_read), the first a write and the last a read; bits uniform
    after a write or an ignore, and after a read the bit of the most recent write. The paper's sparse FFL(0.8) is
    p_ignore = 0.8, p_write = p_read = 0.1. An odd length ends with one padding token.

    Scored: each read's bit, predicted where a next-token model predicts it, at the read instruction's position
    (at the bit's own position the answer would be the input). Ids: bits 0, 1 (also the classes), then
    write 2, ignore 3, read 4, padding 5.
    """

    name: ClassVar[str] = "flip_flop"
    shortest: ClassVar[str] = "a write and its bit, a read and its bit"
    WRITE, IGNORE_OP, READ, PAD = 2, 3, 4, 5  # the paper's instructions w, i, r (ids, not settings)

    p_write: float = 0.1
    p_ignore: float = 0.8
    p_read: float = 0.1

    @property
    def min_length(self) -> int:
        return 4

    @property
    def num_classes(self) -> int:
        return 2

    def validate(self, lengths: Sequence[int] = ()) -> None:
        self.check_vocabulary(6, "bits 0 and 1, write, ignore, read and the padding")
        probabilities = {"p_write": self.p_write, "p_ignore": self.p_ignore, "p_read": self.p_read}
        for key, p in probabilities.items():
            if not 0 <= p <= 1:
                raise ConfigError(f"task.{key}={p} is not a probability; allowed: 0 <= {key} <= 1.")
        total = sum(probabilities.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ConfigError(
                f"task.p_write + task.p_ignore + task.p_read = {self.p_write} + {self.p_ignore} + {self.p_read} "
                f"= {total:g}; allowed: probabilities that sum to 1 (the paper's sparse FFL(0.8): 0.1, 0.8, 0.1)."
            )
        super().validate(lengths)

    def remembered(self, instructions: Tensor, bits: Tensor) -> Tensor:
        """At every pair, the bit of the most recent write (pair 0 is a write)."""
        is_write = instructions == self.WRITE
        last_write = torch.where(is_write, torch.arange(instructions.shape[1]), 0).cummax(dim=1).values
        return bits.gather(1, last_write)

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        pairs = length // 2
        u = torch.rand(batch_size, pairs, generator=generator)
        instructions = torch.where(
            u < self.p_write, self.WRITE, torch.where(u < self.p_write + self.p_ignore, self.IGNORE_OP, self.READ)
        )
        instructions[:, 0], instructions[:, -1] = self.WRITE, self.READ
        bits = torch.randint(0, 2, (batch_size, pairs), generator=generator)
        bits = torch.where(instructions == self.READ, self.remembered(instructions, bits), bits)
        tokens = torch.full((batch_size, length), self.PAD, dtype=torch.long)
        tokens[:, 0 : 2 * pairs : 2], tokens[:, 1 : 2 * pairs : 2] = instructions, bits
        return tokens

    def targets(self, tokens: Tensor) -> Tensor:
        pairs = tokens.shape[1] // 2
        instructions, bits = tokens[:, 0 : 2 * pairs : 2], tokens[:, 1 : 2 * pairs : 2]
        answers = torch.where(instructions == self.READ, self.remembered(instructions, bits), IGNORE)
        targets = torch.full_like(tokens, IGNORE)
        targets[:, 0 : 2 * pairs : 2] = answers  # at the read instruction: its bit is the next token
        return targets


@register
@dataclass
class Counting(Task):
    """CoPE's Counting task (Golovneva et al., 2024, "Contextual Position Encoding: Learning to Count What's
    Important", arXiv 2405.18719; its generator ``projects/cope/scripts/count_data_gen.py`` in
    facebookresearch/RAM, followed here): a program of statements ``x = 0 ;`` (weight 1), ``pass;`` (50) and
    ``x ++;`` (7) over ``num_variables`` variables, then ``print x`` for a variable set earlier; the answer is
    x's value, the number of increments since its last set. As in the generator: a set names any variable; an
    increment a variable already set, and is drawn again (another statement) when the value would pass 10; a
    program that sets no variable is drawn again; only the answer is trained on (``--train-on answer``).

    Mapped onto fixed lengths: the program fills exactly ``length - 2`` tokens (a statement longer than the room
    left is drawn again; ``pass;`` always fits), ``print x`` takes the last two, and the answer is the target at
    x's position (the last), where the reference predicts its answer token. The generator draws 3 to 512
    statements per sample; here the length sets the program's size: about 25 statements at 32 tokens, 200 at
    256, so training at 32 and testing at 64-256 is the write-up's train-short, test-long. Its answers grow with
    the length too: at 32 they are 0 to about 6 (mean 1.3), at 256 0 to 10 (a quarter at 10), so a model trained
    at 32 meets answers it was never trained on; the generator's 3 to 512 statements cover them all in training.

    Ids (the reference's words): values 0..10 (also the classes; ``0`` is also the set's ``0``), ``=`` 11,
    ``;`` 12, ``pass;`` 13, ``++;`` 14, ``print`` 15, variables ``16 .. 16 + num_variables - 1``.
    """

    name: ClassVar[str] = "counting"
    shortest: ClassVar[str] = "x = 0 ; print x"
    MAX_VALUE: ClassVar[int] = 10
    EQUALS, SEMICOLON, PASS, INCREMENT, PRINT, FIRST_VARIABLE = 11, 12, 13, 14, 15, 16  # ids, not settings
    WEIGHTS: ClassVar[dict[str, int]] = {"set": 1, "pass": 50, "increment": 7}

    num_variables: int = 3

    @property
    def min_length(self) -> int:
        return 6

    @property
    def num_classes(self) -> int:
        return self.MAX_VALUE + 1

    def validate(self, lengths: Sequence[int] = ()) -> None:
        if self.num_variables < 1:
            raise ConfigError(
                f"task.num_variables={self.num_variables} must be at least 1 (the paper's table: 1, 3, 5)."
            )
        self.check_vocabulary(
            self.FIRST_VARIABLE + self.num_variables,
            f"values 0..10, =, ;, pass;, ++;, print and {self.num_variables} variables",
        )
        super().validate(lengths)

    def program(self, length: int, rng: random.Random) -> list[int]:
        """One sequence's tokens, drawn as count_data_gen.py draws a sample."""
        variables = list(range(self.FIRST_VARIABLE, self.FIRST_VARIABLE + self.num_variables))
        operations, weights = list(self.WEIGHTS), list(self.WEIGHTS.values())
        for _ in range(100_000):  # the generator's whole-sample retries
            tokens: list[int] = []
            state: dict[int, int] = {}
            while len(tokens) < length - 2:
                room = length - 2 - len(tokens)
                operation = rng.choices(operations, weights)[0]
                if operation == "set" and room >= 4:
                    variable = rng.choice(variables)
                    state[variable] = 0
                    tokens += [variable, self.EQUALS, 0, self.SEMICOLON]
                elif operation == "pass":
                    tokens.append(self.PASS)
                elif operation == "increment" and state and room >= 2:
                    variable = rng.choice(list(state))
                    if state[variable] < self.MAX_VALUE:
                        state[variable] += 1
                        tokens += [variable, self.INCREMENT]
            if state:
                variable = rng.choice(list(state))
                return [*tokens, self.PRINT, variable]
        raise RuntimeError(f"counting: no program of length {length} set a variable in 100000 draws.")

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        # one Python RNG per row, seeded from the generator: the reference's draws, at Python speed
        seeds = torch.randint(0, 2**62, (batch_size,), generator=generator).tolist()
        return torch.tensor([self.program(length, random.Random(seed)) for seed in seeds], dtype=torch.long)

    def targets(self, tokens: Tensor) -> Tensor:
        """The printed variable's increments since its last set: ``x ++;`` after the last ``x = 0 ;``."""
        printed, program = tokens[:, -1:], tokens[:, :-2]
        statement = tokens[:, 1:-1]  # the token after each program token: = marks a set, ++; an increment
        of_printed = program == printed
        sets, increments = of_printed & (statement == self.EQUALS), of_printed & (statement == self.INCREMENT)
        position = torch.arange(program.shape[1])
        last_set = torch.where(sets, position, -1).max(dim=1, keepdim=True).values
        targets = torch.full_like(tokens, IGNORE)
        targets[:, -1] = (increments & (position > last_set)).sum(dim=1)
        return targets


def make_task(name: str, vocab_size: int, **settings: Any) -> Task:
    """The registered task ``name`` with its settings. A setting another task declares is left to that task
    (every task's YAML inherits lag's ``k``); one no task declares is refused."""
    if name not in TASKS:
        raise ConfigError(f"unknown synthetic task {name!r}; allowed: {', '.join(TASKS)}.")
    cls = TASKS[name]
    own = {f.name for f in fields(cls)} - {"vocab_size"}
    known = {f.name for task in TASKS.values() for f in fields(task)}
    for key in settings:
        if key not in known:
            raise ConfigError(
                f"task.{key} is not a setting of any synthetic task; allowed for {name}: "
                f"{', '.join(sorted(own)) or 'none besides vocab_size'}."
            )
    return cls(vocab_size, **{key: value for key, value in settings.items() if key in own})


SyntheticTask = make_task  # its former name, the one ``SyntheticTask(name, vocab_size, k)`` callers use


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

    def __init__(self, task: Task, batch_size: int, length: int, seed: int) -> None:
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

    def __init__(self, task: Task, size: int, length: int, seed: int) -> None:
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
        seed: int = 0,
        **settings: Any,
    ) -> None:
        """``settings``: the task's own (lag's ``k``, flip_flop's probabilities, counting's ``num_variables``)."""
        super().__init__()
        self.task = make_task(name, vocab_size, **settings)
        self.train_length, self.eval_lengths = int(train_length), [int(n) for n in eval_lengths]
        self.task.validate([self.train_length, *self.eval_lengths])
        self.batch_size, self.eval_size, self.eval_batch_size = batch_size, eval_size, eval_batch_size
        self.eval_seed, self.seed = eval_seed, seed
        self.train_batches = TrainingBatches(self.task, batch_size, self.train_length, seed)
        self.eval_sets: list[EvaluationSet] = []
        self.vocab_size, self.num_classes = self.task.vocab_size, self.task.num_classes

    @property
    def max_length(self) -> int:
        return max([self.train_length, *self.eval_lengths])

    @property
    def paragraph_density(self) -> float:
        """Paragraph starts per token, for an encoding that takes it from the data (rand_axial, period_axial): a
        generated sequence is one paragraph, so one start per training sequence."""
        return 1.0 / self.train_length

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
