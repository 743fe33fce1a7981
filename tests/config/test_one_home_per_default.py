"""One home per default (issue 26): every setting's default lives in the YAML under ``conf/``, and only there.

The schema dataclasses in ``poslab/config/settings.py`` give types and bounds, never a value; every field of a schema
has
its value in the YAML; the code reads a composed config directly, and a config built by hand takes what it leaves
out from the YAML (``poslab.config.settings.yaml_defaults`` and its kin), never from a literal of its own.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path
from typing import Any

import pytest
import torch
from omegaconf import OmegaConf

from poslab.config import settings
from poslab.config.settings import (
    CONF_DIR,
    SECTIONS,
    TASK_SCHEMAS,
    TEXT_CORPUS_SETTINGS,
    CorpusSettings,
    ModelSettings,
    OptimizerSettings,
    RootSettings,
    TrainerSettings,
    default_option,
    schema_types,
)
from poslab.running.compose import compose_config

POSLAB = Path(settings.__file__).resolve().parents[1]

#: ``.get("<setting>", <literal>)`` calls allowed, each with its reason: they read a record an older version wrote
#: (a fallback there says what that version did), not a composed config
ALLOWED_GETS = {
    ("datamodules/corpora/cache.py", "tokenizer"): "a prepared cache's meta.json; one from before bpe has no tokenizer",
    ("running/extension.py", "scaling"): "a parent run's recorded encoding; one from before the scaling rules had none",
    ("running/extension.py", "inner"): "a parent run's recorded encoding; one without inner is a rotary encoding",
}
#: folders whose code reads older runs' results.json and configs (a fallback there is what an older version did)
OLDER_RUNS = ("analysis",)


def yaml(group: str, option: str) -> dict[str, Any]:
    """A config file as Hydra composes its group (the files its defaults list names first), read here on its own."""
    path = CONF_DIR / group / f"{option}.yaml"
    raw = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    merged: dict[str, Any] = {}
    for entry in raw.pop("defaults", []) or []:
        if isinstance(entry, str) and entry != "_self_":
            merged.update(yaml(group, entry.split("@")[0]))
    return {**merged, **raw}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def text_corpora() -> list[str]:
    return [name for name in options("corpus") if "corpus" in yaml("corpus", name)]


# ---- the schema has no defaults -----------------------------------------------------------------------------------
def schemas() -> list[type]:
    return [
        value
        for value in vars(settings).values()
        if isinstance(value, type) and dataclasses.is_dataclass(value) and value.__module__ == settings.__name__
    ]


def test_no_schema_field_has_a_default():
    found = schemas()
    assert {RootSettings, TrainerSettings, OptimizerSettings, ModelSettings, CorpusSettings} <= set(found)
    assert set(TASK_SCHEMAS.values()) <= set(found)
    with_default = [
        f"{schema.__name__}.{field.name}"
        for schema in found
        for field in dataclasses.fields(schema)
        if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    ]
    assert with_default == [], f"a schema field restates a default the YAML owns: {with_default}"


# ---- every schema field has its value in the YAML -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("group", "schema"),
    [("optimizer", OptimizerSettings), ("model", ModelSettings), ("trainer", TrainerSettings)],
)
def test_every_field_of_a_section_has_its_value_in_each_of_its_yamls(group, schema):
    for option in options(group):
        missing = set(schema_types(schema)) - set(yaml(group, option))
        assert not missing, f"conf/{group}/{option}.yaml gives no value for {sorted(missing)}"


def test_every_root_setting_has_its_value_in_train_yaml():
    root = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "train.yaml"), resolve=False)
    assert set(schema_types(RootSettings)) <= set(root)
    sections = ["", "trainer", "optimizer", "model", "callbacks.evaluation_checkpoint"]  # the sections above, below
    assert [prefix for prefix, _, _ in SECTIONS] == sections


def test_the_evaluation_checkpoint_gives_every_field_of_its_schema():
    from poslab.config.settings import EvaluationCheckpointSettings

    for option in options("callbacks"):
        values = yaml("callbacks", option)["evaluation_checkpoint"]
        missing = set(schema_types(EvaluationCheckpointSettings)) - set(values)
        assert not missing, f"conf/callbacks/{option}.yaml's evaluation_checkpoint gives no value for {sorted(missing)}"


@pytest.mark.parametrize("option", options("task"))
def test_every_field_of_a_tasks_schema_has_its_value_in_its_yaml(option):
    values = yaml("task", option)
    missing = set(schema_types(TASK_SCHEMAS[values["name"]])) - set(values)
    assert not missing, f"conf/task/{option}.yaml gives no value for {sorted(missing)}"


def test_every_text_corpus_gives_the_settings_every_corpus_shares():
    assert set(TEXT_CORPUS_SETTINGS) <= set(schema_types(CorpusSettings))
    assert len(text_corpora()) >= 5
    for name in text_corpora():
        missing = set(TEXT_CORPUS_SETTINGS) - set(yaml("corpus", name)["corpus"])
        assert not missing, f"conf/corpus/{name}.yaml gives no value for {sorted(missing)}"


# ---- a config built by hand takes the YAML's values ---------------------------------------------------------------
def test_a_model_made_in_python_takes_the_default_models_yaml():
    from poslab.model import ModelConfig

    tiny = yaml("model", default_option("model"))
    made = ModelConfig(vocab_size=4, n_outputs=4)
    assert {key: getattr(made, key) for key in schema_types(ModelSettings)} == tiny
    assert ModelConfig(vocab_size=4, n_outputs=4, d_model=32).d_model == 32
    assert made.encoding == {"name": default_option("encoding")}


def test_a_partial_optimizer_config_takes_adamw_yaml():
    from poslab.lightning_modules.base import optimizer_settings

    adamw = yaml("optimizer", default_option("optimizer"))
    assert optimizer_settings({"lr": 0.5}) == {**adamw, "lr": 0.5, "total_steps": None}  # an interpolation: None
    assert optimizer_settings(adamw) == adamw


def test_a_task_data_and_passkey_made_in_python_take_their_yamls():
    from poslab.config.passkey_settings import check_passkey_settings
    from poslab.datamodules.tasks import make_task

    flip_flop = yaml("task", "flip_flop")
    made = make_task("flip_flop", 6)
    assert (made.p_write, made.p_ignore, made.p_read) == tuple(
        flip_flop[key] for key in ("p_write", "p_ignore", "p_read")
    )
    assert make_task("lag", 16).k == yaml("task", "lag")["k"] and make_task("lag", 16, k=5).k == 5
    counting = make_task("counting", 21)
    assert (counting.num_variables, counting.program_length) == (
        yaml("task", "counting")["num_variables"],
        yaml("task", "counting")["program_length"],
    )
    passkey = yaml("task", "lm")["passkey"]
    chosen = check_passkey_settings({}, 128)
    assert (chosen.trials, list(chosen.depths), chosen.key_length) == (
        passkey["trials"],
        passkey["depths"],
        passkey["key_length"],
    )


def test_a_corpus_built_by_hand_takes_the_local_corpus_yaml():
    from poslab.config.settings import corpus_setting, with_corpus_defaults

    local = yaml("corpus", "local")["corpus"]
    filled = with_corpus_defaults({"name": "mine", "groups": {}})
    assert {key: filled[key] for key in TEXT_CORPUS_SETTINGS} == {key: local[key] for key in TEXT_CORPUS_SETTINGS}
    assert corpus_setting({"validation_fraction": 0.3}, "validation_fraction") == 0.3


# ---- no code restates a default -------------------------------------------------------------------------------------
def setting_keys() -> set[str]:
    """Every setting the YAMLs of the schema sections, the tasks, the corpora and the encodings declare."""
    keys = set(OmegaConf.load(CONF_DIR / "train.yaml")) - {"defaults", "hydra"}
    for group in ("optimizer", "model", "trainer", "task", "encoding"):
        for option in options(group):
            keys |= set(yaml(group, option)) - {"defaults"}
    keys |= set(yaml("task", "lm")["passkey"])
    for name in text_corpora():
        keys |= set(yaml("corpus", name)["corpus"])
    return {key for key in keys if not key.startswith("_")}  # _target_: Hydra's, not a setting


def literal_gets(tree: ast.AST, keys: set[str]) -> list[tuple[int, str]]:
    """(line, key) of each ``x.get("<key>", <literal>)`` with a key in ``keys`` and a literal other than None."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
            continue
        if len(node.args) != 2 or not isinstance(node.args[0], ast.Constant) or node.args[0].value not in keys:
            continue
        try:
            value = ast.literal_eval(node.args[1])
        except ValueError:
            continue  # a name or an expression: not a literal restating a default
        if value is not None:
            found.append((node.lineno, str(node.args[0].value)))
    return found


