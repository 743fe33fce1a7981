"""``poslab analyze increments RUN_DIR``: the increments write-up's analyses for a trained checkpoint.

1. δ by byte category and layer on held-out text (the corpus's validation documents, or ``--text``):
   printed as the write-up prints it and saved as ``increments_categories.csv`` (in ``RUN_DIR/analysis/increments/``
   unless ``--output-dir`` says otherwise);
2. the picture: sentences with each character at its learned position, one row per layer
   (``increments_positions_*.png``);
3. Chinese word boundaries: ROC-AUC per layer against "jieba starts a word here" for each gap between two
   CJK characters of held-out Chinese text, of two scores (δ at the next character's lead byte; δ summed over
   its three bytes), on the held-out Wikipedia documents, the novels and all of them, beside the ceilings any
   function of the next character's lead byte (or of the next character, or of the previous character and
   the lead byte) reaches on the same gaps (``increments.boundary_table``); printed, and saved as
   ``increments_boundaries.csv`` and in ``increments_analysis.json``.

The model is run on windows of its context length; δ of every token is read from the per-layer
coordinates the encoding returns (``Transformer.forward(..., return_positions=True)``), so any rotary
encoding works (plain RoPE gives δ = 1 everywhere: a baseline). Each window's first token has no token
before it: its "increment" is the window's starting coordinate (0 for plain RoPE), not a distance, so the
category table and the AUC leave it out (a gap counts only when its next character's three bytes all lie
inside one window). Only language-model runs (task=lm) that finished successfully are analysed; anything else
is refused with one sentence.

The prepared cache records each document's ordinal, not its file; which source a held-out document came from
is read off the group's files (``validation_source_kinds``), so caches prepared before this analysis need no
change.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from poslab.analysis import increments as inc
from poslab.analysis.logging import log_analysis
from poslab.analysis.output import (
    AnalysisResult,
    sample_notes,
    steps_cell,
    training_steps,
)
from poslab.analysis.results import SUCCESS, run_status, validation_documents
from poslab.builders import load_run_and_data
from poslab.datamodules.codec import byte_length
from poslab.datamodules.corpora import PreparedGroup, PreparedSplit, decode_bytes, local_documents, resolve_corpus
from poslab.encodings.increments import increments_from_positions
from poslab.errors import ConfigError, DataError, MissingRunError
from poslab.io import read_json
from poslab.run_files import ANALYSIS_DIR, RESULTS_FILE

DEFAULT_SENTENCES = (
    "Artificial intelligence is a branch of computer science.",
    "人工智能是计算机科学的一个分支。",
)


@torch.no_grad()
def token_increments(model: torch.nn.Module, tokens: np.ndarray, context: int, batch_size: int = 32) -> np.ndarray:
    """δ ``[L, N]`` for a token stream, run in consecutive windows of ``context`` tokens (batched; a shorter
    last window alone). Each window starts counting afresh, as in training. Layers without rotation are dropped.
    """
    tokens = torch.as_tensor(np.asarray(tokens, dtype=np.int64))
    n_full = len(tokens) // context
    batches = list(tokens[: n_full * context].view(n_full, context).split(batch_size)) if n_full else []
    if len(tokens) % context:
        batches.append(tokens[n_full * context :][None])
    rows: list[np.ndarray] = []
    for batch in batches:
        layers = [p for p in model(batch, return_positions=True).positions if p is not None]
        if not layers:
            raise ConfigError("the model rotates by no coordinates: it has no position increments to analyse.")
        deltas = torch.stack([increments_from_positions(p.float().expand(len(batch), -1)) for p in layers])
        rows.append(deltas.flatten(1).cpu().numpy())  # [L, windows x T], in stream order
    return np.concatenate(rows, axis=1)


def positions_learned(model: torch.nn.Module) -> bool:
    """Whether the coordinates the model rotates by are learned: computed by trained parameters (the increments
    encodings' DeltaMLP) rather than counted (plain RoPE's 0, 1, 2, ...). Learned ones carry a gradient."""
    tokens = torch.zeros((1, 4), dtype=torch.long, device=next(model.parameters()).device)
    with torch.enable_grad():
        positions = model(tokens, return_positions=True).positions
    return any(p is not None and p.requires_grad for p in positions)


def positions_title(encoding: str, learned: bool, unit_steps: bool, steps: str) -> str:
    """The picture's title, saying what was trained: positions learned in so many training steps, or positions the
    encoding counts (plain RoPE: δ = 1 per byte, the baseline), which no training changes."""
    if learned:
        return f"{encoding}: positions learned in {steps} training steps"
    if unit_steps:
        return f"{encoding}: positions counted, not learned (δ = 1 per byte: the baseline)"
    return f"{encoding}: the positions the encoding computes, not learned"


def positions_axis_label(learned: bool, unit_steps: bool) -> str:
    """The picture's x axis, saying what the positions are: learned (the increments encodings), or the token index
    an encoding counts (plain RoPE: byte 0, 1, 2, ...), or whatever else the encoding computes."""
    if learned:
        return inc.LEARNED_POSITION
    if unit_steps:
        return "token index (byte offset: positions counted, δ = 1 per byte)"
    return "position the encoding computes (not learned)"


def within_windows(n_tokens: int, context: int) -> np.ndarray:
    """True for every token of a stream run in windows of ``context`` but the first of each window, whose δ
    is its window's starting coordinate rather than a distance to a previous token."""
    return np.arange(n_tokens) % context != 0


