"""Typed settings: the schema of each config group, checked when a config is composed, before anything runs.

Each group's settings are declared once, as a dataclass below: a field's type says what a value may be
(``int`` refuses ``2.5`` and ``"abc"``, ``float`` takes whole numbers too, ``Literal[...]`` lists the allowed
options), and ``Annotated[..., Bound(">=", 1)]`` its bounds; a list's length is ``Length(n)``, or ``LengthOf(key)``
where another setting decides it (ALiBi's slopes: one per ``model.n_heads``). ``check_settings`` walks a composed
config against them; a bad value stops with one sentence naming the key, the value and what is allowed, with the closest
valid key or option suggested. A new setting is checked by being declared here; a closed group (``closed``
below) also refuses keys it does not declare. An encoding's settings take the type of their default in the
encoding's YAML (``conf/encoding/<name>.yaml``); its ``validate`` checks their ranges.

One home per default: the YAML. Every setting's default value lives in ``conf/`` (what a user reads and overrides,
what an experiment patches, what Hydra composes), and only there. The dataclasses here are the schema: each
field's type and bounds, and no default (they are never instantiated; ``tests/config/test_one_home_per_default.py``
checks that no field has one and that every field has its value in the YAML). Code reads a composed config's
settings directly (``cfg.optimizer.lr``), so a key missing is an error rather than a second, silent default. A
config built by hand that may leave settings out (a test, a library user's ``ModelConfig``, an encoding or a
corpus made in Python, an older run's record) is merged over the YAML's values, read once per process by
``poslab.config.yaml_values`` (``yaml_defaults``, ``default_option``, ``root_defaults``) and the helpers below
(``encoding_values``, ``task_defaults``, ``with_corpus_defaults``, ``with_yaml_defaults``).

Path settings (``PATH_SETTINGS``) have ``~`` and ``$VAR`` expanded by one function, ``expand_path``, wherever their
value enters (the command line, the ``POSLAB_*_DIR`` defaults, a config composed in Python).

Light by design (no torch): ``train.py`` runs these checks before importing torch, so a typo costs a second.
"""

from __future__ import annotations

import copy
import difflib
import functools
import math
import operator
import os
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass, make_dataclass
from dataclasses import field as dataclass_field
from typing import Annotated, Any, Literal, Union

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict, read_write

from poslab.config.passkey_settings import passkey_max_length
from poslab.config.yaml_values import (  # noqa: F401  (re-exported: the YAML's values, read where the settings are)
    CONF_DIR,
    default_option,
    file_values,
    root_defaults,
    without_interpolations,
    yaml_defaults,
)
from poslab.errors import ConfigError

# ---- the enumerated settings: each list of options is defined here, once ------------------------------------
SYNTHETIC_TASKS = ("lag", "seen", "copy", "associative_recall", "flip_flop", "counting", "state_tracking")
SCHEDULES = ("constant", "cosine")
#: ``trainer.precision`` values poslab trains with. Mixed precision keeps fp32 weights and optimizer moments
#: (autocast computes in bf16/fp16); the "-true" half precisions would store the weights, AdamW's moments and
#: the RoPE frequencies in 16 bits, which loses the updates and rounds positions: refused.
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed")
PRECISION_ALIASES = {"32": "32-true", "bf16": "bf16-mixed", "16": "16-mixed"}
NORMS = ("layernorm", "rmsnorm")
MLPS = ("gelu", "swiglu")
BACKENDS = ("sdpa", "explicit", "flex")  # model.attention
TOKENIZERS = ("bytes", "bpe")
FORMATS = ("jsonl", "text", "wikitext", "parquet", "python")  # corpus.format
SEGMENTATIONS = ("blank_lines", "wikitext", "lines", "code")  # corpus.segmentation (null: by format)
DECODE_ERRORS = ("strict", "replace")  # corpus.decode_errors: what reading a data file does with invalid UTF-8
VERIFY_CACHE = ("first_use", "always", "never")  # corpus.verify_cache: when array checksums are compared
#: a language model's evaluation lengths when ``task.eval_lengths`` is null: these multiples of its context
LM_EVAL_MULTIPLES = (1, 2, 4, 8, 16)


def check_precision(precision: Any, accelerator: str | None = None) -> str:
    """The canonical name of a ``trainer.precision`` poslab can train with, or a ``ConfigError`` naming it.
    ``accelerator``: the device kind it runs on, where known (``cpu``: 16-mixed refused, see below)."""
    check_not_half_true(precision)
    name = PRECISION_ALIASES.get(str(precision), str(precision))
    if name not in PRECISIONS:
        raise ConfigError(
            f"trainer.precision={precision!r} is not supported; allowed: {', '.join(PRECISIONS)} "
            f"(mixed precision keeps fp32 weights; bf16-mixed is the fast path on GPUs and AMX/AVX512-BF16 CPUs)."
        )
    if name == "16-mixed" and accelerator == "cpu":
        # Lightning would train in bf16-mixed instead, with a warning only, and results.json would record 16-mixed
        raise ConfigError(
            f"trainer.precision={precision!r} is not available on the CPU (trainer.accelerator=cpu): PyTorch has no "
            f"fp16 mixed precision with loss scaling there, and Lightning would silently train in bf16-mixed "
            f"instead; allowed on a CPU: 32-true or bf16-mixed (16-mixed needs a GPU, e.g. trainer=gpu)."
        )
    return name


#: Lightning's half "-true" precisions (``PRECISIONS``' comment: refused on purpose), and the mixed one each is near
HALF_TRUE_PRECISIONS = {"16-true": "16-mixed", "bf16-true": "bf16-mixed"}


