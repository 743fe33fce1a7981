"""Training and length-extrapolation evaluation on the synthetic tasks (``poslab.datamodules.synthetic``).

At every evaluation length L the module reports, as the write-up does:
``accuracy`` over scored positions; ``accuracy_past_train`` over positions
t >= train_length only (when L > train_length); ``accuracy_log_scaled`` with
every attention score multiplied by log(L)/log(train_length) at test time
(Chiang & Cholak, 2022; the factor is 1 at the training length); and, for an
encoding with test-time variants (``PositionEncoding.test_time_variants``: RoPE's
scaling rules applied with factor L / train_length), ``accuracy_<variant>`` at
each length past the training length (at or below it every rule is the identity).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from poslab.datamodules.synthetic import IGNORE
from poslab.lightning_modules.base import TransformerModule
from poslab.model import ModelConfig

METRICS = ("accuracy", "accuracy_past_train", "accuracy_log_scaled")


class SyntheticTaskModule(TransformerModule):
    def __init__(
        self, model: ModelConfig, optimizer: dict[str, Any], max_length: int, train_length: int, eval_lengths: list[int]
    ) -> None:
        super().__init__(model, optimizer, max_length)
        self.train_length, self.eval_lengths = train_length, list(eval_lengths)
        self.variants = self.model.encoding.test_time_variants()
        self.metrics = nn.ModuleDict(
            {
                self._key(length, metric): MulticlassAccuracy(model.n_outputs, average="micro", ignore_index=IGNORE)
                for length in self.eval_lengths
                for metric in self.metric_names()
                if metric in ("accuracy", "accuracy_log_scaled") or length > train_length
            }
        )
        self.figures: dict[str, dict[str, float]] = {}

    def metric_names(self) -> list[str]:
        return [*METRICS, *(f"accuracy_{variant}" for variant in self.variants)]

    @staticmethod
    def _key(length: int, metric: str) -> str:
        return f"L{length}_{metric}"

    def coordinates(self, tokens: Tensor) -> dict[str, Tensor] | None:
        """Synthetic sequences have no structure: to an encoding that reads paragraph or sentence indices,
        each sequence is one paragraph and one sentence."""
        needed = self.model.encoding.required_coordinates
        return {name: torch.zeros_like(tokens) for name in needed} if needed else None

    def loss(self, batch: tuple[Tensor, Tensor]) -> Tensor:
        tokens, targets = batch
        logits = self.model(tokens, self.with_row_seeds(self.coordinates(tokens), len(tokens))).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)  # bf16 logits

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int, dataloader_idx: int = 0) -> None:
        tokens, targets = batch
        length = tokens.shape[1]
        coordinates = self.coordinates(tokens)
        predictions = self.model(tokens, coordinates).logits.argmax(-1)
        self.metrics[self._key(length, "accuracy")].update(predictions, targets)
        if length > self.train_length:
            past = targets.clone()
            past[:, : self.train_length] = IGNORE
            self.metrics[self._key(length, "accuracy_past_train")].update(predictions, past)
        scale = math.log(length) / math.log(self.train_length)
        scaled = self.model(tokens, coordinates, score_scale=scale).logits.argmax(-1)
        self.metrics[self._key(length, "accuracy_log_scaled")].update(scaled, targets)
        if length > self.train_length:
            for variant in self.variants:
                with self.model.encoding.evaluated_as(variant):
                    predicted = self.model(tokens, coordinates).logits.argmax(-1)
                self.metrics[self._key(length, f"accuracy_{variant}")].update(predicted, targets)

    def on_test_epoch_end(self) -> None:
        self.figures = {}
        for length in self.eval_lengths:
            row = {}
            for metric in self.metric_names():
                key = self._key(length, metric)
                if key in self.metrics:
                    row[metric] = float(self.metrics[key].compute())
                    self.metrics[key].reset()
                    self.log(f"eval/L{length}/{metric}", row[metric], add_dataloader_idx=False, sync_dist=False)
            self.figures[str(length)] = row
