"""The synthetic tasks: a small registry, one class per task. Torch only, no Lightning: a config's check
(``poslab.running.checks``) builds a task and checks its settings without loading the datamodule.

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
- ``state_tracking``: a word of S5 or A5 elements (Merrill et al., 2024's word problem); at every position
  predict the running product of the elements so far.

The length defines the instance: the same rule makes a sequence of any length
from a task's minimum on (trained at 32, evaluated at 64 to 256), and the
tasks whose instance grows (copy's prefix, the number of pairs, reads and
statements) grow with it. Unscored positions have the target ``IGNORE``.

``validated_task`` checks a datamodule's task settings against every length it will see: the datamodule
(``poslab.datamodules.synthetic``) calls it when built, and the config check calls the same function.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, fields, replace
from typing import Any, ClassVar

import torch
from torch import Tensor

from poslab.config.settings import task_defaults
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
    #: every prefix is an answer, so the evaluation also reports whole-sequence accuracy
    whole_sequence: ClassVar[bool] = False
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
                    f"{self.min_length} ({self.shortest}); allowed: task.train_length, task.train_lengths and "
                    f"task.eval_lengths >= {self.min_length}."
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

    @property
    def chance(self) -> float:
        """The accuracy of uniform guessing over the classes, ``1 / num_classes``: the floor a report shows beside
        the models (the best constant answer, read from the targets, is another baseline, not this one)."""
        return 1.0 / self.num_classes

    def trivial_rules(self, tokens: Tensor) -> dict[str, Tensor]:
        """Named trivial predictors a report shows as baselines beside the models: each maps ``tokens``
        ``[batch, length]`` to predicted classes of the same shape, from the tokens alone (only the scored
        positions count; elsewhere a valid class stands in). Constant answers are not here: they come from the
        targets. A task with no natural rule has none."""
        return {}

    def evaluation_mixes(self) -> dict[str, Task]:
        """Other distributions of the same task the trained weights are also evaluated on, by name (flip_flop's
        sparse and dense mixes, associative_recall's numbers of pairs); none by default. A mix is evaluated at the
        lengths from its own ``min_length`` on."""
        return {}

    def mix_figures(self, name: str, accuracy: float) -> dict[str, float]:
        """The figures ``results.json`` gives for mix ``name`` at a length, from the model's accuracy on it."""
        return {f"accuracy_mix_{name}": accuracy}


@register
@dataclass
class Lag(Task):
    """At every position, the token ``k`` back; tokens uniform over the vocabulary."""

    name: ClassVar[str] = "lag"
    shortest: ClassVar[str] = "k positions without an answer, then one with"
    k: int

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

    def trivial_rules(self, tokens: Tensor) -> dict[str, Tensor]:
        """``repeat_input``: predict the current input token (its class where it is a content token), the answer
        of a model that echoes instead of looking back ``n + 1`` positions."""
        return {"repeat_input": torch.where(tokens < self.num_classes, tokens, 0)}

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
    ``k_1 v_1 .. k_P v_P`` (distinct keys), then a tail of ``length - 2P`` positions in which every key is
    queried once; the tail's other positions are filler. The target at a query's position is its key's value (a
    next-token model's answer, the value's class). ``P = length // 4`` is the most pairs Zoology's
    ``multiquery_ar`` allows at a length (its ``4P <= length``).

    The vocabulary splits as Zoology's does: keys ``0 .. K - 1`` with ``K = (vocab_size - 1) // 2``, values
    ``K .. vocab_size - 2`` (class = id - K), blank ``vocab_size - 1``. For an even ``vocab_size`` this is
    Zoology's split relabelled, poslab id = (Zoology id - 1) mod vocab_size: Zoology's filler 0, keys
    ``1 .. V/2 - 1`` and values ``V/2 .. V - 1`` are poslab's blank, keys and values, the same counts.

    Three settings choose between poslab's variant (the defaults, which draw the very batches they always drew for
    a seed) and Zoology's ``multiquery_ar`` (HazyResearch/zoology, ``zoology/data/multiquery_ar.py`` at commit
    d88d6f5474f36998d82d5c3bd58a190248d0a669; ``task=mqar_zoology`` sets them, and ``power_a``, to Zoology's):

    - ``distinct_values``: false, values uniform with replacement; true, distinct values (Zoology's
      ``np.random.choice(value_choices, replace=False)``).
    - ``query_gaps``: ``uniform``, the P query positions uniform (without replacement) over the whole tail, in
      random order; ``power_law``, Zoology's: pair i's key is queried at tail offset ``2 gap_i``, the gaps drawn
      without replacement from ``0 .. space - 1`` (``space = (length - 2P) // 2``) with
      ``p(gap) ~ (gap + 1)^(power_a - 1)``, in their order of drawing (so the first pairs tend to get the
      smallest gaps, as in Zoology). numpy's weighted ``choice(replace=False)`` is successive sampling; here it
      is its exact equivalent on a torch generator, the Gumbel top-k (the top P of ``log p + Gumbel`` noise, in
      decreasing order).
    - ``filler``: ``blank``, the blank token; ``random``, tokens uniform over the whole vocabulary (keys, values
      and the blank too: Zoology's ``random_non_queries=True`` replaces every 0 of the input by
      ``torch.randint(vocab_size)``). A random filler may repeat a key; it is not scored, as in Zoology, so the
      targets come from the drawn query positions (``sample``), not from the tokens (``targets``).

    What stays poslab's: a model's output is a class over the values (Zoology's predicts the next token over the
    vocabulary, the value's id), and any length from 4P is allowed (Zoology asserts an even length and
    ``vocab_size > length``; an odd length here ends with one more filler).
    """

    name: ClassVar[str] = "associative_recall"
    shortest: ClassVar[str] = "one key-value pair and a tail of 2 holding its query"
    QUERY_GAPS: ClassVar[tuple[str, ...]] = ("uniform", "power_law")
    FILLERS: ClassVar[tuple[str, ...]] = ("blank", "random")

    #: the number of pairs at every length (None: ``length // 4``, the most a length holds)
    num_pairs: int | None = None
    #: numbers of pairs the same weights are also evaluated on, at each eval length holding them (4P <= length)
    eval_pairs: Sequence[int] = ()
    _: KW_ONLY  # the protocol's settings have their defaults in conf/task/associative_recall.yaml (make_task)
    #: where the queries sit in the tail: ``uniform`` (poslab's) or ``power_law`` (Zoology's)
    query_gaps: str
    #: ``power_law``'s exponent: p(gap g) ~ g^(power_a - 1) for g = 1, 2, .. (Zoology's 0.01; 1: uniform gaps)
    power_a: float
    #: values drawn without replacement (Zoology's) instead of uniform with replacement (poslab's)
    distinct_values: bool
    #: the tail's positions that are not queries: ``blank`` (poslab's) or ``random`` tokens (Zoology's)
    filler: str

    @property
    def num_keys(self) -> int:
        return (self.vocab_size - 1) // 2

    @property
    def blank(self) -> int:
        return self.vocab_size - 1

    @property
    def min_length(self) -> int:
        return 4 * (self.num_pairs or 1)

    @property
    def num_classes(self) -> int:
        return self.vocab_size - 1 - self.num_keys

    def pairs(self, length: int) -> int:
        return self.num_pairs or length // 4

    def evaluation_mixes(self) -> dict[str, Task]:
        """MQAR with ``P`` pairs for each ``eval_pairs`` P, keyed ``pairs<P>`` (accuracy by number of pairs)."""
        return {f"pairs{n}": replace(self, num_pairs=int(n), eval_pairs=()) for n in self.eval_pairs}

    def mix_figures(self, name: str, accuracy: float) -> dict[str, float]:
        return {f"accuracy_{name}": accuracy}

    def validate(self, lengths: Sequence[int] = ()) -> None:
        self.check_vocabulary(5, "at least 2 keys, 2 values and the blank")
        self.validate_protocol()
        for n in [*self.eval_pairs, *([self.num_pairs] if self.num_pairs is not None else [])]:
            if not 1 <= n <= self.num_keys:
                raise ConfigError(
                    f"task.eval_pairs or task.num_pairs holds {n} pairs, but task.vocab_size={self.vocab_size} "
                    f"gives {self.num_keys} distinct keys; allowed: 1 <= pairs <= {self.num_keys}."
                )
        super().validate(lengths)
        if lengths and self.num_keys < self.pairs(max(lengths)):
            longest, needed = max(lengths), self.pairs(max(lengths))
            raise ConfigError(
                f"task.vocab_size={self.vocab_size} gives {self.num_keys} distinct keys, but the longest length "
                f"{longest} holds {needed} key-value pairs (length // 4), each with its own key; allowed: "
                f"vocab_size >= {2 * needed + 1}."
            )

    def validate_protocol(self) -> None:
        """The three settings that choose between poslab's variant and Zoology's protocol, and ``power_a``."""
        if self.query_gaps not in self.QUERY_GAPS:
            raise ConfigError(
                f"task.query_gaps={self.query_gaps!r} is not a known placement of the queries; allowed: 'uniform' "
                f"(poslab's, uniform over the tail) or 'power_law' (Zoology's multiquery_ar)."
            )
        if self.filler not in self.FILLERS:
            raise ConfigError(
                f"task.filler={self.filler!r} is not a known filler; allowed: 'blank' (poslab's blank token) or "
                f"'random' (Zoology's random_non_queries, tokens uniform over the vocabulary)."
            )
        if not isinstance(self.distinct_values, bool):
            raise ConfigError(
                f"task.distinct_values={self.distinct_values!r} is not a flag; allowed: false (values with "
                f"replacement, poslab's) or true (distinct values, Zoology's)."
            )
        a = self.power_a
        if isinstance(a, bool) or not isinstance(a, int | float) or not (math.isfinite(a) and a > 0):
            raise ConfigError(
                f"task.power_a={a!r} is not a positive exponent; allowed: a finite power_a > 0, p(gap g) ~ "
                f"g^(power_a - 1) (Zoology's 0.01; 1 makes the gaps uniform)."
            )

    def draw_queries(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``(tokens, query_at)``: the sequences and, ``[batch, P]``, the position where pair i's key is queried."""
        pairs, tail = self.pairs(length), length - 2 * self.pairs(length)
        keys = torch.rand(batch_size, self.num_keys, generator=generator).argsort(dim=1)[:, :pairs]  # distinct
        if self.distinct_values:
            values = self.num_keys + torch.rand(batch_size, self.num_classes, generator=generator).argsort(dim=1)
            values = values[:, :pairs]
        else:
            values = torch.randint(self.num_keys, self.vocab_size - 1, (batch_size, pairs), generator=generator)
        if self.query_gaps == "power_law":
            query_at = 2 * pairs + 2 * self.power_law_gaps(batch_size, tail // 2, pairs, generator)
        else:
            query_at = 2 * pairs + torch.rand(batch_size, tail, generator=generator).argsort(dim=1)[:, :pairs]
        tokens = torch.full((batch_size, length), self.blank, dtype=torch.long)
        if self.filler == "random":  # as Zoology: drawn last, over the whole input; it lands on the tail only
            filler = torch.randint(0, self.vocab_size, (batch_size, length), generator=generator)
            tokens[:, 2 * pairs :] = filler[:, 2 * pairs :]
        tokens[:, 0 : 2 * pairs : 2], tokens[:, 1 : 2 * pairs : 2] = keys, values
        return tokens.scatter_(1, query_at, keys), query_at

    def power_law_gaps(self, batch_size: int, space: int, pairs: int, generator: torch.Generator) -> Tensor:
        """``[batch, pairs]`` distinct gaps in ``0 .. space - 1``, drawn one after another with
        ``p(gap) ~ (gap + 1)^(power_a - 1)`` among those left (Zoology's ``np.random.choice(arange(space),
        replace=False, p=p)``), by the Gumbel top-k: the same distribution, the order of drawing included."""
        log_p = (self.power_a - 1) * torch.arange(1, space + 1, dtype=torch.float64).log()
        uniform = torch.rand(batch_size, space, generator=generator, dtype=torch.float64)
        gumbel = -(-uniform.clamp_min(torch.finfo(torch.float64).tiny).log()).log()
        return (log_p + gumbel).topk(pairs, dim=1).indices  # sorted: the first drawn first

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        return self.draw_queries(batch_size, length, generator)[0]

    def sample(self, batch_size: int, length: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """The targets from the drawn query positions: a random filler may repeat a key, and is not a query."""
        tokens, query_at = self.draw_queries(batch_size, length, generator)
        pairs = query_at.shape[1]
        values = tokens[:, 1 : 2 * pairs : 2] - self.num_keys
        return tokens, torch.full_like(tokens, IGNORE).scatter_(1, query_at, values)

    def targets(self, tokens: Tensor) -> Tensor:
        """The rule read from the tokens, with the blank filler (every non-blank tail token is a query)."""
        if self.filler != "blank":
            raise ValueError("with task.filler='random' a filler may repeat a key: the targets come from sample()")
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

    p_write: float
    p_ignore: float
    p_read: float
    #: the out-of-distribution mixes the same weights are evaluated on: FFL(p) with p_write = p_read = (1 - p) / 2
    eval_p_ignore: Sequence[float] = ()

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
        for p in self.eval_p_ignore:
            if not 0 <= p < 1:
                raise ConfigError(
                    f"task.eval_p_ignore holds {p}, not a probability below 1; allowed: a list of 0 <= p < 1 "
                    f"(the paper's sparse and dense mixes: [0.98, 0.1])."
                )
        total = sum(probabilities.values())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ConfigError(
                f"task.p_write + task.p_ignore + task.p_read = {self.p_write} + {self.p_ignore} + {self.p_read} "
                f"= {total:g}; allowed: probabilities that sum to 1 (the paper's sparse FFL(0.8): 0.1, 0.8, 0.1)."
            )
        super().validate(lengths)

    def evaluation_mixes(self) -> dict[str, Task]:
        """FFL(p) for each ``eval_p_ignore`` p (Liu et al.'s sparse FFL(0.98) and dense FFL(0.1)), keyed ``ffl<p>``:
        p_write = p_read = (1 - p) / 2, as the paper's mixes."""
        mix = lambda p: replace(self, p_write=(1 - p) / 2, p_ignore=p, p_read=(1 - p) / 2, eval_p_ignore=())  # noqa: E731
        return {f"ffl{p:g}": mix(float(p)) for p in self.eval_p_ignore}

    def mix_figures(self, name: str, accuracy: float) -> dict[str, float]:
        """The paper's read error %: flip_flop scores the reads only, so it is 100 x (1 - accuracy)."""
        return {f"read_error_pct_{name}": 100.0 * (1.0 - accuracy)}

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

    def trivial_rules(self, tokens: Tensor) -> dict[str, Tensor]:
        """``last_bit``: at a read instruction, the bit just before it (the previous pair's bit, whatever its
        instruction): right after a write or a read (their bit is the remembered one), a coin flip after an ignore,
        so about ``p_write + p_read + p_ignore / 2`` (0.6 on FFL(0.8))."""
        previous = torch.cat([torch.zeros_like(tokens[:, :1]), tokens[:, :-1]], dim=1)
        return {"last_bit": torch.where(previous <= 1, previous, 0)}  # bits are ids 0 and 1

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

    ``program_length`` (null: the above) fixes the answers' distribution across lengths: the program is drawn
    as above at ``program_length`` tokens (``program_length - 2`` of statements), then ``length -
    program_length`` ``pass;`` fillers go between its statements (never inside ``x = 0 ;`` or ``x ++;``) at
    uniformly random places, every interleaving of statements and fillers equally likely, before ``print x``.
    The program, so the answer, has the same distribution at every length; only the distances between the
    statements that matter grow. A length below ``program_length`` is refused.

    Ids (the reference's words): values 0..10 (also the classes; ``0`` is also the set's ``0``), ``=`` 11,
    ``;`` 12, ``pass;`` 13, ``++;`` 14, ``print`` 15, variables ``16 .. 16 + num_variables - 1``.
    """

    name: ClassVar[str] = "counting"
    shortest: ClassVar[str] = "x = 0 ; print x"
    MAX_VALUE: ClassVar[int] = 10
    SHORTEST_PROGRAM: ClassVar[int] = 6  # x = 0 ; print x
    EQUALS, SEMICOLON, PASS, INCREMENT, PRINT, FIRST_VARIABLE = 11, 12, 13, 14, 15, 16  # ids, not settings
    WEIGHTS: ClassVar[dict[str, int]] = {"set": 1, "pass": 50, "increment": 7}

    num_variables: int
    program_length: int | None  # null: the program fills the whole length

    @property
    def min_length(self) -> int:
        return self.SHORTEST_PROGRAM if self.program_length is None else self.program_length

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
        self.check_program_length(lengths)
        super().validate(lengths)

    def check_program_length(self, lengths: Sequence[int]) -> None:
        """``program_length``: null or a whole number that fits ``x = 0 ; print x``, and no longer than any length
        (the program is drawn at it; filler only lengthens it)."""
        given = self.program_length
        if given is None:
            return
        if isinstance(given, bool) or not isinstance(given, int) or given < self.SHORTEST_PROGRAM:
            raise ConfigError(
                f"task.program_length={given!r} is not allowed; task.program_length takes null (the program fills "
                f"the whole length) or a whole number of at least {self.SHORTEST_PROGRAM} (x = 0 ; print x)."
            )
        shorter = sorted({n for n in lengths if n < given})
        if shorter:
            raise ConfigError(
                f"length {shorter[0]} is shorter than task.program_length={given}: the program is drawn at "
                f"{given} tokens and filler only lengthens it; allowed: task.train_length, task.train_lengths and "
                f"task.eval_lengths >= {given}, or a shorter task.program_length."
            )

    def statements(self, length: int, rng: random.Random) -> tuple[list[list[int]], int]:
        """The statements of one program of ``length - 2`` tokens and the variable it prints, drawn as
        count_data_gen.py draws a sample."""
        for _ in range(100_000):  # the generator's whole-sample retries
            drawn: list[list[int]] = []
            state: dict[int, int] = {}
            room = length - 2
            while room > 0:
                statement = self.statement(rng, state, room)
                if statement:
                    drawn.append(statement)
                    room -= len(statement)
            if state:
                return drawn, rng.choice(list(state))
        raise RuntimeError(f"counting: no program of length {length} set a variable in 100000 draws.")

    def statement(self, rng: random.Random, state: dict[int, int], room: int) -> list[int]:
        """One draw of the generator's loop: a statement that fits ``room`` tokens (updating ``state``), or none
        (``[]``: a set or an increment that does not fit, or an increment past 10) and the loop draws again."""
        operation = rng.choices(list(self.WEIGHTS), list(self.WEIGHTS.values()))[0]
        if operation == "set" and room >= 4:
            variable = rng.choice(range(self.FIRST_VARIABLE, self.FIRST_VARIABLE + self.num_variables))
            state[variable] = 0
            return [variable, self.EQUALS, 0, self.SEMICOLON]
        if operation == "pass":
            return [self.PASS]
        if operation == "increment" and state and room >= 2:
            variable = rng.choice(list(state))
            if state[variable] < self.MAX_VALUE:
                state[variable] += 1
                return [variable, self.INCREMENT]
        return []

    def program(self, length: int, rng: random.Random) -> list[int]:
        """One sequence's tokens: the program (at ``program_length``, then ``pass;`` fillers placed uniformly
        between its statements, when set), then ``print x``."""
        if self.program_length is None:
            drawn, printed = self.statements(length, rng)
        else:
            drawn, printed = self.statements(self.program_length, rng)
            fillers = length - self.program_length
            # which of the len(drawn) + fillers statements are fillers: a uniform subset, so a uniform interleaving
            at = set(rng.sample(range(len(drawn) + fillers), fillers))
            kept = iter(drawn)
            drawn = [[self.PASS] if slot in at else next(kept) for slot in range(len(drawn) + fillers)]
        return [token for statement in drawn for token in statement] + [self.PRINT, printed]

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


def permutation_parity(perm: Sequence[int]) -> int:
    """0 for an even permutation, 1 for an odd one (the parity of its number of inversions)."""
    return sum(a > b for a, b in itertools.combinations(perm, 2)) % 2


def group_elements(group: str) -> list[tuple[int, ...]]:
    """The elements of S5 (all 120 permutations of 0..4) or A5 (the 60 even ones), in lexicographic order: an
    element's index is its token id and its class. The identity (0, 1, 2, 3, 4) is index 0 in both."""
    perms = list(itertools.permutations(range(5)))
    return perms if group == "S5" else [p for p in perms if permutation_parity(p) == 0]


def compose(later: Sequence[int], earlier: Sequence[int]) -> tuple[int, ...]:
    """``later`` after ``earlier``: i -> later[earlier[i]]."""
    return tuple(later[e] for e in earlier)


@register
@dataclass
class StateTracking(Task):
    """The word problem of a permutation group (Merrill et al., 2024, "The Illusion of State in State-Space
    Models", ICML; the S5 and A5 words of the PaTH paper, Yang et al., 2025): tokens are group elements drawn
    uniformly and i.i.d., and at every position the target is the running product ``y_t = x_t o y_(t-1)``
    (``y_1 = x_1``; ``o`` composes permutations, the later applied after the earlier). ``group``: ``S5`` (120
    elements, non-solvable) or ``A5`` (the 60 even permutations, the smallest non-solvable group). Token ids and
    classes are element indices in lexicographic order (``group_elements``). Every position is scored; chance is
    ``1 / |G|`` per token and ``|G| ** -length`` for a whole sequence."""

    name: ClassVar[str] = "state_tracking"
    shortest: ClassVar[str] = "any word of one element or more"
    whole_sequence: ClassVar[bool] = True

    group: str

    @property
    def elements(self) -> list[tuple[int, ...]]:
        return group_elements(self.group)

    @property
    def table(self) -> Tensor:
        """``table[a, b]``: the index of ``a o b`` (b first, then a)."""
        elements = self.elements
        index = {e: i for i, e in enumerate(elements)}
        rows = [[index[compose(a, b)] for b in elements] for a in elements]
        return torch.tensor(rows, dtype=torch.long)

    @property
    def min_length(self) -> int:
        return 1

    @property
    def num_classes(self) -> int:
        return 120 if self.group == "S5" else 60

    def validate(self, lengths: Sequence[int] = ()) -> None:
        if self.group not in ("S5", "A5"):
            raise ConfigError(f"task.group={self.group!r} is not a known group; allowed: 'S5', 'A5'.")
        self.check_vocabulary(self.num_classes, f"the {self.num_classes} elements of {self.group}")
        super().validate(lengths)

    def draw(self, batch_size: int, length: int, generator: torch.Generator) -> Tensor:
        return torch.randint(0, self.num_classes, (batch_size, length), generator=generator)

    def targets(self, tokens: Tensor) -> Tensor:
        table = self.table.to(tokens.device)
        state = tokens[:, 0]
        out = [state]
        for t in range(1, tokens.shape[1]):  # a scan: the product is associative, but a loop is plainest
            state = table[tokens[:, t], state]
            out.append(state)
        return torch.stack(out, dim=1)

    def trivial_rules(self, tokens: Tensor) -> dict[str, Tensor]:
        """``last_element``: the current element alone (right only at t = 1, or by chance)."""
        return {"last_element": tokens.clone()}


def make_task(name: str, vocab_size: int, **settings: Any) -> Task:
    """The registered task ``name`` with its settings. A setting another task declares is left to that task
    (every task's YAML inherits lag's ``k``); one no task declares is refused; one left out (a task made in Python)
    takes its value in the task's YAML (``conf/task/<name>.yaml``, its one home)."""
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
    given = {**task_defaults()[name], **settings}
    return cls(vocab_size, **{key: value for key, value in given.items() if key in own})


SyntheticTask = make_task  # its former name, the one ``SyntheticTask(name, vocab_size, k)`` callers use


def training_lengths(train_lengths: Any, train_length: int) -> tuple[int, int] | None:
    """``task.train_lengths`` checked: null, or ``[low, high]`` whole numbers with ``low <= high`` ending at
    ``task.train_length``. The high end must be written as ``train_length`` too, because the encodings' training
    length (RoPE's ``original_length``), log-length scaling and ``accuracy_past_train`` read ``train_length``
    as the longest length trained on; a range ending elsewhere would leave them a length never trained at."""
    if train_lengths is None:
        return None
    # a list, a tuple or (from Hydra's instantiate) a ListConfig; never a string
    pair = list(train_lengths) if isinstance(train_lengths, Sequence) and not isinstance(train_lengths, str) else None
    if pair is None or len(pair) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) for n in pair):
        shown = pair if pair is not None else train_lengths
        raise ConfigError(
            f"task.train_lengths={shown!r} is not allowed; task.train_lengths takes null (every batch at "
            f"task.train_length) or a list of two whole numbers [low, high], e.g. [8, 32]."
        )
    low, high = pair
    if low > high:
        raise ConfigError(
            f"task.train_lengths={pair} has its low end {low} above its high end {high}; allowed: [low, high] with "
            f"low <= high, e.g. [{high}, {low}]."
        )
    if high != train_length:
        raise ConfigError(
            f"task.train_lengths={pair} ends at {high} but task.train_length={train_length}; allowed: "
            f"task.train_length equal to the high end, the longest length trained on (add "
            f"task.train_length={high})."
        )
    return low, high


def validated_task(
    name: str,
    vocab_size: int,
    train_length: int,
    eval_lengths: Sequence[int],
    train_lengths: Any,
    eval_ways: Any,
    **settings: Any,
) -> tuple[Task, tuple[int, int] | None]:
    """A synthetic datamodule's task settings, checked as ``SyntheticDataModule`` takes them: the task (``make_task``),
    ``task.train_lengths`` (``training_lengths``), every length the task will make sequences of, and
    ``task.eval_ways``. Returns the task and the checked training range. The datamodule calls it when built, and
    ``poslab.running.checks.check_synthetic_task`` before the run (without importing the datamodule, whose Lightning
    takes seconds to load)."""
    task = make_task(name, vocab_size, **settings)
    train_length = int(train_length)
    checked = training_lengths(train_lengths, train_length)
    task.validate([train_length, *(checked or ()), *(int(n) for n in eval_lengths)])
    if str(eval_ways) not in ("all", "plain"):
        raise ConfigError(f"task.eval_ways={eval_ways!r} is not allowed; allowed: all (every way) or plain.")
    return task, checked
