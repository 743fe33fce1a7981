"""Language modelling on a prepared corpus: random training windows; held-out evaluation from the context up.

Training batch i is a pure function of (seed, i), like the synthetic tasks:
each row picks a source group with probability proportional to its weight
(``wiki_en_zh``: 1/2 English, 1/2 Chinese windows, whatever the groups' sizes:
half the tokens each, which is half the bytes with the byte tokenizer only;
with ``bpe`` the byte mix follows each group's bytes per token),
then a uniformly random window of ``context_length + 1`` tokens in that
group's training split. The test after training scores each group's whole
validation split (held-out documents), the same tokens at each of
``task.eval_lengths``; a validation during training a small sample of it
(``val_windows``) (``poslab.datamodules.held_out``: the sample, the selection
and test documents, the windows, and how they cross document boundaries), the
same for every run.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, IterableDataset

from poslab.config.passkey_settings import check_passkey_settings, fit_filler
from poslab.config.settings import check_lm_evaluation, root_defaults, with_corpus_defaults, yaml_defaults
from poslab.datamodules.codec import BYTE_VOCAB
from poslab.datamodules.corpora import (
    PreparedGroup,
    PreparedSplit,
    check_local_corpus,
    corpus_tokenizer,
    data_notes,
    describe,
    prepare_corpus,
)
from poslab.datamodules.held_out import (
    TEST_ROUNDS,
    EvaluationPlan,
    Layout,
    check_test_rounds,
    describe_sample,
    document_index,
    plan_evaluation,
    select_documents,
    touches_selection,
)
from poslab.datamodules.passkey_phrases import plant_pairs
from poslab.datamodules.synthetic import (
    RankShard,
    assign_rank,
    batch_generator,
    trainer_rank,
    training_batches_drawn,
)
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


#: fewer windows than this at the context length: the figures are one or a few windows' loss, said in a note
#: (train.log and results.json's data_notes); the run goes on (a smoke test on a small file is legitimate)
MIN_WINDOWS = 8


def small_sample_note(plan: EvaluationPlan, held_out: int) -> str | None:
    """A note when the shortest validation split (``held_out`` tokens) holds fewer than ``MIN_WINDOWS`` windows
    at the context length: the corpus is too small for a steady figure, whatever the evaluation asked for (a
    short sample asked for on purpose, ``val_windows``, is no note)."""
    length = plan.lengths[0]
    windows = (held_out - 1) // length  # whole windows of the context (and their token of context) it holds
    if windows >= MIN_WINDOWS:
        return None
    return (
        f"the held-out text is {held_out} tokens, scored as {windows} window{'s' if windows != 1 else ''} of "
        f"{length} tokens at the context length, fewer than {MIN_WINDOWS}, so the figures are noisy; give a larger "
        f"corpus or a larger corpus.validation_fraction."
    )


class TrainingWindows(IterableDataset):
    def __init__(
        self, groups: list[PreparedGroup], batch_size: int, context_length: int, seed: int,
        passkey_fraction: float, key_length: int, passkey_warmup: int,
    ) -> None:  # fmt: skip
        self.groups, self.batch_size, self.length, self.seed = groups, batch_size, context_length + 1, seed
        # task.passkey.train_fraction and key_length; warmup_steps: global batches below it hold a pair in every window
        self.passkey_fraction, self.key_length, self.passkey_warmup = passkey_fraction, key_length, passkey_warmup
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
        fraction = 1.0 if index < self.passkey_warmup else self.passkey_fraction
        plant_pairs(batch, fraction, self.key_length, generator)  # after every other draw: unchanged
        return batch

    def __iter__(self) -> Iterator[dict[str, Tensor]]:
        rows = slice(
            self.rank * (self.batch_size // self.world_size), (self.rank + 1) * (self.batch_size // self.world_size)
        )
        index = self.start
        while True:
            yield {key: value[rows] for key, value in self.batch(index).items()}
            index += 1


def in_round(split: PreparedSplit, layout: Layout, length: int, selection: np.ndarray, test_round: str) -> Layout:
    """The windows of ``layout`` in ``test_round``: those touching a selection document, or the others."""
    touching = touches_selection(split, layout, length, selection)
    keep = touching if test_round == "selection" else ~touching
    return Layout(layout.starts[keep], layout.scored_from[keep])


class EvaluationBatches(Dataset):
    """The evaluation's batches, each item a whole batch (``DataLoader(batch_size=None)``) of windows of one length
    from one group: ``tokens`` ``[R, L + 1]``, their ``paragraph`` / ``sentence`` indices, ``group`` (its index),
    ``sliding`` and ``scored_from`` ``[R]`` (the first of each window's ``L`` predictions that is scored),
    ``document`` ``[R, L + 1]`` (the index of each token's held-out document in its split, for per-document sums), and,
    given the tokenizer's ``token_bytes`` (``[vocab]``), ``bytes`` ``[R, L + 1]``: the UTF-8 bytes of each token,
    which bits per byte divides by. The non-overlapping windows of every length, then (``sliding``) the sliding
    ones. ``sample``: ``test`` (after training: each group's whole held-out split, ``plan.spans``) or
    ``validation`` (during training: the ``val_windows`` sample, ``plan.val_span``). ``test_round`` (the test in
    two rounds, ``LanguageModelDataModule.test_rounds``): ``selection``, only the windows with a scored token in a
    selection document (``selection``: group name -> ``select_documents``' mask), or ``test``, only the others;
    None: every window."""

    def __init__(
        self,
        groups: list[PreparedGroup],
        plan: EvaluationPlan,
        sliding: bool = False,
        token_bytes: Tensor | None = None,
        sample: str = "test",
        test_round: str | None = None,
        selection: dict[str, np.ndarray] | None = None,
    ) -> None:
        self.groups, self.token_bytes = groups, token_bytes
        self.items: list[tuple[int, int, bool, Layout]] = []  # (group, length, sliding, one batch's windows)
        for g in range(len(groups)):
            for length in plan.lengths:
                name = groups[g].name
                layouts = [(False, plan.non_overlapping(length, name, sample))]
                if sliding and plan.stride is not None:
                    layouts.append((True, plan.sliding(length, name, sample)))
                if test_round is not None:
                    assert selection is not None and test_round in TEST_ROUNDS, test_round
                    split, mask = groups[g].splits["validation"], selection[name]
                    layouts = [(s, in_round(split, layout, length, mask, test_round)) for s, layout in layouts]
                rows = plan.rows(length)
                for is_sliding, layout in layouts:
                    for i in range(0, len(layout.starts), rows):
                        part = Layout(layout.starts[i : i + rows], layout.scored_from[i : i + rows])
                        self.items.append((g, length, is_sliding, part))

    def __len__(self) -> int:
        return len(self.items)

    def item(self, i: int) -> tuple[int, int, bool, Layout]:
        """Batch ``i``; past the last, ``RankShard``'s stand-in ``len + j``: batch ``j``'s first window with no
        prediction scored (``scored_from`` its length), for a DDP rank the batches do not reach."""
        if i < len(self.items):
            return self.items[i]
        g, length, is_sliding, part = self.items[i - len(self.items)]
        return g, length, is_sliding, Layout(part.starts[:1], np.full_like(part.scored_from[:1], length))

    def shape(self, i: int) -> tuple[int, bool, int]:
        """Batch ``i``'s (length, sliding, windows), without cutting it: what the test's cost counts."""
        _, length, is_sliding, part = self.item(i)
        return length, is_sliding, len(part.starts)

    def __getitem__(self, i: int) -> dict[str, Tensor]:
        g, length, is_sliding, part = self.item(i)
        split = self.groups[g].splits["validation"]
        positions = part.starts[:, None] + np.arange(length + 1)
        batch = {
            **windows(split, part.starts, length + 1),
            "document": torch.from_numpy(document_index(split, positions)),
            "group": torch.tensor(g),
            "sliding": torch.tensor(is_sliding),
            "scored_from": torch.from_numpy(part.scored_from),
        }
        if self.token_bytes is not None:
            batch["bytes"] = self.token_bytes[batch["tokens"]]
        return batch


def check_extended_from(extended_from: int | None, context_length: int) -> int | None:
    """``task.extended_from``: a context extension's parent's context (``poslab.running.extension``), shorter than the
    context it extends to; evaluation may start there (``poslab.config.settings.shortest_eval_length``)."""
    if extended_from is not None and not 2 <= int(extended_from) < context_length:
        raise ConfigError(
            f"task.extended_from={extended_from} must be the parent's context of a context extension, shorter than "
            f"task.context_length={context_length}; allowed: 2 to {context_length - 1}, or null."
        )
    return None if extended_from is None else int(extended_from)


#: ``conf/task/lm.yaml`` and ``conf/train.yaml``: the one home of what a datamodule made without them takes
LM, ROOT = yaml_defaults("task", "lm"), root_defaults()


class LanguageModelDataModule(L.LightningDataModule):
    def __init__(
        self,
        name: str,
        corpus: dict[str, Any],
        data_dir: str,
        cache_dir: str,
        context_length: int = LM["context_length"],
        batch_size: int = LM["batch_size"],
        val_windows: int = LM["val_windows"],
        eval_batch_size: int = LM["eval_batch_size"],
        val_every_n_steps: int = LM["val_every_n_steps"],
        eval_lengths: list[int] | None = LM["eval_lengths"],
        eval_tokens: int | None = LM["eval_tokens"],
        eval_stride: int | None = LM["eval_stride"],
        passkey: dict[str, Any] | None = None,  # None: conf/task/lm.yaml's (check_passkey_settings)
        extended_from: int | None = LM["extended_from"],
        selection_fraction: float = LM["selection_fraction"],
        selection_seed: int = LM["selection_seed"],
        every_way_on_test: bool = LM["every_way_on_test"],
        seed: int = ROOT["seed"],
    ) -> None:
        """A setting not given (a datamodule made in Python, an older run's config) takes its YAML value (``LM``,
        ``ROOT``); ``corpus`` the settings every corpus shares that it leaves out (``with_corpus_defaults``)."""
        super().__init__()
        if context_length < 2:
            raise ConfigError(f"task.context_length={context_length} must be at least 2.")
        self.extended_from = check_extended_from(extended_from, int(context_length))
        # a corpus built by hand may leave the settings every corpus shares out: conf/corpus/local.yaml gives them
        self.corpus, self.data_dir, self.cache_dir = with_corpus_defaults(corpus), data_dir, cache_dir
        self.context_length, self.batch_size = int(context_length), int(batch_size)
        self.val_windows, self.eval_batch_size, self.seed = int(val_windows), int(eval_batch_size), seed
        self.val_every_n_steps = int(val_every_n_steps)
        if not 0 <= float(selection_fraction) < 1:
            raise ConfigError(
                f"task.selection_fraction={selection_fraction} must be the share of held-out documents that choose "
                f"among test-time rules (the rest are the test split): allowed 0 (no selection split) up to below 1."
            )
        # the held-out documents' split into selection and test (held_out.select_documents): the same in every seed
        self.selection_settings = {"fraction": float(selection_fraction), "seed": int(selection_seed)}
        self.every_way_on_test = bool(every_way_on_test)
        self.selection: dict[str, np.ndarray] = {}  # group name -> [documents] bool, True: the selection split
        self.evaluation_settings = {
            "context_length": self.context_length,
            "eval_lengths": None if eval_lengths is None else [int(n) for n in eval_lengths],
            "eval_tokens": None if eval_tokens is None else int(eval_tokens),
            "eval_stride": None if eval_stride is None else int(eval_stride),
            "val_windows": self.val_windows,
            "extended_from": self.extended_from,  # an extension's lengths may start at its parent's context
        }
        self.declared_lengths = check_lm_evaluation(self.evaluation_settings)  # before any data is read
        check_tokenizer(self.corpus)  # a bad tokenizer setting stops here, before any data is read
        # passkey retrieval after training (the module runs it on the first group's held-out text)
        self.passkey_given = dict(passkey or {})
        self.passkey = check_passkey_settings(passkey, self.context_length, self.corpus["tokenizer"])
        self.passkey_note: str | None = None  # what the held-out text left out of the grid (results.json's passkey)
        check_local_corpus(self.corpus)  # corpus=local: a path matching nothing stops here too
        self.groups: list[PreparedGroup] = []
        self.token_bytes: Tensor | None = None  # the UTF-8 bytes of each token id (the tokenizer's token_bytes)
        self.train_windows: TrainingWindows | None = None
        self.evaluation: EvaluationPlan | None = None
        self.test_round: str | None = None  # which round test_dataloader serves (test_rounds); None: every window

    @property
    def max_length(self) -> int:
        """The longest evaluation length declared (the model is built for it before any data is read; the data may
        leave out the default's longest, ``evaluation.left_out``), or the longest passkey trial where longer."""
        longest_trial = self.passkey.max_length(self.context_length) if self.passkey.enabled else 0
        return max(self.declared_lengths[-1], longest_trial)

    @property
    def train_length(self) -> int:
        """The length trained on: the context (what settings tied to the training length take)."""
        return self.context_length

    def describe(self) -> dict[str, Any]:
        splits = {g.name: g.splits["validation"] for g in self.groups}
        token_bytes = None if self.token_bytes is None else self.token_bytes.numpy()
        return {
            "corpus": self.corpus["name"],
            "context_length": self.context_length,
            **({"extended_from": self.extended_from} if self.extended_from is not None else {}),
            "groups": {g.name: g.meta["splits"] for g in self.groups},
            # how each group was split (rule, fraction asked for, documents and share of tokens held out)
            "split": {g.name: g.meta.get("split") for g in self.groups},
            # what each group was read from: file count and bytes (python_code: and the Python version)
            "sources": {g.name: g.meta.get("source_files") for g in self.groups},
            # what a reader of the figures must know about the data (e.g. trained on a test split): one line each
            "data_notes": [*data_notes(self.corpus["name"], self.groups), *self.evaluation_notes()],
            # the held-out sample each length scores (poslab.datamodules.held_out)
            "evaluation": describe_sample(self.evaluation, splits, self.selection, token_bytes, self.selection_settings)
            if self.evaluation is not None
            else None,
        }

    def evaluation_notes(self) -> list[str]:
        """One line when the held-out text was too short for some of the default evaluation lengths, one per group
        that ``task.eval_tokens`` subsamples (a remainder shorter than the lengths' lcm, left out of nearly every run,
        is logged and in results.json's ``evaluation.notes``, not a data note), and one when it holds fewer than
        ``MIN_WINDOWS`` windows at the context (``small_sample_note``)."""
        plan = self.evaluation
        if plan is None:
            return []
        capped = [note for note in plan.notes if note.startswith("a subsample")]
        shortest = min(len(g.splits["validation"]) for g in self.groups)
        small = small_sample_note(plan, shortest)
        if not plan.left_out:
            return [*capped, *([small] if small else [])]
        return [
            *capped,
            f"evaluated at lengths {', '.join(map(str, plan.lengths))} only: the default's "
            f"{', '.join(map(str, plan.left_out))} need more held-out tokens than the shortest validation split "
            f"holds ({shortest}); raise corpus.validation_fraction or give task.eval_lengths.",
            *([small] if small else []),
        ]

    @property
    def vocab_size(self) -> int:
        """257 for bytes; a bpe vocabulary is known once the tokenizer is trained (so this prepares the corpus)."""
        if self.corpus["tokenizer"] == "bytes":
            return BYTE_VOCAB
        self.setup()
        return int(self.groups[0].meta["vocab_size"])

    @property
    def num_classes(self) -> int:
        return self.vocab_size

    def group_bytes_per_token(self) -> dict[str, float]:
        """UTF-8 bytes per token of each group's validation split, in the groups' order (1 for bytes, where the
        separator counts as one byte; known without the data, as the byte vocabulary is): the module's groups and
        their sizes. Bits per byte divides by the bytes of the scored tokens themselves (the evaluation batches'
        ``bytes``), not by this mean."""
        if self.corpus["tokenizer"] == "bytes" and not self.groups:
            return {str(name): 1.0 for name in self.corpus["groups"]}  # prepare_corpus keeps this order
        self.setup()
        if self.corpus["tokenizer"] == "bytes":
            return {g.name: 1.0 for g in self.groups}
        split = {g.name: g.meta["splits"]["validation"] for g in self.groups}
        return {name: s["bytes"] / max(1, s["tokens"]) for name, s in split.items()}

    def module_arguments(self) -> dict[str, Any]:
        """What the module evaluates: the declared lengths (a length the held-out text cannot hold is left out when
        the data is read, and the module reports only what it scored), each group's bytes per token, sliding."""
        return {
            "train_length": self.context_length,
            "eval_lengths": self.declared_lengths,
            "groups": self.group_bytes_per_token(),
            "sliding": self.evaluation_settings["eval_stride"] is not None,
        }

    @property
    def paragraph_density(self) -> float:
        """Paragraph boundaries per token in the training data, weighted as training samples the groups."""
        self.setup()
        total = sum(g.weight for g in self.groups)
        return sum(g.weight * g.splits["train"].paragraph_density for g in self.groups) / total

    def trainer_arguments(self) -> dict[str, Any]:
        # training windows are endless: validate by steps, not by epochs
        # and each rank's evaluation batches come from RankShard, not from a DistributedSampler
        return {
            "val_check_interval": self.val_every_n_steps,
            "check_val_every_n_epoch": None,
            "use_distributed_sampler": False,
        }

    def prepare_data(self) -> None:
        self.prepare()  # on one process per node (Lightning); the other ranks map the cache in setup

    def setup(self, stage: str | None = None) -> None:  # idempotent: also called for corpus statistics
        self.prepare()
        assign_rank(self.train_windows, self.trainer, self.batch_size)

    def prepare(self) -> list[PreparedGroup]:
        """The corpus prepared (or its cache mapped) once per datamodule, by whichever hook asks first: Lightning
        calls ``prepare_data`` at every entry (fit, then test) and ``setup`` after it, and each call of
        ``prepare_corpus`` logs the split and the data's warnings again (three times a job, before)."""
        if not self.groups:
            groups = prepare_corpus(self.corpus, self.data_dir, self.cache_dir)
            log.info("corpus %s: %s", self.corpus["name"], describe(groups))
            for note in data_notes(self.corpus["name"], groups):
                log.warning("note: %s", note)
            self.train_windows = TrainingWindows(
                groups, self.batch_size, self.context_length, self.seed, self.passkey.train_fraction,
                self.passkey.key_length, self.passkey.warmup_steps,
            )  # fmt: skip
            streams = {g.name: len(g.splits["validation"]) for g in groups}
            budget = self.eval_batch_size * self.context_length  # a batch at any length: as many tokens as at 1x
            self.evaluation = plan_evaluation(streams, self.evaluation_settings, budget)
            self.token_bytes = torch.from_numpy(corpus_tokenizer(groups, self.cache_dir).token_bytes())
            self.selection = self.select(groups)
            if self.in_two_rounds(self.chooses):  # an empty round would leave the run without figures or a choice
                splits = {g.name: g.splits["validation"] for g in groups}
                check_test_rounds(self.evaluation, splits, self.selection, self.evaluation_settings["eval_tokens"])
            self.groups = groups  # last: a refusal above leaves the datamodule unset, and a second setup refuses too
            self.fit_passkey(groups[0])
            for note in [*self.evaluation_notes(), *([self.passkey_note] if self.passkey_note else [])]:
                log.warning("note: %s", note)
            for note in self.evaluation.notes:
                if not note.startswith("a subsample"):
                    log.info("evaluation: %s", note)
            log.info(
                "evaluation: the test scores %s tokens (group: tokens) at lengths %s; a validation %d per group",
                self.evaluation.spans, self.evaluation.lengths, self.evaluation.val_span,
            )  # fmt: skip
        return self.groups

    def select(self, groups: list[PreparedGroup]) -> dict[str, np.ndarray]:
        """Each group's held-out documents split into selection and test (``held_out.select_documents``)."""
        selection = {}
        for group in groups:
            ordinals = np.asarray(group.splits["validation"].documents.values).astype(np.int64)
            fraction, seed = self.selection_settings["fraction"], self.selection_settings["seed"]
            selection[group.name] = select_documents(group.name, ordinals, fraction, seed)
            if fraction > 0 and len(ordinals) < 2:
                log.warning("note: group %r holds out one document: no selection split, all of it is test", group.name)
        return selection

    def fit_passkey(self, group: PreparedGroup) -> None:
        """Passkey retrieval reads the first group's validation split (the prose of a two-group corpus, by its
        config's order): its default distances too long for it are left out, a named one is refused, before
        training. The note (what was left out) goes with the grid, not among the data notes: it is about passkey
        retrieval alone."""
        what = f"group {group.name!r}'s validation split"
        given, tokens = self.passkey_given, len(group.splits["validation"])
        self.passkey, self.passkey_note = fit_filler(self.passkey, given, self.context_length, tokens, what)

    def passkey_filler(self) -> PreparedSplit:
        """The held-out split passkey retrieval writes its keys into (``fit_passkey``)."""
        return self.prepare()[0].splits["validation"]

    def train_dataloader(self) -> DataLoader:
        self.train_windows.start = training_batches_drawn(self.trainer)
        return DataLoader(self.train_windows, batch_size=None)

    def evaluation_dataloader(self, sliding: bool, sample: str = "test", test_round: str | None = None) -> DataLoader:
        # each DDP rank evaluates its own batches, none twice (Lightning's DistributedSampler would pad the last
        # rank with repeated ones); the losses are summed over ranks, as one process computes them; a rank the
        # batches do not reach (fewer than ranks) scores a stand-in that counts nothing (RankShard)
        rank, world = trainer_rank(self.trainer)
        batches = EvaluationBatches(
            self.groups, self.evaluation, sliding, self.token_bytes, sample, test_round, self.selection
        )
        return DataLoader(batches, batch_size=None, sampler=RankShard(len(batches), rank, world, stand_in=True))

    def test_rounds(self, chooses: bool) -> list[str | None]:
        """The test's rounds (``fit_and_test`` runs one ``trainer.test`` each, setting ``test_round``): where the
        module ``chooses`` among ways past the context and a selection split exists, first the windows touching a
        selection document (every way: the choice is made on them), then the rest (the plain model and the ways
        chosen), so that a way not chosen is not scored on windows of test documents only (docs/evaluation.md,
        "Two rounds"); otherwise, or with ``task.every_way_on_test``, one round of every window in every way."""
        self.prepare()
        return list(TEST_ROUNDS) if self.in_two_rounds(chooses) else [None]

    @property
    def chooses(self) -> bool:
        """Whether the module chooses among ways (``LanguageModelModule.chooses``): a declared length past the
        context."""
        return any(length > self.context_length for length in self.declared_lengths)

    def in_two_rounds(self, chooses: bool) -> bool:
        """Whether the test runs in two rounds (``test_rounds``), from the selection split already drawn."""
        split = any(mask.any() and not mask.all() for mask in self.selection.values())
        return chooses and split and not self.every_way_on_test

    def val_dataloader(self) -> DataLoader:
        """Every length's non-overlapping windows of the ``val_windows`` sample (the plain model's loss, at every
        validation during training: a small sample, for speed; the test scores the whole held-out split)."""
        return self.evaluation_dataloader(sliding=False, sample="validation")

    def test_dataloader(self) -> DataLoader:
        """Every length's non-overlapping windows over each group's whole held-out split (or ``task.eval_tokens``),
        then the sliding ones (``task.eval_stride``); of those in ``test_round`` (``test_rounds``)."""
        return self.evaluation_dataloader(sliding=True, test_round=self.test_round)
