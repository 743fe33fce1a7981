"""Next-symbol prediction on a corpus: the training loss, and the held-out loss at lengths from the context up.

The held-out sample, its windows and how they cross document boundaries are ``poslab.datamodules.held_out``'s:
the same tokens of every source group's validation split are scored at every evaluation length
(``task.eval_lengths``; windows cross document boundaries, as training windows do, and the separator is scored
as one byte). ``results.json``'s ``figures`` keep ``val_loss`` and ``val_bpb`` (the figures at the context, 1x)
and ``step``, and key every figure by evaluation length L, as the synthetic tasks do:

- ``loss`` (nats per token) and ``bpb`` (bits per byte: the scored tokens' summed loss / ln 2 / the UTF-8 bytes
  of exactly those tokens, the batches' ``bytes``) over non-overlapping windows of L + 1 tokens, every group's
  tokens together (token-weighted loss, byte-weighted bpb);
- ``loss_sliding`` / ``bpb_sliding`` with ``task.eval_stride``: sliding windows, each scored token with at least
  L - stride tokens of context;
- past the context, on the same weights and windows: ``loss_log_scaled`` / ``bpb_log_scaled`` (each query's
  attention scores times max(1, log(t + 1) / log(context)), Chiang & Cholak 2022; ``base.log_length_scale``)
  and ``loss_<variant>`` / ``bpb_<variant>`` for each of the encoding's ``test_time_variants()`` (RoPE's rules,
  factor L / context);
- with two or more source groups, each figure again per group: ``loss[en]``, ``bpb_sliding[zh]``, ...;
- ``loss_draw_sd`` for an encoding that draws positions in evaluation (``evaluation_draws() > 1``): every figure
  is the mean over its draws, this the spread of the plain loss over them.

Every validation measures the plain model's non-overlapping figures at every length (the same numbers as the
test's ``loss`` and ``bpb``); the test after training adds the sliding windows and the test-time ways. Beside the
figures, results.json's ``loss_by_position`` holds the mean loss at each position of the non-overlapping windows,
log-binned (``held_out.position_bins``), with each bin's token count, per length (and per group).

The test scores each group's whole held-out split; a validation the ``val_windows`` sample (``held_out``). After
the test, results.json's ``held_out`` holds every way's figures on the selection and on the test documents, the
way chosen on selection past the context with its test figures, and each document's sums (loss, tokens, bytes)
per length and way (``held_out.held_out_results``, docs/evaluation.md).

After training, once (not at every validation), passkey retrieval (``poslab.lightning_modules.passkey``, settings
``task.passkey``) on the first source group's held-out text (a two-group corpus: the first group of its config, the
prose): results.json's top-level ``passkey``, the plain model's grid and each test-time way's under ``ways``.
With ``task.passkey.at_validation``, every validation also scores the plain model within one context
(``PasskeySettings.within_context``): ``val/passkey_exact`` and results.json's ``passkey_by_step``.

Each round of the test logs its cost before it starts (batches, windows and forward passes per length, with the
ways scored there) and its progress while it runs (``poslab.lightning_modules.progress``), bar or not.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import time
import warnings
from statistics import stdev
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import Metric

from poslab.datamodules.held_out import BINS_PER_OCTAVE, held_out_results, position_bins
from poslab.datamodules.language import windows
from poslab.lightning_modules.base import LOG_SCALED, TransformerModule, logits_in_way
from poslab.lightning_modules.passkey import evaluate_passkey, evaluation_ways
from poslab.lightning_modules.progress import EvaluationProgress, LengthCost, training_step
from poslab.model import ModelConfig

PLAIN, SLIDING = "plain", "sliding"
log = logging.getLogger("poslab")


class LengthTotals(Metric):
    """Sums at one evaluation length, over batches and DDP ranks: each way's loss, scored tokens and their bytes
    per group, the plain model's per draw (its spread over draws) and at each position per group (loss by
    position)."""

    full_state_update = False

    def __init__(self, ways: int, groups: int, draws: int, length: int) -> None:
        super().__init__()
        shapes = {
            "loss": (ways, groups),
            "tokens": (ways, groups),
            "bytes": (ways, groups),
            "draw_loss": (draws, groups),
            "draw_tokens": (draws, groups),
            "position_loss": (groups, length),
            "position_tokens": (groups, length),
        }
        self.shapes = shapes
        for name, shape in shapes.items():  # fp64: sums over many thousand tokens, compared to 1e-6 in tests
            self.add_state(name, default=torch.zeros(shape, dtype=torch.float64), dist_reduce_fx="sum")
        # per-document sums, one row (way, group, document, loss, tokens, bytes) per document a batch touched:
        # a list (concatenated over DDP ranks), summed by document when read (document_sums)
        self.add_state("document_rows", default=[], dist_reduce_fx="cat")

    def update(
        self, way: int, group: int, draw: int, losses: Tensor, scored: Tensor, target_bytes: Tensor,
        documents: Tensor | None = None,
    ) -> None:  # fmt: skip
        """``losses`` ``[R, L]`` of one batch, ``scored`` ``[R, L]`` the predictions it scores, ``target_bytes``
        ``[R, L]`` the UTF-8 bytes of each predicted token, ``documents`` ``[R, L]`` the held-out document each
        predicted token belongs to; way 0 is the plain model on non-overlapping windows, the one whose draws and
        positions are kept."""
        masked = losses.double() * scored
        if documents is not None:
            scored_bytes = target_bytes.double() * scored
            self.document_rows.append(document_rows(way, group, masked, scored, scored_bytes, documents))
        self.loss[way, group] += masked.sum()
        self.tokens[way, group] += scored.sum()
        self.bytes[way, group] += (target_bytes.double() * scored).sum()
        if way == 0:
            self.draw_loss[draw, group] += masked.sum()
            self.draw_tokens[draw, group] += scored.sum()
            self.position_loss[group] += masked.sum(0)
            self.position_tokens[group] += scored.sum(0)

    def compute(self) -> dict[str, Tensor]:
        rows = self.document_rows
        rows = torch.cat(rows) if isinstance(rows, list) and rows else rows
        rows = rows if isinstance(rows, Tensor) else torch.zeros((0, 6), dtype=torch.float64)
        return {**{name: getattr(self, name) for name in self.shapes}, "document_rows": rows}

    def sums(self) -> dict[str, Tensor]:
        """``compute()`` (summed over DDP ranks) on the CPU, each sum in its shape (torchmetrics squeezes a result
        of one element to a scalar)."""
        if isinstance(self.document_rows, list) and not self.document_rows:
            # a rank that scored no batch here still joins the gather (an empty list state cannot be synced):
            # one row of way -1, which no way's sums read
            self.document_rows.append(torch.tensor([[-1.0, 0, 0, 0, 0, 0]], dtype=torch.float64, device=self.device))
        # a fresh sync: torchmetrics caches compute()'s result until this rank's next update, but the test's second
        # round may add to other ranks' sums only (a collective every rank joins, each time it is read)
        self._computed = None
        values = dict(self.compute())  # a copy: the cached dict would lose document_rows to the pop below
        rows = values.pop("document_rows").reshape(-1, 6).cpu()
        rows = rows[rows[:, 0] >= 0]
        sums = {name: value.reshape(self.shapes[name]).cpu() for name, value in values.items()}
        return {**sums, "document_rows": rows}


def metric_state(metric: Metric) -> dict[str, Any]:
    """A torchmetrics ``Metric``'s sums on this process (a list state concatenated into one tensor) and its update
    count (``compute`` warns on a metric never updated), copied to the CPU."""
    state: dict[str, Any] = {"_update_count": int(metric._update_count)}
    for name in metric._defaults:
        value = getattr(metric, name)
        if isinstance(value, list):
            value = torch.cat(value) if value else None
        state[name] = None if value is None else value.detach().cpu().clone()
    return state


def load_metric_state(metric: Metric, state: dict[str, Any]) -> None:
    """``metric_state`` back into ``metric`` (on its device): a list state as a list of the one saved tensor."""
    for name, default in metric._defaults.items():
        value = state[name]
        if isinstance(default, list):
            setattr(metric, name, [] if value is None else [value.to(metric.device)])
        else:
            setattr(metric, name, value.to(device=metric.device, dtype=default.dtype))
    metric._update_count = int(state["_update_count"])
    metric._computed = None  # torchmetrics' cached result belongs to the old sums


def document_rows(
    way: int, group: int, loss: Tensor, tokens: Tensor, scored_bytes: Tensor, documents: Tensor
) -> Tensor:
    """``[D, 6]`` float64: for each of the ``D`` documents of one batch's scored tokens, (way, group, document, its
    tokens' summed loss, their count, their bytes): a window that crosses a document boundary counts each token for
    the document it belongs to."""
    ids, inverse = torch.unique(documents.flatten(), return_inverse=True)
    sums = torch.zeros((len(ids), 3), dtype=torch.float64, device=loss.device)
    sums.index_add_(0, inverse, torch.stack([loss.flatten(), tokens.flatten(), scored_bytes.flatten()], 1).double())
    keys = torch.tensor([way, group], dtype=torch.float64, device=loss.device).expand(len(ids), 2)
    return torch.cat([keys, ids.double()[:, None], sums], 1)


class LanguageModelModule(TransformerModule):
    """Bits per byte: the scored tokens' summed loss in nats / ln 2 / the UTF-8 bytes those tokens hold (the
    evaluation batches' ``bytes``; the document separator counts as one byte). With the byte tokenizer every
    token is one byte, so it is the loss per token in bits; with bpe the bytes are those of exactly the tokens
    scored (not the split's mean bytes per token). A batch without ``bytes`` (one made by hand) takes its group's
    mean from ``groups``."""

    def __init__(
        self,
        model: ModelConfig,
        optimizer: dict[str, Any],
        max_length: int,
        train_length: int | None = None,
        eval_lengths: list[int] | None = None,
        groups: dict[str, float] | None = None,
        sliding: bool = False,
    ) -> None:
        """``groups``: each source group's bytes per token, in the datamodule's order (its batches' ``group``)."""
        super().__init__(model, optimizer, max_length)
        self.train_length = int(train_length or max_length)
        self.eval_lengths = sorted({self.train_length, *(int(n) for n in eval_lengths or [])})
        groups = dict(groups or {"main": 1.0})
        self.group_names, self.sliding = list(groups), bool(sliding)
        self.bytes_per_token = torch.tensor(list(groups.values()), dtype=torch.float64)
        self.variants = self.model.encoding.test_time_variants()
        self.draws = self.model.encoding.evaluation_draws()
        self.totals = nn.ModuleDict(
            {str(n): LengthTotals(len(self.ways(n)), len(groups), self.draws, n) for n in self.eval_lengths}
        )
        self.figures: dict[str, Any] = {}
        self.loss_by_position: dict[str, Any] = {}
        self.held_out: dict[str, Any] | None = None  # the test's figures on the selection and test documents
        # the test in two rounds (LanguageModelDataModule.test_rounds): which round runs, and per length the ways
        # chosen on selection in the first, which the second scores beside the plain model
        self.test_round: str | None = None
        self.test_ways: dict[int, list[str]] = {}
        self.passkey: dict[str, Any] | None = None
        self.passkey_by_step: list[dict[str, Any]] = []  # task.passkey.at_validation: the copying curve
        self.progress: EvaluationProgress | None = None  # the test round's cost and progress lines (rank zero)
        # batches of this test round scored by an earlier process of the run, their sums restored
        # (``load_evaluation_state``, poslab.running.evaluation_checkpoint): skipped, not scored twice
        self.scored_earlier = 0

    def ways(self, length: int) -> list[str]:
        """The ways of evaluating at ``length``: the plain model (non-overlapping, then sliding windows), and past
        the context log-length scaling and each test-time variant."""
        ways = [PLAIN, *([SLIDING] if self.sliding else [])]
        return ways + ([LOG_SCALED, *self.variants] if length > self.train_length else [])

    def coordinates(self, batch: dict[str, Tensor]) -> dict[str, Tensor] | None:
        """The paragraph and sentence indices of the inputs (all but each window's last token), where the
        encoding reads them."""
        needed = self.model.encoding.required_coordinates
        return {name: batch[name][:, :-1] for name in needed} if needed else None

    def loss(self, batch: dict[str, Tensor]) -> Tensor:
        """Windows of context + 1 tokens: predict each of the last context tokens from those before it."""
        tokens = batch["tokens"]
        logits = self.model(tokens[:, :-1], self.with_row_seeds(self.coordinates(batch), len(tokens))).logits
        return F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())

    def token_losses(self, batch: dict[str, Tensor], way: str) -> Tensor:
        """``[R, L]``: the loss of each prediction of a batch of windows, the model evaluated in ``way``."""
        tokens = batch["tokens"]
        inputs, targets, coordinates = tokens[:, :-1], tokens[:, 1:], self.coordinates(batch)
        plain = way in (PLAIN, SLIDING)  # sliding windows are scored by the plain model
        logits = logits_in_way(self.model, inputs, coordinates, None if plain else way, self.train_length)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")
        return losses.view_as(targets)

    @property
    def chooses(self) -> bool:
        """Whether the test chooses among ways: at a length past the context, log scaling and the test-time rules
        are candidates beside the plain model."""
        return any(length > self.train_length for length in self.eval_lengths)

    def batch_ways(self, length: int, sliding: bool) -> list[str]:
        """What one evaluation batch is scored in: sliding windows by the plain model; non-overlapping ones by
        the plain model at a validation, in every way at the test (or outside a Trainer), but in its second round
        (``test_round`` ``test``: windows of test documents only) by the plain model and the ways chosen on
        selection in the first (``test_ways``)."""
        if sliding:
            return [SLIDING]
        testing = self._trainer is None or self.trainer.testing
        if not testing:
            return [PLAIN]
        if self.test_round == "test":
            return [PLAIN, *self.test_ways.get(length, [])]
        return [way for way in self.ways(length) if way != SLIDING]

    def partial_ways(self, length: int) -> set[str]:
        """The ways that scored only the first round's windows at ``length`` (after a test in two rounds): not
        chosen on selection, so they have figures on the selection documents only."""
        if self.test_round != "test":
            return set()
        return {w for w in self.ways(length) if w not in (PLAIN, SLIDING, *self.test_ways.get(length, []))}

    def evaluation_step(self, batch: dict[str, Tensor]) -> None:
        length = batch["tokens"].shape[1] - 1
        group, sliding = int(batch["group"]), bool(batch["sliding"])
        positions = torch.arange(length, device=batch["tokens"].device)
        scored = (positions[None, :] >= batch["scored_from"][:, None]).double()
        totals, ways = self.totals[str(length)], self.ways(length)
        target_bytes = self.target_bytes(batch, group)
        documents = batch["document"][:, 1:] if "document" in batch else None  # each predicted token's document
        for draw in range(self.draws):
            with self.model.encoding.evaluation_draw(draw):
                for way in self.batch_ways(length, sliding):
                    losses = self.token_losses(batch, way)
                    totals.update(ways.index(way), group, draw, losses, scored, target_bytes, documents)

    def target_bytes(self, batch: dict[str, Tensor], group: int) -> Tensor:
        """``[R, L]``: the UTF-8 bytes of each predicted token (the batch's ``bytes`` past each window's first
        token), or the group's mean bytes per token for a batch without them."""
        if "bytes" in batch:
            return batch["bytes"][:, 1:]
        targets = batch["tokens"][:, 1:]
        return torch.full(targets.shape, float(self.bytes_per_token[group]), dtype=torch.float64, device=targets.device)

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self.evaluation_step(batch)

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        if batch_idx >= self.scored_earlier:  # the test's batches come in the same order in every process
            self.evaluation_step(batch)

    def test_costs(self) -> dict[str, LengthCost]:
        """What this round of the test scores on this process, by length: the batches its dataloader holds and the
        ways each is scored in (``batch_ways``, under each draw)."""
        loader = self.trainer.test_dataloaders
        loader = loader[0] if isinstance(loader, list) else loader
        costs: dict[str, LengthCost] = {}
        for position, i in enumerate(loader.sampler):  # this rank's batches (RankShard), in the order they are scored
            if position < self.scored_earlier:
                continue  # scored by an earlier process: not this one's cost
            length, sliding, rows = loader.dataset.shape(i)
            costs.setdefault(f"L{length}", LengthCost(f"L{length}", length)).add(
                rows, self.batch_ways(length, sliding), self.draws
            )
        return costs

    def on_test_start(self) -> None:
        self.progress = None
        if self.trainer.is_global_zero:
            title = "test" if self.test_round is None else f"test, round {self.test_round}"
            self.progress = EvaluationProgress(title, self.test_costs(), training_step(self.trainer))
            self.progress.start()

    def on_test_batch_end(self, outputs: Any, batch: dict[str, Tensor], batch_idx: int, *args: Any) -> None:
        if self.progress is not None and batch_idx >= self.scored_earlier:
            length = batch["tokens"].shape[1] - 1
            forwards = len(self.batch_ways(length, bool(batch["sliding"]))) * self.draws
            self.progress.advance(f"L{length}", forwards)

    def evaluation_signature(self) -> dict[str, Any]:
        """What the test's sums are sums of: the lengths, the ways at each, the draws, the groups and the encoding's
        settings (its test-time rules' among them); a saved evaluation state with another signature is not resumed
        (``poslab.running.evaluation_checkpoint``)."""
        lengths = {str(n): self.ways(n) for n in self.eval_lengths}
        encoding = json.loads(json.dumps(self.model.encoding.resolved_settings, sort_keys=True, default=str))
        return {"lengths": lengths, "draws": self.draws, "groups": self.group_names, "sliding": self.sliding,
                "encoding": encoding}  # fmt: skip

    def evaluation_state(self) -> dict[str, Any]:
        """The test so far, on this process: the round, the ways chosen on selection and every length's sums (its
        own, before any DDP reduction), as ``load_evaluation_state`` takes them back."""
        return {
            "test_round": self.test_round,
            "test_ways": {int(n): list(ways) for n, ways in self.test_ways.items()},
            "totals": {length: metric_state(totals) for length, totals in self.totals.items()},
        }

    def load_evaluation_state(self, state: dict[str, Any], scored_earlier: int) -> None:
        """Continue a test where ``evaluation_state`` left it: its sums restored, and the first ``scored_earlier``
        batches of its round, already in them, skipped."""
        self.test_round, self.test_ways = state["test_round"], dict(state["test_ways"])
        for length, totals in self.totals.items():
            load_metric_state(totals, state["totals"][length])
        self.scored_earlier = int(scored_earlier)

    def on_validation_epoch_end(self) -> None:
        self.report()
        self.log("val/loss", self.figures["val_loss"], prog_bar=True, sync_dist=False)
        self.log("val/bpb", self.figures["val_bpb"], sync_dist=False)
        for length in self.loss_by_position["lengths"]:
            for key in ("loss", "bpb"):
                self.log(f"val/L{length}/{key}", self.figures[length][key], sync_dist=False)
        settings = getattr(self.trainer.datamodule, "passkey", None)
        if settings is not None and settings.enabled and settings.at_validation and not self.trainer.sanity_checking:
            self.passkey_at_validation(settings.within_context())

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_save_checkpoint(checkpoint)
        checkpoint["passkey_by_step"] = self.passkey_by_step  # a resumed run's curve starts where it stopped

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        super().on_load_checkpoint(checkpoint)
        self.passkey_by_step = list(checkpoint.get("passkey_by_step", []))

    def passkey_at_validation(self, settings: Any) -> None:
        """The plain model's passkey retrieval within one context, kept per step (``passkey_by_step``): when
        copying appears in training."""
        result = self.run_passkey(settings, ways={})
        exact, digits = float(np.mean(result["exact"])), float(np.mean(result["digits"]))
        entry = {"step": int(self.global_step), "exact": exact, "digits": digits}
        self.passkey_by_step.append({**entry, "distances": result["distances"], "exact_by_distance": result["exact"]})
        self.log("val/passkey_exact", exact, sync_dist=False)
        self.log("val/passkey_digits", digits, sync_dist=False)

    def on_test_epoch_end(self) -> None:
        if self.progress is not None:
            self.progress.finish()
        if self.test_round == "selection":  # the choice; the sums stay for the second round to add to
            self.test_ways = self.chosen_on_selection()
            return
        self.report()
        self.passkey = self.passkey_retrieval()
        for length in self.loss_by_position["lengths"]:
            for key, value in self.figures[length].items():
                self.log(f"eval/L{length}/{key}", value, sync_dist=False)

    def report(self) -> None:
        """``figures`` and ``loss_by_position`` from the sums of the evaluation that just ended (then reset), for
        every length it scored (not those the held-out text could not hold: the datamodule's ``left_out``)."""
        figures: dict[str, Any] = {}
        curves: dict[str, dict[str, Any]] = {}
        rows: dict[int, np.ndarray] = {}  # per-document sums, by length
        for length in self.eval_lengths:
            totals = self.totals[str(length)]
            with warnings.catch_warnings():
                # every rank reads every length's sums (a collective under DDP, even where this rank got no batch of
                # it); a length the held-out text cannot hold had no batch anywhere: torchmetrics' "compute before
                # update" warning says nothing here
                warnings.filterwarnings("ignore", message=r"(?s).*was called before the ``update`` method")
                sums = totals.sums()
            totals.reset()
            if float(sums["tokens"][0].sum()) == 0:
                continue
            figures[str(length)] = self.length_row(length, sums)
            rows[length] = sums["document_rows"].numpy()
            curves[str(length)] = self.position_curves(length, sums)
        at_context = figures[str(self.train_length)]
        self.figures = {"val_loss": at_context["loss"], "val_bpb": at_context["bpb"], "step": int(self.global_step)}
        self.figures.update(figures)
        self.loss_by_position = {
            "train_length": self.train_length,
            "bins_per_octave": BINS_PER_OCTAVE,
            "lengths": {length: curve["all"] for length, curve in curves.items()},
        }
        if len(self.group_names) > 1:
            self.loss_by_position["groups"] = {
                name: {length: curve[name] for length, curve in curves.items()} for name in self.group_names
            }
        self.held_out = self.selection_results(rows)

    def chosen_on_selection(self) -> dict[int, list[str]]:
        """After the test's first round: per length past the context, the ways chosen on the selection documents
        (that length's own and the one for every length, ``held_out_results``' ``chosen``), but the plain model."""
        rows = {}
        for length in self.eval_lengths:
            with warnings.catch_warnings():  # as in report: a length without batches is no news here
                warnings.filterwarnings("ignore", message=r"(?s).*was called before the ``update`` method")
                rows[length] = self.totals[str(length)].sums()["document_rows"].numpy()
        results = self.selection_results({n: r for n, r in rows.items() if len(r)}) or {}
        overall = (results.get("chosen") or {}).get("way")
        chosen: dict[int, list[str]] = {}
        for length in self.eval_lengths:
            at = ((results.get("lengths") or {}).get(str(length)) or {}).get("chosen") or {}
            ways = [w for w in (at.get("way"), overall if length > self.train_length else None) if w]
            chosen[length] = sorted(set(ways) - {PLAIN}, key=self.ways(length).index)
        log.info("test: chosen on the selection documents, scored on the test documents: %s",
                 {n: ways for n, ways in chosen.items() if ways} or "the plain model")  # fmt: skip
        return chosen

    def selection_results(self, rows: dict[int, np.ndarray]) -> dict[str, Any] | None:
        """results.json's ``held_out`` after the test (``held_out.held_out_results``: each way on the selection and
        test documents, the way chosen on selection, per-document sums), given the datamodule's selection split
        (``selection``: group -> mask); None at a validation or without one."""
        testing = self._trainer is not None and self.trainer.testing
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        selection = getattr(datamodule, "selection", None)
        if not testing or not selection or any(not len(r) for r in rows.values()):
            return None
        ways = {length: self.ways(length) for length in rows}
        partial = {length: self.partial_ways(length) for length in rows}
        results = held_out_results(rows, ways, self.group_names, selection, self.train_length, self.draws, partial)
        if self.test_round == "test":  # two rounds: what the test documents were scored in besides the plain model
            results["test_ways"] = {str(n): list(self.test_ways.get(n, [])) for n in rows}
        return {**getattr(datamodule, "selection_settings", {}), **results}

    def length_row(self, length: int, sums: dict[str, Tensor]) -> dict[str, float]:
        """One length's figures: each way this evaluation scored (tokens counted), then the spread over draws."""
        row: dict[str, float] = {}
        partial = self.partial_ways(length)  # not chosen on selection: scored on its documents only, no figure here
        for w, way in enumerate(self.ways(length)):
            if float(sums["tokens"][w].sum()) == 0 or way in partial:  # not scored (a validation: plain only)
                continue
            suffix = "" if way == PLAIN else f"_{way}"
            row.update(self.loss_and_bpb(sums["loss"][w], sums["tokens"][w], sums["bytes"][w], suffix))
        if self.draws > 1:
            per_draw = sums["draw_loss"].sum(1) / sums["draw_tokens"].sum(1)
            row["loss_draw_sd"] = stdev(per_draw.tolist())
        return row

    def loss_and_bpb(self, loss: Tensor, tokens: Tensor, scored_bytes: Tensor, suffix: str) -> dict[str, float]:
        """``loss<suffix>`` and ``bpb<suffix>`` from per-group sums (loss in nats, scored tokens, their bytes), all
        groups together (loss per token, bits per byte), then per group."""
        row = {
            f"loss{suffix}": float(loss.sum() / tokens.sum()),
            f"bpb{suffix}": float(loss.sum() / math.log(2) / scored_bytes.sum()),
        }
        if not suffix:  # the sample a report states: the bytes scored (each draw adds them once: counted once)
            row["bytes"] = int(round(float(scored_bytes.sum()) / self.draws))
        if len(self.group_names) > 1:
            for g, name in enumerate(self.group_names):
                row[f"loss{suffix}[{name}]"] = float(loss[g] / tokens[g])
                row[f"bpb{suffix}[{name}]"] = float(loss[g] / math.log(2) / scored_bytes[g])
        return row

    def position_curves(self, length: int, sums: dict[str, Tensor]) -> dict[str, dict[str, list]]:
        """The loss-by-position curve at ``length``, of all groups (``all``) and of each: per log-spaced bin its
        positions ``start`` .. ``stop - 1``, scored ``tokens`` and mean ``loss`` (the plain model, non-overlapping
        windows, the mean over draws; the token counts are one draw's)."""
        edges = position_bins(length)
        loss, tokens = sums["position_loss"].numpy(), sums["position_tokens"].numpy() / self.draws

        def curve(loss_at: np.ndarray, tokens_at: np.ndarray) -> dict[str, list]:
            binned_loss, binned_tokens = np.add.reduceat(loss_at, edges[:-1]), np.add.reduceat(tokens_at, edges[:-1])
            return {
                "start": edges[:-1].tolist(),
                "stop": edges[1:].tolist(),
                "tokens": [int(round(t)) for t in binned_tokens],
                "loss": (binned_loss / self.draws / np.maximum(binned_tokens, 1)).tolist(),
            }

        curves = {"all": curve(loss.sum(0), tokens.sum(0))}
        if len(self.group_names) > 1:
            curves.update({name: curve(loss[g], tokens[g]) for g, name in enumerate(self.group_names)})
        return curves

    def passkey_retrieval(self) -> dict[str, Any] | None:
        """Passkey retrieval on the datamodule's held-out text with its settings (``passkey_filler``, ``passkey``:
        fitted to that text), plain and in every test-time way, with the datamodule's note on what that text left
        out; ``{"left_out": note}`` where it held no trial; None where it is off or there is no such data."""
        datamodule = getattr(self.trainer, "datamodule", None)
        settings, note = getattr(datamodule, "passkey", None), getattr(datamodule, "passkey_note", None)
        if settings is None or not settings.enabled:
            return {"left_out": note} if note else None
        start = time.perf_counter()
        result = self.run_passkey(settings, ways=evaluation_ways(self.model, self.train_length))
        result["seconds"] = round(time.perf_counter() - start, 3)  # its part of results.json's test_seconds
        return {**result, "note": note} if note else result

    def run_passkey(self, settings: Any, ways: dict[str, Any]) -> dict[str, Any]:
        """``evaluate_passkey`` on the datamodule's held-out filler, under the run's precision."""
        datamodule = self.trainer.datamodule
        split = datamodule.passkey_filler()
        with self.trainer.precision_plugin.forward_context():  # bf16 runs score as they evaluate
            return evaluate_passkey(
                self.model,
                split.tokens,
                settings,
                self.train_length,
                ways=ways,
                coordinates=functools.partial(windows, split),
                max_tokens=datamodule.eval_batch_size * self.train_length,  # an evaluation batch's tokens
            )

    def evaluation_results(self) -> dict[str, Any]:
        """What results.json holds beside ``figures``: the loss-by-position curves, and passkey retrieval's grid."""
        return {
            "loss_by_position": self.loss_by_position,
            **({"held_out": self.held_out} if self.held_out else {}),
            **({"passkey": self.passkey} if self.passkey else {}),
            **({"passkey_by_step": self.passkey_by_step} if self.passkey_by_step else {}),
        }
