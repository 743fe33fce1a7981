"""Typed settings (poslab/config/settings.py) and train.py's command-line check (poslab/running/precheck.py): a bad
command
stops with one short message naming the key and the value, exit status 2, no traceback, nothing written."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from poslab.config.settings import CONF_DIR, check_settings, describe, schema_types, value_fits
from poslab.errors import ConfigError
from poslab.running.compose import compose_config
from poslab.running.precheck import check_command_line, config_groups, help_text, option_description
from tests.conftest import run_train

# (command line, what the message must name: the key or option, and the value)
BAD_COMMANDS = [
    (["trainer.max_steps=abc"], ["trainer.max_steps", "'abc'", "whole number"]),
    (["trainer.max_steps=2.5"], ["trainer.max_steps", "2.5", "whole number"]),
    (["trainer.max_steps=0"], ["trainer.max_steps", "0", "at least 1"]),
    (["trainer.max_steps=1e4"], ["trainer.max_steps", "10000.0", "write 10000"]),
    (["trainer.log_every_n_steps=-1"], ["trainer.log_every_n_steps", "-1"]),
    (["trainer.precision=bf17"], ["trainer.precision", "'bf17'", "bf16"]),
    (["trainer.max_step=50"], ["trainer.max_step=50", "max_steps"]),
    (["optimizer.lr=fast"], ["optimizer.lr", "'fast'", "number"]),
    (["optimizer.lr=-1"], ["optimizer.lr", "-1", "at least 0"]),
    (["optimizer.schedule=cosin"], ["optimizer.schedule", "'cosin'", "did you mean cosine"]),
    (["optimizer.warmup_steps=1.5"], ["optimizer.warmup_steps", "1.5"]),
    (["optimizer.min_lr_ratio=2"], ["optimizer.min_lr_ratio", "2", "at most 1"]),
    (["optimizer.grad_clip=-1"], ["optimizer.grad_clip", "-1"]),
    (["optimizer.betas=[0.9,1.5]"], ["optimizer.betas", "1.5"]),
    (["optimizer.fused=maybe"], ["optimizer.fused", "'maybe'", "true or false"]),
    (["+optimizer.lrr=1"], ["optimizer.lrr", "did you mean lr"]),
    (["optimizer.lrr=1"], ["optimizer.lrr=1", "did you mean lr"]),
    (["seed=abc"], ["seed", "'abc'", "whole number"]),
    (["threads=0"], ["threads", "0"]),
    (["save_model=sometimes"], ["save_model", "'sometimes'"]),
    (["model.d_model=0"], ["model.d_model", "0", "at least 1"]),
    (["model.d_model=30", "model.n_heads=4"], ["model.d_model=30", "model.n_heads=4"]),
    (["model.n_layers=two"], ["model.n_layers", "'two'"]),
    (["model.norm=batchnorm"], ["model.norm", "'batchnorm'", "layernorm, rmsnorm"]),
    (["model.mlp=swiglue"], ["model.mlp", "'swiglue'", "did you mean swiglu"]),
    (["model.attention=fast"], ["model.attention", "'fast'", "sdpa"]),
    (["model.compile=yes"], ["model.compile", "'yes'"]),
    (["encodng=rope"], ["encodng=rope", "did you mean encoding"]),
    (["encoding=ropee"], ["encoding=ropee", "did you mean rope"]),
    (["model=huge"], ["model=huge", "allowed: byte, hrope, hrope_cpu, lm_copy, lm_zoo, tiny, zoo."]),
    (["experiment=hrope"], ["experiment=hrope", "hrope_axial"]),
    (["encoding=rope", "encoding.base=abc"], ["encoding.base", "'abc'", "number"]),
    (["encoding=rope", "encoding.bas=3"], ["encoding.bas=3", "did you mean base"]),
    (["encoding=rope", "encoding.base=-5"], ["encoding.base=-5", "greater than 1"]),
    (["encoding=rope", "encoding.pairing=halves"], ["encoding.pairing", "'halves'"]),
    (["encoding=alibi", "+encoding.slope=0.5"], ["encoding.slope", "did you mean slopes"]),
    (["task=lag", "task.k=0"], ["task.k", "0"]),
    (["task=lag", "task.eval_lengths=[32,1]"], ["task.eval_lengths", "1"]),
    (["task=lag", "task.train_length=abc"], ["task.train_length", "'abc'"]),
    (["corpus=wikitext2", "corpus.tokenizer=bp"], ["corpus.tokenizer", "'bp'", "did you mean bpe"]),
    (["corpus=wikitext2", "corpus.validation_fraction=1.5"], ["corpus.validation_fraction", "1.5"]),
    (["corpus=wikitext2", "corpus.verify_cache=sometimes"], ["corpus.verify_cache", "'sometimes'"]),
    (["corpus=wikitext2", "task.context_length=0"], ["task.context_length", "0"]),
    (["corpus=wikitext2", "task=lag"], ["task=lag", "corpus=wikitext2"]),
    (["name=../x"], ["name='../x'"]),
    (["trainer.devices=64"], ["trainer.devices=64"]),
    (["trainer.max_steps=[1,2]"], ["trainer.max_steps"]),
    (["-m", "encoding=rope,alibi", "optimizer.lr=fast"], ["optimizer.lr", "'fast'"]),
    (["-m", "encoding=rope,alibx"], ["encoding=alibx", "did you mean alibi"]),
    (["-m", "seed=0,1", "trainer.max_steps=0"], ["trainer.max_steps", "0"]),
    # a new user's review: each refusal says what is wrong and a fix that is taken
    (["encoding.base=1000"], ["encoding 'none' has no settings; base is a setting of ", "encoding=rope encoding.base"]),
    (
        ["+encoding.base=1000"],
        ["encoding 'none' has no settings; base is a setting of ", "encoding=rope encoding.base"],
    ),
    (["encoding=rope", "+encoding.bse=1000"], ["encoding.bse=1000", "did you mean base? its settings: base, "]),
    (["encoding=nope"], ["encoding=nope", "did you mean none?"]),
    (
        ["trainer.precision=16-true"],
        ["trainer.precision='16-true' is refused on purpose", "trainer.precision=16-mixed"],
    ),
    (["task.eval_lengths=[32,abc]"], ["task.eval_lengths", "its element 'abc' is not a whole number"]),
    (["encoding=alibi", "encoding.slopes=[0.5"], ["encoding.slopes=[0.5: ", "did you mean encoding.slopes=[0.5]?"]),
    (["seed=0,1"], ["seed=0,1: a comma list sweeps", "python train.py -m seed=0,1"]),
    (["-m", "encoding=rope,alibi", "--cfg", "job"], ["-m/--multirun and --cfg cannot be given together"]),
    (["task.eval_lengths=[32,abc]", "--cfg", "job"], ["its element 'abc'"]),  # --cfg prints only a config that passes
]


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "named"), BAD_COMMANDS, ids=[" ".join(a) for a, _ in BAD_COMMANDS])
def test_a_bad_command_stops_with_one_short_message_naming_key_and_value(argv, named, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("POSLAB_LOG_DIR", str(tmp_path))
    with pytest.raises(SystemExit) as stopped:
        check_command_line(argv)
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert 1 <= len(lines) <= 3 and not captured.out, captured.err
    assert lines[0].startswith("poslab: configuration error: ")
    assert "Traceback" not in captured.err
    for fragment in named:
        assert fragment in captured.err, (fragment, captured.err)
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_the_table_covers_every_item_the_issue_names():
    assert len(BAD_COMMANDS) >= 30


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["trainer.max_steps=abc"],
        ["encoding=rope", "encoding.base=-5"],
        ["corpus=local", "corpus.path=/nonexistent/corpus"],  # refused inside the run: Hydra's directory is removed
        ["-m", "encoding=rope,alibi", "trainer.max_step=3"],
    ],
)
def test_train_py_refuses_a_bad_command_and_leaves_no_directory(argv, tmp_path):
    result = run_train([*argv, f"paths.log_dir={tmp_path / 'logs'}"], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    err = [line for line in result.stderr.splitlines() if line.startswith("poslab:")]
    assert len(err) == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    left = [p for p in (tmp_path / "logs").rglob("*")] if (tmp_path / "logs").exists() else []
    assert left == [], left


@pytest.mark.slow
def test_every_recipe_and_encoding_passes_train_pys_check():
    """Every experiment, and every encoding under a synthetic task and a text corpus, passes what train.py checks
    before running (types, combinations, the encoding's validate, a synthetic task's own checks): a setting the
    data fills in (rand_axial's paragraph_density: the corpus's, or one paragraph per generated sequence) may be
    null."""
    groups = config_groups()
    # GPU recipes too; context_extension needs a trained parent (tests/running/test_context_extension.py checks it with
    # one)
    experiments = [e for e in groups["experiment"] if e != "context_extension"]
    commands = [[f"experiment={e}", "trainer.accelerator=cpu"] for e in experiments]
    for encoding in groups["encoding"]:
        # tables left null: as long as the longest sequence (16 x the context of 512, or a longer passkey trial)
        commands.append([f"encoding={encoding}", "corpus=wikitext2"])
        commands.append([f"encoding={encoding}", "task=lag"])
    commands += [[f"corpus={c}"] for c in groups["corpus"] if c != "local"]
    commands.append(["corpus=local", "corpus.path=/tmp"])
    commands += [[f"task={task}"] for task in groups["task"] if task != "lm"]  # lm: with a corpus, above
    for command in commands:
        check_command_line(command)
    with pytest.raises(SystemExit):  # the task's own check, before anything is written
        check_command_line(["task=flip_flop", "task.p_write=0.5"])  # the probabilities sum to 1.4


@pytest.mark.parametrize(
    ("value", "annotation_of", "fits"),
    [
        (3, "trainer.max_steps", True),
        (True, "trainer.max_steps", False),  # a flag is not a count
        (3.0, "trainer.max_steps", False),
        (3, "optimizer.lr", True),  # a whole number is a number
        ("1e-3", "optimizer.lr", False),
        (None, "optimizer.grad_clip", True),
        (None, "optimizer.lr", False),
        ("cosine", "optimizer.schedule", True),
        ("bf16", "trainer.precision", True),
        (32, "trainer.precision", True),
    ],
)
def test_declared_types_accept_exactly_their_values(value, annotation_of, fits):
    from poslab.config.settings import OptimizerSettings, TrainerSettings

    group, key = annotation_of.split(".")
    schema = {"trainer": TrainerSettings, "optimizer": OptimizerSettings}[group]
    assert value_fits(value, schema_types(schema)[key]) is fits


def test_a_setting_is_checked_by_being_declared(monkeypatch):
    """A new field in a schema is checked with no new code: add one and give it a bad value."""
    from dataclasses import make_dataclass

    from poslab.config import settings
    from poslab.config.settings import Count, OptimizerSettings

    extended = make_dataclass("Extended", [("accumulate", Count, 1)], bases=(OptimizerSettings,))
    monkeypatch.setattr(settings, "SECTIONS", (("optimizer", extended, True),))
    cfg = compose_config([])
    OmegaConf.set_struct(cfg, False)
    cfg.optimizer.accumulate = 0
    with pytest.raises(ConfigError, match=r"optimizer.accumulate=0 is not allowed; optimizer.accumulate takes a whole"):
        check_settings(cfg)
    assert describe(Count) == "a whole number, at least 1"


def test_model_config_made_in_python_is_checked_the_same_way():
    from poslab.model import ModelConfig

    with pytest.raises(ConfigError, match=r"model.norm='batchnorm' is not allowed"):
        ModelConfig(vocab_size=4, n_outputs=4, norm="batchnorm")
    with pytest.raises(ConfigError, match=r"model.n_layers=0 is not allowed"):
        ModelConfig(vocab_size=4, n_outputs=4, n_layers=0)


def test_train_py_help_lists_every_group_option_with_a_description_and_examples():
    text = help_text()
    for group, options in config_groups().items():
        assert f"  {group}: " in text
        for option in options:
            assert option_description(CONF_DIR / group / f"{option}.yaml"), f"conf/{group}/{option}.yaml"
            assert f"      {option} " in text
    assert "examples:" in text and "python train.py -m experiment=extrapolation_grid" in text
    assert "results: a run writes" in text
    for key in ("seed=0", "threads=null", "save_model=true"):
        assert key in text


@pytest.mark.slow
def test_train_py_help_is_poslabs_own(tmp_path):
    result = run_train(["--help"], tmp_path)
    assert result.returncode == 0
    assert result.stdout.startswith("poslab: train small transformers")
    assert "config groups (group=option):" in result.stdout


@pytest.mark.slow
def test_a_run_prints_each_line_once_and_ends_with_where_its_results_are(tmp_path):
    args = ["task=lag", "trainer.max_steps=3", "task.eval_size=32", "trainer.precision=bf16-mixed"]
    result = run_train(args, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in (result.stdout + result.stderr).replace("\r", "\n").splitlines() if line.strip()]
    logged = [line for line in lines if line.startswith("[")]
    assert any("Using bfloat16 Automatic Mixed Precision" in line for line in logged)  # a line that applies stays
    assert not any(line.startswith("INFO:") for line in lines)  # not a second time in Lightning's own format
    assert not any("TPU available" in line or "GPU available: False" in line for line in lines)
    (run_dir,) = (tmp_path / "logs" / "runs").iterdir()
    assert logged[-1].endswith(f"results: {run_dir / 'results.json'} (run directory {run_dir})")


def test_an_encoding_setting_is_never_offered_as_a_key_to_add():
    """An encoding takes only the settings its YAML declares: the hint names the encodings that have the setting (or a
    close one of its own), never ``+encoding.<key>``, which the typed check would refuse."""
    from poslab.config.settings import unknown_encoding_setting
    from poslab.running.precheck import compose_explained

    for argv in (["encoding.base=1000"], ["encoding=rope", "encoding.bse=1000"]):
        with pytest.raises(ConfigError) as refused:
            compose_explained(argv)
        assert "+encoding" not in str(refused.value) and "add a new key" not in str(refused.value)
    assert unknown_encoding_setting("none", "zzz", 1) == "encoding 'none' has no settings."
    said = unknown_encoding_setting("rope", "slopes", [0.5, 0.25])
    assert said.endswith(
        "slopes is a setting of alibi: pick one of those, e.g. encoding=alibi encoding.slopes=[0.5,0.25]."
    )


def test_the_key_to_add_hint_is_given_only_where_a_section_takes_new_keys():
    from poslab.running.precheck import compose_explained

    with pytest.raises(ConfigError) as closed:
        compose_explained(["model.foo=1"])
    assert "model has no setting 'foo'" in str(closed.value) and "+model.foo" not in str(closed.value)
    with pytest.raises(ConfigError, match=r"\(to add a new key on purpose: \+trainer\.foo=1\)"):
        compose_explained(["trainer.foo=1"])


@pytest.mark.parametrize(("precision", "mixed"), [("16-true", "16-mixed"), ("bf16-true", "bf16-mixed")])
def test_a_half_true_precision_is_said_refused_on_purpose(precision, mixed):
    from poslab.config.settings import check_precision

    cfg = compose_config([f"trainer.precision={precision}"])
    for check in (lambda: check_settings(cfg), lambda: check_precision(precision)):
        with pytest.raises(ConfigError) as refused:
            check()
        assert "refused on purpose" in str(refused.value) and f"trainer.precision={mixed}" in str(refused.value)
        assert "did you mean" not in str(refused.value)


def test_a_lists_bad_element_is_named_and_a_bad_length_counted():
    from poslab.config.settings import OptimizerSettings, SyntheticTaskSettings, check_value

    lengths = schema_types(SyntheticTaskSettings)["eval_lengths"]
    with pytest.raises(ConfigError, match=r"\[32, 'abc'\] is not allowed \(its element 'abc' is not a whole number"):
        check_value("task.eval_lengths", [32, "abc"], lengths)
    with pytest.raises(ConfigError, match=r"\(its element 1 is not a whole number, at least 2\)"):
        check_value("task.eval_lengths", [32, 1], lengths)
    betas = schema_types(OptimizerSettings)["betas"]
    with pytest.raises(ConfigError, match=r"\(it has 3 values\)"):
        check_value("optimizer.betas", [0.9, 0.95, 0.99], betas)
