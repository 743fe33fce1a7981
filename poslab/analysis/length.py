"""Train short, test long on text: the language models' bits per byte by evaluation length, loss by position and
passkey retrieval, per corpus and encoding, with the uncertainty over seeds.

    poslab report length DIR...          (run or multirun directories of task=lm runs, e.g. experiment=lm_zoo)
    poslab report length --from length.json

Three layers, as the zoo's report: this module computes (``length_summary``: everything the tables and figures
show, what ``length.json`` holds), ``length_render`` draws the tables and PNGs from that summary alone (no runs,
no model: ``--from`` re-renders), ``length_report`` runs both and writes the files.

What is measured (``poslab.lightning_modules.language``; statistics from ``poslab.analysis.stats``):

- **Rows**: each encoding's plain model, and each way it was evaluated on the same weights as its own row
  (``rope + sliding``, ``rope + log_scaled``, ``rope + test_yarn``): the sliding windows (``task.eval_stride``), the
  log-length scaling and the encoding's test-time rules, these past the context only.
- **Context extensions** (``experiment=context_extension``): a row of their own, named by rule and factor
  (``rope extended yarn x4``), measured at their *parent's* multiples (1x is the parent's context), and set beside
  the parent's row under the same rule at test time only (``rope + test_yarn``; rule none: the parent's plain row)
  in the summary's ``extensions``.
- **Bits per byte** at each multiple of the training context: the mean over seeds with a 95% Student-t interval,
  and the **ratio to 1x** (per seed, the row's bits per byte over the plain model's at 1x; then over seeds).
- **Score and ranking**: the mean bits per byte over 2x to 16x (1x is what every encoding was trained at; lower is
  better), ranks by the seed-mean score with ``stats.rank_intervals`` (paired differences, Bonferroni over each
  row's comparisons) over seeds and held-out documents where every row recorded the same documents, over seeds
  alone else (a row's ``rank_over``), and the consecutive places the intervals do not separate.
- **Loss by position**: the plain model's mean loss at each (log-binned) position of the longest evaluation
  length, the mean over seeds.
- **Passkey retrieval**: the exact-match grid (distance x depth) per encoding, the mean over seeds.
- **Cost**: seconds of training and of the evaluation after it (every length and way, passkey retrieval's part
  apart), and the evaluation's share of the run (issue 25's target: at most 20%), means over seeds.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import Any

import numpy as np

from poslab.analysis.effective_length import effective_length_over_seeds
from poslab.analysis.output import data_versions_apart
from poslab.analysis.stats import (
    crossed_interval,
    linearised_ratio,
    not_separated,
    over_seeds,
    rank_intervals,
    seed_tables,
)
from poslab.errors import MissingRunError
from poslab.running.extension import checked_parent_data
from poslab.runs.files import RESULTS_FILE
from poslab.runs.results import (
    FinishedRun,
    collect_runs,
    data_hash,
    differing_settings,
    host_of,
    setting_values,
    whole_training_seconds,
)

RANKED = (2, 4, 8, 16)  # the multiples of the context the score averages: past training, to 16x
PLAIN = "plain"
CHOSEN = "chosen on selection"  # a row: per seed, the way chosen on the selection documents, on the test documents
WAY_KEY = re.compile(r"^bpb(?:_(?P<way>[a-z0-9_]+))?$")  # bpb, bpb_sliding, bpb_test_yarn; not bpb[en] nor sds


@dataclass
class LengthRun:
    """One finished language-model run: its corpus, encoding and seed, and bits per byte by way and multiple."""

    corpus: str
    encoding: str  # the run's label plus the settings telling it apart from others of the same label
    seed: int
    train_length: int
    bpb: dict[str, dict[int, float]]  # way -> multiple -> bits per byte
    result: dict[str, Any]
    path: Path

    @property
    def data(self) -> str | None:
        """The hash of the text the run read (``data_hash``)."""
        return data_hash(self.result)

    @property
    def stride(self) -> int | None:
        """The sliding windows' stride (``task.eval_stride``); None: non-overlapping windows only."""
        stride = (self.result.get("evaluation") or {}).get("stride")
        return None if stride is None else int(stride)