def test_no_code_restates_a_setting_default_with_a_literal_fallback():
    keys = setting_keys()
    assert {"weight_decay", "mlp", "num_nodes", "validation_fraction", "beta_fast", "enabled", "k"} <= keys
    found, used = [], set()
    for path in sorted(POSLAB.rglob("*.py")):
        relative = path.relative_to(POSLAB).as_posix()
        if relative.split("/")[0] in OLDER_RUNS:
            continue
        for line, key in literal_gets(ast.parse(path.read_text()), keys):
            if (relative, key) in ALLOWED_GETS:
                used.add((relative, key))
            else:
                found.append(f"poslab/{relative}:{line} .get({key!r}, <literal>)")
    hint = "read the composed config directly, or merge over the YAML (poslab.config.settings): "
    assert found == [], hint + str(found)
    assert used == set(ALLOWED_GETS), f"allowed but no longer there: {set(ALLOWED_GETS) - used}"


def test_the_scan_finds_a_restated_default():
    """The scan can fail: it catches the pattern it looks for, and leaves None and names alone."""
    source = (
        'a = cfg.get("weight_decay", 0.01)\nb = cfg.get("betas", (0.9, 0.999))\nc = cfg.get("eps")\nd = x.get("lr", y)'
    )
    assert literal_gets(ast.parse(source), {"weight_decay", "betas", "eps", "lr"}) == [
        (1, "weight_decay"),
        (2, "betas"),
    ]