def check_not_half_true(precision: Any) -> None:
    """A half "-true" precision said as refused on purpose, with its mixed counterpart: the typed check alone would
    take ``16-true`` for a typo of ``32-true``."""
    mixed = HALF_TRUE_PRECISIONS.get(str(precision))
    if mixed is not None:
        raise ConfigError(
            f'trainer.precision={precision!r} is refused on purpose: a half "-true" precision stores the weights, '
            f"AdamW's moments and the RoPE frequencies in 16 bits, which loses small updates and rounds positions; "
            f"give trainer.precision={mixed} (16-bit compute, fp32 weights; bf16-mixed on CPUs and recent GPUs, "
            f"16-mixed on GPUs only) or 32-true."
        )


#: a bound's comparison: its words in a message, and its test
COMPARISONS: dict[str, tuple[str, Callable[[float, float], bool]]] = {
    ">=": ("at least", operator.ge),
    ">": ("greater than", operator.gt),
    "<=": ("at most", operator.le),
    "<": ("less than", operator.lt),
}


@dataclass(frozen=True)
class Bound:
    """A bound on a number setting, in ``Annotated[int, Bound(">=", 1)]``."""

    comparison: str
    value: float

    def holds(self, number: float) -> bool:
        return COMPARISONS[self.comparison][1](number, self.value)

    def __str__(self) -> str:
        shown = str(int(self.value)) if float(self.value).is_integer() else f"{self.value:g}"  # 2**32: 4294967296
        return f"{COMPARISONS[self.comparison][0]} {shown}"


@dataclass(frozen=True)
class Length:
    """A list setting's exact length, in ``Annotated[list[float], Length(2)]`` (AdamW's two betas): a list of
    another length is refused before anything runs, not deep in torch."""

    n: int

    def holds(self, value: Any) -> bool:
        return len(value) == self.n

    def __str__(self) -> str:
        return f"exactly {self.n} long"


@dataclass(frozen=True)
class LengthOf:
    """A list setting whose length another setting decides, in ``Annotated[list[float], LengthOf("model.n_heads",
    "head")]`` (ALiBi's slopes: one per head): checked against that setting's value in the same config, before
    anything runs. ``per`` names what each value is for, in a message."""

    key: str
    per: str

    def holds(self, value: Any, sizes: Mapping[str, int]) -> bool:
        return self.key not in sizes or len(value) == sizes[self.key]  # a size not known here: validate checks it

    def said(self, sizes: Mapping[str, int]) -> str:
        known = f"{sizes[self.key]} long, " if self.key in sizes else ""
        value = f"={sizes[self.key]}" if self.key in sizes else ""
        return f"{known}one per {self.per} ({self.key}{value})"


def holds(bound: Bound | Length | LengthOf, value: Any, sizes: Mapping[str, int]) -> bool:
    return bound.holds(value, sizes) if isinstance(bound, LengthOf) else bound.holds(value)


def said(bound: Bound | Length | LengthOf, sizes: Mapping[str, int]) -> str:
    return bound.said(sizes) if isinstance(bound, LengthOf) else str(bound)


#: the sizes a ``LengthOf`` may name, read from a composed config (``config_sizes``)
SIZE_SETTINGS = ("model.n_heads", "model.n_layers")


Count = Annotated[int, Bound(">=", 1)]  # sizes, steps, lengths: no zero, no negatives
NonNegative = Annotated[int, Bound(">=", 0)]
PositiveFloat = Annotated[float, Bound(">", 0)]
Fraction = Annotated[float, Bound(">=", 0), Bound("<=", 1)]
OpenFraction = Annotated[float, Bound(">", 0), Bound("<", 1)]
#: a random seed: Lightning's ``seed_everything`` and numpy take 0 to 2**32 - 1
Seed = Annotated[int, Bound(">=", 0), Bound("<", 2**32)]


# The schema of each group: types and bounds, no defaults (their values live in conf/: the module docstring).
@dataclass
class RootSettings:
    seed: Seed
    threads: Count | None  # null: PyTorch's own thread count (all cores)
    name: str
    keep_freed_memory: bool
    save_model: bool
    ckpt_path: str | None
    resume_allow_changes: list[str] | None
    smoke_eval: bool  # debug=fast: the evaluation cut to one length, the plain model, a small sample (config.py)


@dataclass
class TrainerSettings:
    """The Trainer arguments poslab's configs set; any other Lightning Trainer argument may be added (open)."""

    accelerator: Literal["cpu", "gpu", "cuda", "mps", "tpu", "auto"]
    devices: Any  # a count, device indices or auto: checked by poslab.running.compose.check_devices
    precision: Literal[PRECISIONS + tuple(PRECISION_ALIASES) + (32, 16)]  # noqa: RUF005
    max_steps: Count
    max_epochs: int
    log_every_n_steps: Count
    num_sanity_val_steps: NonNegative
    enable_model_summary: bool
    deterministic: bool
    strategy: str
    num_nodes: Count


@dataclass
class OptimizerSettings:
    lr: Annotated[float, Bound(">=", 0)]  # 0: the weights stay as they are (evaluation-only runs, tests)
    weight_decay: Annotated[float, Bound(">=", 0)]
    # null: PyTorch's AdamW betas
    betas: Annotated[list[Annotated[float, Bound(">=", 0), Bound("<", 1)]], Length(2)] | None
    eps: PositiveFloat
    schedule: Literal[SCHEDULES]
    warmup_steps: NonNegative
    min_lr_ratio: Fraction
    fused: bool
    grad_clip: PositiveFloat | None  # null: no clipping
    skip_nonfinite_steps: NonNegative
    total_steps: Count