def is_language_model(result: dict[str, Any]) -> bool:
    return result.get("task") == "lm" or "val_bpb" in (result.get("figures") or {})


def length_bpb(figures: dict[str, Any], train_length: int) -> dict[str, dict[int, float]]:
    """Bits per byte by way and multiple from results.json's ``figures`` keyed by length (whole multiples only)."""
    found: dict[str, dict[int, float]] = defaultdict(dict)
    for length, row in figures.items():
        if not (length.isdigit() and isinstance(row, dict)) or int(length) % train_length:
            continue
        for key, value in row.items():
            if (match := WAY_KEY.match(key)) and not key.endswith("_sd"):
                found[match["way"] or PLAIN][int(length) // train_length] = float(value)
    return dict(found)


def chosen_way(result: dict[str, Any]) -> str | None:
    """The way a run chose on its selection documents for every length past the context (``held_out.chosen``)."""
    return ((result.get("held_out") or {}).get("chosen") or {}).get("way")


def with_chosen(result: dict[str, Any], bpb: dict[str, dict[int, float]], train_length: int) -> dict[str, dict]:
    """A run's rows with the way chosen on selection (``CHOSEN``: its test documents' bits/byte, past the context),
    and without the test-time ways a test in two rounds scored on the selection documents only (results.json's
    ``held_out.test_ways``): their figures are on part of the text. A run without a selection split: as it is."""
    held = result.get("held_out") or {}
    chosen = held.get("chosen") or {}
    if not chosen.get("test"):
        return bpb
    if held.get("test_ways") is not None:  # two rounds: figures of the plain model (and sliding) and the chosen
        bpb = {way: values for way, values in bpb.items() if way in (PLAIN, "sliding")}
    test = {int(n) // train_length: f["bpb"] for n, f in chosen["test"].items() if f and f.get("bpb") is not None}
    return {**bpb, CHOSEN: test} if test else bpb


def plain_test_bpb(run: LengthRun) -> float:
    """The plain model's bits/byte at 1x on the test documents (``held_out.lengths[<context>].test.plain``): what a
    'chosen on selection' row's ratio divides by, its own figures being on the test documents; NaN where absent."""
    lengths = (run.result.get("held_out") or {}).get("lengths") or {}
    plain = (((lengths.get(str(run.train_length)) or {}).get("test") or {}).get(PLAIN)) or {}
    value = plain.get("bpb")
    return float(value) if isinstance(value, (int, float)) else math.nan


def one_x_bpb(run: LengthRun, way: str) -> float:
    """What a row's ratio to 1x divides by: the plain model's 1x, on the test documents for a 'chosen on
    selection' row (its own figures are on them), else on the whole sample."""
    return plain_test_bpb(run) if way == CHOSEN else run.bpb[PLAIN].get(1, math.nan)


def extension_of(result: dict[str, Any]) -> tuple[str, int] | None:
    """A context extension's row name suffix and its parent's context (its multiples are the parent's, so that it
    sits beside its parent and the parent's test-time rule); None for any other run."""
    extension, parent = result.get("extension"), result.get("parent")
    if not (isinstance(extension, dict) and isinstance(parent, dict) and parent.get("context_length")):
        return None
    return f"extended {extension.get('rule')} x{float(extension.get('factor', 0)):g}", int(parent["context_length"])


def length_run(run: FinishedRun, keys: list[str]) -> LengthRun:
    result = run.result
    train = int(result.get("context_length") or (result.get("loss_by_position") or {}).get("train_length"))
    settings = [f"{k}={v}" for k, v in zip(keys, setting_values(run, keys)) if not k.startswith("extension.")]
    if (extension := extension_of(result)) is not None:
        settings, train = [extension[0], *settings], extension[1]
    return LengthRun(
        corpus=str(result.get("corpus", "?")),
        encoding=" ".join([str(result.get("label") or result.get("encoding")), *settings]),
        seed=int(result["seed"]),
        train_length=train,
        bpb=with_chosen(result, length_bpb(result["figures"], train), train),
        result=result,
        path=run.path,
    )


#: the task.passkey settings that change what a model trains on (key pairs planted in its training windows,
#: ``LanguageModelDataModule``): runs that differ in them are different models, never seeds of one row
PASSKEY_TRAINING_SETTINGS = ("task.passkey.train_fraction", "task.passkey.warmup_steps")


def load_length_runs(directories: list[str | Path]) -> tuple[list[LengthRun], list[str]]:
    """Every successful language-model run below ``directories`` that has figures by length, and the notes on
    those left out (failed jobs, damaged files, and runs older than the evaluation by length)."""
    found = collect_runs(list(directories), keep=is_language_model)
    # a context extension is a row of its own (its rule and factor name it): the settings it derives from its
    # parent (context, steps, learning rate, ...) differ from the parent's by design, not as a column of both
    keys = differing_settings(
        found.counted, lambda r: (r.result.get("corpus"), r.result.get("label"), extension_of(r.result))
    )
    # the passkey grid's evaluation settings are not the model's; what plants key pairs in training is
    keys = [k for k in keys if not k.startswith("task.passkey") or k in PASSKEY_TRAINING_SETTINGS]
    runs, old = [], []
    for finished in found.counted:
        run = length_run(finished, keys)
        (runs if any(m > 1 for m in run.bpb.get(PLAIN, {})) else old).append(run)
    notes = found.notes()
    if old:
        shown = ", ".join(f"{r.corpus} {r.encoding} seed {r.seed}" for r in old)
        notes.append(
            f"{len(old)} run(s) left out, no figures past the training context (written before task.eval_lengths, "
            f"or evaluated at 1x only: only val_bpb): {shown}"
        )
    notes += keep_data_versions_apart(runs)
    notes += [f"{run.path}: {note}" for run in runs if (note := checked_parent_data(run.result))]
    if not runs:
        listed = " ".join(notes)
        raise MissingRunError(
            f"no {RESULTS_FILE} of a successful language-model run with figures by evaluation length below "
            f"{', '.join(map(str, directories))}" + (f": {listed}" if listed else "")
        )
    runs.sort(key=lambda r: (r.corpus, r.encoding, r.seed))
    return runs, notes


def keep_data_versions_apart(runs: list[LengthRun]) -> list[str]:
    """Runs of one corpus that read different text (different source hashes: another version of the files, another
    split) are not seeds of one figure: each version becomes a corpus of its own, ``corpus [data <hash>]``, and a
    note says so (``output.data_versions_apart``, which ``report losses`` shares). Returns the notes."""
    shown, notes = data_versions_apart([r.corpus for r in runs], [r.data for r in runs])
    for run, corpus in zip(runs, shown):
        run.corpus = corpus
    return notes


# ---- the bits-per-byte table ---------------------------------------------------------------------------------------
def document_sums(
    run: LengthRun, way: str, length: int, every_document: bool = False
) -> tuple[list[float], list[float]] | None:
    """One run's test documents (``every_document``: the selection ones too, for a way nothing was chosen by) at
    ``length`` in ``way``: (loss in bits, bytes) per document, every group's in group order (results.json's
    ``held_out.documents``); None for a run without them (written before issue 37)."""
    documents = (run.result.get("held_out") or {}).get("documents") or {}
    losses: list[float] = []
    sizes: list[float] = []
    way = (chosen_way(run.result) or "") if way == CHOSEN else way  # each seed's own choice
    for group in documents.values():
        at = (group.get("by_length") or {}).get(str(length))
        loss = None if at is None else (at.get("loss") or {}).get(way)
        if loss is None:
            return None
        test = [every_document or not chosen for chosen in group.get("selection") or [0] * len(loss)]
        if any(nats is None for nats, keep in zip(loss, test) if keep):
            return None  # a document this way did not score (a way not chosen, on a test document)
        losses += [nats / math.log(2) for nats, keep in zip(loss, test) if keep]
        sizes += [float(b) for b, keep in zip(at["bytes"], test) if keep]
    return (losses, sizes) if losses and sum(sizes) > 0 else None


def linearised_documents(
    runs: list[LengthRun], way: str, multiple: int, ratio: bool = False
) -> tuple[np.ndarray, tuple[float, ...]] | None:
    """[seeds, documents] on the test documents (``runs`` in order), linearised so that each seed's mean over
    documents is its bits/byte at ``multiple`` (``stats.linearised_ratio``), or with ``ratio`` its bits at
    ``multiple`` over the plain model's at 1x, document by document (every length scores the same bytes of a
    document, so a ratio of bits is a ratio of bits/byte); with the documents' bytes. None unless every run
    recorded the same test documents."""
    tables = [document_sums(r, way, multiple * r.train_length) for r in runs]
    if ratio:
        tables += [document_sums(r, PLAIN, r.train_length) for r in runs]
    if not runs or any(t is None for t in tables) or len({tuple(t[1]) for t in tables}) != 1:
        return None
    losses, sizes = np.array([t[0] for t in tables]), tuple(tables[0][1])
    if ratio:
        return linearised_ratio(losses[: len(runs)], losses[len(runs) :]), sizes
    return linearised_ratio(losses, np.array(sizes)), sizes


def over_seeds_and_documents(
    runs: list[LengthRun], way: str, multiple: int, ratio: bool = False
) -> dict[str, Any] | None:
    """A row's bits/byte (or ``ratio`` to the plain 1x) at ``multiple`` on the test documents with its interval over
    seeds and documents (``stats.crossed_interval`` of ``linearised_documents``): None for one seed, or unless every
    seed recorded the same test documents (the same bytes) in that way."""
    found = linearised_documents(runs, way, multiple, ratio) if len(runs) >= 2 else None
    return None if found is None else crossed_interval(found[0]).as_dict()


@dataclass
class ScoreDocuments:
    """A row's score by seed and document: per multiple the loss in bits of each (seed, document) and the bytes of
    each document, every seed the same documents (``rank_rows`` ranks on them, paired, over seeds and documents)."""

    seeds: list[int]
    losses: dict[int, np.ndarray]  # multiple -> [seeds, documents]
    sizes: dict[int, tuple[float, ...]]  # multiple -> bytes per document

    def table(self, seeds: list[int]) -> np.ndarray:
        """``[seeds, documents]``: the score (mean bits/byte over the multiples) of each seed given, linearised
        (``stats.linearised_ratio``): its mean over documents is each seed's score."""
        rows = [self.seeds.index(seed) for seed in seeds]
        tables = [linearised_ratio(self.losses[m][rows], np.array(self.sizes[m])) for m in sorted(self.losses)]
        return np.mean(tables, axis=0)


def score_documents(runs: list[LengthRun], way: str, multiples: list[int]) -> ScoreDocuments | None:
    """Every held-out document's sums for a ranked row (the plain model or sliding windows: on the whole sample, as
    its ``figures``) at the score's multiples; None where a seed recorded none or other documents."""
    if not multiples:
        return None
    losses, sizes = {}, {}
    for m in multiples:
        tables = [document_sums(r, way, m * r.train_length, every_document=True) for r in runs]
        if any(t is None for t in tables) or len({tuple(t[1]) for t in tables}) != 1:
            return None
        losses[m], sizes[m] = np.array([t[0] for t in tables]), tuple(tables[0][1])
    return ScoreDocuments([r.seed for r in runs], losses, sizes)


def row_multiples(way: str, runs: list[LengthRun]) -> set[int]:
    """The multiples every seed of a row was evaluated at."""
    return set.intersection(*(set(r.bpb.get(way, {})) for r in runs)) if runs else set()


def row_summary(encoding: str, way: str, runs: list[LengthRun], ranked: list[int]) -> dict[str, Any]:
    """One row: an encoding in one way, bits per byte and its ratio to the plain model's 1x by multiple, the score
    (the mean over ``ranked``, the multiples every row of the corpus shares)."""
    multiples = sorted({m for r in runs for m in r.bpb.get(way, {})})
    bpb = {m: {r.seed: r.bpb.get(way, {}).get(m, math.nan) for r in runs} for m in multiples}
    one_x = {r.seed: one_x_bpb(r, way) for r in runs}
    ratio = {m: {s: v / one_x[s] for s, v in seeds.items()} for m, seeds in bpb.items()}
    score = {r.seed: mean(bpb[m][r.seed] for m in ranked) if ranked else math.nan for r in runs}
    strides = {r.stride for r in runs} if way == "sliding" else {None}
    train = runs[0].train_length
    by_length = {r.seed: {m * train: bpb[m][r.seed] for m in multiples} for r in runs}  # seed -> length -> bpb
    effective = effective_length_over_seeds(by_length, train, higher_is_better=False) if 1 in multiples else None
    chosen = sorted({str(chosen_way(r.result)) for r in runs}) if way == CHOSEN else []
    return {
        "name": encoding if way == PLAIN else f"{encoding} + {way}" + (f" ({', '.join(chosen)})" if chosen else ""),
        "encoding": encoding,
        "way": way,
        "stride": strides.pop() if len(strides) == 1 else None,
        "chosen_ways": chosen,  # a CHOSEN row: the ways its seeds chose on selection (its figures: test documents)
        "seeds": len(runs),
        "hosts": sorted({host_of(r.result) for r in runs}),  # more than one: its seeds' last digits may differ
        "bpb": {f"{m}x": over_seeds(bpb[m]) for m in multiples},
        "ratio_to_1x": {f"{m}x": over_seeds(ratio[m]) for m in multiples},
        "score": over_seeds(score),
        "score_multiples": ranked,
        # on the test documents, with the interval over seeds and documents (runs that recorded them)
        "bpb_documents": {f"{m}x": c for m in multiples if (c := over_seeds_and_documents(runs, way, m))},
        "ratio_documents": {
            f"{m}x": c for m in multiples if m > 1 and (c := over_seeds_and_documents(runs, way, m, ratio=True))
        },
        # the longest length whose bits/byte stays within 1.05x of 1x's, every length on the way too (None: no 1x)
        "effective_length": None if effective is None else effective.as_dict(),
    }


def document_tables(
    members: list[dict[str, Any]], per_seed: dict[str, dict[int, float]], documents: dict[str, ScoreDocuments]
) -> dict[str, np.ndarray] | None:
    """The rows' scores as seeds x documents tables over the seeds every row has a score for, where every row
    recorded the same documents; None else (ranked over seeds alone)."""
    found = [documents.get(row["name"]) for row in members]
    if not found or any(d is None for d in found) or len({tuple(sorted(d.sizes.items())) for d in found}) != 1:
        return None
    seeds = sorted(set.intersection(*({s for s, v in scores.items() if v == v} for scores in per_seed.values())))
    if not seeds:
        return None
    return {row["name"]: d.table(seeds) for row, d in zip(members, found)}


def rank_rows(
    rows: list[dict[str, Any]], documents: dict[str, ScoreDocuments] | None = None
) -> tuple[list[dict[str, Any]], list[list[str]]]:
    """The rows best first by seed-mean score (lower bits per byte is better; no score last), each with its rank and
    rank interval among the rows of its class (``stride_class``: the plain models; sliding windows of one stride;
    windows of different strides score different contexts and are never ranked together; test-time variants are
    not ranked: None); the groups of consecutive
    places the intervals do not separate. The interval is ``stats.rank_intervals`` over the seeds every row of the
    class has and, where every row recorded the same held-out documents (``documents``, by row name), over those
    documents too (paired: the rows share the data; ``rank_over`` says which): it always holds the rank."""
    score = {row["name"]: _or_high(row["score"]["mean"]) for row in rows}
    rows = sorted(rows, key=lambda row: (score[row["name"]], row["name"]))
    groups: list[list[str]] = []
    for row in rows:  # a test-time variant is not ranked (its class is None): choosing one is a selection
        row["rank"], row["rank_interval"] = None, None
    for stride in sorted({stride_class(row) for row in rows} - {None}, key=str):
        members = [row for row in rows if stride_class(row) == stride and math.isfinite(score[row["name"]])]
        per_seed = {row["name"]: {int(s): v for s, v in row["score"]["per_seed"].items()} for row in members}
        tables = document_tables(members, per_seed, documents or {})
        places = rank_intervals(tables or seed_tables(per_seed), higher_is_better=False) if per_seed else {}
        for row in members:
            row["rank_over"] = "seeds and documents" if tables else "seeds"
        for row in rows:
            if stride_class(row) == stride:
                place = places.get(row["name"])
                row["rank"] = place.rank if place else None
                row["rank_interval"] = [place.low, place.high] if place else None
        intervals = {name: (p.low, p.high) for name, p in places.items()}
        groups += not_separated(intervals, [row["name"] for row in members])
    return rows, [group for group in groups if len(group) > 1]


def stride_class(row: dict[str, Any]) -> str | None:
    """Which rows are ranked together: the encodings' plain models (non-overlapping windows), or their sliding
    rows of one stride. A test-time variant (log scaling, a RoPE rule) is None, not ranked: ranking an
    encoding's variants beside the models picks the best of them on the figures it reports (a choice made on
    test), and every variant widens every rank interval."""
    if row["way"] == PLAIN:
        return "non-overlapping"
    return f"sliding, stride {row['stride']}" if row["way"] == "sliding" else None


def _or_high(value: float | None) -> float:
    return math.inf if value is None or value != value else value


# ---- loss by position, passkey -------------------------------------------------------------------------------------
def position_curve(runs: list[LengthRun]) -> dict[str, Any] | None:
    """An encoding's loss by position at the longest length every seed scored: per log-spaced bin its first
    position, the mean loss over seeds, the tokens it averages per seed (where the runs recorded them), and the
    seeds."""
    curves = [(r.result.get("loss_by_position") or {}).get("lengths") or {} for r in runs]
    common = set.intersection(*(set(c) for c in curves)) if curves else set()
    if not common:
        return None
    longest = max(common, key=int)
    bins = [c[longest] for c in curves]
    if any(b["start"] != bins[0]["start"] for b in bins):  # other binning (another version): not averaged
        return None
    loss = np.mean([b["loss"] for b in bins], axis=0)
    curve = {"length": int(longest), "start": bins[0]["start"], "stop": bins[0]["stop"], "loss": loss.tolist(),
             "seeds": len(runs)}  # fmt: skip
    if all("tokens" in b for b in bins):  # each bin's tokens, per seed (the figure's sample per point)
        curve["tokens"] = np.mean([b["tokens"] for b in bins], axis=0).round().astype(int).tolist()
    return curve


#: what makes two runs' passkey grids one grid (a mean over seeds of equal weight)
PASSKEY_GRID = ("distances", "depths", "depth_offsets", "trials", "draws", "key_length")


def passkey_mean(runs: list[LengthRun]) -> dict[str, Any] | None:
    """An encoding's passkey grid, the mean over the seeds that ran the same grid (each way too): the same
    distances, depths and depth offsets, trials, draws and key length, so every cell is a mean of as many trials
    as the title says and its chance line is theirs; None without."""
    results = [p for r in runs if isinstance(p := r.result.get("passkey"), dict) and "distances" in p]
    same = [p for p in results if all(p.get(key) == results[0].get(key) for key in PASSKEY_GRID)]
    if not same:
        return None

    def averaged(figures: list[dict[str, Any]]) -> dict[str, Any]:
        return {key: np.mean([f[key] for f in figures], axis=0).tolist() for key in ("exact", "digits")}

    ways = set.intersection(*(set(p.get("ways", {})) for p in same))
    return {
        **{k: v for k, v in same[0].items() if k not in ("exact", "digits", "ways", "settings", "note")},
        **averaged(same),
        "ways": {way: averaged([p["ways"][way] for p in same]) for way in sorted(ways)},
        "seeds": len(same),
    }


def run_cost(runs: list[LengthRun]) -> dict[str, Any] | None:
    """An encoding's seconds (means over the seeds that recorded them, each trained whole in one process:
    ``whole_training_seconds``; ``resumed`` counts the runs left out): training, the evaluation after it, passkey
    retrieval's part of that, and the evaluation's share of the whole run; None where no run recorded a test time,
    and only the count of resumed runs where every run was resumed."""
    tested = [r.result for r in runs if isinstance(r.result.get("test_seconds"), (int, float))]
    timed = [(r, seconds) for r in tested if (seconds := whole_training_seconds(r)) is not None]
    if not tested:
        return None
    if not timed:
        return {"train_seconds": None, "test_seconds": None, "passkey_seconds": None, "evaluation_share": None,
                "seeds": 0, "resumed": len(tested)}  # fmt: skip
    train = mean(seconds for _, seconds in timed)
    test = mean(float(r["test_seconds"]) for r, _ in timed)
    passkey = [float(p["seconds"]) for r, _ in timed if isinstance(p := r.get("passkey"), dict) and "seconds" in p]
    return {"train_seconds": train, "test_seconds": test, "passkey_seconds": mean(passkey) if passkey else None,
            "evaluation_share": test / (train + test), "seeds": len(timed),
            "resumed": len(tested) - len(timed)}  # fmt: skip


# ---- the summary ---------------------------------------------------------------------------------------------------
def corpus_summary(runs: list[LengthRun]) -> dict[str, Any]:
    """One corpus: the ranked rows, the groups not separated, the curves and passkey grids by encoding."""
    by_encoding: dict[str, list[LengthRun]] = defaultdict(list)
    for run in runs:
        by_encoding[run.encoding].append(run)
    row_keys = [
        (encoding, way, members)
        for encoding, members in by_encoding.items()
        for way in sorted({w for r in members for w in r.bpb}, key=lambda w: (w != PLAIN, w))
    ]
    # the score's multiples: those every row has, so every row's mean covers the same lengths (named in the header)
    shared = set(RANKED).intersection(*(row_multiples(way, members) for _, way, members in row_keys))
    rows = [row_summary(encoding, way, members, sorted(shared)) for encoding, way, members in row_keys]
    documents = {
        row["name"]: found
        for row, (_, way, members) in zip(rows, row_keys)
        if stride_class(row) is not None and (found := score_documents(members, way, sorted(shared)))
    }
    rows, groups = rank_rows(rows, documents)
    extensions = [comparison for run in runs if (comparison := extension_comparison(run, rows))]
    curves = {e: c for e, members in by_encoding.items() if (c := position_curve(members))}
    passkey = {e: p for e, members in by_encoding.items() if (p := passkey_mean(members))}
    cost = {e: c for e, members in by_encoding.items() if (c := run_cost(members))}
    return {
        "train_length": runs[0].train_length,
        "train_lengths": sorted({r.train_length for r in runs}),
        "score_multiples": sorted(shared),
        "sample": sample_summary(runs),
        "rows": rows,
        "not_separated": groups,
        "loss_by_position": curves,
        "passkey": passkey,
        "cost": cost,
        "extensions": list({c["extension"]: c for c in extensions}.values()),  # one per extension row
    }


def _spread(values: list[Any]) -> Any:
    """One value where every run has the same, else the sorted distinct values (a report says what differs)."""
    distinct = sorted({v for v in values if v is not None}, key=str)
    return distinct[0] if len(distinct) == 1 else (distinct or None)


def sample_summary(runs: list[LengthRun]) -> dict[str, Any]:
    """What a corpus's figures rest on: the held-out sample at the training length (documents, tokens, bytes where
    the run recorded them), the stride, the training steps, the seeds and the hosts (CPU models) of its runs."""
    samples = [((r.result.get("evaluation") or {}).get("sample") or {}).get(str(r.train_length)) or {} for r in runs]
    hosts = sorted({host_of(r.result) for r in runs})
    return {
        "documents": _spread([s.get("documents") for s in samples]),
        "tokens": _spread([s.get("tokens") for s in samples]),
        "bytes": _spread([s.get("bytes", scored_bytes(r)) for s, r in zip(samples, runs)]),
        # the split the figures to cite are on (chosen ways; the interval over documents), and the one choosing
        **{
            f"{part}_{key}": _spread([(s.get(part) or {}).get(key) for s in samples])
            for part in ("test", "selection")
            for key in ("documents", "bytes")
        },  # fmt: skip
        "stride": _spread([r.stride for r in runs]),
        "steps": _spread([r.result.get("steps") for r in runs]),
        "seeds": sorted({r.seed for r in runs}),
        "hosts": hosts,
        "mixed_hosts": len(hosts) > 1,
    }


def scored_bytes(run: LengthRun) -> int | None:
    """The bytes the run scored at its training length (``figures.<L>.bytes``), None where not recorded."""
    value = ((run.result.get("figures") or {}).get(str(run.train_length)) or {}).get("bytes")
    return None if value is None else int(value)


def extension_comparison(run: LengthRun, rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """An extension's plain row beside its parent's row under the same rule at test time only (``test_<rule>``;
    rule none: the parent's plain row), both over their seeds; None for a run that is no extension or whose
    parent's runs are not in the report."""
    extension = run.result.get("extension")
    if extension_of(run.result) is None:
        return None
    rule, parent_label = extension.get("rule"), (run.result.get("parent") or {}).get("label")
    way = PLAIN if rule == "none" else f"test_{rule}"
    by_name = {row["name"]: row for row in rows}
    parent = next((row for row in rows if row["encoding"] == parent_label and row["way"] == way), None)
    mine = by_name.get(run.encoding)
    if parent is None or mine is None:
        return None
    return {"extension": mine["name"], "rule": rule, "test_time": parent["name"], "bpb_extension": mine["bpb"],
            "bpb_test_time": parent["bpb"]}  # fmt: skip


def length_summary(runs: list[LengthRun], notes: list[str]) -> dict[str, Any]:
    """Everything the report shows, per seed where a figure has seeds: ``length.json``, what rendering reads."""
    by_corpus: dict[str, list[LengthRun]] = defaultdict(list)
    for run in runs:
        by_corpus[run.corpus].append(run)
    return {
        "report": "length",
        "ranked_multiples": list(RANKED),
        "corpora": {corpus: corpus_summary(members) for corpus, members in sorted(by_corpus.items())},
        "runs": [
            {
                "corpus": r.corpus,
                "encoding": r.encoding,
                "seed": r.seed,
                "train_length": r.train_length,
                "bpb": {way: {f"{m}x": v for m, v in sorted(per.items())} for way, per in r.bpb.items()},
            }
            for r in runs
        ],  # fmt: skip
        "notes": notes,
    }