def gaps_within_windows(at: np.ndarray, n_tokens: int, context: int) -> np.ndarray:
    """True for each gap (the byte offset of its second character) whose scored bytes (``SCORE_BYTES``: the next
    character's three) all lie inside one window: no δ of a window's first token enters a score."""
    offsets = np.array(sorted({o for bytes_ in inc.SCORE_BYTES.values() for o in bytes_}), dtype=np.int64)
    at = np.asarray(at, dtype=np.int64).reshape(-1)
    return within_windows(n_tokens, context)[at[:, None] + offsets].all(axis=1)


def held_out_text(datamodule: Any, max_bytes: int) -> dict[str, bytes]:
    """Validation bytes of each source group of the run's corpus (documents never trained on)."""
    datamodule.setup()
    return {g.name: decode_bytes(np.asarray(g.splits["validation"].tokens[:max_bytes])) for g in datamodule.groups}


def chinese_text(raw: bytes) -> str:
    """Decodable text with Chinese in it; invalid bytes (a window cut inside a character) are dropped."""
    return raw.decode("utf-8", errors="ignore")


def validation_source_kinds(
    corpus: dict[str, Any], data_dir: str | Path, group: PreparedGroup
) -> tuple[dict[int, str], dict[str, str]]:
    """The source subset (``increments.source_kind``) of each validation document of ``group``, by ordinal, and
    of each file the group reads.

    The prepared cache records a document's ordinal (its place in the group's reading order), not its file.
    The ordinals count the documents file by file, in the order ``ResolvedGroup.documents`` reads them, so
    reading the files again tells which file each ordinal falls in; each held-out document's length is then
    checked against the cache, so files changed since preparation stop the analysis instead of mislabelling.
    """
    resolved = next(g for g in resolve_corpus(corpus, data_dir).groups if g.group.name == group.name)
    spans = list(group.splits["validation"].document_spans())
    if resolved.use_hub:  # one dataset: every document is of its kind
        kind = inc.source_kind(resolved.group.hub.path, "hub")
        return {ordinal: kind for ordinal, _, _ in spans}, {resolved.group.hub.path: kind}
    owners: list[str] = []
    lengths: list[int] = []
    files: dict[str, str] = {}
    for source, path in resolved.files:
        kind = files[str(path)] = inc.source_kind(str(path), source.file_format(path))
        for text in local_documents(source, path, resolved.decode_errors):
            owners.append(kind)
            lengths.append(byte_length(text))
    for ordinal, start, stop in spans:
        if ordinal >= len(owners) or lengths[ordinal] + 1 != stop - start:  # + 1: the separator after each
            found = f"{lengths[ordinal]:,} bytes" if ordinal < len(owners) else "no such document"
            raise DataError(
                f"cannot tell which source each held-out document of group {group.name!r} came from: the cache "
                f"{group.directory} holds document {ordinal} with {stop - start - 1:,} bytes, but reading the "
                f"group's {len(resolved.files)} files again ({len(owners):,} documents) gives {found}. The files "
                f"have changed since the cache was prepared; analyse with the files the run was trained on, or "
                f"give --zh-text FILE for the boundary AUC without the split by source."
            )
    return {ordinal: owners[ordinal] for ordinal, _, _ in spans}, files


