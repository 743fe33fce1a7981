"""The compute layer of the hRoPE analysis: a model's forward passes over held-out documents, the shuffles and the
interventions, streamed in batches into sums (``Sums``, passed explicitly from batch to batch), then U* and its
intervals; for a set of runs, the one summary (``hrope_summary``, ``hrope.json``) the render layer reads.

Per batch, four forward passes in this order: the documents as they are, their shuffled versions (the shuffles
draw from one generator, document after document: the same ``seed`` shuffles the same way), and the fake merge
and the fake split of each. The bootstrap draws from its own generator (``seed + 1``): one set of document
resamples for every statistic of a run, the same for runs with the same documents.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poslab.analysis.hrope.attention import (
    PairStatistics,
    features,
    intervention_readings,
    mean_attention,
    pair_statistics,
)
from poslab.analysis.hrope.documents import (
    Document,
    fake_merge,
    fake_split,
    held_out_documents,
    merge_boundary,
    segment_split_position,
    shuffle_paragraphs,
    split_position,
)
from poslab.analysis.hrope.readings import INTERVENTION_READINGS, INTERVENTIONS, Reading, u_readings
from poslab.analysis.hrope.runs import Depth, RunAnalysis, RunFacts
from poslab.analysis.hrope.seeds import summary_figures
from poslab.analysis.hrope.shape import shape_estimates
from poslab.analysis.hrope.well import Well, bootstrap_curves, bootstrap_depths, curve_depths, well_from
from poslab.analysis.output import training_steps
from poslab.analysis.stats import Estimate, bootstrap_mean, resample_weights
from poslab.errors import ConfigError
from poslab.io import number_or_nan, read_json
from poslab.running.builders import load_run_and_data
from poslab.runs.files import RESULTS_FILE

log = logging.getLogger("poslab")


@dataclass
class Sums:
    """What the analysis keeps of the documents seen so far; every part is additive over documents."""

    original: dict[str, PairStatistics]  # reading -> per-document pair sums of the documents as they are
    shuffled: dict[str, PairStatistics]  # reading -> the same for the documents the shuffle test could use
    changes: dict[str, dict[str, list[float]]]  # intervention -> reading -> per-document change
    shuffled_rows: list[int] = field(default_factory=list)  # the shuffled documents' places among all
    count: int = 0  # documents seen


def empty_sums(readings: Sequence[Reading], max_displacement: int) -> Sums:
    def empty() -> dict[str, PairStatistics]:
        n_features = {r.name: features(torch.ones(1), r.trend).shape[-1] for r in readings}
        return {name: PairStatistics.empty(n, max_displacement) for name, n in n_features.items()}

    changes = {kind: {r: [] for r in INTERVENTION_READINGS} for kind in INTERVENTIONS}
    return Sums(empty(), empty(), changes)


@dataclass(frozen=True)
class Passes:
    """What every batch's forward passes read, the same for the whole run."""

    model: torch.nn.Module
    readings: Sequence[Reading]  # the readings the pair sums are kept under
    max_displacement: int  # the largest paragraph displacement kept
    rng: np.random.Generator  # the shuffles: one draw per document, batch after batch
    keep_ends: bool  # the shuffle keeps the first and the last paragraph in place (``shuffle_paragraphs``)
    intervene_on: str = "paragraph"  # the coordinate the interventions change (``hierarchy``)


def add_pairs(
    target: dict[str, PairStatistics],
    attention: torch.Tensor,
    documents: Sequence[Document],
    readings: Sequence[Reading],
    max_displacement: int,
) -> None:
    """Each document's pair sums under every reading, appended to ``target``."""
    lengths, paragraphs = [len(d) for d in documents], [d.paragraph for d in documents]
    for r in readings:
        target[r.name].extend(pair_statistics(attention, lengths, paragraphs, r, max_displacement))


