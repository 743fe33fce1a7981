"""Context extension by fine-tuning (issue 25 item 4): a new run that starts from the weights of a finished language
model (its *parent*, trained at context ``L``) and trains on at ``extension.factor`` x ``L`` under a RoPE scaling
rule (``extension.rule``: linear, ntk, yarn, llama3) or none, in a run directory of its own.

    python train.py experiment=context_extension parent=logs/runs/<the parent's run> extension.rule=yarn

**What comes from where.** The parent's ``results.json`` ``config`` supplies the model, the encoding, the corpus, the
task and the seed: the extension continues that model on that text, so the command names the parent and the rule
only. The command line may still name the parent's own choices (``encoding=rope``: a sweep over parents reads
better, and a parent of another encoding than the one named is refused), may change what does not change the
model or its data (``CHANGEABLE``: ``model.attention``, ``task.batch_size``, a rule's own settings such as
``encoding.beta_fast``, ...), and is refused, with the parent's value, for anything else of those sections.
``seed=``, ``optimizer.*`` and ``trainer.*`` are the command's (the trainer's precision is the parent's unless
given). Settings the extension sets itself (the context, the rule and its factor) are given through
``extension.*``; naming them directly is refused with the setting to use.

**Not a resume.** A resume (``ckpt_path``) continues its checkpoint: the same model, optimizer moments, schedule and
step. An extension is a new run initialised from the parent's ``model.pt`` (``initialise_from_parent``): fresh
AdamW moments, step 0, and a schedule of its own: the parent's optimizer settings with peak learning rate
``extension.lr_scale`` x the parent's (0.1: position interpolation and YaRN fine-tune Llama at 2e-5, about a
fifteenth of its pre-training peak), a linear warm-up over ``extension.warmup_fraction`` of its steps and the
parent's schedule (cosine or constant) over ``trainer.max_steps``, which null makes ``extension.step_fraction``
(10%) of the parent's steps. An interrupted extension resumes like any run (``ckpt_path=last``).

**Evaluation.** ``task.eval_lengths`` becomes ``extension.eval_multiples`` x ``L`` (1x to 16x the *parent's*
context), so the fine-tuned model is measured where its parent was; lengths below its own context (``L``, ``2L``)
are allowed because ``task.extended_from`` records ``L``, which the language-model checks take as the shortest
length (``poslab.config.settings.shortest_eval_length``).
The same rule applied at test time only is the parent's ``test_<rule>`` variant, measured on the parent's
weights: ``results.json`` names the parent (path, name, hashes of its config and ``model.pt``), the rule, and
copies the parent's figures beside a pointer to that variant (``test_time_comparison``).

**Refused**, each with one sentence (exit status 2, nothing written): no parent, a missing one, one without
``results.json`` (unfinished) or ``model.pt``, one that diverged or failed, a synthetic task's, one trained with a
rule itself, an encoding named that is not the parent's, a rule on an encoding that rotates nothing (NoPE, ALiBi,
...: only rotary encodings take a rule; ``none`` suits every encoding), and a factor that does not lengthen the
context.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from poslab.config.settings import (
    Fraction,
    ModelSettings,
    PositiveFloat,
    check_section,
    default_option,
    encoding_defaults,
    schema_types,
    yaml_defaults,
)
from poslab.config.targets import filled_encoding, flatten
from poslab.errors import ConfigError
from poslab.runs.files import CHECKPOINT_DIR, LAST_CHECKPOINT, MODEL_FILE, RESULTS_FILE
from poslab.runs.results import data_hash

log = logging.getLogger("poslab")

#: the training rules an extension may take (``rope_scaling.RULES`` less dynamic, whose factor follows the length)
EXTENSION_RULES = ("none", "linear", "ntk", "yarn", "llama3")
#: the sections the parent supplies
PARENT_SECTIONS = ("encoding", "model", "corpus", "task")
#: settings of those sections a command may change: how the model computes or is fed, not what it is or reads (an
#: encoding's: its rule's own settings, ``changeable``)
CHANGEABLE = {
    "model": ("attention", "compile"),
    "corpus": ("verify_cache",),
    "task": ("batch_size", "eval_batch_size", "val_windows", "val_every_n_steps", "eval_tokens", "eval_stride"),
}
#: settings the extension sets itself, and the setting that gives each
SET_BY_EXTENSION = {
    "task.context_length": "extension.factor",
    "task.extended_from": "parent",
    "task.eval_lengths": "extension.eval_multiples",
    "encoding.scaling": "extension.rule",
    "encoding.scaling_factor": "extension.factor",
    "encoding.original_length": "parent",
}


@dataclass
class ExtensionSettings:
    """The ``extension`` section (conf/experiment/context_extension.yaml holds the defaults)."""

    rule: Literal[EXTENSION_RULES]
    factor: PositiveFloat
    step_fraction: PositiveFloat
    lr_scale: PositiveFloat
    warmup_fraction: Fraction
    eval_multiples: list[PositiveFloat]


@dataclass
class ParentRun:
    """A finished language-model run to extend: its directory (absolute), ``results.json`` and resolved config."""

    path: Path
    results: dict[str, Any]
    config: dict[str, Any]

    @property
    def context(self) -> int:
        return int(self.config["task"]["context_length"])

    @property
    def encoding(self) -> dict[str, Any]:
        return self.config["encoding"]


# ---- the parent ---------------------------------------------------------------------------------------------
def read_parent(value: Any) -> ParentRun:
    """The run ``parent=`` names, refused with one sentence unless it is a finished, converged language model with
    its weights (``model.pt``)."""
    allowed = (
        "allowed: the directory of a finished train.py language-model run (results.json with status success, and "
        "model.pt)"
    )
    if value is None or not str(value).strip():
        raise ConfigError(f"experiment=context_extension needs parent=<run directory> to continue from; {allowed}.")
    path = Path(str(value)).expanduser()
    if not path.exists():
        raise ConfigError(f"parent={value} does not exist; {allowed}.")
    if not path.is_dir():
        raise ConfigError(f"parent={value} is a file, not a run directory; {allowed} (give the folder holding it).")
    if not (path / RESULTS_FILE).is_file():
        has_checkpoint = (path / CHECKPOINT_DIR / LAST_CHECKPOINT).is_file()
        state = "has a checkpoint but no results.json" if has_checkpoint else "holds no results.json"
        raise ConfigError(f"parent={value} is unfinished: it {state}, so no trained model ended there; {allowed}.")
    results = read_finished_results(path, value)
    config = results["config"]
    task = config.get("task") or {}
    if task.get("name") != "lm" or "context_length" not in task:
        raise ConfigError(
            f"parent={value} trained task={task.get('name')}, a synthetic task, and context extension continues a "
            f"language model; allowed: a run of task=lm (trained on a text corpus, e.g. corpus=wikitext2)."
        )
    if not (path / MODEL_FILE).is_file():
        raise ConfigError(
            f"parent={value} has no {MODEL_FILE} (trained with save_model=false?), so there are no weights to start "
            f"from; {allowed}."
        )
    flat = flatten({section: config.get(section) for section in PARENT_SECTIONS})
    foreign = [key for key in flat if key.endswith("_target_") and key != "task._target_"]
    if foreign:  # nothing of a file someone else wrote is instantiated: the extension's task targets are poslab's
        raise ConfigError(f"parent={value}: its config names {foreign[0]}, which no poslab run writes; {allowed}.")
    return ParentRun(path.resolve(), results, config)


def read_finished_results(path: Path, value: Any) -> dict[str, Any]:
    """The parent's results, read as the reports read them; a damaged file, a diverged or failed run refused."""
    from poslab.runs.results import SUCCESS, ResultsFileError, read_results

    try:
        results = read_results(path)
    except ResultsFileError as error:
        raise ConfigError(f"parent={value} cannot be extended: {error}.") from None
    status = results.get("status", SUCCESS)  # an older run's results.json has no status: it finished
    if status == "diverged":
        step = results.get("diverged_at_step")
        where = f" at step {step}" if step is not None else ""
        raise ConfigError(
            f"parent={value} diverged{where} (results.json status diverged), so its weights are no model to extend; "
            f"allowed: a run whose results.json status is {SUCCESS}."
        )
    if status != SUCCESS or not isinstance(results.get("config"), dict):
        raise ConfigError(
            f"parent={value} did not finish (results.json status {status!r}); allowed: a run whose results.json "
            f"status is {SUCCESS}."
        )
    return results