def held_out_chinese(
    split: PreparedSplit, kinds: dict[int, str], max_bytes: int
) -> tuple[str, np.ndarray, Counter[str]]:
    """The held-out text the boundary AUC reads (``chinese_text`` of the split's first ``max_bytes`` tokens,
    separators dropped, as ``held_out_text`` gives it), the source subset of each of its UTF-8 bytes (that of
    the document the byte belongs to; ``kinds``: by ordinal), and how many documents of each subset it holds."""
    pieces: list[str] = []
    byte_kinds: list[np.ndarray] = []
    documents: Counter[str] = Counter()
    for ordinal, start, stop in split.document_spans():
        if start >= max_bytes:
            break
        piece = chinese_text(decode_bytes(np.asarray(split.tokens[start : min(stop, max_bytes)])))
        pieces.append(piece)
        byte_kinds.append(np.full(len(piece.encode("utf-8")), kinds[ordinal]))
        documents[kinds[ordinal]] += 1
    return "".join(pieces), (np.concatenate(byte_kinds) if byte_kinds else np.zeros(0, dtype=str)), documents


def analyze_increments(
    run_dir: str | Path,
    text_file: str | None = None,
    sentences: list[str] | None = None,
    zh_text_file: str | None = None,
    max_bytes: int = 200_000,
) -> AnalysisResult:
    """The three analyses of one run; files for ``RUN_DIR/analysis/increments/`` (or ``--output-dir``)."""
    status = run_status(run_dir)
    if status != SUCCESS:
        raise MissingRunError(
            f"{run_dir} is not a successful run (its results.json says status {status!r}); the increments "
            f"analyses need a run whose training finished with status {SUCCESS!r}."
        )
    cfg, module, datamodule = load_run_and_data(run_dir)
    if cfg.task.name != "lm":
        raise ConfigError(
            f"{run_dir} is a task={cfg.task.name} run; the increments analyses read δ per byte of text, so they "
            f"need a language-model run (task=lm, e.g. train.py corpus=wikitext2 encoding=increments_layer)."
        )
    tokenizer = cfg.get("corpus", {}).get("tokenizer", "bytes") if cfg.task.name == "lm" else "bytes"
    if tokenizer != "bytes":
        raise ConfigError(
            f"{run_dir} was trained with corpus.tokenizer={tokenizer!r}; the increments analyses read δ per byte "
            f"(byte categories, a character's lead byte), so they need a run with corpus.tokenizer=bytes."
        )
    model, context = module.model, int(cfg.task.get("context_length", 512))
    result = AnalysisResult("increments", "", Path(run_dir) / ANALYSIS_DIR / "increments")
    results_path = Path(run_dir) / RESULTS_FILE
    saved = read_json(results_path) if results_path.is_file() else {}
    steps = training_steps(run_dir, saved)
    lines = [
        f"run {run_dir}: encoding {cfg.encoding.name}, corpus {cfg.corpus.name}, {steps_cell(*steps)} training steps"
    ]

    # 1. categories on held-out text
    held = {} if text_file else held_out_text(datamodule, max_bytes)
    streams = {"text": Path(text_file).read_bytes()[:max_bytes]} if text_file else held
    all_tokens = np.concatenate([np.frombuffer(b, dtype=np.uint8).astype(np.int64) for b in streams.values()])
    keep = within_windows(len(all_tokens), context)
    all_tokens, deltas = all_tokens[keep], token_increments(model, all_tokens, context)[:, keep]
    names = [f"L{i}" for i in range(deltas.shape[0])]
    if np.allclose(deltas, deltas[:1]):  # the same increments in every layer (shared, or plain RoPE): one row
        deltas, names = deltas[:1], ["shared"]
    rows = inc.category_table(all_tokens, deltas, names)
    result.add_text("increments_categories.csv", inc.category_csv(rows))
    lines += [
        "",
        f"δ by byte category on {len(all_tokens):,} held-out bytes ({', '.join(streams)}; each window's first "
        f"byte left out):",
        inc.format_category_table(rows),
    ]
    documents = None
    if not text_file:  # held-out text: the documents of the run's validation split behind the table
        documents = {str(run_dir): validation_documents(saved) if saved else 0}
        lines.append(
            f"Held-out text: up to {max_bytes:,} bytes per group from {documents[str(run_dir)]:,} validation documents."
        )
    lines += sample_notes({str(run_dir): steps}, [saved] if saved else [], documents)

    # 2. the picture
    pictures = []
    learned, unit_steps = positions_learned(model), bool(np.allclose(deltas, 1.0))
    title = positions_title(cfg.encoding.name, learned, unit_steps, steps_cell(*steps))
    axis = positions_axis_label(learned, unit_steps)
    for i, sentence in enumerate(sentences or DEFAULT_SENTENCES):
        tokens = np.frombuffer(sentence.encode("utf-8"), dtype=np.uint8).astype(np.int64)
        sentence_deltas = token_increments(model, tokens, context)
        if len(names) == 1:
            sentence_deltas = sentence_deltas[:1]
        figure = inc.positions_figure(
            sentence,
            tokens,
            inc.positions_from_deltas(sentence_deltas),
            title=title,
            layer_names=names,
            position_label=axis,
        )
        pictures.append(result.add_figure(f"increments_positions_{i}.png", figure))

    # 3. Chinese word boundaries, by source
    boundary_lines, boundary_rows, boundary_sources = chinese_boundaries(
        model, context, names, datamodule, zh_text_file, bool(text_file), max_bytes
    )
    lines += ["", *boundary_lines]
    aucs = {r.layer: r.auc for r in boundary_rows if (r.subset, r.reading) == (inc.ALL_SOURCES, "lead")}
    if boundary_rows:
        result.add_text("increments_boundaries.csv", inc.boundary_csv(boundary_rows))

    summary = {
        "run": str(run_dir),
        "encoding": cfg.encoding.name,
        "categories": [asdict(row) for row in rows],
        "boundary_auc": aucs,  # all held-out gaps, δ at the next character's lead byte: the first reading
        "boundaries": {
            "scores": inc.SCORE_LABELS,
            "ceilings": {name: f"any function of the {label}" for name, label in inc.CEILING_LABELS.items()},
            "source_files": boundary_sources,  # file -> subset (increments.source_kind); empty for --zh-text
            "subsets": inc.boundary_summary(boundary_rows),
        },
    }
    result.add_json("increments_analysis.json", json.loads(json.dumps(summary, default=float)))
    result.report = "\n".join(lines)

    def log_to_the_runs_loggers(directory: Path) -> str | None:
        scalars = {f"analysis/boundary_auc/{name}": auc for name, auc in aucs.items()}
        scalars |= {boundary_key(r): r.auc for r in boundary_rows}
        scalars |= {f"analysis/boundary_gaps/{r.subset}": r.gaps for r in boundary_rows}
        scalars |= {f"analysis/delta/{row.layer}/{row.category}": row.mean for row in rows}
        images = {Path(name).stem: directory / name for name in pictures}
        tables = {
            key: (list(records[0]), [list(r.values()) for r in records])
            for key, records in (
                ("analysis/categories", [asdict(row) for row in rows]),
                ("analysis/boundaries", [asdict(row) for row in boundary_rows]),
            )
            if records
        }
        used = log_analysis(cfg, run_dir, scalars, images, tables or None)
        return f"logged to: {', '.join(used)}" if used else None

    result.after_write.append(log_to_the_runs_loggers)
    return result