@dataclass
class ModelSettings:
    """The ``model`` group; ``poslab.model.ModelConfig`` is these plus what the data and encoding give."""

    n_layers: Count
    n_heads: Count
    d_model: Count
    norm: Literal[NORMS]
    mlp: Literal[MLPS]
    mlp_hidden: Count | None  # null: 4 * d_model
    bias: bool  # biases in linear layers
    final_norm: bool  # the where_am_i model has none before its output layer
    tie_embeddings: bool
    attention: Literal[BACKENDS]
    init_std: PositiveFloat | None  # null: PyTorch's default initialisation
    compile: bool  # torch.compile the model when training starts (poslab.lightning_modules.base)


@dataclass
class TaskSettings:
    _target_: str
    module: str
    name: str
    batch_size: Count
    eval_batch_size: Count


@dataclass
class SyntheticTaskSettings(TaskSettings):
    k: Count
    vocab_size: Annotated[int, Bound(">=", 2)]
    train_length: Annotated[int, Bound(">=", 2)]  # log-length scaling divides by log(train_length)
    # [low, high]: each training batch's length drawn from it (high must equal train_length: the datamodule checks);
    # null: every batch at train_length
    train_lengths: Annotated[list[Annotated[int, Bound(">=", 2)]], Length(2)] | None
    eval_lengths: list[Annotated[int, Bound(">=", 2)]] | None
    eval_size: Count
    eval_seed: Seed
    eval_ways: Literal["all", "plain"]  # plain: the plain model only (debug=fast's smoke_eval)


@dataclass
class AssociativeRecallSettings(SyntheticTaskSettings):
    num_pairs: Count | None  # null: length // 4, the most a length holds
    eval_pairs: list[Count]
    query_gaps: Literal["uniform", "power_law"]  # where the queries sit in the tail (Zoology's: power_law)
    power_a: PositiveFloat  # power_law's exponent: p(gap g) ~ g^(power_a - 1) (Zoology's 0.01)
    distinct_values: bool  # values drawn without replacement (Zoology's: true)
    filler: Literal["blank", "random"]  # the tail's other positions (Zoology's random_non_queries: random)


@dataclass
class FlipFlopSettings(SyntheticTaskSettings):
    p_write: Fraction
    p_ignore: Fraction
    p_read: Fraction
    eval_p_ignore: list[Fraction]


@dataclass
class CountingSettings(SyntheticTaskSettings):
    num_variables: Count
    program_length: Annotated[int, Bound(">=", 6)] | None  # null: the program fills the whole length


@dataclass
class StateTrackingSettings(SyntheticTaskSettings):
    group: Literal["S5", "A5"]


@dataclass
class LanguageTaskSettings(TaskSettings):
    context_length: Count
    val_windows: Count
    val_every_n_steps: Count
    eval_lengths: list[Annotated[int, Bound(">=", 2)]] | None  # null: LM_EVAL_MULTIPLES x context_length
    eval_tokens: Count | None  # tokens scored per source group; null: from val_windows (conf/task/lm.yaml)
    eval_stride: Count | None  # sliding-window evaluation's stride; null: none
    selection_fraction: float  # held-out documents that choose among test-time rules (0 .. <1); the rest: test
    selection_seed: int  # the selection split's draw (held_out.select_documents), not the run's seed
    every_way_on_test: bool  # one round of every way on every window (each way's test figure), not two
    passkey: Any  # passkey retrieval after training: checked by poslab.config.passkey_settings
    extended_from: Annotated[int, Bound(">=", 2)] | None  # a context extension's parent's context; null: none
    corpus: Any
    data_dir: str
    cache_dir: str


@dataclass
class CorpusSettings:
    """The settings every text corpus shares; a corpus may declare more (its groups, sources): open. Each corpus's
    YAML gives the shared four (``TEXT_CORPUS_SETTINGS``); the others belong to some corpora only."""

    name: str
    tokenizer: Literal[TOKENIZERS]
    vocab_size: Annotated[int, Bound(">=", 258)] | None  # bpe: 256 bytes + the separator + merges
    validation_fraction: OpenFraction
    decode_errors: Literal[DECODE_ERRORS]
    verify_cache: Literal[VERIFY_CACHE]
    format: Literal[FORMATS]
    segmentation: Literal[SEGMENTATIONS] | None  # null: by format
    path: str | None
    field: str
    document_start: str | None  # null: a file is one document (format text)
    include_tests: bool
    max_bytes: Count | None  # null: no limit


#: the corpus settings every text corpus's YAML gives (``conf/corpus/*.yaml``), which the data code reads
TEXT_CORPUS_SETTINGS = ("tokenizer", "validation_fraction", "decode_errors", "verify_cache")


#: (config path, schema, closed: keys it does not declare are refused)
@dataclass
class EvaluationCheckpointSettings:
    """``callbacks.evaluation_checkpoint`` (``poslab.running.evaluation_checkpoint``): where the test after training
    is saved as it goes, and at most how many seconds apart (null: not saved)."""

    dirpath: str | None
    every_seconds: Annotated[float, Bound(">=", 0)] | None


SECTIONS: tuple[tuple[str, type, bool], ...] = (
    ("", RootSettings, False),
    ("trainer", TrainerSettings, False),
    ("optimizer", OptimizerSettings, True),
    ("model", ModelSettings, True),
    ("callbacks.evaluation_checkpoint", EvaluationCheckpointSettings, True),
)
TASK_SCHEMAS = {
    "lag": SyntheticTaskSettings,
    "seen": SyntheticTaskSettings,
    "copy": SyntheticTaskSettings,
    "associative_recall": AssociativeRecallSettings,
    "flip_flop": FlipFlopSettings,
    "counting": CountingSettings,
    "state_tracking": StateTrackingSettings,
    "lm": LanguageTaskSettings,
}