def parent_name(path: Any) -> str:
    """The run name of the parent at ``path`` (its config's ``name``), for the extension's directory name; never
    raises (the checks refuse a bad parent with a sentence of their own)."""
    try:
        name = json.loads((Path(str(path)) / RESULTS_FILE).read_text())["config"]["name"]
    except Exception:  # noqa: BLE001  (no parent, or not a run: the checks say so)
        return "extension"
    return re.sub(r"[^\w.=,+-]+", "_", str(name)).strip("._") or "extension"


# ---- the command line ---------------------------------------------------------------------------------------
def given_overrides(overrides: Sequence[str] | None) -> dict[str, Any]:
    """The settings and groups the command line gave (key -> Hydra's parsed override); ``None``: the running Hydra
    job's own (none outside a Hydra job)."""
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(overrides))
    return {o.key_or_group: o for o in parsed if not o.is_hydra_override()}


def check_given(cfg: DictConfig, parent: ParentRun, given: dict[str, Any]) -> list[str]:
    """Refuse what the command line gave against the parent (the module's docstring says what may change); return
    the keys of the parent's sections to take from the command line."""
    changes = []
    for key, override in given.items():
        section, _, leaf = key.partition(".")
        if section not in PARENT_SECTIONS:
            continue
        if not leaf:
            check_group_choice(section, cfg, parent)
        elif key in SET_BY_EXTENSION:
            raise ConfigError(
                f"{override.input_line}: an extension sets {key} itself; give {SET_BY_EXTENSION[key]} instead "
                f"(conf/experiment/context_extension.yaml)."
            )
        elif override.is_delete():
            raise ConfigError(f"{override.input_line}: an extension keeps its parent's {section} settings; drop it.")
        elif leaf in changeable(section) and section == "encoding" and leaf not in parent.encoding:
            raise ConfigError(
                f"{override.input_line}: the parent's encoding {parent.encoding.get('name')} has no setting {leaf} "
                f"(a RoPE scaling rule's); drop it."
            )
        elif leaf in changeable(section):
            changes.append(key)
        elif OmegaConf.select(cfg, key) != select(parent.config, key):
            raise ConfigError(
                f"{override.input_line} differs from the parent's {key}={select(parent.config, key)!r}, and an "
                f"extension continues its parent's model, encoding, data and task; drop it (changeable here: "
                f"{', '.join(f'{section}.{k}' for k in changeable(section))})."
            )
    return changes


