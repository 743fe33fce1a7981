"""``poslab analyze increments RUN_DIR``: the increments write-up's analyses for a trained checkpoint.

1. δ by byte category and layer on held-out text (the corpus's validation documents, or ``--text``):
   printed as the write-up prints it and saved as ``increments_categories.csv`` (in ``RUN_DIR/analysis/increments/``
   unless ``--output-dir`` says otherwise);
2. the picture: sentences with each character at its learned position, one row per layer
   (``increments_positions_*.png``);
3. Chinese word boundaries: ROC-AUC per layer of the increment at a character's lead byte against
   "jieba starts a word here", on held-out Chinese text.

The model is run on windows of its context length; δ of every token is read from the per-layer
coordinates the encoding returns (``Transformer.forward(..., return_positions=True)``), so any rotary
encoding works (plain RoPE gives δ = 1 everywhere: a baseline). Each window's first token has no token
before it: its "increment" is the window's starting coordinate (0 for plain RoPE), not a distance, so the
category table and the AUC leave it out. Only language-model runs (task=lm) that finished successfully are
analysed; anything else is refused with one sentence.
"""

from __future__ import annotations

import json
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
from poslab.datamodules.corpora import decode_bytes
from poslab.encodings.increments import increments_from_positions
from poslab.errors import ConfigError, MissingRunError
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


def within_windows(n_tokens: int, context: int) -> np.ndarray:
    """True for every token of a stream run in windows of ``context`` but the first of each window, whose δ
    is its window's starting coordinate rather than a distance to a previous token."""
    return np.arange(n_tokens) % context != 0


def boundary_auc_within_windows(text: str, tokens: np.ndarray, deltas: np.ndarray, context: int) -> list[float]:
    """``increments.boundary_auc``, leaving out the gaps that fall on a window's first token."""
    if np.asarray(tokens).tolist() != list(text.encode("utf-8")):
        raise ValueError("tokens must be text encoded as UTF-8")
    at, labels = inc.chinese_gaps(text)
    keep = within_windows(len(tokens), context)[at] if len(at) else np.zeros(0, dtype=bool)
    return [inc.roc_auc(row[at[keep]], labels[keep]) for row in deltas]


def held_out_text(datamodule: Any, max_bytes: int) -> dict[str, bytes]:
    """Validation bytes of each source group of the run's corpus (documents never trained on)."""
    datamodule.setup()
    return {g.name: decode_bytes(np.asarray(g.splits["validation"].tokens[:max_bytes])) for g in datamodule.groups}


def chinese_text(raw: bytes) -> str:
    """Decodable text with Chinese in it; invalid bytes (a window cut inside a character) are dropped."""
    return raw.decode("utf-8", errors="ignore")


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
    for i, sentence in enumerate(sentences or DEFAULT_SENTENCES):
        tokens = np.frombuffer(sentence.encode("utf-8"), dtype=np.uint8).astype(np.int64)
        sentence_deltas = token_increments(model, tokens, context)
        if len(names) == 1:
            sentence_deltas = sentence_deltas[:1]
        figure = inc.positions_figure(
            sentence,
            tokens,
            inc.positions_from_deltas(sentence_deltas),
            title=f"{cfg.encoding.name}: learned positions",
            layer_names=names,
        )
        pictures.append(result.add_figure(f"increments_positions_{i}.png", figure))

    # 3. Chinese word boundaries
    if zh_text_file:
        zh = Path(zh_text_file).read_text(encoding="utf-8")[: max_bytes // 3]
    else:
        zh = chinese_text(held.get("zh", b""))
    aucs: list[float] = []
    if zh:
        zh_tokens = np.frombuffer(zh.encode("utf-8"), dtype=np.uint8).astype(np.int64)
        zh_deltas = token_increments(model, zh_tokens, context)[: len(names)]
        aucs = boundary_auc_within_windows(zh, zh_tokens, zh_deltas, context)
        n_gaps = len(inc.chinese_gaps(zh)[0])
        lines += [
            "",
            f"Chinese word boundaries (jieba) on {len(zh):,} held-out characters, {n_gaps:,} gaps; "
            "ROC-AUC of the increment at the next character's lead byte (0.5 = chance):",
        ]
        lines += [f"  {name}: {auc:.3f}" for name, auc in zip(names, aucs)]
    else:
        lines += ["", "Chinese word boundaries: no Chinese text (give --zh-text FILE, or a corpus with a 'zh' group)."]

    summary = {
        "run": str(run_dir),
        "encoding": cfg.encoding.name,
        "categories": [asdict(row) for row in rows],
        "boundary_auc": dict(zip(names, aucs)),
    }
    result.add_json("increments_analysis.json", json.loads(json.dumps(summary, default=float)))
    result.report = "\n".join(lines)

    def log_to_the_runs_loggers(directory: Path) -> str | None:
        scalars = {f"analysis/boundary_auc/{name}": auc for name, auc in zip(names, aucs)}
        scalars |= {f"analysis/delta/{row.layer}/{row.category}": row.mean for row in rows}
        images = {Path(name).stem: directory / name for name in pictures}
        categories = [asdict(row) for row in rows]
        table = (list(categories[0]), [list(row.values()) for row in categories]) if categories else None
        used = log_analysis(cfg, run_dir, scalars, images, {"analysis/categories": table} if table else None)
        return f"logged to: {', '.join(used)}" if used else None

    result.after_write.append(log_to_the_runs_loggers)
    return result
