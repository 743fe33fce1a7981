"""``poslab analyze increments RUN_DIR``, the compute layer: load the checkpoint, read δ of every token, and return
the summary (``increments_analysis.json``) that holds everything the render layer draws and prints.

1. δ by byte category and layer on held-out text (the corpus's validation documents, or ``--text``);
2. δ of the sentences the picture draws (each character at its learned position, one row per layer);
3. Chinese word boundaries: ROC-AUC per layer against "jieba starts a word here" for each gap between two
   CJK characters of held-out Chinese text (or ``--zh-text``), of two scores, per source subset, beside the
   in-sample ceilings (``readings.boundary_table``).

The model is run on windows of its context length; δ of every token is read from the per-layer
coordinates the encoding returns (``Transformer.forward(..., return_positions=True)``), so any rotary
encoding works (plain RoPE gives δ = 1 everywhere: a baseline). Each window's first token has no token
before it: its "increment" is the window's starting coordinate (0 for plain RoPE), not a distance, so the
category table and the AUC leave it out (a gap counts only when its next character's three bytes all lie
inside one window). Only language-model runs (task=lm, byte tokens) that finished successfully are analysed;
anything else is refused with one sentence.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from poslab.analysis.increments.held_out import (
    gaps_within_windows,
    held_out_chinese,
    held_out_text,
    validation_source_kinds,
    within_windows,
)
from poslab.analysis.increments.readings import (
    ALL_SOURCES,
    CEILING_LABELS,
    SCORE_LABELS,
    boundary_summary,
    boundary_table,
    category_table,
)
from poslab.analysis.increments.text import chinese_gaps
from poslab.analysis.output import sample_notes, training_steps
from poslab.encodings.increments import increments_from_positions
from poslab.errors import ConfigError, MissingRunError
from poslab.io import read_json
from poslab.running.builders import load_run_and_data
from poslab.runs.files import RESULTS_FILE
from poslab.runs.results import SUCCESS, run_status, validation_documents

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


def byte_tokens(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8).astype(np.int64)


def load_lm_run(run_dir: str | Path) -> tuple[DictConfig, Any, Any]:
    """The run's config, module and datamodule, once it is known to be a finished byte-level language model."""
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
    tokenizer = cfg.get("corpus", {}).get("tokenizer", "bytes")
    if tokenizer != "bytes":
        raise ConfigError(
            f"{run_dir} was trained with corpus.tokenizer={tokenizer!r}; the increments analyses read δ per byte "
            f"(byte categories, a character's lead byte), so they need a run with corpus.tokenizer=bytes."
        )
    return cfg, module, datamodule