def test_no_encoding_constructor_restates_a_setting_its_yaml_declares():
    from poslab.encodings import ENCODINGS

    restated = []
    for name, cls in ENCODINGS.items():
        declared = set(cls.yaml_settings())
        for klass in cls.__mro__:
            if "__init__" not in vars(klass) or klass is torch.nn.Module:
                continue
            for key, parameter in inspect.signature(klass.__init__).parameters.items():
                if key in declared and parameter.default is not inspect.Parameter.empty:
                    restated.append(f"{name}: {klass.__name__}.{key}={parameter.default!r}")
    assert restated == [], f"the YAML owns these defaults: {restated}"


# ---- RoPE's settings: what the code uses is what the YAML says ------------------------------------------------------
RULE_KEYS = ("beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor")


def test_rope_uses_the_rule_settings_the_yaml_gives_read_both_ways():
    from poslab.config.settings import encoding_defaults
    from poslab.encodings import ModelShape, build_encoding
    from poslab.encodings.rope_scaling import RULE_SETTINGS, rule_defaults, scaled_frequencies

    shared = OmegaConf.load(CONF_DIR / "encoding" / "shared" / "rotary.yaml")  # the file, read here
    written = {key: float(shared[key]) for key in RULE_KEYS}
    assert set(RULE_SETTINGS) == set(RULE_KEYS) and written == {"beta_fast": 32, "beta_slow": 1, **LLAMA}
    assert rule_defaults() == written
    rope = OmegaConf.load(CONF_DIR / "encoding" / "rope.yaml")
    assert not set(RULE_KEYS) & set(rope), "rope.yaml repeats a rule setting the shared file gives"
    assert {key: float(encoding_defaults()["rope"][key]) for key in RULE_KEYS} == written

    shape = ModelShape.of(32, 2, 1)
    by_hand = build_encoding({"name": "rope"}, shape, 64)  # every setting left out
    composed = OmegaConf.to_container(compose_config(["encoding=rope"]).encoding, resolve=True)
    assert composed["original_length"] == 32  # task.train_length, the interpolation a composed config resolves
    from_config = build_encoding(composed, shape, 64)
    for encoding in (by_hand, from_config):
        assert encoding.rule_settings == written
        assert (encoding.base, encoding.pairing, encoding.partial_fraction) == (
            float(shared.base),
            shared.pairing,
            float(rope.partial_fraction),
        )
        assert (encoding.scaling, encoding.scaling_factor, encoding.test_scaling) == (
            shared.scaling,
            float(shared.scaling_factor),
            shared.test_scaling,
        )

    # the rule itself, called with its settings left out, computes with the YAML's values and no others
    for rule, other in (("yarn", {"beta_fast": 16.0}), ("llama3", {"high_freq_factor": 8.0})):
        left_out, _ = scaled_frequencies(rule, 32, 10_000.0, 4.0, 4096)
        given, _ = scaled_frequencies(rule, 32, 10_000.0, 4.0, 4096, **written)
        changed, _ = scaled_frequencies(rule, 32, 10_000.0, 4.0, 4096, **{**written, **other})
        assert torch.equal(left_out, given) and not torch.equal(left_out, changed), rule


LLAMA = {"low_freq_factor": 1.0, "high_freq_factor": 4.0}
