"""Every recipe is run, always: each file in conf/experiment/ (found by globbing: a recipe added later is in
this test without anyone editing it) trains for 2 steps on the CPU and its analysis runs on the saved model.

A recipe keeps its own precision (bf16-mixed for the GPU recipes), optimizer, clipping, schedule (its form:
warm-up and cosine over the 2 steps), tokenizer (BPE: only the vocabulary shrinks), attention backend and
compile settings. Only these change:

- the accelerator: ``trainer.accelerator=cpu``, ``trainer.devices=1`` (and ``strategy=auto``, one node, for a
  data-parallel recipe), ``threads=1``;
- the sizes: at most 2 layers and 2 heads of 24 features, the MLP's hidden width, the context (64 tokens),
  batch, validation windows and evaluation sets, the BPE vocabulary (320);
- the length: ``trainer.max_steps=2``, validation every 2 steps;
- the data: a fixture corpus in a temporary directory made from each corpus config's own local patterns
  (``paths.data_dir``; a ``{stdlib}`` pattern is pointed at the fixture's own Python files), with a quarter of
  the documents held out;
- ``model.attention=flex`` (FlexAttention has no backward on a CPU) trains with ``sdpa``: the same function
  (tests/lightning_modules/test_speed_options.py checks they agree), said in the test's id.

Which analysis a recipe gets follows from its config, not its name: a recipe that is a sweep (``hydra.sweeper
.params``) trains its first and last jobs and gets ``poslab report grid``; a language model with a BPE
tokenizer (the hRoPE arms) gets ``poslab analyze hrope``, each arm on one corpus of conf/corpus/ (but
``synthetic``), paired in turn so that every arm runs once and every corpus at least once (``hrope_pairs``: not
every arm on every corpus, which is 48 runs of one code path); a byte-level language model (the increments
recipes) gets ``poslab analyze increments`` on its own corpus.
"""

from __future__ import annotations

import functools
import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import DictConfig, OmegaConf

from poslab.cli import main
from poslab.datamodules.corpora import STDLIB, LocalSource
from poslab.running.builders import load_run
from poslab.running.compose import SYNTHETIC_TASKS
from poslab.running.training import run
from poslab.runs.files import MODEL_FILE, RESULTS_FILE
from tests.conftest import CONF, compose_config

# context_extension continues a trained parent run: tests/running/test_context_extension.py runs it from one
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if p.stem != "context_extension")
CORPORA = sorted(p.stem for p in (CONF / "corpus").glob("*.yaml") if p.stem != "synthetic")
HEADINGS = ("第{i}回 标题", "Chapter {i}", "# Document {i}", "= Document {i} =")  # for a document_start regex
DOCUMENTS = 40


def sweep_jobs(experiment: str) -> list[list[str]]:
    """The overrides of the first and the last job of a recipe's sweep (empty: not a sweep)."""
    params = OmegaConf.load(CONF / "experiment" / f"{experiment}.yaml").get("hydra", {}).get("sweeper", {})
    params = params.get("params") or {}
    if not params:
        return []
    choices = [[f"{key}={value.strip()}" for value in str(values).split(",")] for key, values in params.items()]
    jobs = list(itertools.product(*choices))
    return [list(jobs[0]), list(jobs[-1])] if len(jobs) > 1 else [list(jobs[0])]


@functools.cache  # composing a recipe takes a while: the cases and the test of them ask once
def recipe_kind(experiment: str) -> str:
    if sweep_jobs(experiment):
        return "sweep"
    cfg = compose_config([f"experiment={experiment}"])
    if cfg.task.name in SYNTHETIC_TASKS:
        return "synthetic"
    return "hrope" if cfg.corpus.get("tokenizer", "bytes") == "bpe" else "increments"


def hrope_pairs(arms: list[str], corpora: list[str]) -> list[tuple[str, str]]:
    """Each arm with a corpus, both taken in turn: every arm once and every corpus at least once (as many pairs as
    the longer list; an arm runs again only when there are more corpora than arms)."""
    return [(arms[i % len(arms)], corpora[i % len(corpora)]) for i in range(max(len(arms), len(corpora)))]


def cases() -> list[Any]:
    kinds = {experiment: recipe_kind(experiment) for experiment in EXPERIMENTS}
    arms = [experiment for experiment, kind in kinds.items() if kind == "hrope"]
    out = [pytest.param(e, kind, None, id=e) for e, kind in kinds.items() if kind != "hrope"]
    out += [pytest.param(arm, "hrope", corpus, id=f"{arm}-{corpus}") for arm, corpus in hrope_pairs(arms, CORPORA)]
    return out


# ---------------------------------------------------------------------------------------------- the fixture


def english_document(i: int) -> list[str]:
    return [f"Paragraph {p} of document {i}. It has {p * i} words here. More text follows." for p in range(5)]


def chinese_document(i: int) -> list[str]:
    return [f"人工智能是计算机科学的一个分支。第{i}篇第{p}段。机器学习很有用！" for p in range(4)]