def changeable(section: str) -> tuple[str, ...]:
    """The settings of a parent's section a command may change (``CHANGEABLE``; an encoding: its rule's own)."""
    if section == "encoding":
        from poslab.encodings.rope_scaling import RULE_SETTINGS  # torch: only once an encoding setting is given

        return RULE_SETTINGS
    return CHANGEABLE[section]


def model_shape() -> list[str]:
    """The model settings that make its weights what they are: all but how it computes and ``init_std``."""
    return [key for key in schema_types(ModelSettings) if key not in (*CHANGEABLE["model"], "init_std")]


def check_group_choice(section: str, cfg: DictConfig, parent: ParentRun) -> None:
    """``encoding=``, ``model=``, ``corpus=`` or ``task=`` given: it must be what the parent was trained with."""
    where = f"parent={parent.path}"
    if section == "encoding" and cfg.encoding.name != parent.encoding.get("name"):
        raise ConfigError(
            f"encoding={cfg.encoding.name} was asked for, but {where} was trained with encoding="
            f"{parent.encoding.get('name')}, and an extension continues its parent's encoding; allowed: "
            f"encoding={parent.encoding.get('name')} (or no encoding=), or a parent trained with {cfg.encoding.name}."
        )
    if section == "model":
        different = [k for k in model_shape() if cfg.model.get(k) != parent.config["model"].get(k)]
        if different:
            theirs = parent.config["model"]
            said = ", ".join(f"model.{k} {cfg.model.get(k)} (parent {theirs.get(k)})" for k in different)
            raise ConfigError(f"the model asked for is not the one {where} was trained with ({said}); drop model=.")
    if section == "corpus" and cfg.corpus.name != parent.config["corpus"].get("name"):
        raise ConfigError(
            f"corpus={cfg.corpus.name} was asked for, but {where} was trained on corpus "
            f"{parent.config['corpus'].get('name')}, and an extension continues on its parent's text; drop corpus=."
        )
    if section == "task" and cfg.task.name != "lm":
        raise ConfigError(f"task={cfg.task.name}: an extension continues its parent's task=lm; drop task=.")