#: the sections that take only the keys they declare, with everything below them (an encoding's, a task's: their
#: own schemas), beside ``SECTIONS``' closed ones
CLOSED_SECTIONS = ("encoding", "task", *(prefix for prefix, _, closed in SECTIONS if closed))


def closed_section(prefix: str) -> bool:
    """Whether the section ``prefix`` (``model``, ``task.passkey``) refuses a key it does not declare, so that a
    new key given on purpose (``+model.x=1``) is refused too."""
    return any(prefix == closed or prefix.startswith(f"{closed}.") for closed in CLOSED_SECTIONS)


# ---- messages -------------------------------------------------------------------------------------------------
def suggestion(word: Any, candidates: Sequence[Any]) -> str:
    """`` did you mean X?`` for the candidate closest to ``word``, or nothing."""
    names = [str(c) for c in candidates]
    close = difflib.get_close_matches(str(word), names, n=1, cutoff=0.6)
    return f" did you mean {close[0]}?" if close else ""


def check_choice(key: str, value: Any, allowed: Sequence[Any]) -> None:
    """One sentence for an enumerated setting whose value is not one of ``allowed``."""
    if value not in allowed:
        listed = ", ".join(dict.fromkeys(str(a) for a in allowed))
        raise ConfigError(f"{key}={value!r} is not allowed;{suggestion(value, allowed)} allowed: {listed}.")


