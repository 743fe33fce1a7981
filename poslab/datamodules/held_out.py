"""A language model's held-out evaluation at lengths from its context up: which tokens are scored, by which
windows (numpy only; ``poslab.datamodules.language`` cuts the windows, ``poslab.lightning_modules.language``
scores them).

**The sample.** Each source group's validation split is one token stream, its documents joined, each ending
with the separator token, as the cache stores them and the training windows read them (the held-out documents
are a pseudo-random choice of the group's, ``corpora.plan_split``). The test after training scores the same
``S_g`` tokens of group ``g`` at every length: tokens ``1 .. S_g`` of the stream, after token 0 as their first
context (nothing predicts it). ``S_g`` is the largest multiple of every evaluation length (their least common
multiple) that the stream holds: the whole held-out split but a remainder shorter than the lcm, chosen per group
(not the shortest group's), so the all-groups figure is token-weighted over the groups' whole splits;
``task.eval_tokens`` is an explicit cap, the same in every group, reported as a subsample
(``EvaluationPlan.notes``, results.json's ``evaluation.notes``). A validation during training scores only
``val_span`` tokens of each group (``val_windows`` x the context, rounded up to the lcm): a small sample for speed,
the plain model's curve, not the reported figures.

**Selection and test.** The held-out documents of each group are split by document into ``selection`` and
``test`` (``select_documents``: ``task.selection_fraction`` of them by a hash of ``task.selection_seed``, the group
and the ordinal). Each scored token counts for the document it lies in (``document_index``), so every way's
figures on either split are sums of per-document sums (``held_out_results``), and a test-time way is chosen on
selection and reported on test (``choose``; docs/evaluation.md). A sample (a small ``task.eval_tokens``) that
would leave either round of such a test no window is refused before training (``check_test_rounds``).

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
reports per length the documents, tokens, bytes and windows scored, and the held-out documents (results.json's
``evaluation``).

**Loss by position**: ``position_bins`` cuts positions ``0 .. L - 1`` (the index of the predicted token in its
window: position ``p`` is predicted from ``p + 1`` tokens) into log-spaced bins that do not depend on ``L``.
"""

from __future__ import annotations