def select(config: dict[str, Any], key: str) -> Any:
    return OmegaConf.select(OmegaConf.create(config), key)


# ---- the extension's config ---------------------------------------------------------------------------------
def is_extension(cfg: DictConfig) -> bool:
    """A config of ``experiment=context_extension`` (it declares the ``extension`` section)."""
    return isinstance(cfg.get("extension"), DictConfig)


def extended_config(cfg: DictConfig, overrides: Sequence[str] | None = None) -> DictConfig:
    """``cfg`` as the extension of its ``parent`` trains it (the module's docstring), checked; ``cfg`` itself when
    it is no extension or was extended already. ``overrides``: the command line's (None: the Hydra job's)."""
    if not is_extension(cfg) or cfg.task.get("extended_from") is not None:
        return cfg
    check_section("extension", cfg.extension, schema_types(ExtensionSettings), closed=True)
    settings = OmegaConf.to_container(cfg.extension, resolve=True)
    parent = read_parent(cfg.get("parent"))
    given = given_overrides(overrides)
    changes = check_given(cfg, parent, given)
    context = extended_context(parent, float(settings["factor"]))
    check_rule(parent, str(settings["rule"]), context)
    steps = cfg.trainer.max_steps
    if steps is None:  # the experiment's default: a share of the parent's steps
        parent_steps = parent.results.get("steps") or parent.config["trainer"]["max_steps"]
        steps = max(1, round(float(settings["step_fraction"]) * int(parent_steps)))
    merged = copy.deepcopy(cfg)
    with read_write(merged), open_dict(merged):
        # a model setting added since the parent ran: the value the YAML gives it, what older versions ran with
        merged.model = {**yaml_defaults("model", default_option("model")), **parent.config["model"]}
        merged.corpus = parent.config["corpus"]
        merged.encoding = extended_encoding(parent, str(settings["rule"]), float(settings["factor"]), context)
        merged.task = extended_task(cfg, parent, context, settings["eval_multiples"])
        merged.optimizer = extended_optimizer(cfg, parent, settings, steps, given)
        merged.trainer.max_steps = steps
        if "trainer" not in given and "trainer.precision" not in given:  # train as the parent did
            merged.trainer.precision = parent.config.get("trainer", {}).get("precision", merged.trainer.precision)
        if "seed" not in given:
            merged.seed = parent.config.get("seed", merged.seed)
        for key in changes:  # what the command line may change, as it gave it
            OmegaConf.update(merged, key, OmegaConf.select(cfg, key), force_add=True)
    return merged


def extended_context(parent: ParentRun, factor: float) -> int:
    """``factor`` x the parent's context: a whole number of tokens, longer than the parent's."""
    context = factor * parent.context
    if context <= parent.context or not float(context).is_integer():
        raise ConfigError(
            f"extension.factor={factor:g} gives a context of {context:g} tokens from the parent's "
            f"task.context_length={parent.context}, and an extension trains on a longer whole number of tokens; "
            f"allowed: a factor greater than 1 whose product with {parent.context} is whole (e.g. 2, 4, 8)."
        )
    return int(context)


def rotary_encodings() -> str:
    """The encodings that take RoPE scaling rules, in words: those whose YAML declares ``scaling``, the ones with an
    ``inner`` setting only over RoPE."""
    declared = {name: settings for name, settings in encoding_defaults().items() if "scaling" in settings}
    always = sorted(name for name, settings in declared.items() if "inner" not in settings)
    over_rope = sorted(name for name, settings in declared.items() if "inner" in settings)
    return f"{', '.join(always)}; {', '.join(over_rope)} with inner=rope"


def check_rule(parent: ParentRun, rule: str, context: int) -> None:
    """A rule needs rotations to rescale; a parent trained with a rule is an extension already."""
    encoding = parent.encoding
    name = encoding.get("name")
    if encoding.get("scaling", "none") not in ("none", None):  # a parent from before the rules had none
        raise ConfigError(
            f"parent={parent.path} was trained with encoding.scaling={encoding['scaling']} (factor "
            f"{encoding.get('scaling_factor')}), an extension itself, and poslab extends only runs trained without a "
            f"rule; allowed: the run it was extended from."
        )
    rotates = "scaling" in encoding and encoding.get("inner", "rope") != "none"  # no inner: a rotary encoding
    if rule != "none" and not rotates:
        inner = " with inner=none" if "inner" in encoding else ""
        raise ConfigError(
            f"extension.rule={rule} rescales RoPE's frequencies, but the parent's encoding {name}{inner} rotates "
            f"nothing: only rotary encodings ({rotary_encodings()}) take a rule; allowed for this parent: "
            f"extension.rule=none (trained on at {context} tokens, no rule)."
        )