def check_whole(key: str, value: Any, minimum: int, meaning: str = "") -> int:
    """One sentence when ``value`` is not a whole number of at least ``minimum`` (``meaning``: what it is, in
    brackets); the number otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        said = f" ({meaning})" if meaning else ""
        raise ConfigError(f"{key}={value!r} must be a whole number of at least {minimum}{said}.")
    return value


def check_number(
    key: str, value: Any, above: float | None = None, at_least: float | None = None, meaning: str = ""
) -> float:
    """One sentence when ``value`` is not a finite number (``above`` it, or ``at_least`` it, when given); the
    number otherwise. A boolean is no number here, though Python counts it as one."""
    try:
        number = math.nan if isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        number = math.nan
    bound = (
        f" greater than {above:g}"
        if above is not None
        else f" of at least {at_least:g}"
        if at_least is not None
        else ""
    )
    fits = (above is None or number > above) and (at_least is None or number >= at_least)
    if not (math.isfinite(number) and fits):
        said = f" ({meaning})" if meaning else ""
        raise ConfigError(f"{key}={value!r} must be a finite number{bound}{said}.")
    return number


def describe(annotation: Any, sizes: Mapping[str, int] | None = None) -> str:
    """What a value of ``annotation`` is, in words: ``a whole number of at least 1``, ``one of a, b``; ``sizes``:
    the values of the settings a ``LengthOf`` names (``config_sizes``)."""
    base, bounds = unannotated(annotation)
    origin = typing.get_origin(base)
    sizes = sizes or {}
    if origin in (Union, types.UnionType):
        parts = [describe(a, sizes) for a in typing.get_args(base) if a is not type(None)]
        parts += ["null"] if type(None) in typing.get_args(base) else []
        return (", or " if any(", " in part for part in parts) else " or ").join(parts)
    if origin is Literal:
        return "one of " + ", ".join(dict.fromkeys(str(a) for a in typing.get_args(base)))
    if origin is list:
        (item,) = typing.get_args(base) or (Any,)
        kind, _, each = describe(item).removeprefix("a ").removeprefix("an ").partition(", ")
        listed = "a list" if item is Any else f"a list of {kind}s" + (f" (each {each})" if each else "")
        return listed + "".join(f", {said(bound, sizes)}" for bound in bounds)
    words = {int: "a whole number", float: "a number", bool: "true or false", str: "a string"}.get(base, "a value")
    return words + (", " + " and ".join(map(str, bounds)) if bounds else "")


def unannotated(annotation: Any) -> tuple[Any, list[Any]]:
    if typing.get_origin(annotation) is Annotated:
        base, *extras = typing.get_args(annotation)
        return base, [e for e in extras if isinstance(e, (Bound, Length, LengthOf))]
    return annotation, []


def value_fits(value: Any, annotation: Any, sizes: Mapping[str, int] | None = None) -> bool:
    """Whether ``value`` is of the declared type and within its bounds (``sizes``: as ``describe``'s)."""
    base, bounds = unannotated(annotation)
    origin = typing.get_origin(base)
    sizes = sizes or {}
    if base is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(value_fits(value, a, sizes) for a in typing.get_args(base))
    if base is type(None):
        return value is None
    if origin is Literal:
        return value in typing.get_args(base) and not isinstance(value, bool)
    if origin is list:
        (item,) = typing.get_args(base) or (Any,)
        fits = isinstance(value, (list, tuple, ListConfig)) and all(value_fits(v, item) for v in value)
        return fits and all(holds(bound, value, sizes) for bound in bounds)
    if base is bool:
        return isinstance(value, bool)
    if base is int:
        fits = isinstance(value, int) and not isinstance(value, bool)
    elif base is float:
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif base is str:
        fits = isinstance(value, (str, int, float)) and not isinstance(value, bool)  # name=123 is a fine name
    else:
        fits = isinstance(value, base)
    return fits and all(bound.holds(value) for bound in bounds)


def check_value(key: str, value: Any, annotation: Any, sizes: Mapping[str, int] | None = None) -> None:
    """One sentence when ``value`` does not fit ``annotation``: the key, the value (a list's length) and what is
    allowed; ``sizes``: the settings a ``LengthOf`` names, as ``describe``'s."""
    if value_fits(value, annotation, sizes):
        return
    base, _ = unannotated(annotation)
    choices = [a for u in _union_members(base) if typing.get_origin(u) is Literal for a in typing.get_args(u)]
    hint = suggestion(value, choices) if choices and isinstance(value, str) else ""
    written = ""
    if isinstance(value, float) and value.is_integer() and int in _union_members(base):
        written = f" (write {int(value)}, without a decimal point)"
    if isinstance(value, (list, tuple)) and any(typing.get_origin(u) is list for u in _union_members(base)):
        written = list_fault(value, base)
    raise ConfigError(f"{key}={value!r} is not allowed{written};{hint} {key} takes {describe(annotation, sizes)}.")


def list_fault(value: Sequence[Any], base: Any) -> str:
    """What is wrong with a list ``value`` of a list setting (``base``, its type less bounds), in brackets: the first
    element no list type of ``base`` takes (``[32, abc]``: ``'abc'``), else its length (its bounds decide it)."""
    items = [typing.get_args(u)[0] for u in _union_members(base) if typing.get_origin(u) is list and typing.get_args(u)]
    for element in value:
        if items and not any(value_fits(element, item) for item in items):
            return f" (its element {element!r} is not {' or '.join(describe(item) for item in items)})"
    return f" (it has {len(value)} value{'s' if len(value) != 1 else ''})"


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return tuple(m for a in typing.get_args(annotation) for m in _union_members(unannotated(a)[0]))
    return (annotation,)


def schema_types(schema: type) -> dict[str, Any]:
    assert is_dataclass(schema)
    hints = typing.get_type_hints(schema, include_extras=True)
    return {f.name: hints[f.name] for f in fields(schema)}


def readable(node: DictConfig, key: str) -> tuple[bool, Any]:
    """(True, value) for a key whose value resolves here; (False, None) for one that needs Hydra's runtime
    (``${hydra:...}``) or another resolver not registered in this process: its consumer checks it."""
    try:
        value = node[key]
    except Exception:  # noqa: BLE001  (an interpolation that resolves only inside the job)
        return False, None
    if isinstance(value, (DictConfig, ListConfig)):
        try:
            return True, OmegaConf.to_container(value, resolve=True)
        except Exception:  # noqa: BLE001
            return False, None
    return True, value


def check_dataclass(prefix: str, instance: Any, schema: type) -> None:
    """The declared fields of a dataclass instance (e.g. a ``ModelConfig`` made in Python) against ``schema``."""
    for key, annotation in schema_types(schema).items():
        check_value(f"{prefix}.{key}", getattr(instance, key), annotation)


def check_section(
    prefix: str,
    node: Any,
    declared: Mapping[str, Any],
    closed: bool,
    owner: str = "",
    sizes: Mapping[str, int] | None = None,
) -> None:
    """Every key of ``node`` that ``declared`` types (key -> annotation) against its type; with ``closed``, no
    other keys (``name`` and ``_target_`` aside). ``owner`` names the section in a message (default: ``prefix``);
    ``sizes``: the settings a ``LengthOf`` names (``config_sizes``)."""
    if not isinstance(node, DictConfig):
        return
    dotted = f"{prefix}." if prefix else ""
    for key in map(str, node):
        if key in declared:
            present, value = readable(node, key)
            if present:
                check_value(f"{dotted}{key}", value, declared[key], sizes)
        elif closed and key not in ("name", "_target_"):
            allowed = ", ".join(k for k in declared if not k.startswith("_") and k != "name") or "none"
            raise ConfigError(
                f"{dotted}{key} is not a setting of {owner or prefix or 'the config'};{suggestion(key, list(declared))}"
                f" allowed: {allowed}."
            )


def text_corpus_defaults() -> dict[str, Any]:
    """The settings every text corpus gives (``TEXT_CORPUS_SETTINGS``) as ``conf/corpus/local.yaml`` gives them
    (the corpus a user brings): what a corpus config built by hand (a test, ``prepare_corpus`` called from Python)
    takes for those it leaves out. A composed config has its own corpus's."""
    corpus = yaml_defaults("corpus", "local")["corpus"]
    return {key: corpus[key] for key in TEXT_CORPUS_SETTINGS}


def with_corpus_defaults(corpus: Mapping[str, Any]) -> dict[str, Any]:
    """``corpus`` (a ``corpus:`` config) with the shared settings it leaves out from ``text_corpus_defaults``."""
    return {**text_corpus_defaults(), **corpus}


def corpus_setting(corpus: Mapping[str, Any], key: str) -> Any:
    """One shared setting of ``corpus`` (``TEXT_CORPUS_SETTINGS``), from ``text_corpus_defaults`` where it leaves it
    out; reads no other key (a composed config's other values may need resolvers only the job registers)."""
    return corpus[key] if key in corpus else text_corpus_defaults()[key]


@functools.cache
def encoding_defaults() -> dict[str, dict[str, Any]]:
    """Each encoding's settings as its YAML declares them (``shared/`` files it includes first), by name; read
    once per process (a multirun's check asks for every job). Interpolations as written (``${...}``): callers
    that fill a config built by hand take ``encoding_values``."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((CONF_DIR / "encoding").glob("*.yaml")):
        merged = file_values(path)
        if "name" in merged:
            found[str(merged["name"])] = merged
    return found


def encoding_values(name: str) -> dict[str, Any]:
    """The settings of encoding ``name`` its YAML gives, a fresh copy with interpolations read as None (nothing
    for an encoding no YAML declares, e.g. one a test registers): what an ``encoding`` config built by hand
    takes for those it leaves out (``poslab.encodings.base.own_settings``)."""
    return without_interpolations(encoding_defaults().get(name, {}))


def task_defaults() -> dict[str, dict[str, Any]]:
    """Each task's settings as its YAML declares them (the YAMLs it inherits first), by task name."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((CONF_DIR / "task").glob("*.yaml")):
        merged = file_values(path)
        # a variant of a task (counting_filler: counting with other values) is not the task's declaration
        if "name" in merged and (path.stem == merged["name"] or merged["name"] not in found):
            found[str(merged["name"])] = merged
    return found


def with_yaml_defaults(schema: type, values: Mapping[str, Any]) -> type:
    """``schema`` as a dataclass one may build from a partial config: each field's default is its value in
    ``values`` (a YAML's, ``yaml_defaults``), so the YAML stays its one home (``poslab.model.ModelConfig``)."""
    declared = [
        (key, annotation, dataclass_field(default_factory=functools.partial(copy.deepcopy, values[key])))
        for key, annotation in schema_types(schema).items()
    ]
    return make_dataclass(f"{schema.__name__}FromYaml", declared, bases=(schema,), kw_only=True)


def default_type(default: Any) -> Any:
    """The type a YAML default declares: a number's kind, a string, a flag, a list; null: any value."""
    if default is None or (isinstance(default, str) and default.startswith("${")):
        return Any
    if isinstance(default, bool):
        return bool
    if isinstance(default, (int, float)):  # a number (YAML writes 10000 for RoPE's float base): ranges in validate
        return float
    if isinstance(default, list):
        return list[Any]
    return str


#: a list of three rotated-block sizes (paragraph, sentence, token): evenness and their sum are the encoding's check
AXIAL_BLOCKS = Annotated[list[Annotated[int, Bound(">=", 2)]], Length(3)] | None
#: encoding settings whose YAML default cannot type them (``default_type``): a null default that stands for a list,
#: a list whose length another setting decides (``LengthOf``). Declared here, light, so the typed check refuses a
#: list of the wrong length or element type before torch loads; the encoding's ``validate`` checks the rest.
ENCODING_TYPES: dict[str, dict[str, Any]] = {
    "alibi": {"slopes": Annotated[list[Annotated[float, Bound(">=", 0)]], LengthOf("model.n_heads", "head")] | None},
    "rope_nope_mix": {
        "base": PositiveFloat | Annotated[list[PositiveFloat], LengthOf("model.n_layers", "layer")] | None
    },
    "hrope_axial": {"blocks": AXIAL_BLOCKS},
    "period_axial": {"blocks": AXIAL_BLOCKS},
    "rand_axial": {"blocks": AXIAL_BLOCKS},
}


def config_sizes(cfg: DictConfig) -> dict[str, int]:
    """The values of ``SIZE_SETTINGS`` in ``cfg`` that are whole numbers (a bad one is refused by its own type)."""
    sizes = {}
    for key in SIZE_SETTINGS:
        value = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        if isinstance(value, int) and not isinstance(value, bool):
            sizes[key] = value
    return sizes


def check_encoding_settings(
    node: Any, optional: Callable[[str], Sequence[str]] | None = None, sizes: Mapping[str, int] | None = None
) -> None:
    """An encoding's settings typed by their YAML defaults; a key its YAML does not declare is refused. A null
    where the YAML has a value passes when ``optional(name)`` (the encoding's ``optional_settings``, which only the
    encodings know: ``poslab.running.compose.optional_encoding_settings``) lists the setting. ``ENCODING_TYPES`` types
    those
    a default cannot, the lists among them against ``sizes`` (``config_sizes``)."""
    if not isinstance(node, DictConfig):
        return
    present, name = readable(node, "name")
    if not present:
        return
    declared = encoding_defaults()
    check_choice("encoding.name", name, sorted(declared))
    for key in map(str, node):  # +encoding.<key>: said with the encodings that have it
        if key not in declared[name] and key != "_target_":
            value = command_value(readable(node, key)[1])
            raise ConfigError(f"encoding.{key}={value}: {unknown_encoding_setting(name, key, value)}")
    types_of = {key: default_type(default) for key, default in declared[name].items() if key != "name"}
    types_of |= {key: kind for key, kind in ENCODING_TYPES.get(str(name), {}).items() if key in types_of}
    nulled = [key for key in types_of if types_of[key] is not Any and key in node and node.get(key) is None]
    if nulled and optional is not None:  # null where the YAML has a value: where the encoding says it means something
        for key in set(nulled) & set(optional(str(name))):
            types_of[key] = Any
    check_section("encoding", node, types_of, closed=True, owner=f"encoding {name!r}", sizes=sizes)


def encodings_with_setting(key: str) -> list[str]:
    """The encodings whose YAML declares setting ``key``, by name."""
    return sorted(name for name, values in encoding_defaults().items() if key in values and key != "name")


def unknown_encoding_setting(name: Any, key: str, value: Any) -> str:
    """Why encoding ``name`` refuses ``encoding.<key>=<value>``, and what to give instead: a setting of its own close
    to ``key`` (a typo), or an encoding that has ``key``. No ``+encoding.<key>`` is offered: an encoding takes only
    the settings its YAML declares (``check_encoding_settings``)."""
    own = [k for k in encoding_defaults().get(str(name), {}) if k != "name"]
    said = f"encoding {name!r} has no settings"
    if own:
        said = f"encoding {name!r} has no setting {key!r};{suggestion(key, own)} its settings: {', '.join(own)}"
    owners = encodings_with_setting(key)
    if not owners:
        return said + "."
    example = "rope" if "rope" in owners else owners[0]
    return (
        f"{said}; {key} is a setting of {', '.join(owners)}: pick one of those, e.g. encoding={example} "
        f"encoding.{key}={command_value(value)}."
    )


def command_value(value: Any) -> str:
    """A value as a command line writes it (a list without spaces: one shell word)."""
    if isinstance(value, (list, tuple, ListConfig)):
        return "[" + ",".join(command_value(v) for v in value) + "]"
    if value is None or isinstance(value, bool):
        return str(value).lower().replace("none", "null")
    return str(value)


# ---- path settings ---------------------------------------------------------------------------------------------
#: the settings that name a file or a directory (paths.*, what reads them, and the runs a command names): ``~`` and
#: ``$VAR`` / ``${VAR}`` in them are expanded as a shell would (``expand_path``), wherever the value comes from
PATH_SETTINGS = (
    "paths.log_dir",
    "paths.data_dir",
    "paths.cache_dir",
    "paths.output_dir",
    "task.data_dir",
    "task.cache_dir",
    "corpus.path",
    "ckpt_path",
    "parent",
    "hydra.run.dir",
    "hydra.sweep.dir",
)
#: ``$VAR`` and ``${VAR}``; on a command line ``$VAR`` only (``${...}`` there is an OmegaConf interpolation)
VARIABLE = re.compile(r"\$(?:(\w+)|\{(\w+)\})")
BARE_VARIABLE = re.compile(r"\$(\w+)")


def expand_path(key: str, value: Any, braces: bool = True) -> Any:
    """A path setting's value with a leading ``~`` (or ``~user``) and every ``$VAR`` / ``${VAR}`` environment
    variable expanded; a variable that is not set is refused, naming the setting, the value and the variable. The
    one expansion of every path setting: the command line's overrides (``poslab.config.overrides.expanded_overrides``),
    the
    ``POSLAB_*_DIR`` defaults (the ``poslab.path`` resolver), a composed config's (``expand_path_settings``) and a
    local corpus's path. ``braces=False`` leaves ``${...}`` (an OmegaConf interpolation on a command line)."""
    if not isinstance(value, str):
        return value

    def variable(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in os.environ:
            raise ConfigError(
                f"{key}={value} names the environment variable {name}, which is not set; set it "
                f"(export {name}=...) or give the path itself."
            )
        return os.environ[name]

    return os.path.expanduser((VARIABLE if braces else BARE_VARIABLE).sub(variable, value))


def config_error_cause(error: BaseException) -> ConfigError | None:
    """The ``ConfigError`` a resolver raised, which OmegaConf wraps in its own error; None for any other error."""
    while error is not None and not isinstance(error, ConfigError):
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return error


def expand_path_settings(cfg: DictConfig) -> None:
    """Every path setting of a composed config (``PATH_SETTINGS``) with ``~`` and ``$VAR`` expanded, in place: a
    value that changes is replaced by the expanded path; one that resolves only inside a job (``${hydra:...}``)
    is left to it."""
    for key in PATH_SETTINGS:
        try:
            value = OmegaConf.select(cfg, key, default=None)
        except Exception as error:  # noqa: BLE001  (an interpolation that resolves only inside the job)
            if (cause := config_error_cause(error)) is not None:
                raise cause from None
            continue
        expanded = expand_path(key, value)
        if expanded != value:
            with read_write(cfg), open_dict(cfg):
                OmegaConf.update(cfg, key, expanded, merge=False)


# ---- the whole config -----------------------------------------------------------------------------------------
def check_settings(cfg: DictConfig, optional: Callable[[str], Sequence[str]] | None = None) -> None:
    """Every group of a composed config against its schema (see the module's docstring); ``optional``: the
    encoding settings that may be null besides those whose YAML default is (``check_encoding_settings``)."""
    trainer = cfg.get("trainer")
    if isinstance(trainer, DictConfig):
        check_not_half_true(readable(trainer, "precision")[1])  # before its type: not "did you mean 32-true?"
    for prefix, schema, closed in SECTIONS:
        check_section(
            prefix,
            cfg if not prefix else OmegaConf.select(cfg, prefix, default=None, throw_on_resolution_failure=False),
            schema_types(schema),
            closed,
        )
    task = cfg.get("task")
    if isinstance(task, DictConfig):
        present, name = readable(task, "name")
        if present:
            check_choice("task.name", name, list(TASK_SCHEMAS))
            check_section("task", task, schema_types(TASK_SCHEMAS[name]), closed=True)
    corpus = cfg.get("corpus")
    if isinstance(corpus, DictConfig) and corpus.get("name") != "synthetic":
        check_section("corpus", corpus, schema_types(CorpusSettings), closed=False)
    model = cfg.get("model")
    if isinstance(model, DictConfig):
        check_heads(model.d_model, model.n_heads)
    check_encoding_settings(cfg.get("encoding"), optional, config_sizes(cfg))


def check_heads(d_model: int, n_heads: int) -> None:
    """Each head takes ``d_model / n_heads`` features: the width must divide among the heads."""
    if d_model % n_heads:
        raise ConfigError(
            f"model.d_model={d_model} is not divisible by model.n_heads={n_heads}: each head takes d_model / "
            f"n_heads features; allowed: n_heads among the divisors of {d_model}."
        )


def train_length(task: Mapping[str, Any]) -> int:
    """The longest sequence a task trains on: its context, or ``train_length`` (the high end of ``train_lengths``,
    which the datamodule requires): what the encodings' settings tied to the training length take."""
    return int(task["context_length"] if "context_length" in task else task["train_length"])


def max_length(task: Mapping[str, Any]) -> int:
    """The longest sequence a task's model sees: the longest training or evaluation length (a language model's
    longest evaluation length, ``lm_eval_lengths``, or its longest passkey trial, ``passkey_max_length``)."""
    if "context_length" in task:
        return max(*lm_eval_lengths(task), passkey_max_length(task))
    lengths = [task["train_length"], *(task.get("train_lengths") or []), *(task.get("eval_lengths") or [])]
    return max(int(n) for n in lengths)


def lm_eval_lengths(task: Mapping[str, Any]) -> list[int]:
    """A language model's evaluation lengths as its config declares them, sorted: ``task.eval_lengths`` with the
    context added (the 1x figures, ``val_loss`` and ``val_bpb``, are always measured), or, null,
    ``LM_EVAL_MULTIPLES`` times the context (the datamodule leaves out those its held-out text cannot hold)."""
    context = int(task["context_length"])
    given = task.get("eval_lengths")
    lengths = [m * context for m in LM_EVAL_MULTIPLES] if given is None else [int(n) for n in given]
    return sorted({context, *lengths})


def shortest_eval_length(task: Mapping[str, Any]) -> int:
    """The shortest evaluation length a language model's task allows: its context, or, for a context extension
    (``poslab.running.extension``), its parent's context ``task.extended_from``: an extension is measured from where its
    parent was trained, beside it, so its own figures at 1x and 2x the parent's context lie below its context."""
    extended = task.get("extended_from")
    return int(task["context_length"]) if extended is None else int(extended)


def check_lm_evaluation(task: Mapping[str, Any]) -> list[int]:
    """A language model's evaluation settings against each other (no data read): every length at or past the
    context (an extension's: its parent's, ``shortest_eval_length``), ``eval_tokens`` a whole number of every
    length, ``eval_stride`` at most the shortest length. Returns the declared lengths (``lm_eval_lengths``)."""
    context, given = int(task["context_length"]), task.get("eval_lengths")
    example = f"[{context}, {2 * context}, {4 * context}]"
    if given is not None and not list(given):
        raise ConfigError(
            f"task.eval_lengths=[] gives no evaluation length; allowed: null ({', '.join(map(str, LM_EVAL_MULTIPLES))}"
            f" x task.context_length={context}) or lengths at or past {context}, e.g. task.eval_lengths={example}."
        )
    below = [int(n) for n in given or [] if int(n) < shortest_eval_length(task)]
    if below:
        raise ConfigError(
            f"task.eval_lengths={[int(n) for n in given]} has lengths below task.context_length={context} "
            f"({', '.join(map(str, below))}), and poslab measures a language model from its training context up; "
            f"allowed: lengths at or past {context}, e.g. task.eval_lengths={example} (or a shorter "
            f"task.context_length)."
        )
    lengths = lm_eval_lengths(task)
    chunk = math.lcm(*lengths)
    tokens = task.get("eval_tokens")
    if tokens is not None and int(tokens) % chunk:
        raise ConfigError(
            f"task.eval_tokens={tokens} is not a multiple of {chunk}, the least common multiple of the evaluation "
            f"lengths {lengths}, so some length could not score exactly the same tokens as the others; allowed: "
            f"a multiple of {chunk}, e.g. task.eval_tokens={max(1, int(tokens) // chunk) * chunk}, or null."
        )
    stride = task.get("eval_stride")
    if stride is not None and int(stride) > lengths[0]:
        raise ConfigError(
            f"task.eval_stride={stride} is longer than the shortest evaluation length {lengths[0]}: a sliding "
            f"window moves by at most its length, or tokens between windows would go unscored; allowed: 1 to "
            f"{lengths[0]}, or null (no sliding-window evaluation)."
        )
    return lengths


def check_eval_lengths(cfg: Any) -> None:
    """A language model's evaluation settings (``poslab.config.settings.check_lm_evaluation``), and a synthetic task's
    evaluation lengths: at least one, and none below the training length (``train_length``,
    the longest trained on). No length would train a run that measures nothing; one below would give the reports
    no position past the training length (the grid's ``past`` column, the zoo's 1x to 8x). Lengths at or past the
    training length need not be multiples of it (the zoo reads the multiples, the grid every length)."""
    from poslab.config.passkey_settings import check_passkey_settings

    task = cfg.get("task")
    if isinstance(task, Mapping) and task.get("name") == "lm":
        check_lm_evaluation(task)  # a language model's: from its context up, and eval_tokens / eval_stride with them
        tokenizer = str(corpus_setting(cfg.get("corpus") or {}, "tokenizer"))
        check_passkey_settings(task.get("passkey"), int(task.context_length), tokenizer)  # before any data is read
        return
    if not isinstance(task, Mapping) or task.get("name") not in SYNTHETIC_TASKS:
        return
    train = int(task.train_length)
    example = f"[{train}, {2 * train}, {4 * train}]"
    given = task.get("eval_lengths")
    lengths = [int(n) for n in given] if given is not None else None
    if not lengths:
        shown = "null" if lengths is None else "[]"
        raise ConfigError(
            f"task.eval_lengths={shown} gives no evaluation length, so the run would measure nothing; allowed: "
            f"one or more lengths at or past task.train_length={train}, e.g. task.eval_lengths={example}."
        )
    below = [n for n in lengths if n < train]
    if below:
        raise ConfigError(
            f"task.eval_lengths={lengths} has lengths below task.train_length={train} "
            f"({', '.join(map(str, below))}), and poslab measures extrapolation from the training length up; "
            f"allowed: lengths at or past {train}, e.g. task.eval_lengths={example} (or a shorter task.train_length)."
        )
