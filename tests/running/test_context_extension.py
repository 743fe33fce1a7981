"""Context extension by fine-tuning (issue 25 item 4): ``experiment=context_extension`` continues a finished language
model at 4x its context, with a rule or none, in a new run directory that records its parent; an unfit parent is
refused with one sentence, exit status 2 and nothing written (``poslab/running/extension.py``)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from poslab.config.settings import shortest_eval_length
from poslab.running.extension import extended_config
from tests.conftest import compose_config, run_train, write_word_documents

#: a parent small enough for a few CPU seconds: the where_am_i model on 16-byte windows
SMALL = [
    "model=tiny",
    "task.context_length=16",
    "task.batch_size=4",
    "task.val_windows=2",
    "task.val_every_n_steps=10",
    "~logger",
    "~callbacks",
]
#: the parents the tests extend (trained once per module): encoding and steps
#: (rope: each rule's test figure, one round: the extension is set beside its parent's rule at test time)
PARENTS = {"rope": ["encoding=rope", "trainer.max_steps=20", "task.every_way_on_test=true"]}
PARENTS["none"] = ["encoding=none", "trainer.max_steps=4"]
#: a table of 16 rows (evaluated at its context only), which the extension's longer sequences outgrow
PARENTS["learned"] = ["encoding=learned", "trainer.max_steps=2", "task.eval_lengths=[16]"]


def write_corpus(root: Path) -> Path:
    """40 small text files of seeded random words: 23k training and 10k held-out bytes."""
    return write_word_documents(root / "notes", paragraphs=3, words=40, name="doc{i}.txt")


def local(root: Path) -> list[str]:
    cache = f"paths.cache_dir={root / 'cache'}"
    return ["corpus=local", f"corpus.path={root / 'notes'}", "corpus.validation_fraction=0.3", cache]


def with_status(source: Path, target: Path, **changes: object) -> Path:
    """A copy of the run ``source`` whose results.json has ``changes`` (``results=None``: none at all)."""
    shutil.copytree(source, target)
    path = target / "results.json"
    if changes.pop("results", True) is None:
        path.unlink()
        return target
    results = json.loads(path.read_text())
    path.write_text(json.dumps({**results, **changes}))
    return target


@pytest.fixture(scope="module")
def parents(tmp_path_factory) -> dict[str, Path]:
    """Finished parents (rope, NoPE, learned language models; a lag model) and unfit copies of the rope one."""
    from poslab.running.training import run

    root = tmp_path_factory.mktemp("parents")
    write_corpus(root)
    made = {"root": root}
    for name, extra in PARENTS.items():
        made[name] = root / name
        run(compose_config([*local(root), *SMALL, *extra], made[name]))
    made["lag"] = root / "lag"
    run(compose_config(["task=lag", "debug=small", "trainer.max_steps=2", "~logger", "~callbacks"], made["lag"]))
    made["unfinished"] = with_status(made["rope"], root / "unfinished", results=None)
    made["failed"] = with_status(made["rope"], root / "failed", status="failed")
    made["diverged"] = with_status(made["rope"], root / "diverged", status="diverged", diverged_at_step=7)
    config = json.loads((made["rope"] / "results.json").read_text())["config"]
    ruled = {**config, "encoding": {**config["encoding"], "scaling": "yarn", "scaling_factor": 4.0}}
    made["extended"] = with_status(made["rope"], root / "extended", config=ruled)  # an extension itself
    return made


def snapshot(directory: Path) -> dict[str, str]:
    """Every file below ``directory`` and the sha256 of its bytes."""
    files = [p for p in sorted(directory.rglob("*")) if p.is_file()]
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def extension_command(parent: Path, *extra: str) -> list[str]:
    return ["experiment=context_extension", f"parent={parent}", f"paths.cache_dir={parent.parent / 'cache'}", *extra]


def saved_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "model.pt", map_location="cpu", weights_only=True)["state_dict"]


# ---- end to end -----------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_an_extension_with_yarn_trains_at_four_times_the_context_and_records_its_parent(parents, tmp_path):
    from poslab.running.checks import check_config
    from poslab.runs.results import read_results

    parent, before = parents["rope"], snapshot(parents["rope"])
    command = extension_command(parent, "extension.rule=yarn")
    done = run_train(command, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "runs").iterdir()
    assert run_dir.name.endswith("_lm_notes_rope_x4_yarn")
    results = read_results(run_dir)  # the reports read it
    parent_results = json.loads((parent / "results.json").read_text())
    assert results["status"] == "success" and results["label"] == "rope:yarn4"
    assert results["context_length"] == 64 and results["extended_from"] == 16
    assert results["steps"] == 2  # 10% of the parent's 20
    config = results["config"]
    assert config["encoding"] | {"scaling": "yarn", "scaling_factor": 4.0, "original_length": 16} == config["encoding"]
    assert config["optimizer"]["lr"] == pytest.approx(0.1 * parent_results["config"]["optimizer"]["lr"])
    assert config["model"] == parent_results["config"]["model"] and config["seed"] == parent_results["seed"]
    recorded = results["parent"]
    assert recorded["path"] == str(parent.resolve()) and recorded["name"] == "lm_notes_rope"
    assert recorded["model_sha256"] == hashlib.sha256((parent / "model.pt").read_bytes()).hexdigest()
    expected = hashlib.sha256(json.dumps(parent_results["config"], sort_keys=True).encode()).hexdigest()
    assert recorded["config_sha256"] == expected and recorded["context_length"] == 16
    comparison = results["extension"]["test_time_comparison"]
    assert results["extension"]["rule"] == "yarn" and comparison["variant"] == "test_yarn"
    assert comparison["run"] == str(parent.resolve()) and comparison["parent_figures"] == parent_results["figures"]
    # evaluated from the parent's context up, 1x to 16x L (below its own 4L too), on the parent's sample of tokens
    assert config["task"]["eval_lengths"] == [16, 32, 64, 128, 256]
    assert {"16", "32", "64", "128", "256"} <= set(results["figures"]) and results["figures"]["val_loss"] > 0
    assert results["evaluation"]["tokens_per_group"] == parent_results["evaluation"]["tokens_per_group"]
    assert results["evaluation"]["train_length"] == 64 and results["loss_by_position"]["train_length"] == 64
    assert "bpb_test_yarn" in parent_results["figures"]["64"]  # the comparison: the parent under test_yarn at 4L
    assert snapshot(parent) == before  # the parent is read, never written
    # an interrupted extension resumes like any run: the same command composes the same model (check_resume passes)
    check_config(compose_config([*command, "ckpt_path=last"], run_dir))


@pytest.mark.slow
def test_an_extension_without_a_rule_continues_nope_from_its_parents_weights(parents, tmp_path):
    """Rule none suits every encoding (a baseline: 4x the context, no rule); at learning rate 0 the extension's
    trained weights are its parent's exactly, so they came from the parent's model.pt."""
    parent = parents["none"]
    done = run_train(extension_command(parent, "optimizer.lr=0"), tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (run_dir,) = (tmp_path / "logs" / "runs").iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    assert run_dir.name.endswith("_lm_notes_none_x4_none") and results["label"] == "none"
    assert results["status"] == "success" and results["context_length"] == 64 and results["steps"] == 1
    assert results["extension"]["test_time_comparison"]["variant"] is None
    mine, theirs = saved_weights(run_dir), saved_weights(parent)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


# ---- the config and the weights, in the process ------------------------------------------------------------
def extension(parent: Path, tmp_path: Path, *extra: str):
    """The extension's config as train.py runs it (``compose_config`` with a run directory extends it)."""
    return compose_config(extension_command(parent, *extra), tmp_path / "run")