def python_document(i: int) -> str:
    return "\n\n".join(
        f'def function_{i}_{p}(x):\n    """Return x plus {p}."""\n    y = x + {p}\n    return y * {i}' for p in range(5)
    )


def wikitext_document(i: int, paragraphs: list[str]) -> str:
    body = "".join(f" {p} \n \n" for p in paragraphs)
    return f" = Article {i} = \n \n{body} = = Section = = \n \n More text {i} . \n \n"


def concrete(pattern: str, k: int) -> str:
    """A file name the glob ``pattern`` matches."""
    name = pattern.replace("**/", "").replace("**", f"d{k}").replace("*", f"fixture{k}").replace("?", "x")
    return re.sub(r"\[([^\]])[^\]]*\]", r"\1", name)


def write_source(data_dir: Path, source: LocalSource) -> None:
    """Fixture files for one local source of a corpus config, in its format: several documents with paragraphs
    and sentences (Chinese where the pattern says zh)."""
    chinese = "zh" in source.pattern.lower()
    texts = [("\n\n".join(chinese_document(i) if chinese else english_document(i)), i) for i in range(DOCUMENTS)]
    wildcard = any(c in source.pattern for c in "*?[")
    fmt = source.file_format(Path(concrete(source.pattern, 0)))
    if fmt == "jsonl":
        files = {concrete(source.pattern, 0): "".join(json.dumps({source.field: t}) + "\n" for t, _ in texts)}
    elif fmt == "wikitext":
        files = {concrete(source.pattern, 0): "".join(wikitext_document(i, english_document(i)) for i in range(40))}
    elif fmt == "text" and source.document_start:
        heading = next((h for h in HEADINGS if re.match(source.document_start, h.format(i=1))), None)
        assert heading, f"no fixture heading matches document_start={source.document_start!r}: add one to HEADINGS"
        files = {concrete(source.pattern, 0): "".join(f"{heading.format(i=i)}\n\n{t}\n\n" for t, i in texts)}
    else:  # one document per file (python, plain text): several files where the pattern allows
        make = python_document if fmt == "python" else (lambda i: texts[i][0])
        count = DOCUMENTS // 2 if wildcard else 1
        files = {concrete(source.pattern, k): make(k) for k in range(count)}
    assert fmt != "parquet", "the fixture writes no parquet files: add a writer here"
    for name, text in files.items():
        path = data_dir / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def local_sources(corpus: DictConfig) -> list[tuple[str, int, LocalSource]]:
    return [
        (group, i, LocalSource(**OmegaConf.to_container(entry, resolve=True)))
        for group, settings in corpus.groups.items()
        for i, entry in enumerate(settings.get("local") or [])
    ]


def corpus_overrides(corpus: str, data_dir: Path) -> list[str]:
    """``corpus=NAME``, and for a corpus that reads a path given on the command line (``corpus=local``, its
    ``corpus.path`` null) a fixture folder of its own."""
    if not ("path" in (cfg := compose_config([f"corpus={corpus}"]).corpus) and cfg.path is None):
        return [f"corpus={corpus}"]
    folder = data_dir / "paths" / corpus
    folder.mkdir(parents=True, exist_ok=True)  # a folder (its files by format), not a file of that name
    return [f"corpus={corpus}", f"corpus.path={folder}"]


def fixture_pattern(pattern: str) -> str:
    """``{stdlib}/...`` (the standard library: thousands of files) becomes the fixture's ``stdlib/...``."""
    return pattern.replace(STDLIB, "stdlib")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    """One data directory with fixture files for every corpus config, and one cache shared by the recipes (the
    hRoPE arms on one corpus prepare it and train its BPE once)."""
    root = tmp_path_factory.mktemp("recipes")
    for corpus in CORPORA:
        cfg = compose_config(corpus_overrides(corpus, root / "data"))
        for _, _, source in local_sources(cfg.corpus):
            source.pattern = fixture_pattern(source.pattern)
            write_source(root / "data", source)
    return {"data": root / "data", "cache": root / "cache"}


# ------------------------------------------------------------------------------------------------ the runs


def shrink(recipe: DictConfig) -> list[str]:
    """Overrides for the accelerator, the sizes and the length; everything else stays the recipe's."""
    heads = min(int(recipe.model.n_heads), 2)
    out = [
        "trainer.accelerator=cpu",
        "trainer.devices=1",
        "trainer.max_steps=2",
        "threads=1",
        "~callbacks.progress_bar",
        f"model.n_layers={min(int(recipe.model.n_layers), 2)}",
        f"model.n_heads={heads}",
        f"model.d_model={24 * heads}",  # head dimension 24: hRoPE's three blocks of 8
    ]
    if recipe.model.get("mlp_hidden"):
        out.append("model.mlp_hidden=64")
    if recipe.trainer.get("strategy") not in (None, "auto"):
        out += ["trainer.strategy=auto", "trainer.num_nodes=1"]
    if recipe.model.get("attention") == "flex":
        out.append("model.attention=sdpa")  # FlexAttention cannot train on a CPU (no backward there)
    if recipe.task.name in SYNTHETIC_TASKS:
        out += ["task.batch_size=8", "task.eval_size=16", "task.eval_batch_size=16"]
    else:
        out += [
            "task.context_length=64",
            "task.batch_size=2",
            "task.val_windows=2",
            "task.eval_batch_size=2",
            "task.val_every_n_steps=2",
            "task.passkey.trials=1",  # the passkey grid: one key per distance, at half depth
            "task.passkey.depths=[0.5]",
        ]
        if recipe.corpus.get("tokenizer") == "bpe":
            out.append("corpus.vocab_size=320")
    return out