def add_shuffled(sums: Sums, passes: Passes, batch: Sequence[Document]) -> None:
    """The shuffle test's forward pass: the batch's documents with enough paragraphs, shuffled (``passes.rng``
    draws once per document, in order)."""
    shuffled = (shuffle_paragraphs(d, passes.rng, passes.keep_ends) for d in batch)
    mixed = [(row, m) for row, m in enumerate(shuffled) if m is not None]
    if not mixed:
        return
    documents = [m for _, m in mixed]
    attention = mean_attention(passes.model, documents, [m.paragraph for m in documents])
    add_pairs(sums.shuffled, attention, documents, passes.readings, passes.max_displacement)
    sums.shuffled_rows.extend(sums.count + row for row, _ in mixed)


def intervened_coordinates(
    document: Document, change: Callable[[np.ndarray, int], np.ndarray], position: int | None, on: str
) -> tuple[np.ndarray, np.ndarray] | None:
    """(paragraph, sentence) indices the model reads under an intervention (``change`` at ``position``) on the
    coordinate ``on``, the other one as it is; None where it cannot be made there (no position, or on the
    sentence index a merge at a paragraph boundary that is no sentence boundary)."""
    if position is None:
        return None
    if on == "paragraph":
        return change(document.paragraph, position), document.sentence
    try:
        return document.paragraph, change(document.sentence, position)
    except ValueError:
        return None


def add_interventions(
    changes: dict[str, dict[str, list[float]]],
    model: torch.nn.Module,
    batch: Sequence[Document],
    base: torch.Tensor,
    on: str = "paragraph",
) -> None:
    """The interventions' forward passes (fake merge, then fake split) and each document's readings of them
    against ``base``, its attention as it is (nan where the intervention cannot be made: no paragraph long enough
    to split). ``on``: the coordinate the model reads the change in, the paragraph index (the write-up's) or the
    sentence index (BiPE's segments, ``hierarchy``); the readings count the pairs by the paragraph labels, before
    and after, either way."""
    splits = [
        split_position(d.paragraph) if on == "paragraph" else segment_split_position(d.paragraph, d.sentence)
        for d in batch
    ]
    plans = {"merge": (fake_merge, [merge_boundary(d.paragraph) for d in batch]), "split": (fake_split, splits)}
    for kind, (change, positions) in plans.items():
        inputs = [intervened_coordinates(d, change, at, on) for d, at in zip(batch, positions)]
        given = [moved or (d.paragraph, d.sentence) for d, moved in zip(batch, inputs)]
        after = mean_attention(model, batch, [p for p, _ in given], [s for _, s in given])
        for row, document in enumerate(batch):
            at = positions[row]
            record(changes[kind], (
                intervention_readings(base[row], after[row], document.paragraph, change(document.paragraph, at), at)
                if inputs[row] is not None
                else dict.fromkeys(INTERVENTION_READINGS, math.nan)
            ))  # fmt: skip


def record(changes: dict[str, list[float]], values: dict[str, float]) -> None:
    for name, value in values.items():
        changes[name].append(value)


def add_batch(sums: Sums, passes: Passes, batch: Sequence[Document]) -> None:
    """One batch through the four forward passes, into ``sums``."""
    base = mean_attention(passes.model, batch, [d.paragraph for d in batch])
    add_pairs(sums.original, base, batch, passes.readings, passes.max_displacement)
    add_shuffled(sums, passes, batch)
    add_interventions(sums.changes, passes.model, batch, base, passes.intervene_on)
    sums.count += len(batch)