def extended_encoding(parent: ParentRun, rule: str, factor: float, context: int) -> dict[str, Any]:
    """The parent's encoding with the rule: ``scaling=rule`` at ``factor`` from the parent's context, or (none) no
    rule with the new context as the length test-time rules start from. Settings the parent left null and filled
    at build (FIRE's threshold, T5's max_distance, CoPE's table, a corpus's paragraph density) keep the parent's
    values, so the weights mean what they meant; a table as long as the longest sequence (learned positions)
    grows with it (``load_parent_weights``)."""
    filled = parent.results.get("encoding_settings") or {}
    encoding = filled_encoding(dict(parent.encoding), filled, keep=grown_settings(str(parent.encoding.get("name"))))
    if "scaling" in encoding:
        encoding["scaling"] = rule
        encoding["scaling_factor"] = factor if rule != "none" else 1.0
        encoding["original_length"] = parent.context if rule != "none" else context
        encoding["test_scaling"] = "none"  # a test-time rule would replace the training rule past original_length
    return encoding


def grown_settings(name: str) -> tuple[str, ...]:
    """The encoding's settings left to the new run to fill: those sized by the longest sequence it uses
    (``length_settings``: a learned table grows) but a distribution the weights were trained on, and those an
    extension fills again at its own context (``extension_settings``)."""
    from poslab.encodings import encoding_class  # torch: only once the parent and the command passed

    cls = encoding_class(name)
    kept = {key for key, how in cls.extension_settings.items() if how == "kept"}
    refilled = [key for key, how in cls.extension_settings.items() if how == "refilled"]
    return (*(key for key in cls.length_settings if key not in kept), *refilled)


def extended_task(cfg: DictConfig, parent: ParentRun, context: int, multiples: list[float]) -> dict[str, Any]:
    """The parent's task at the new context, evaluated at ``multiples`` x the parent's context; where its data live
    and what builds it are this command's (poslab's own classes: nothing a results.json names is instantiated)."""
    composed = OmegaConf.to_container(cfg.task, resolve=False)
    assert isinstance(composed, dict)
    task = {**parent.config["task"], "context_length": context, "extended_from": parent.context}
    for key in ("_target_", "module", "data_dir", "cache_dir", "corpus"):
        task[key] = composed[key]
    task["eval_lengths"] = eval_lengths(parent.context, multiples)
    return task


def eval_lengths(context: int, multiples: list[float]) -> list[int]:
    """``multiples`` x the parent's ``context``: whole lengths from the parent's context up (where it was measured)."""
    lengths = [m * context for m in multiples]
    if not multiples or not all(float(n).is_integer() and n >= context for n in lengths):
        raise ConfigError(
            f"extension.eval_multiples={multiples} of the parent's context {context} are not all whole lengths from "
            f"{context} up; allowed: multiples of at least 1 whose products with {context} are whole, e.g. "
            f"[1, 2, 4, 8, 16]."
        )
    return sorted({int(n) for n in lengths})


def extended_optimizer(
    cfg: DictConfig, parent: ParentRun, settings: dict[str, Any], steps: int, given: dict[str, Any]
) -> dict[str, Any]:
    """A fresh schedule over the extension's ``steps``: the parent's optimizer at ``lr_scale`` x its peak, warmed up
    over ``warmup_fraction`` of the steps; ``optimizer.*`` on the command line wins."""
    optimizer = dict(parent.config["optimizer"])
    optimizer["lr"] = float(optimizer["lr"]) * float(settings["lr_scale"])
    optimizer["warmup_steps"] = round(float(settings["warmup_fraction"]) * steps)
    optimizer["total_steps"] = "${trainer.max_steps}"
    composed = OmegaConf.to_container(cfg.optimizer, resolve=False)
    assert isinstance(composed, dict)
    for key in given:
        section, _, leaf = key.partition(".")
        if section == "optimizer" and leaf in composed:
            optimizer[leaf] = composed[leaf]
    return optimizer