import hashlib
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
    """What the evaluation scores, per source group (``groups``: their names), at each of ``lengths`` (the context
    first), in batches of ``max(1, token_budget // L)`` windows: the test after training tokens ``1 .. spans[g]``
    of group ``g``'s validation split (its whole held-out split, or ``task.eval_tokens``), a validation during
    training tokens ``1 .. val_span`` of every group (the ``val_windows`` sample, the same in every group)."""

    train_length: int
    lengths: list[int]
    spans: dict[str, int]
    val_span: int
    groups: list[str]
    token_budget: int
    stride: int | None = None
    left_out: list[int] = field(default_factory=list)  # default lengths the held-out text could not hold
    notes: list[str] = field(default_factory=list)  # where the test scores less than the whole held-out split

    def rows(self, length: int) -> int:
        """Windows per batch at ``length``: about as many tokens as a batch at the context."""
        return max(1, self.token_budget // length)

    def span(self, group: str, sample: str = "test") -> int:
        """Tokens scored in ``group`` by the ``test`` (after training) or a ``validation`` (during it)."""
        return self.spans[group] if sample == "test" else self.val_span

    def non_overlapping(self, length: int, group: str, sample: str = "test") -> Layout:
        return non_overlapping(self.span(group, sample), length)

    def sliding(self, length: int, group: str, sample: str = "test") -> Layout:
        assert self.stride is not None
        return sliding(self.span(group, sample), length, self.stride)


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


def test_spans(
    streams: Mapping[str, int], tile: int, eval_tokens: int | None, where: str
) -> tuple[dict[str, int], list[str]]:
    """Tokens the test scores per group, each a multiple of ``tile`` (every length's), and what it leaves out:
    (null ``eval_tokens``) the largest multiple each group's stream of ``streams[g]`` tokens holds after its token
    of context, the whole split but a remainder shorter than ``tile``; or ``eval_tokens`` in every group, an
    explicit cap (a subsample), refused where the shortest stream (``where``) cannot hold it."""
    rooms = {g: (n - 1) // tile * tile for g, n in streams.items()}
    if eval_tokens is not None:
        room = min(rooms.values())
        if eval_tokens > room:
            raise ConfigError(
                f"task.eval_tokens={eval_tokens} needs {eval_tokens + 1} held-out tokens in every source group, "
                f"but {where} has only {min(streams.values())} validation tokens; allowed: task.eval_tokens up to "
                f"{room} (a multiple of {tile}, which every evaluation length divides), or null: the whole split."
            )
        notes = [
            f"a subsample: task.eval_tokens={eval_tokens} scores tokens 1 .. {eval_tokens} of the {n} held-out "
            f"tokens of group {g!r}"
            for g, n in streams.items()
            if eval_tokens < n - 1
        ]
        return {g: eval_tokens for g in streams}, notes
    notes = [
        f"group {g!r}: the last {n - 1 - rooms[g]} of {n - 1} held-out tokens, fewer than the lengths' least common "
        f"multiple {tile}, are not scored"
        for g, n in streams.items()
        if n - 1 > rooms[g]
    ]
    return rooms, notes


def plan_evaluation(streams: Mapping[str, int], task: Mapping[str, Any], token_budget: int) -> EvaluationPlan:
    """The plan for validation streams of ``streams`` tokens (group name -> tokens) and a language-model
    ``task`` config (``context_length``, ``eval_lengths``, ``eval_tokens``, ``eval_stride``, ``val_windows``),
    checked by ``poslab.config.settings.check_lm_evaluation`` before."""
    from poslab.config.settings import lm_eval_lengths

    declared = lm_eval_lengths(task)
    name = min(streams, key=lambda g: streams[g])
    shortest, where = streams[name], f"group {name!r}"
    lengths = kept_lengths(declared, shortest, task.get("eval_lengths") is not None, where)
    tile = math.lcm(*lengths)
    spans, notes = test_spans(streams, tile, task.get("eval_tokens"), where)
    sample = -(-int(task.get("val_windows") or 1) * lengths[0] // tile) * tile  # val_windows x context, rounded up
    return EvaluationPlan(
        train_length=int(task["context_length"]),  # a context extension evaluates below it too (extended_from)
        lengths=lengths,
        spans=spans,
        val_span=min(sample, *spans.values()),
        groups=list(streams),
        token_budget=token_budget,
        stride=task.get("eval_stride"),
        left_out=[n for n in declared if n not in lengths],
        notes=notes,
    )


def document_index(split: Any, positions: np.ndarray) -> np.ndarray:
    """The index (0, 1, ... in the split's order) of the held-out document each token position belongs to."""
    starts = np.asarray(split.documents.starts).astype(np.int64)
    return np.searchsorted(starts, np.asarray(positions, dtype=np.int64), side="right") - 1


def touches_selection(split: Any, layout: Layout, length: int, selection: np.ndarray) -> np.ndarray:
    """``[windows]`` bool: True for each window of ``layout`` (windows of ``length + 1`` tokens) with a scored token
    in a selection document (``selection``: ``select_documents``' mask over the split's held-out documents). A
    window's scored tokens are one run of positions, so it touches the documents from its first scored token's to
    its last's."""
    starts = np.asarray(layout.starts, dtype=np.int64)
    first = document_index(split, starts + 1 + np.asarray(layout.scored_from, dtype=np.int64))
    last = document_index(split, starts + length)
    before = np.concatenate(([0], np.cumsum(selection.astype(np.int64))))  # selection documents before each index
    return before[last + 1] - before[first] > 0


#: the test's two rounds where a way is chosen on selection: the windows that touch a selection document, scored
#: in every way; then the rest, in the plain model and the ways chosen (docs/evaluation.md, "Two rounds")
TEST_ROUNDS = ("selection", "test")


def round_ends(split: Any, span: int, length: int, selection: np.ndarray) -> dict[str, int | None]:
    """Per round of the test in two rounds, the tokens of ``split`` a test must score for that round to get a
    window at ``length``: the end of the first non-overlapping window touching a selection document (``selection``)
    and of the first touching none (``test``); None where the first ``span`` tokens hold no such window."""
    layout = non_overlapping(span, length)
    touching = touches_selection(split, layout, length, selection)
    ends = layout.starts + length
    return {
        round_: int(found[0]) if len(found := ends[mask]) else None
        for round_, mask in zip(TEST_ROUNDS, (touching, ~touching), strict=True)
    }


def tokens_for_both_rounds(
    plan: EvaluationPlan, splits: Mapping[str, Any], selection: Mapping[str, np.ndarray], spans: Mapping[str, int]
) -> int | None:
    """The fewest tokens per group (a multiple of every length) for which both rounds get a window, scoring at most
    ``spans[g]`` tokens of group ``g``; None where even those hold none for a round. Checked at the shortest
    length: a window of a longer one holds whole windows of it, so a round empty there is empty at every length."""
    length, tile = min(plan.lengths), math.lcm(*plan.lengths)
    ends = [round_ends(splits[g], spans[g], length, selection[g]) for g in plan.groups]
    needed = [min((e[r] for e in ends if e[r] is not None), default=None) for r in TEST_ROUNDS]
    if any(n is None for n in needed):
        return None
    return -(-max(n for n in needed if n is not None) // tile) * tile


def check_test_rounds(
    plan: EvaluationPlan, splits: Mapping[str, Any], selection: Mapping[str, np.ndarray], eval_tokens: int | None
) -> None:
    """A test in two rounds (a selection split, a length past the context) must give each round a window: an empty
    round scores nothing (Lightning skips it), so the test's figures, or its choice of way, would be missing from a
    run that says it succeeded. Refused before training, naming what would work."""
    if tokens_for_both_rounds(plan, splits, selection, plan.spans) is not None:
        return
    length = min(plan.lengths)
    emptied = [r for r in TEST_ROUNDS if all(round_ends(splits[g], plan.spans[g], length, selection[g])[r] is None
                                             for g in plan.groups)]  # fmt: skip
    why = (
        "every window touches a selection document, so the test round (test documents only) would score nothing "
        "and the run would have no figures"
        if "test" in emptied
        else "no window touches a selection document, so the selection round would score nothing and no test-time "
        "way would be chosen"
    )
    raise ConfigError(
        f"{scored_sample(plan, eval_tokens)}, and at length {length} {why}; allowed: "
        f"{'; or '.join(round_fixes(plan, splits, selection, eval_tokens))}."
    )


def scored_sample(plan: EvaluationPlan, eval_tokens: int | None) -> str:
    """What the test scores, for a message: ``task.eval_tokens=N scores the first N held-out tokens of ...``."""
    where = f"group {plan.groups[0]!r}" if len(plan.groups) == 1 else "each group"
    if eval_tokens is not None:
        return f"task.eval_tokens={eval_tokens} scores the first {eval_tokens} held-out tokens of {where}"
    return f"the test scores the held-out split of {where} ({', '.join(f'{n} tokens' for n in plan.spans.values())})"


def round_fixes(
    plan: EvaluationPlan, splits: Mapping[str, Any], selection: Mapping[str, np.ndarray], eval_tokens: int | None
) -> list[str]:
    """What gives both rounds a window: a larger ``task.eval_tokens`` where the held-out text holds one (the whole
    split where only that does), else no selection split, or every way on every window (one round)."""
    tile = math.lcm(*plan.lengths)
    whole = {g: (len(splits[g]) - 1) // tile * tile for g in plan.groups}
    fixes = []
    if eval_tokens is not None:
        needed = tokens_for_both_rounds(plan, splits, selection, {g: min(whole.values()) for g in plan.groups})
        if needed is not None:
            fixes.append(f"raise task.eval_tokens to at least {needed} (a multiple of {tile}, every length's)")
        elif tokens_for_both_rounds(plan, splits, selection, whole) is not None:
            fixes.append("give task.eval_tokens=null (the whole held-out split)")
    return [
        *fixes,
        "give task.selection_fraction=0 (no selection split: one round, every way on every window)",
        "give task.every_way_on_test=true (one round: every way on every window, the split kept)",
    ]


def selection_draw(seed: int, group: str, ordinal: int) -> float:
    """A fixed pseudo-random number in [0, 1) per document and seed: its place in the selection order."""
    digest = hashlib.sha1(f"selection:{seed}:{group}:{ordinal}".encode()).digest()
    return int.from_bytes(digest[:4], "little") / 2**32


def select_documents(group: str, ordinals: np.ndarray, fraction: float, seed: int) -> np.ndarray:
    """``[D]`` bool, True for the held-out documents (``ordinals``: their ordinals in the split's order) of the
    selection split: the ``round(fraction x D)`` first in a fixed pseudo-random order (``selection_draw``: a hash of
    ``seed``, the group and the ordinal, so the same documents whatever else the run changes), at least one and at
    most ``D - 1`` where ``D >= 2`` and ``0 < fraction < 1``; the rest are the test split. A group of one document
    has no selection split: it is all test, whatever the fraction (docs/evaluation.md)."""
    n = len(ordinals)
    take = round(fraction * n) if n >= 2 else 0
    if n >= 2 and 0 < fraction < 1:
        take = min(max(take, 1), n - 1)
    order = sorted(range(n), key=lambda i: (selection_draw(seed, group, int(ordinals[i])), int(ordinals[i])))
    mask = np.zeros(n, dtype=bool)
    mask[order[:take]] = True
    return mask


def held_out_documents(split: Any, selection: np.ndarray, group: str) -> dict[str, Any]:
    """results.json's record of one group's held-out documents: their ordinals (the document index the cache
    stores), a hash of that list, and which are the selection and test splits."""
    ordinals = np.asarray(split.documents.values).astype(np.int64).tolist()
    return {
        "documents": len(ordinals),
        "ordinals_sha1": hashlib.sha1(",".join(map(str, ordinals)).encode()).hexdigest(),
        "ordinals": ordinals,
        "selection": [o for o, chosen in zip(ordinals, selection.tolist(), strict=True) if chosen],
        "test": [o for o, chosen in zip(ordinals, selection.tolist(), strict=True) if not chosen],
        "group": group,
    }


def scored_counts(split: Any, span: int, token_bytes: np.ndarray | None, selection: np.ndarray) -> dict[str, Any]:
    """Documents, tokens and UTF-8 bytes of the scored tokens ``1 .. span`` of a split, in all and in the selection
    and test splits (a token belongs to the document it lies in; bytes: each token's own, 1 without
    ``token_bytes``)."""
    positions = np.arange(1, span + 1)
    docs = document_index(split, positions)
    sizes = np.ones(span) if token_bytes is None else token_bytes[np.asarray(split.tokens[1 : span + 1], np.int64)]
    tokens = np.bincount(docs, minlength=len(selection))
    scored_bytes = np.bincount(docs, weights=sizes, minlength=len(selection))

    def part(mask: np.ndarray) -> dict[str, int]:
        return {
            "documents": int(np.count_nonzero(tokens[mask])),
            "tokens": int(tokens[mask].sum()),
            "bytes": int(round(scored_bytes[mask].sum())),
        }

    return {**part(np.ones(len(selection), bool)), "selection": part(selection), "test": part(~selection)}


def describe_sample(
    plan: EvaluationPlan,
    splits: Mapping[str, Any],
    selection: Mapping[str, np.ndarray],
    token_bytes: np.ndarray | None = None,
    selection_settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """results.json's ``evaluation``: the lengths, and per length the test's sample (documents, tokens and UTF-8
    bytes scored, windows, in all, per group and in the selection and test splits), the held-out documents and
    the split between selection and test (``splits``: group name -> its validation ``PreparedSplit``;
    ``selection``: group name -> ``select_documents``' mask), the validation sample, and what the test left out."""
    counts = {g: scored_counts(splits[g], plan.spans[g], token_bytes, selection[g]) for g in plan.groups}
    sample: dict[str, Any] = {}
    for length in plan.lengths:
        groups = {}
        for g in plan.groups:
            row = {**counts[g], "windows": len(plan.non_overlapping(length, g).starts)}
            if plan.stride is not None:
                row["windows_sliding"] = len(plan.sliding(length, g).starts)
            groups[g] = row
        totals = {key: sum(gr[key] for gr in groups.values()) for key in groups[plan.groups[0]]
                  if key not in ("selection", "test")}  # fmt: skip
        for part in ("selection", "test"):
            totals[part] = {k: sum(gr[part][k] for gr in groups.values()) for k in ("documents", "tokens", "bytes")}
        sample[str(length)] = {**totals, "groups": groups}
    return {
        "train_length": plan.train_length,
        "lengths": plan.lengths,
        "left_out_lengths": plan.left_out,
        "tokens_per_group": dict(plan.spans),
        "whole_split": not plan.notes or all("are not scored" in n for n in plan.notes),
        "notes": list(plan.notes),
        "stride": plan.stride,
        "document_boundaries": "crossed: windows run over the separator into the next document, as in training; "
        "each scored token counts for the document it belongs to",
        "sample": sample,
        "selection_split": {**dict(selection_settings or {}), "rule": "by document, select_documents"},
        "held_out": {g: held_out_documents(splits[g], selection[g], g) for g in plan.groups},
        "validation_sample": {"tokens_per_group": plan.val_span, "what": "the val_windows sample scored at each "
                              "validation during training (the plain model only); the test scores the above"},
    }  # fmt: skip


def position_bins(length: int, per_octave: int = BINS_PER_OCTAVE) -> np.ndarray:
    """Edges of the loss-by-position bins up to ``length``: ``[0, 1, 2, 3, ..., length]``, bin ``i`` the positions
    ``edges[i] .. edges[i + 1] - 1``. Bin 0 is position 0; then ``ceil(2 ** (k / per_octave))`` for k = 1, 2, ...
    (duplicates dropped: every position below 8 has its own bin), the same edges at every length."""
    steps = math.ceil(per_octave * math.log2(max(2, length))) + 1
    edges = np.ceil(2.0 ** (np.arange(steps) / per_octave)).astype(np.int64)
    return np.unique(np.concatenate(([0], edges[edges < length], [length])))


#: the ways a test-time choice picks among: every way but sliding windows (a way of windowing, not a rule)
NOT_CHOSEN = ("sliding",)


def document_sums(rows: np.ndarray, way: int, group: int, documents: int, draws: int = 1) -> np.ndarray:
    """``[3, documents]``: each document's summed loss (nats), scored tokens and bytes in one way, from
    ``LengthTotals``' rows (way, group, document, loss, tokens, bytes), the mean over ``draws``."""
    mine = rows[(rows[:, 0] == way) & (rows[:, 1] == group)]
    index = mine[:, 2].astype(np.int64)
    return np.stack([np.bincount(index, weights=mine[:, k], minlength=documents) for k in (3, 4, 5)]) / draws


def split_figure(sums: list[np.ndarray], masks: list[np.ndarray]) -> dict[str, float | int]:
    """Loss per token and bits per byte over the documents ``masks`` keep (one ``[3, D]`` and one mask per group)."""
    loss, tokens, scored = (sum(float(s[k][m].sum()) for s, m in zip(sums, masks, strict=True)) for k in range(3))
    documents = sum(int(np.count_nonzero(s[1][m])) for s, m in zip(sums, masks, strict=True))
    return {
        "loss": loss / tokens if tokens else None,  # None: no document of this split was scored
        "bpb": loss / math.log(2) / scored if scored else None,
        "documents": documents,
        "tokens": int(round(tokens)),
        "bytes": int(round(scored)),
    }


def choose(figures: Mapping[str, Mapping[str, Any]], ways: list[str]) -> str:
    """The way with the lowest selection bits per byte (ties: the first in ``ways``, the plain model first)."""
    scored = [w for w in ways if w in figures and figures[w]["bpb"] is not None]
    return min(scored, key=lambda w: (figures[w]["bpb"], ways.index(w)))


def held_out_results(
    rows: Mapping[int, np.ndarray],
    ways: Mapping[int, list[str]],
    groups: list[str],
    selection: Mapping[str, np.ndarray],
    train_length: int,
    draws: int = 1,
    partial: Mapping[int, set[str]] | None = None,
) -> dict[str, Any]:
    """results.json's ``held_out``: per length each way's figures on the selection and on the test documents, the
    way chosen on selection past the context (``chosen``: per length, and one for all lengths past it) with its
    test figures, and every document's sums per length and way (a bootstrap over documents resamples them).
    ``rows``: length -> ``LengthTotals``' per-document rows; ``ways``: length -> the module's ways there;
    ``selection``: group -> ``select_documents``' mask; ``partial``: length -> the ways a test in two rounds
    scored in its first only (not chosen): their test figures and test documents' sums are null."""
    masks = [selection[g] for g in groups]
    partial = partial or {}
    out: dict[str, Any] = {"lengths": {}, "documents": {g: {"selection": selection[g].astype(int).tolist(),
                                                            "by_length": {}} for g in groups}}  # fmt: skip
    for length, names in ways.items():
        scored = [w for w in range(len(names)) if np.any(rows[length][:, 0] == w)]
        sums = {names[w]: [document_sums(rows[length], w, g, len(masks[g]), draws) for g in range(len(groups))]
                for w in scored}  # fmt: skip
        row = {part: {w: split_figure(s, [m if part == "selection" else ~m for m in masks]) for w, s in sums.items()}
               for part in ("selection", "test")}  # fmt: skip
        for way in partial.get(length, set()) & set(sums):  # scored on the windows touching selection only
            row["test"][way] = None
        candidates = [w for w in sums if w not in NOT_CHOSEN and row["selection"][w]["bpb"] is not None]
        if length > train_length and candidates:
            way = choose(row["selection"], candidates)
            row["chosen"] = {"way": way, "selection": row["selection"][way], "test": row["test"][way]}
        out["lengths"][str(length)] = row
        for g, name in enumerate(groups):
            per_way = {w: [None if w in partial.get(length, ()) and not kept else v
                           for v, kept in zip(np.round(s[g][0], 6).tolist(), masks[g].tolist(), strict=True)]
                       for w, s in sums.items()}  # fmt: skip
            first = next(iter(sums.values()))[g] if sums else np.zeros((3, len(masks[g])))
            out["documents"][name]["by_length"][str(length)] = {
                "tokens": first[1].round().astype(int).tolist(), "bytes": first[2].round().astype(int).tolist(),
                "loss": per_way,
            }  # fmt: skip
    past = [n for n in ways if n > train_length and "chosen" in out["lengths"][str(n)]]
    if past:  # one rule for every length past the context: the lowest mean selection bpb over them
        selected = [out["lengths"][str(n)]["selection"] for n in past]
        common = [w for w in selected[0] if w not in NOT_CHOSEN
                  and all(row.get(w, {}).get("bpb") is not None for row in selected)]  # fmt: skip
        mean = {w: {"bpb": float(np.mean([out["lengths"][str(n)]["selection"][w]["bpb"] for n in past]))}
                for w in common}  # fmt: skip
        way = choose(mean, common)
        out["chosen"] = {
            "way": way,
            "over_lengths": past,
            "selection_mean_bpb": mean[way]["bpb"],
            "test": {str(n): out["lengths"][str(n)]["test"][way] for n in past},
        }
    return out
