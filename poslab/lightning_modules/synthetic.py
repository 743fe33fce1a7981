"""Training and length-extrapolation evaluation on the synthetic tasks (``poslab.datamodules.tasks``).

At every evaluation length L the module reports, keyed by L in ``results.json``, for each way of evaluating the
trained model:

- ``accuracy``: the plain model, over every scored position;
- ``accuracy_log_scaled``: each query's attention scores multiplied by max(1, log(t + 1) / log(train_length)) at
  test time, ``t + 1`` the keys it sees (Chiang & Cholak, 2022; ``base.log_length_scale``: 1 within the training
  length);
- ``accuracy_<variant>`` for an encoding with test-time variants (``PositionEncoding.test_time_variants``: the RoPE
  scaling rules with factor L / train_length, on every encoding that rotates by RoPE's frequencies), at each length
  past the training length only (at or below it every rule is the identity: not evaluated, which keeps it cheap);

and past the training length each of them again over the positions ``t >= train_length`` only
(``<name>_past_train``): the positions a causal model has never computed, what extrapolation is. A selection set
(other sequences of the same length, ``SyntheticDataModule.selection_lengths``) gives ``selection_<way>``, the
past-training accuracy on which a report chooses among the test-time ways before reading their test figures.

Beside them, the baselines of the same evaluation set (``baseline_*``, all positions and ``_past_train``):
``chance`` (a uniform guess, 1 / classes), ``constant`` (the best constant answer, chosen on this set itself: an
upper bound on any constant rule) and the task's own trivial rules (``Task.trivial_rules``: flip_flop's last bit,
copy's repeated input). An encoding that draws at random in evaluation (randomized positions,
``PositionEncoding.evaluation_draws``) is evaluated under each draw: the figures are their mean, and
``accuracy_draw_sd`` / ``accuracy_past_train_draw_sd`` their standard deviation over draws.

A task whose every prefix is an answer (``Task.whole_sequence``: state_tracking) also reports
``sequence_accuracy``: the fraction of sequences whose every scored position is right (the plain model; chance
``(1 / classes) ** length``).

A task with evaluation mixes (``Task.evaluation_mixes``: flip_flop's FFL(0.98) and FFL(0.1)) is also evaluated,
plain model, on each mix at every length: with each test batch, a batch of the mix of the same size and length,
drawn from its own seed (the length, the batch index and the mix's place: the same sequences for every run). Its
figure is ``read_error_pct_<mix>`` (flip_flop scores the reads only, so 100 x (1 - accuracy) is the paper's read
error %), and ``read_error_pct`` the training mix's.

``task.eval_ways=plain`` (debug=fast) scores the plain model only. The test logs its cost before it starts and its
progress while it runs (``poslab.lightning_modules.progress``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from statistics import stdev
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric
from torchmetrics.classification import MulticlassAccuracy

from poslab.datamodules.tasks import IGNORE, Task
from poslab.lightning_modules.base import TransformerModule, logits_in_way, summed_over_ranks
from poslab.lightning_modules.progress import EvaluationProgress, LengthCost, training_step
from poslab.model import ModelConfig

PAST = "_past_train"


class ClassCounts(Metric):
    """How often each class is the target at the scored positions (summed over DDP ranks): the best constant
    answer's accuracy is the largest count over the total."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.add_state("counts", default=torch.zeros(num_classes, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, targets: Tensor) -> None:
        scored = targets[targets != IGNORE]
        self.counts += torch.bincount(scored.flatten(), minlength=len(self.counts))

    def compute(self) -> Tensor:
        total = self.counts.sum()
        return self.counts.max() / total if total else torch.tensor(math.nan)


class SequenceAccuracy(Metric):
    """The fraction of sequences whose every scored position is predicted right (summed over DDP ranks)."""

    def __init__(self) -> None:
        super().__init__()
        self.add_state("right", default=torch.tensor(0), dist_reduce_fx="sum")
        self.add_state("total", default=torch.tensor(0), dist_reduce_fx="sum")

    def update(self, predicted: Tensor, targets: Tensor) -> None:
        wrong = (predicted != targets) & (targets != IGNORE)
        self.right += int((~wrong.any(dim=1)).sum())
        self.total += len(targets)

    def compute(self) -> Tensor:
        return self.right / self.total if self.total else torch.tensor(math.nan)