@pytest.mark.slow
def test_the_loaded_weights_are_the_parents_before_any_step(parents, tmp_path):
    from poslab.running.builders import build_datamodule, build_module
    from poslab.running.extension import initialise_from_parent

    cfg = extension(parents["rope"], tmp_path, "extension.rule=ntk")
    module = build_module(cfg, build_datamodule(cfg))
    fresh = {k: v.clone() for k, v in module.model.state_dict().items()}
    record = initialise_from_parent(module, cfg)
    loaded, theirs = module.model.state_dict(), saved_weights(parents["rope"])
    assert all(torch.equal(loaded[k], theirs[k]) for k in theirs) and loaded.keys() == theirs.keys()
    assert not all(torch.equal(fresh[k], theirs[k]) for k in theirs)  # not by chance: a fresh model differs
    assert record["extension"]["rule"] == "ntk" and module.model.encoding.label() == "rope:ntk4"


@pytest.mark.slow
def test_a_learned_position_table_grows_with_the_parents_rows_first(parents, tmp_path):
    from poslab.running.builders import build_datamodule, build_module
    from poslab.running.extension import load_parent_weights

    cfg = extension(parents["learned"], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    rows = datamodule.max_length  # the longest the extension reads: 16x L, or a longer passkey trial
    assert rows >= 256
    loaded_record = load_parent_weights(module.model, parents["learned"])
    theirs, loaded = saved_weights(parents["learned"]), module.model.state_dict()
    table = "encoding.table.weight"
    parent_rows = len(theirs[table])  # the parent's longest: its 16x, or its passkey trial
    assert len(loaded[table]) == rows, (parent_rows, rows)
    assert torch.equal(loaded[table][:parent_rows], theirs[table])
    assert loaded_record["grown"] == [f"{table}: {parent_rows} -> {rows} rows"]
    assert all(torch.equal(loaded[k], theirs[k]) for k in theirs if k != table)


@pytest.mark.slow
def test_the_parent_supplies_the_model_and_the_command_what_may_change(parents, tmp_path):
    cfg = extension(parents["rope"], tmp_path, "extension.rule=linear")
    parent = json.loads((parents["rope"] / "results.json").read_text())["config"]
    assert cfg.model == parent["model"] and cfg.corpus.name == "notes" and cfg.seed == parent["seed"]
    assert cfg.task.context_length == 64 and cfg.task.extended_from == 16 and cfg.task.batch_size == 4
    assert cfg.trainer.max_steps == 2 and cfg.optimizer.total_steps == 2 and cfg.optimizer.warmup_steps == 0
    assert cfg.trainer.precision == parent["trainer"]["precision"]
    assert extended_config(cfg, []) is cfg  # extended once: a second pass (the run guard, the run) changes nothing
    changed = extension(
        parents["rope"],
        tmp_path,
        "encoding=rope",  # the parent's own: allowed
        "extension.rule=yarn",
        "encoding.beta_fast=16",
        "model.attention=explicit",
        "task.batch_size=2",
        "seed=3",
        "optimizer.lr=0.005",
        "optimizer.warmup_steps=3",
        "trainer.max_steps=7",
        "extension.factor=2",
    )
    assert changed.encoding.beta_fast == 16 and changed.encoding.scaling_factor == 2
    assert changed.task.context_length == 32
    assert changed.model.attention == "explicit" and changed.task.batch_size == 2 and changed.seed == 3
    assert changed.optimizer.lr == 0.005 and changed.optimizer.warmup_steps == 3 and changed.optimizer.total_steps == 7


def test_evaluation_may_start_at_the_parents_context():
    from poslab.datamodules.language import check_extended_from
    from poslab.errors import ConfigError

    assert shortest_eval_length({"context_length": 64, "extended_from": 16}) == 16
    assert shortest_eval_length({"context_length": 64, "extended_from": None}) == 64
    assert check_extended_from(16, 64) == 16 and check_extended_from(None, 64) is None
    with pytest.raises(ConfigError, match=r"^task.extended_from=64 must be .* shorter than task.context_length=64"):
        check_extended_from(64, 64)


# ---- refusals ---------------------------------------------------------------------------------------------------
#: (id, the parent (a key of ``parents``, or a path under the test's directory), more arguments, words the message
#: must hold)
REFUSED = [
    ("no parent", None, [], ["needs parent="]),
    ("missing parent", "{tmp}/nowhere", [], ["parent={tmp}/nowhere does not exist"]),
    ("unfinished parent", "unfinished", [], ["is unfinished", "no results.json"]),
    ("failed parent", "failed", [], ["did not finish", "'failed'"]),
    ("diverged parent", "diverged", [], ["diverged at step 7"]),
    ("another encoding", "rope", ["encoding=alibi"], ["encoding=alibi", "encoding=rope"]),
    ("synthetic parent", "lag", [], ["task=lag", "synthetic"]),
    ("rule on NoPE", "none", ["extension.rule=yarn"], ["extension.rule=yarn", "only rotary encodings", "rule=none"]),
    ("rule setting on NoPE", "none", ["encoding.beta_fast=16"], ["encoding.beta_fast=16", "encoding none has no"]),
    ("parent with a rule", "extended", ["extension.rule=yarn"], ["encoding.scaling=yarn", "trained without a rule"]),
    ("no longer context", "rope", ["extension.factor=1"], ["extension.factor=1", "greater than 1"]),
    ("context given", "rope", ["task.context_length=64"], ["task.context_length=64", "extension.factor"]),
    ("another model", "rope", ["model.d_model=128"], ["model.d_model=128", "model.d_model=64"]),
]


@pytest.mark.slow
@pytest.mark.parametrize(("parent", "extra", "words"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_an_unfit_parent_or_setting_is_refused_with_one_sentence_and_nothing_written(
    parents, tmp_path, parent, extra, words
):
    source = parents.get(parent, Path(str(parent).replace("{tmp}", str(tmp_path)))) if parent else None
    command = ["experiment=context_extension", *([f"parent={source}"] if source else []), *extra]
    before, parents_before = snapshot(tmp_path), snapshot(parents["root"])
    done = run_train(command, tmp_path, timeout=120)
    message = done.stderr.strip()
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(message.splitlines()) == 1 and message.startswith("poslab: configuration error: "), message
    for word in words:
        assert word.replace("{tmp}", str(tmp_path)) in message, message
    assert "Traceback" not in done.stderr + done.stdout
    assert snapshot(tmp_path) == before and not (tmp_path / "logs").exists()
    assert snapshot(parents["root"]) == parents_before


@pytest.mark.parametrize(
    ("encoding", "parent_filled", "expected"),
    [
        # xPos masks blockwise past the length it trained at: the extension's own context, not its parent's 128
        ({"name": "xpos", "blockwise_length": None, "scaling": "none"}, {"blockwise_length": 128}, None),
        # randomized positions: the range its parent was trained on (2048), not one the extension fills again
        ({"name": "randomized_rope", "max_position": None, "scaling": "none"}, {"max_position": 2048}, 2048),
        # a learned table grows with the new run; FIRE's threshold keeps the parent's (its weights learned it)
        ({"name": "learned", "max_positions": None}, {"max_positions": 2048}, None),
        ({"name": "fire", "threshold": None}, {"threshold": 64}, 64),
    ],
)
def test_an_extension_fills_again_only_what_its_own_context_decides(encoding, parent_filled, expected):
    from poslab.running.extension import ParentRun, extended_encoding

    setting = next(key for key in parent_filled)
    parent = ParentRun(
        Path("parent"),
        {"encoding_settings": {"name": encoding["name"], **parent_filled}},
        {"task": {"context_length": 128}, "encoding": encoding},
    )
    assert extended_encoding(parent, "none", 1.0, 512)[setting] == expected  # None: filled at the new run's build