def batches(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for document in documents:
        batch.append(document)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def reading_depth(sums: Sums, reading: Reading, min_pairs: int, weights: np.ndarray) -> Depth:
    """U* under ``reading`` with its interval over documents, and the shuffle test on the shuffled documents
    against the same documents unshuffled (a paired bootstrap: one resample of documents for both)."""
    return depth_and_curves(sums, reading, min_pairs, weights)[0]


def depth_and_curves(sums: Sums, reading: Reading, min_pairs: int, weights: np.ndarray) -> tuple[Depth, np.ndarray]:
    """``reading_depth``, and the residual curves of the bootstrap resamples behind its U* replicates
    (``[R, K + 1]``: the well's shape reads them, ``shape.shape_estimates``)."""
    stats, trend_on = sums.original[reading.name], reading.trend_on
    well = well_from(stats, min_pairs, trend_on=trend_on)
    curves = bootstrap_curves(stats, well.pairs >= min_pairs, weights, trend_on)
    depth = Estimate.of(well.depth, curve_depths(curves))
    rows = np.asarray(sums.shuffled_rows, dtype=np.int64)
    if not len(rows):
        nothing = Well(np.full_like(well.residual, np.nan), np.zeros_like(well.pairs), math.nan, -1, well.coefficients)
        return Depth(well, nothing, depth, Estimate.missing()), curves
    same_documents, shuffled = stats.subset(rows), sums.shuffled[reading.name]
    unshuffled = well_from(same_documents, min_pairs, trend_on=trend_on)
    shuffled_well = well_from(shuffled, min_pairs, trend_on=trend_on)
    eligible = (unshuffled.pairs >= min_pairs) & (shuffled_well.pairs >= min_pairs)
    w = weights[:, rows]
    replicates = bootstrap_depths(shuffled, eligible, w, trend_on) - bootstrap_depths(
        same_documents, eligible, w, trend_on
    )
    return Depth(well, shuffled_well, depth, Estimate.of(shuffled_well.depth - unshuffled.depth, replicates)), curves


def intervention_estimates(
    changes: dict[str, dict[str, list[float]]], weights: np.ndarray
) -> dict[str, dict[str, Estimate]]:
    """Reading -> intervention -> the mean change over documents with its bootstrap interval."""
    return {
        name: {
            kind: bootstrap_mean(np.asarray(changes[kind][name], dtype=np.float64), weights) for kind in INTERVENTIONS
        }
        for name in INTERVENTION_READINGS
    }


def analyze_documents(
    model: torch.nn.Module,
    documents: Iterable[Document],
    batch_size: int = 8,
    trend: str = "linear",
    max_displacement: int = 16,
    min_pairs: int = 200,
    bootstrap: int = 1000,
    seed: int = 0,
    progress: bool = True,
    keep_ends: bool = True,
    intervene_on: str = "paragraph",
) -> dict[str, Any]:
    """Stream ``documents`` through ``model`` in batches: the well under every reading of ``u_readings(trend)``,
    the shuffle test (``shuffle_paragraphs(..., keep_ends)``) and the interventions under every reading of
    ``INTERVENTION_READINGS`` (made on the coordinate ``intervene_on``: ``hierarchy``) and the main well's shape
    (``shape.shape_estimates``), with ``bootstrap`` resamples of the documents for their intervals (one set of
    resamples for every statistic of the run, the same for runs with the same documents)."""
    if intervene_on not in COORDINATES:
        raise ConfigError(f"intervene_on={intervene_on!r} is not known; allowed: {', '.join(COORDINATES)}.")
    readings = u_readings(trend)
    sums = empty_sums(readings, max_displacement)
    passes = Passes(model, readings, max_displacement, np.random.default_rng(seed), keep_ends, intervene_on)
    for batch in batches(documents, batch_size):
        add_batch(sums, passes, batch)
        if progress:
            log.info("  %d documents", sums.count)
    if sums.count < 2:
        raise ConfigError(
            f"only {sums.count} held-out document(s) with two or more paragraphs in the window: the corpus has no (or "
            f"too few) paragraph boundaries in its validation split; the hRoPE analyses need documents with paragraphs."
        )
    weights = resample_weights(sums.count, bootstrap, seed + 1)
    depths, curves = {}, {}
    for r in readings:
        depths[r.name], curves[r.name] = depth_and_curves(sums, r, min_pairs, weights)
    return {
        "documents": sums.count,
        "shuffled_documents": len(sums.shuffled_rows),
        "depths": depths,
        "interventions": intervention_estimates(sums.changes, weights),
        "shape": shape_estimates(depths["main"].well, curves["main"]),
    }


def read_run_facts(run_dir: str | Path, bootstrap: int = 0, seed: int = 0) -> RunFacts:
    """What the report shows of a run besides its analysis, read from its directory now (``RunFacts``), with
    ``bootstrap`` document replicates of its bits/byte where its results.json holds the per-document sums
    (``bits_per_byte_replicates``; 0: none)."""
    path = Path(run_dir) / RESULTS_FILE
    saved = read_json(path) if path.is_file() else None
    steps, recipe = training_steps(run_dir, saved or {})
    bpb = number_or_nan(((saved or {}).get("figures") or {}).get("val_bpb"))
    results = None if saved is None else {k: saved[k] for k in ("corpus", "sources", "data_notes") if k in saved}
    replicates = bits_per_byte_replicates(saved or {}, bpb, bootstrap, seed) if bootstrap else np.zeros(0)
    return RunFacts(bpb, steps, recipe, results, replicates)


def per_document_losses(saved: dict[str, Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """(summed loss in nats, bytes) of each held-out document at the training length, every group's documents in
    turn, as a run's results.json keeps them (``held_out.documents.GROUP.by_length.LENGTH``: ``loss.plain`` and
    ``bytes``); None where it keeps none."""
    documents = (saved.get("held_out") or {}).get("documents") or {}
    length = str((saved.get("evaluation") or {}).get("train_length") or saved.get("context_length"))
    losses, sizes = [], []
    for group in documents.values():
        at = ((group or {}).get("by_length") or {}).get(length) or {}
        loss, size = (at.get("loss") or {}).get("plain"), at.get("bytes")
        if not loss or not size or len(loss) != len(size):
            return None
        losses += loss
        sizes += size
    if not losses:
        return None
    return np.asarray(losses, dtype=np.float64), np.asarray(sizes, dtype=np.float64)


def bits_per_byte_replicates(saved: dict[str, Any], bpb: float, bootstrap: int, seed: int) -> np.ndarray:
    """Bits/byte of each of ``bootstrap`` resamples of the run's held-out documents (the summed loss over the summed
    bytes of the drawn documents), drawn as the analysis draws its own (``resample_weights(D, bootstrap, seed +
    1)``): every run of a corpus evaluates the same held-out documents, so replicate ``r`` is the same resample in
    each (the intervals over seeds and documents pair them). None kept (an empty array) where the results hold no
    per-document sums, or where they do not add up to the run's ``val_bpb`` (they would be another figure's)."""
    found = per_document_losses(saved)
    if found is None or not math.isfinite(bpb):
        return np.zeros(0)
    loss, size = found
    if not math.isclose(loss.sum() / size.sum() / math.log(2), bpb, rel_tol=1e-6):
        return np.zeros(0)
    weights = resample_weights(len(loss), bootstrap, seed + 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ loss) / (weights @ size) / math.log(2)


#: the coordinates an intervention can change
COORDINATES = ("paragraph", "sentence")


def hierarchy(encoding: Any) -> tuple[str | None, str]:
    """(variant, coordinate) of a run's encoding config: what tells its runs apart in the report besides its name
    and allocation (None: nothing), and the coordinate the interventions change.

    The write-up's interventions change the paragraph index alone, which is what the hRoPE encodings read. BiPE
    reads one coordinate as its segments (``encoding.segment``: sentences by default, the authors' split) and no
    other: with sentence segments the paragraph index moves nothing it reads, so its interventions change its
    segment index at the same places instead (a paragraph boundary is a sentence boundary: BiPE sees it as a
    segment boundary, and the fake merge joins the two segments meeting there). Its variant is ``inter:segment``
    (``rope:sentence``): BiPE-RoPE and BiPE-ALiBi are two arms."""
    if encoding.name == "bipe":
        return f"{encoding.inter}:{encoding.segment}", str(encoding.segment)
    return None, "paragraph"


def analyze_run(run_dir: str | Path, documents: int = 200, **settings: Any) -> RunAnalysis:
    """Load a finished run and analyse ``documents`` of its held-out split."""
    cfg, module, datamodule = load_run_and_data(run_dir)
    if cfg.task.name != "lm":
        raise ConfigError(f"{run_dir} is a {cfg.task.name!r} run; the hRoPE analyses need a language-model run.")
    datamodule.setup()  # idempotent: maps the prepared corpus once
    context = int(cfg.task.context_length)
    streams = (held_out_documents(g.splits["validation"], context) for g in datamodule.groups)
    chained = (d for stream in streams for d in stream)
    limited = (d for _, d in zip(range(documents), chained))
    variant, intervened = hierarchy(cfg.encoding)
    result = analyze_documents(module.model, limited, intervene_on=intervened, **settings)
    frequencies = cfg.encoding.get("frequencies")
    return RunAnalysis(
        run_dir=str(run_dir),
        encoding=str(cfg.encoding.name),
        corpus=str(cfg.corpus.name),
        seed=int(cfg.seed),
        frequencies=None if frequencies is None else str(frequencies),
        variant=variant,
        intervened=intervened,
        config=cfg,
        facts=read_run_facts(run_dir, settings.get("bootstrap", 1000), settings.get("seed", 0)),
        **result,
    )


def hrope_summary(
    analyses: list[RunAnalysis], settings: dict[str, Any], left_out: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """The one summary of a report (``hrope.json``): the settings, the runs left out (run, status), each run's
    entry (``RunAnalysis.entry``, with its document replicates), and the figures over each arm's seeds and the
    documents and the write-up's comparisons (``seeds.summary_figures``), computed from the entries as the render
    layer computes them again from the summary."""
    entries = [a.entry() for a in analyses]
    return {
        "settings": settings,
        "left_out": [{"run_dir": str(run), "status": status} for run, status in left_out],
        "runs": entries,
        **summary_figures([RunAnalysis.from_summary(entry) for entry in entries]),
    }


def merged_summary(summaries: Sequence[dict[str, Any]], names: Sequence[str]) -> dict[str, Any]:
    """One summary from several ``hrope.json`` (``names``: where each came from) of runs analysed apart, with the
    same settings: their runs' entries, and the arms and comparisons computed again over all of them, as one
    analysis of every run would give (each run's analysis depends on its own model, documents and seed alone).
    A run left out of one summary and analysed in another counts as analysed."""
    first = summaries[0]["settings"]
    for name, summary in zip(names[1:], summaries[1:]):
        differing = sorted(
            k for k in first.keys() | summary["settings"].keys() if first.get(k) != summary["settings"].get(k)
        )
        if differing:
            shown = "; ".join(
                f"{k}: {first.get(k)!r} in {names[0]}, {summary['settings'].get(k)!r} in {name}" for k in differing
            )
            raise ConfigError(
                f"the summaries were analysed with different settings ({shown}): merge only summaries "
                f"of one analysis's settings (--documents, --trend, --min-pairs, --bootstrap, --seed ...)."
            )
    entries = [entry for summary in summaries for entry in summary["runs"]]
    seen: dict[str, str] = {}
    for name, summary in zip(names, summaries):
        for entry in summary["runs"]:
            if entry["run_dir"] in seen:
                raise ConfigError(
                    f"run {entry['run_dir']} is in both {seen[entry['run_dir']]} and {name}: give each "
                    f"run's analysis once."
                )
            seen[entry["run_dir"]] = name
    left_out = [(item["run_dir"], item["status"]) for s in summaries for item in s.get("left_out", [])
                if item["run_dir"] not in seen]  # fmt: skip
    analyses = [RunAnalysis.from_summary(entry) for entry in entries]
    merged = hrope_summary(analyses, first, left_out)
    return {**merged, "runs": entries, "merged_from": list(names)}