def mix_seed(length: int, batch_idx: int, place: int) -> int:
    """The seed of evaluation mix ``place``'s batch ``batch_idx`` at ``length``: distinct for each triple (lengths
    under a million, batch indices under 100,000)."""
    return ((place + 1) * 1_000_000 + length) * 100_000 + batch_idx


def past_training(targets: Tensor, train_length: int) -> Tensor:
    """``targets`` with every position before ``train_length`` unscored."""
    past = targets.clone()
    past[:, :train_length] = IGNORE
    return past


class SyntheticTaskModule(TransformerModule):
    def __init__(
        self,
        model: ModelConfig,
        optimizer: dict[str, Any],
        max_length: int,
        train_length: int,
        eval_lengths: list[int],
        task: Task | None = None,
        plain_only: bool = False,
    ) -> None:
        """``task``: the datamodule's task, whose trivial rules are baselines (None: no rules, chance and the best
        constant only); ``plain_only``: the plain model's figures only (``task.eval_ways=plain``, debug=fast)."""
        super().__init__(model, optimizer, max_length)
        self.plain_only = bool(plain_only)
        self.train_length, self.eval_lengths, self.task = train_length, list(eval_lengths), task
        self.variants = self.model.encoding.test_time_variants()
        self.draws = self.model.encoding.evaluation_draws()
        accuracy = lambda: MulticlassAccuracy(model.n_outputs, average="micro", ignore_index=IGNORE)  # noqa: E731
        names = [(length, name) for length in self.eval_lengths for name in self.accuracy_names(length)]
        self.metrics = nn.ModuleDict({self._key(length, name): accuracy() for length, name in names})
        self.whole_sequence = task is not None and task.whole_sequence
        self.mixes = task.evaluation_mixes() if task is not None else {}
        # metrics by the mix's place (a module name has no dots)
        self.metrics.update(
            {
                self._key(n, f"mix{i}{part}"): accuracy()
                for n, part in self.parts()  # past the training length too: the positions a longer length adds
                for i in range(len(self.mixes))
            }
        )
        if self.whole_sequence:
            self.metrics.update({self._key(n, "sequence_accuracy"): SequenceAccuracy() for n in self.eval_lengths})
        self.constants = nn.ModuleDict(
            {self._key(n, f"baseline_constant{part}"): ClassCounts(model.n_outputs) for n, part in self.parts()}
        )
        self.figures: dict[str, dict[str, float]] = {}
        self.progress: EvaluationProgress | None = None  # the test's cost and progress lines (rank zero)

    def parts(self) -> list[tuple[int, str]]:
        """(length, "") for every length and (length, "_past_train") for those past the training length."""
        return [(n, part) for n in self.eval_lengths for part in ("", PAST) if not part or n > self.train_length]

    def ways(self, length: int) -> list[str]:
        """The ways of evaluating at ``length``: plain (``accuracy``), log-scaled, and past the training length
        each test-time variant (``plain_only``: the plain model alone)."""
        if self.plain_only:
            return ["accuracy"]
        variants = [f"accuracy_{v}" for v in self.variants] if length > self.train_length else []
        return ["accuracy", "accuracy_log_scaled", *variants]

    def accuracy_names(self, length: int) -> list[str]:
        past = length > self.train_length
        names = [name + part for name in self.ways(length) for part in ("", PAST) if not part or past]
        names += [f"selection_{way.removeprefix('accuracy_')}" for way in self.ways(length)[1:]] if past else []
        if self.draws > 1:  # the plain accuracy of each draw, for the spread over draws
            names += [f"accuracy{part}_draw{d}" for d in range(self.draws) for part in ("", PAST) if not part or past]
        return names

    @staticmethod
    def _key(length: int, metric: str) -> str:
        return f"L{length}_{metric}"

    def coordinates(self, tokens: Tensor) -> dict[str, Tensor] | None:
        """Synthetic sequences have no structure: to an encoding that reads paragraph or sentence indices,
        each sequence is one paragraph and one sentence."""
        needed = self.model.encoding.required_coordinates
        return {name: torch.zeros_like(tokens) for name in needed} if needed else None

    def loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        """The mean loss over the global batch's scored positions, as one process computes it. Under DDP each rank
        returns its summed loss over the global count times the world size: DDP averages the ranks' gradients, so
        that average is the global token mean's gradient even where rows score different numbers of positions
        (flip_flop scores its reads only); a rank's own mean would weight a token of a rank with few scored
        positions more. Ranks scoring as many each (lag, seen) get their own mean again."""
        tokens, targets = batch
        logits = self.model(tokens, self.with_row_seeds(self.coordinates(tokens), len(tokens))).logits
        logits, targets = logits.flatten(0, 1).float(), targets.flatten()  # bf16 logits: the loss in fp32
        world = self.trainer.world_size if self._trainer is not None else 1
        if world == 1:
            return F.cross_entropy(logits, targets, ignore_index=IGNORE)
        scored = summed_over_ranks((targets != IGNORE).sum(), self.trainer)  # one all-reduce of a count
        return F.cross_entropy(logits, targets, ignore_index=IGNORE, reduction="sum") * world / scored

    def predictions(self, tokens: Tensor) -> Iterator[tuple[str, Tensor]]:
        """(way, predicted classes ``[B, T]``) for each way of evaluating at this length (``ways``)."""
        length, coordinates = tokens.shape[1], self.coordinates(tokens)
        for way in self.ways(length):
            plain = way == "accuracy"
            logits = logits_in_way(self.model, tokens, coordinates, None if plain else way.removeprefix("accuracy_"),
                                   self.train_length)  # fmt: skip
            yield way, logits.argmax(-1)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        tokens, targets = batch
        length = tokens.shape[1]
        selection = dataloader_idx >= len(self.eval_lengths)  # the selection sets follow the test sets
        scored = {"": targets, PAST: past_training(targets, self.train_length)}
        if length <= self.train_length:
            del scored[PAST]
        if not selection:
            self.update_baselines(tokens, scored)
            self.update_mixes(length, len(tokens), batch_idx, tokens.device)
        for draw in range(self.draws):
            with self.model.encoding.evaluation_draw(draw):
                for way, predicted in self.predictions(tokens):
                    if selection:
                        if way != "accuracy":
                            key = f"selection_{way.removeprefix('accuracy_')}"
                            self.metrics[self._key(length, key)].update(predicted, scored[PAST])
                        continue
                    if self.whole_sequence and way == "accuracy" and draw == 0:
                        self.metrics[self._key(length, "sequence_accuracy")].update(predicted, targets)
                    for part, target in scored.items():
                        self.metrics[self._key(length, way + part)].update(predicted, target)
                        if self.draws > 1 and way == "accuracy":
                            self.metrics[self._key(length, f"accuracy{part}_draw{draw}")].update(predicted, target)

    def set_name(self, length: int, dataloader_idx: int) -> str:
        """``L64``, or ``L64 selection`` for a selection set (they follow the test sets)."""
        return f"L{length}" + (" selection" if dataloader_idx >= len(self.eval_lengths) else "")

    def batch_mixes(self, length: int, dataloader_idx: int) -> list[str]:
        """The evaluation mixes a batch is also scored on (``update_mixes``): a test set's, those that fit."""
        if dataloader_idx >= len(self.eval_lengths):
            return []
        return [name for name, mix in self.mixes.items() if length >= mix.min_length]

    def test_costs(self) -> dict[str, LengthCost]:
        """What the test scores on this process: each set's batches, sequences and forward passes (every way under
        each draw, ``predictions``: a selection set's too; each mix that fits, once)."""
        costs: dict[str, LengthCost] = {}
        for index, loader in enumerate(self.trainer.test_dataloaders):
            # this rank's sequences (under DDP its share: RankShard, poslab.datamodules.synthetic)
            size, batch_size = len(loader.sampler), int(loader.batch_size or 1)
            length = int(loader.dataset.tokens.shape[1])
            cost = costs.setdefault(self.set_name(length, index), LengthCost(self.set_name(length, index), length))
            for start in range(0, size, batch_size):
                rows = min(batch_size, size - start)
                cost.add(rows, self.ways(length), self.draws, self.batch_mixes(length, index))
        return costs

    def on_test_start(self) -> None:
        self.progress = None
        if self.trainer.is_global_zero:
            self.progress = EvaluationProgress("test", self.test_costs(), training_step(self.trainer))
            self.progress.start()

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        if self.progress is not None:
            length = batch[0].shape[1]
            forwards = len(self.ways(length)) * self.draws + len(self.batch_mixes(length, dataloader_idx))
            self.progress.advance(self.set_name(length, dataloader_idx), forwards)

    def update_mixes(self, length: int, batch_size: int, batch_idx: int, device: torch.device) -> None:
        """The plain model on a batch of each evaluation mix, drawn from a seed of its own (``mix_seed``): the
        rank's batch ``batch_idx`` is the run's ``batch_idx x world size + rank``, so DDP ranks draw different
        batches, together those one process draws."""
        world, rank = (self.trainer.world_size, self.trainer.global_rank) if self._trainer is not None else (1, 0)
        batch_idx = batch_idx * world + rank
        for place, mix in enumerate(self.mixes.values()):
            if length < mix.min_length:  # the mix does not fit this length (associative_recall's 4P > length)
                continue
            generator = torch.Generator().manual_seed(mix_seed(length, batch_idx, place))
            tokens, targets = (x.to(device) for x in mix.sample(batch_size, length, generator))
            logits = logits_in_way(self.model, tokens, self.coordinates(tokens), None, self.train_length)
            predicted = logits.argmax(-1)
            self.metrics[self._key(length, f"mix{place}")].update(predicted, targets)
            if length > self.train_length:
                past = past_training(targets, self.train_length)
                self.metrics[self._key(length, f"mix{place}{PAST}")].update(predicted, past)

    def update_baselines(self, tokens: Tensor, scored: dict[str, Tensor]) -> None:
        """The best-constant counts and the task's trivial rules on this batch of the test set."""
        length = tokens.shape[1]
        rules = self.task.trivial_rules(tokens) if self.task is not None else {}
        for part, target in scored.items():
            self.constants[self._key(length, f"baseline_constant{part}")].update(target)
            for name, predicted in rules.items():
                key = self._key(length, f"baseline_{name}{part}")
                if key not in self.metrics:  # the task's rules are known once its data is: made on first use
                    self.metrics[key] = MulticlassAccuracy(
                        self.model.cfg.n_outputs, average="micro", ignore_index=IGNORE
                    ).to(tokens.device)
                self.metrics[key].update(predicted, target)

    def on_test_epoch_end(self) -> None:
        if self.progress is not None:
            self.progress.finish()
        self.figures = {}
        for length in self.eval_lengths:
            row: dict[str, float] = {}
            for collection in (self.metrics, self.constants):
                prefix = self._key(length, "")
                for key in [k for k in collection if k.startswith(prefix)]:
                    row[key.removeprefix(prefix)] = float(collection[key].compute())
                    collection[key].reset()
            row = self.with_draw_spread(row)
            for place, (name, mix) in enumerate(self.mixes.items()):  # each mix's figures (Task.mix_figures)
                for part in ("", PAST):
                    if f"mix{place}{part}" not in row:
                        continue
                    accuracy = row.pop(f"mix{place}{part}")
                    if length >= mix.min_length:  # too short for the mix (16 pairs in 32 tokens): no figure
                        row.update({k + part: v for k, v in self.task.mix_figures(name, accuracy).items()})
            if self.task is not None and self.task.name == "flip_flop":  # the training mix's read error %
                for part in ("", PAST):
                    if f"accuracy{part}" in row:
                        row[f"read_error_pct{part}"] = 100.0 * (1.0 - row[f"accuracy{part}"])
            row["baseline_chance"] = 1.0 / self.model.cfg.n_outputs
            for metric, value in row.items():
                self.log(f"eval/L{length}/{metric}", value, add_dataloader_idx=False, sync_dist=False)
            self.figures[str(length)] = row

    def with_draw_spread(self, row: dict[str, float]) -> dict[str, float]:
        """``row`` with its per-draw accuracies replaced by their standard deviation over draws."""
        if self.draws < 2:
            return row
        for part in ("", PAST):
            draws = [row.pop(f"accuracy{part}_draw{d}") for d in range(self.draws) if f"accuracy{part}_draw{d}" in row]
            if draws:
                row[f"accuracy{part}_draw_sd"] = stdev(draws)
        return row
