"""A language model's held-out evaluation at lengths from its context up: which tokens are scored, by which
windows (numpy only; ``poslab.datamodules.language`` cuts the windows, ``poslab.lightning_modules.language``
scores them).

**The sample.** Each source group's validation split is one token stream, its documents joined, each ending
with the separator token, as the cache stores them and the training windows read them (the held-out documents
are a pseudo-random choice of the group's, ``corpora.plan_split``, so the stream's first documents are a sample
of them). The evaluation scores the same ``S`` tokens at every length: tokens ``1 .. S`` of the stream, after
token 0 as their first context (nothing predicts it). ``S`` is ``task.eval_tokens``, a multiple of every
evaluation length (null: ``val_windows * context_length`` rounded up to one, or the largest that every group's
stream holds), the same in every group.

**Non-overlapping windows.** At length ``L`` the span is cut into ``S / L`` windows of ``L + 1`` tokens
starting at 0, L, 2L, ...: a window predicts its last ``L`` tokens, the first from one token of context, the
last from ``L``. Every length scores every token of the span once: the same tokens, so two lengths' figures
differ only by the context the model reads.

**Sliding windows** (``task.eval_stride`` = ``s``). Windows of ``L + 1`` tokens start at 0, s, 2s, ... (the last
at ``S - L``); the first scores all its ``L`` predictions, each later one only the tokens the one before did not
reach (``s`` of them, fewer for the last), so every scored token past the first ``L`` has at least ``L - s``
tokens of context (fairseq's ``eval-lm --context-window``). ``s = L`` gives the non-overlapping windows exactly;
at ``L = S`` there is one window either way.

**Document boundaries.** Windows cross them, as the training windows do: a window may end one document and
begin the next, the separator is scored like any token (one byte), and a document's first tokens are predicted
from the end of the one before, as fairseq's eval-lm scores a concatenated stream (the ALiBi paper's
WikiText-103 figures are measured so). The paragraph and sentence indices an hRoPE encoding reads are counted
from each window's first token, and a new document starts a new paragraph and sentence. ``describe_sample``
reports per length the windows and the documents the span touches (results.json's ``evaluation``).

**Loss by position**: ``position_bins`` cuts positions ``0 .. L - 1`` (the index of the predicted token in its
window: position ``p`` is predicted from ``p + 1`` tokens) into log-spaced bins that do not depend on ``L``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poslab.errors import ConfigError

#: the loss-by-position curve's resolution: bins per doubling of the position
BINS_PER_OCTAVE = 4


@dataclass(frozen=True)
class Layout:
    """Windows of one length in one group: each one's first token in the split, and the first of its ``L``
    predictions that is scored (0: all of them)."""

    starts: np.ndarray
    scored_from: np.ndarray


@dataclass
class EvaluationPlan:
    """What the evaluation scores: tokens ``1 .. span`` of every group's validation split (``groups``: their
    names), at each of ``lengths`` (the context first), in batches of ``max(1, token_budget // L)`` windows."""

    train_length: int
    lengths: list[int]
    span: int
    groups: list[str]
    token_budget: int
    stride: int | None = None
    left_out: list[int] = field(default_factory=list)  # default lengths the held-out text could not hold

    def rows(self, length: int) -> int:
        """Windows per batch at ``length``: about as many tokens as a batch at the context."""
        return max(1, self.token_budget // length)

    def non_overlapping(self, length: int) -> Layout:
        return non_overlapping(self.span, length)

    def sliding(self, length: int) -> Layout:
        assert self.stride is not None
        return sliding(self.span, length, self.stride)


def non_overlapping(span: int, length: int) -> Layout:
    """Windows of ``length + 1`` tokens at 0, length, 2 length, ... over a span of ``span`` scored tokens."""
    starts = np.arange(0, span, length, dtype=np.int64)
    return Layout(starts, np.zeros(len(starts), dtype=np.int64))


def sliding(span: int, length: int, stride: int) -> Layout:
    """Windows of ``length + 1`` tokens ``stride`` apart (the last at ``span - length``), each scoring only the
    predictions past the last token of the window before."""
    starts = np.arange(0, span - length + 1, stride, dtype=np.int64)
    if starts[-1] != span - length:
        starts = np.append(starts, span - length)
    scored_from = np.concatenate(([0], length - np.diff(starts)))  # the tokens the window before reached
    return Layout(starts, scored_from.astype(np.int64))


def kept_lengths(lengths: list[int], shortest: int, explicit: bool, where: str) -> list[int]:
    """The lengths evaluated on streams of at least ``shortest`` tokens (``where``: the group with the fewest):
    all of an explicit list, or refused; of the default's, the longest run from the context whose least common
    multiple (the smallest span every one of them tiles) fits with its token of context."""
    if math.lcm(*lengths) + 1 <= shortest:
        return lengths
    context = lengths[0]
    if explicit and len(lengths) > 1:
        span = math.lcm(*lengths)
        raise ConfigError(
            f"task.eval_lengths={lengths} need {span + 1} consecutive held-out tokens ({span}, a multiple of "
            f"every length, plus one of context), but {where} has only {shortest} validation tokens; allowed: "
            f"lengths whose least common multiple is at most {shortest - 1}, or more held-out text (raise "
            f"corpus.validation_fraction)."
        )
    if context + 1 > shortest:
        raise ConfigError(
            f"{where}: the validation split has {shortest} tokens, fewer than one validation window of {context + 1} "
            f"(task.context_length={context} + 1); lower task.context_length, raise corpus.validation_fraction or "
            f"give the corpus more data."
        )
    kept = [context]
    for length in lengths[1:]:
        if math.lcm(*kept, length) + 1 > shortest:
            break
        kept.append(length)
    return kept


def span_tokens(shortest: int, where: str, tile: int, eval_tokens: int | None, default_tokens: int) -> int:
    """Tokens scored per group, a multiple of ``tile`` (every length's): ``eval_tokens`` (refused when the
    shortest stream, of ``shortest`` tokens, cannot hold it and its token of context), or (null) ``default_tokens``
    rounded up to a multiple of ``tile``, or the largest multiple the stream holds."""
    room = (shortest - 1) // tile * tile
    if eval_tokens is None:
        return min(-(-default_tokens // tile) * tile, room)
    if eval_tokens > room:
        raise ConfigError(
            f"task.eval_tokens={eval_tokens} needs {eval_tokens + 1} held-out tokens in every source group, but "
            f"{where} has only {shortest} validation tokens; allowed: task.eval_tokens up to {room} (a multiple "
            f"of {tile}, which every evaluation length divides), or null."
        )
    return eval_tokens


def plan_evaluation(streams: Mapping[str, int], task: Mapping[str, Any], token_budget: int) -> EvaluationPlan:
    """The plan for validation streams of ``streams`` tokens (group name -> tokens) and a language-model
    ``task`` config (``context_length``, ``eval_lengths``, ``eval_tokens``, ``eval_stride``, ``val_windows``),
    checked by ``poslab.settings.check_lm_evaluation`` before."""
    from poslab.settings import lm_eval_lengths

    declared = lm_eval_lengths(task)
    name = min(streams, key=lambda g: streams[g])
    shortest, where = streams[name], f"group {name!r}"
    lengths = kept_lengths(declared, shortest, task.get("eval_lengths") is not None, where)
    default_tokens = int(task.get("val_windows") or 1) * lengths[0]
    return EvaluationPlan(
        train_length=int(task["context_length"]),  # a context extension evaluates below it too (extended_from)
        lengths=lengths,
        span=span_tokens(shortest, where, math.lcm(*lengths), task.get("eval_tokens"), default_tokens),
        groups=list(streams),
        token_budget=token_budget,
        stride=task.get("eval_stride"),
        left_out=[n for n in declared if n not in lengths],
    )


def describe_sample(plan: EvaluationPlan, documents: Mapping[str, Any]) -> dict[str, Any]:
    """results.json's ``evaluation``: the lengths, the span, and per length the tokens scored, the windows (and
    sliding windows) and the documents the span touches (with its token of context), in all and per group
    (``documents``: group name -> its validation split's document ``Coordinate``)."""
    touched = {g: len(np.unique(documents[g].span(0, plan.span + 1))) for g in plan.groups}
    sample: dict[str, Any] = {}
    for length in plan.lengths:
        row = {"tokens": plan.span, "windows": len(plan.non_overlapping(length).starts)}
        if plan.stride is not None:
            row["windows_sliding"] = len(plan.sliding(length).starts)
        groups = {g: {**row, "documents": touched[g]} for g in plan.groups}
        totals = {key: sum(group[key] for group in groups.values()) for key in groups[plan.groups[0]]}
        sample[str(length)] = {**totals, "groups": groups}
    return {
        "train_length": plan.train_length,
        "lengths": plan.lengths,
        "left_out_lengths": plan.left_out,
        "tokens_per_group": plan.span,
        "stride": plan.stride,
        "document_boundaries": "crossed: windows run over the separator into the next document, as in training",
        "sample": sample,
    }


def position_bins(length: int, per_octave: int = BINS_PER_OCTAVE) -> np.ndarray:
    """Edges of the loss-by-position bins up to ``length``: ``[0, 1, 2, 3, ..., length]``, bin ``i`` the positions
    ``edges[i] .. edges[i + 1] - 1``. Bin 0 is position 0; then ``ceil(2 ** (k / per_octave))`` for k = 1, 2, ...
    (duplicates dropped: every position below 8 has its own bin), the same edges at every length."""
    steps = math.ceil(per_octave * math.log2(max(2, length))) + 1
    edges = np.ceil(2.0 ** (np.arange(steps) / per_octave)).astype(np.int64)
    return np.unique(np.concatenate(([0], edges[edges < length], [length])))