def boundary_key(row: inc.BoundaryRow) -> str:
    """The logger's scalar of one boundary reading: ``analysis/boundary_auc/<subset>/<score>/<layer>`` or
    ``analysis/boundary_ceiling/<subset>/<ceiling>``."""
    if row.reading in inc.SCORE_BYTES:
        return f"analysis/boundary_auc/{row.subset}/{row.reading}/{row.layer}"
    return f"analysis/boundary_ceiling/{row.subset}/{row.reading}"


NO_CHINESE = "Chinese word boundaries: no Chinese text (give --zh-text FILE, or a corpus with a 'zh' group)."
#: layers whose δ is a function of the byte alone: the shared DeltaMLP reads the token embeddings, and so does
#: layer 0's (its residual stream is the embeddings)
BYTE_ONLY_LAYERS = ("shared", "L0")


def chinese_boundaries(
    model: torch.nn.Module,
    context: int,
    names: list[str],
    datamodule: Any,
    zh_text_file: str | None,
    other_text: bool,
    max_bytes: int,
) -> tuple[list[str], list[inc.BoundaryRow], dict[str, str]]:
    """The word-boundary section: its report lines, its rows (``increments.boundary_table``; none without
    Chinese text) and the subset of each source file. The text is ``zh_text_file`` (no sources), else the
    held-out documents of the corpus's ``zh`` group unless ``--text`` replaced the held-out text."""
    byte_kinds: np.ndarray | None = None  # the source subset of each byte of the text (held-out text only)
    documents: Counter[str] = Counter()
    source_files: dict[str, str] = {}
    zh, where = "", "held-out"
    if zh_text_file:
        zh, where = Path(zh_text_file).read_text(encoding="utf-8")[: max_bytes // 3], Path(zh_text_file).name
    elif not other_text:
        group = next((g for g in datamodule.groups if g.name == "zh"), None)
        if group is not None:
            kinds, source_files = validation_source_kinds(datamodule.corpus, datamodule.data_dir, group)
            zh, byte_kinds, documents = held_out_chinese(group.splits["validation"], kinds, max_bytes)
    if not zh:
        return [NO_CHINESE], [], {}
    zh_tokens = np.frombuffer(zh.encode("utf-8"), dtype=np.uint8).astype(np.int64)
    zh_deltas = token_increments(model, zh_tokens, context)[: len(names)]
    at, labels = inc.chinese_gaps(zh)
    keep = gaps_within_windows(at, len(zh_tokens), context)
    sources = byte_kinds[at[keep]] if byte_kinds is not None else None
    rows = inc.boundary_table(zh_tokens, zh_deltas, at[keep], labels[keep], sources, names)
    scores = "; ".join(f"{name}: {label}" for name, label in inc.SCORE_LABELS.items())
    lines = [
        f"Chinese word boundaries (jieba): ROC-AUC (0.5 = chance) on {len(zh):,} {where} characters, the gaps "
        f"between two CJK characters whose next character lies inside one window; {scores}. A ceiling is the best "
        f"AUC any function of what it names reaches on the same gaps (in-sample: an upper bound).",
    ]
    if documents:
        shown = ", ".join(f"{kind} {documents[kind]}" for kind in inc.SOURCE_KINDS if documents[kind])
        lines.append(f"Held-out documents by source (docs/increments.md: the rule): {shown}.")
    lines.append(inc.format_boundary_table(rows))
    byte_only = [name for name in names if name in BYTE_ONLY_LAYERS]
    ceilings = {r.reading: r.auc for r in rows if r.subset == inc.ALL_SOURCES and not r.layer}
    if byte_only and not math.isnan(ceilings["lead_byte"]):  # NaN: the gaps hold one class only
        lines.append(
            f"{' and '.join(byte_only)}: δ there is a function of the byte alone, so its lead score cannot beat the "
            f"lead-byte ceiling ({ceilings['lead_byte']:.3f} on all gaps, {ceilings['lead_byte'] - 0.5:+.3f} from "
            f"chance: an AUC near 0.5 there is built in, not a finding about the model) nor its char score the "
            f"next-character ceiling ({ceilings['next_character']:.3f})."
        )
    return lines, rows, source_files