def train(overrides: list[str], run_dir: Path, data: dict[str, Path] | None) -> DictConfig:
    """Compose the recipe with the CPU overrides and the fixture data, train it, check model.pt; its config."""
    recipe = compose_config(overrides, run_dir)
    paths = [f"paths.data_dir={data['data']}", f"paths.cache_dir={data['cache']}"] if data else []
    cfg = compose_config([*overrides, *shrink(recipe), *paths], run_dir)
    if data:
        OmegaConf.update(cfg, "corpus.validation_fraction", 0.25)
        for group, i, source in local_sources(cfg.corpus):
            OmegaConf.update(cfg, f"corpus.groups.{group}.local.{i}.pattern", fixture_pattern(source.pattern))
    # what the recipe decides is what ran
    kept = ("trainer.precision", "model.compile", "corpus.tokenizer", "encoding", "task.name", "seed")
    kept += tuple(f"optimizer.{k}" for k in recipe.optimizer if k != "total_steps")  # total_steps: max_steps

    def as_written(node: Any) -> Any:  # interpolations unresolved: original_length follows the shrunk context
        return OmegaConf.to_container(node, resolve=False) if isinstance(node, DictConfig) else node

    for key in kept:
        assert as_written(OmegaConf.select(cfg, key)) == as_written(OmegaConf.select(recipe, key)), key
    if recipe.trainer.accelerator == "gpu":
        assert cfg.trainer.precision == "bf16-mixed"  # the GPU recipes' own precision, run on the CPU

    results = run(cfg)
    assert results["steps"] == 2
    saved = torch.load(run_dir / MODEL_FILE, map_location="cpu", weights_only=True)["state_dict"]
    assert {v.dtype for v in saved.values() if v.is_floating_point()} == {torch.float32}  # fp32 weights
    loaded, module = load_run(run_dir)
    assert loaded.encoding.name == cfg.encoding.name and not module.training
    return cfg


@pytest.mark.slow
@pytest.mark.parametrize(("experiment", "kind", "corpus"), cases())
def test_recipe_trains_on_the_cpu_and_its_analysis_runs(experiment, kind, corpus, data, tmp_path):
    base = [f"experiment={experiment}", *(corpus_overrides(corpus, data["data"]) if corpus else [])]
    out = tmp_path / "analysis"
    if kind == "sweep":
        multirun, jobs = tmp_path / "multirun", sweep_jobs(experiment)
        text = any(override.startswith("corpus=") for job in jobs for override in job)  # lm_zoo: its corpora
        for k, job in enumerate(jobs):
            cfg = train([*base, *job], multirun / str(k), data if text else None)
        assert text or cfg.task.name in SYNTHETIC_TASKS
        assert len(list(multirun.rglob(RESULTS_FILE))) == len(jobs)
        report = "length" if text else "grid"  # a language-model sweep's report: by evaluation length
        assert main(["report", report, str(multirun), "--output-dir", str(out)]) == 0
    elif kind == "synthetic":  # a single synthetic run: its figures are the analysis
        cfg = train(base, tmp_path / "run", None)
    elif kind == "hrope":
        train(base, tmp_path / "run", data)
        argv = ["analyze", "hrope", str(tmp_path / "run"), "--output-dir", str(out), "--documents", "2"]
        assert main([*argv, "--bootstrap", "10", "--min-pairs", "1"]) == 0
    else:
        train(base, tmp_path / "run", data)
        argv = ["analyze", "increments", str(tmp_path / "run"), "--output-dir", str(out), "--max-bytes", "2000"]
        assert main(argv) == 0
    assert kind == "synthetic" or any(out.iterdir())  # the analysis wrote its files


def test_every_hrope_arm_and_every_corpus_is_a_case():
    ids = [case.id for case in cases()]
    arms = [e for e in EXPERIMENTS if recipe_kind(e) == "hrope"]
    assert arms and all(sum(i.startswith(f"{arm}-") for i in ids) == 1 for arm in arms)
    assert all(any(i.endswith(f"-{corpus}") for i in ids) for corpus in CORPORA)
    assert set(ids) >= {e for e in EXPERIMENTS if recipe_kind(e) != "hrope"}
    assert hrope_pairs(["a"], ["x", "y", "z"]) == [("a", "x"), ("a", "y"), ("a", "z")]  # more corpora than arms