def category_deltas(
    model: torch.nn.Module, context: int, streams: dict[str, bytes]
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """The streams' tokens and δ without each window's first token, and the layers' names: one ``shared`` row
    when every layer has the same increments (a shared DeltaMLP, or plain RoPE)."""
    tokens = np.concatenate([byte_tokens(b) for b in streams.values()])
    keep = within_windows(len(tokens), context)
    tokens, deltas = tokens[keep], token_increments(model, tokens, context)[:, keep]
    if np.allclose(deltas, deltas[:1]):
        return tokens, deltas[:1], ["shared"]
    return tokens, deltas, [f"L{i}" for i in range(deltas.shape[0])]


def sentence_deltas(model: torch.nn.Module, context: int, sentences: list[str], layers: int) -> list[dict[str, Any]]:
    """δ ``[layers, N]`` of each sentence the picture draws, as JSON (float32 values: exact as JSON floats)."""
    drawn = []
    for sentence in sentences:
        deltas = token_increments(model, byte_tokens(sentence.encode("utf-8")), context)
        drawn.append({"text": sentence, "deltas": (deltas[:1] if layers == 1 else deltas).tolist()})
    return drawn


@dataclass
class ChineseText:
    """The Chinese text the boundary AUC reads: where it is from (``held-out``, or the ``--zh-text`` file's name),
    the source subset of each of its bytes (held-out text only), each source file's subset, documents per subset."""

    text: str = ""
    where: str = "held-out"
    byte_kinds: np.ndarray | None = None
    source_files: dict[str, str] = field(default_factory=dict)
    documents: dict[str, int] = field(default_factory=dict)


def boundary_text(datamodule: Any, zh_text_file: str | None, other_text: bool, max_bytes: int) -> ChineseText:
    """``zh_text_file`` (no sources), else the held-out documents of the corpus's ``zh`` group unless ``--text``
    replaced the held-out text; empty text when there is none."""
    if zh_text_file:
        return ChineseText(Path(zh_text_file).read_text(encoding="utf-8")[: max_bytes // 3], Path(zh_text_file).name)
    group = None if other_text else next((g for g in datamodule.groups if g.name == "zh"), None)
    if group is None:
        return ChineseText()
    kinds, source_files = validation_source_kinds(datamodule.corpus, datamodule.data_dir, group)
    text, byte_kinds, documents = held_out_chinese(group.splits["validation"], kinds, max_bytes)
    return ChineseText(text, "held-out", byte_kinds, source_files, {kind: n for kind, n in documents.items() if n})


def boundary_section(model: torch.nn.Module, context: int, names: list[str], zh: ChineseText) -> dict[str, Any]:
    """The summary's ``boundaries``: the scores' and ceilings' labels, each source file's subset, the table per
    subset (``readings.boundary_summary``; empty without Chinese text) and the text it was read on."""
    subsets: dict[str, Any] = {}
    if zh.text:
        zh_tokens = byte_tokens(zh.text.encode("utf-8"))
        zh_deltas = token_increments(model, zh_tokens, context)[: len(names)]
        at, labels = chinese_gaps(zh.text)
        keep = gaps_within_windows(at, len(zh_tokens), context)
        sources = zh.byte_kinds[at[keep]] if zh.byte_kinds is not None else None
        subsets = boundary_summary(boundary_table(zh_tokens, zh_deltas, at[keep], labels[keep], sources, names))
    return {
        "scores": SCORE_LABELS,
        "ceilings": {name: f"any function of the {label}" for name, label in CEILING_LABELS.items()},
        "source_files": zh.source_files if zh.text else {},  # file -> subset (source_kind); empty for --zh-text
        "subsets": subsets,
        "characters": len(zh.text),
        "text": zh.where,
        "documents": zh.documents if zh.text else {},  # held-out documents per subset
    }


@dataclass(frozen=True)
class IncrementsOptions:
    """What ``poslab analyze increments`` reads of a run besides its model (its options, for the compute layer and
    the report alike)."""

    text_file: str | None = None  # --text: the category table's text (None: the run's held-out data)
    sentences: list[str] | None = None  # --sentence: the sentences drawn (None: DEFAULT_SENTENCES)
    zh_text_file: str | None = None  # --zh-text: Chinese text for the word boundaries (None: the corpus's zh group)
    max_bytes: int = 200_000  # --max-bytes: the most bytes read of each text


def increments_summary(
    run_dir: str | Path, options: IncrementsOptions = IncrementsOptions()
) -> tuple[dict[str, Any], DictConfig]:
    """The three analyses of one run as the summary (JSON-ready: it reads back from the file as it is here), and
    the run's config (for its loggers)."""
    text_file, max_bytes = options.text_file, options.max_bytes
    cfg, module, datamodule = load_lm_run(run_dir)
    model, context = module.model, int(cfg.task.get("context_length", 512))
    results_path = Path(run_dir) / RESULTS_FILE
    saved = read_json(results_path) if results_path.is_file() else {}
    steps = training_steps(run_dir, saved)
    streams = {"text": Path(text_file).read_bytes()[:max_bytes]} if text_file else held_out_text(datamodule, max_bytes)
    tokens, deltas, names = category_deltas(model, context, streams)
    documents = None if text_file else validation_documents(saved) if saved else 0
    per_run = None if documents is None else {str(run_dir): documents}
    notes = sample_notes({str(run_dir): steps}, [saved] if saved else [], per_run)
    zh = boundary_text(datamodule, options.zh_text_file, bool(text_file), max_bytes)
    boundaries = boundary_section(model, context, names, zh)
    every = boundaries["subsets"].get(ALL_SOURCES, {}).get("auc", {}).get("lead", {})
    summary = {
        "run": str(run_dir),
        "encoding": cfg.encoding.name,
        "categories": [asdict(row) for row in category_table(tokens, deltas, names)],
        "boundary_auc": {name: float("nan") if auc is None else auc for name, auc in every.items()},
        "boundaries": boundaries,
        "corpus": cfg.corpus.name,
        "steps": steps,  # (trained, the recipe's)
        "layers": names,
        "category_text": {"bytes": len(tokens), "streams": list(streams), "max_bytes": max_bytes},
        "validation_documents": documents,  # behind the category table; None for --text
        "notes": notes,  # the sample's warnings and data lines (output.sample_notes)
        "pictures": {
            "learned": positions_learned(model),
            "unit_steps": bool(np.allclose(deltas, 1.0)),
            "sentences": sentence_deltas(model, context, list(options.sentences or DEFAULT_SENTENCES), len(names)),
        },
    }
    return json.loads(json.dumps(summary, default=float)), cfg