# ---- the run: weights from the parent, the record in results.json -------------------------------------------
def initialise_from_parent(module: Any, cfg: DictConfig) -> dict[str, Any]:
    """Load the parent's weights into ``module.model`` (an extension's config; else nothing) and return what
    ``results.json`` records of the extension: ``parent`` and ``extension``."""
    if not is_extension(cfg):
        return {}
    parent = read_parent(cfg.parent)
    loaded = load_parent_weights(module.model, parent.path)
    rule = str(cfg.extension.rule)
    config_hash = hashlib.sha256(json.dumps(parent.config, sort_keys=True).encode()).hexdigest()
    log.info("extension of %s (rule %s): weights from its %s", parent.path, rule, MODEL_FILE)
    return {
        "parent": {
            "path": str(parent.path),
            "name": parent.config.get("name"),
            "label": parent.results.get("label"),
            "seed": parent.results.get("seed"),
            "steps": parent.results.get("steps"),
            "context_length": parent.context,
            "config_sha256": config_hash,
            "model_sha256": loaded["model_sha256"],
            "data_sha256": data_hash(parent.results),  # checked against the extension's own (checked_parent_data)
        },
        "extension": {
            "rule": rule,
            "factor": float(cfg.extension.factor),
            "context_length": int(cfg.task.context_length),
            "eval_lengths": cfg.task.get("eval_lengths"),
            "lr": float(cfg.optimizer.lr),
            "warmup_steps": int(cfg.optimizer.warmup_steps),
            "grown_tables": loaded["grown"],
            # the same rule at test time only: the parent's weights under test_<rule> (past its context)
            "test_time_comparison": {
                "run": str(parent.path),
                "variant": None if rule == "none" else f"test_{rule}",
                "parent_figures": parent.results.get("figures"),
            },
        },
    }


def checked_parent_data(results: dict[str, Any]) -> str | None:
    """An extension fine-tunes its parent on the parent's text: where the text it read (``data_hash`` of its
    sources) is not the parent's, one sentence for the log and results.json's ``data_notes`` (the comparison with
    the parent's test-time rule then mixes two corpora), or that it could not be checked (a parent run before the
    hash was recorded); None where they agree, and for a run that is no extension."""
    parent = results.get("parent")
    if not isinstance(parent, dict) or not parent:
        return None
    theirs, mine = parent.get("data_sha256"), data_hash(results)
    if theirs is None or mine is None:
        return (
            f"this extension's data could not be checked against its parent {parent.get('path')}'s (no data hash "
            f"recorded for {'the parent' if theirs is None else 'the extension'}): that both read the same text "
            f"is assumed, not known."
        )
    if theirs == mine:
        return None
    return (
        f"this extension read other data than its parent {parent.get('path')} (data hash {mine}, the parent's "
        f"{theirs}: the corpus files changed since the parent ran); its figures beside the parent's compare two "
        f"texts, not two ways of extending one model."
    )


def load_parent_weights(model: Any, parent: Path) -> dict[str, Any]:
    """Load ``parent``'s ``model.pt`` into ``model`` (the extension's, built for its longer sequences): every tensor
    as saved, but an encoding's table with one row per position (learned positions), whose first rows are the
    parent's and the rest the new model's initial values (rows no parent sequence reached had never trained).
    Returns the file's sha256 and the tables grown."""
    import io

    import torch

    from poslab.runs.checkpoints import uncompiled_state_dict

    data = (parent / MODEL_FILE).read_bytes()
    state = uncompiled_state_dict(torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)["state_dict"])
    own = model.state_dict()
    grown = []
    for key, tensor in state.items():
        target = own.get(key)
        if target is None or target.shape == tensor.shape:
            continue
        if not (key.startswith("encoding.") and target.shape[1:] == tensor.shape[1:]):
            raise ConfigError(
                f"parent={parent}: its {MODEL_FILE} does not fit the extension's model ({key} is "
                f"{tuple(tensor.shape)} there, {tuple(target.shape)} here); allowed: a parent of this poslab's models."
            )
        rows = min(len(tensor), len(target))
        state[key] = torch.cat([tensor[:rows], target[rows:].to(tensor.dtype)])
        grown.append(f"{key}: {len(tensor)} -> {len(target)} rows")
    model.load_state_dict(state)  # strict: a missing or unexpected tensor is a bug, with its traceback
    return {"model_sha256": hashlib.sha256(data).hexdigest(), "grown": grown}
