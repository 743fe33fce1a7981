"""``train.py``'s command line checked before Hydra runs anything: every job's config composed and checked.

A bad command stops here with one sentence (exit status 2) and nothing written: a misspelled key or group
gets the closest valid one suggested (Hydra alone says "To append to your config use +..."), an unknown
option lists the options, and every setting is checked against its declared type (``poslab.config.settings``).
A multirun's jobs are expanded as Hydra's basic sweeper would and each is checked, so a sweep with one bad
value starts no job. Light until the configs pass: torch is imported only for the encodings' own
``validate`` checks, last.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from poslab.config.settings import (
    CONF_DIR,
    RootSettings,
    closed_section,
    schema_types,
    suggestion,
    unknown_encoding_setting,
)
from poslab.errors import ConfigError

#: the flags of a command poslab checks whole, every job; with any other flag it is Hydra's mode (``hydra_mode``)
RUN_FLAGS = ("-m", "--multirun")
NOT_CHECKED_GROUPS = ("hydra",)  # Hydra's own groups: Hydra reports their errors


def config_groups(conf_dir: Path = CONF_DIR) -> dict[str, list[str]]:
    """Each config group (a folder of ``conf/``) and its options (its YAML files)."""
    groups = {}
    for folder in sorted(p for p in conf_dir.iterdir() if p.is_dir() and p.name not in NOT_CHECKED_GROUPS):
        groups[folder.name] = sorted(p.stem for p in folder.glob("*.yaml"))
    return groups


def compose(overrides: list[str], hydra_node: bool = False) -> DictConfig:
    from poslab.running.compose import compose_config

    return compose_config(overrides, hydra_node=hydra_node)


def parse(overrides: list[str]) -> list[Any]:
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    try:
        return parser.parse_overrides(overrides)
    except OverrideParseException as error:
        for line in overrides:  # the override that does not parse, said as such
            key, equals, value = line.partition("=")
            if equals and not value.isascii() and value[:1] not in ("'", '"'):
                raise ConfigError(
                    f"{line}: Hydra's command line takes characters outside ASCII only quoted; give "
                    f"{key}='{value}' (in a shell: \"{key}='{value}'\")."
                ) from None
            if equals and "~" in value and value[:1] not in ("'", '"'):  # Hydra's grammar has no bare ~
                raise ConfigError(
                    f"{line}: Hydra's command line takes '~' only quoted; give '{key}=\"{value}\"' (quoted so "
                    f"for the shell too; poslab expands ~ and $VAR in path settings itself)."
                ) from None
        raise unparsed(parser, overrides, error) from None


def unparsed(parser: Any, overrides: list[str], error: Exception) -> ConfigError:
    """The error for a command line Hydra's grammar does not parse: the override that does not, the grammar's
    reason, and a fix (its missing closing brackets, or quoting)."""
    from hydra.errors import OverrideParseException

    for line in overrides:
        try:
            parser.parse_overrides([line])
        except OverrideParseException as own:
            error = own
            break
    else:
        return ConfigError(f"the command line does not parse: {parse_reason(error)}")
    key, _, value = line.partition("=")
    closers = missing_closers(value)
    quoted = f"\"{key}='...'\" in a shell"
    fix = (
        f"its brackets do not close: did you mean {key}={value}{closers}? (a value holding brackets as text is "
        f"quoted: {quoted})"
        if closers
        else f"a value holding brackets, braces, parentheses, commas or quotes as text is quoted: {quoted}"
    )
    return ConfigError(
        f"{line}: Hydra's command line does not parse the value of {key} ({parse_reason(error)}); {fix}."
    )


def parse_reason(error: Exception) -> str:
    """The grammar's reason in Hydra's parse error, without its first line's override and its link to the docs."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    kept = [line for line in lines if not line.startswith(("Error parsing override", "See https"))]
    return (kept or lines or [type(error).__name__])[0]


#: the brackets Hydra's grammar pairs in a value
CLOSING = {"[": "]", "{": "}", "(": ")"}


def missing_closers(value: str) -> str:
    """The closing brackets ``value`` lacks at its end (``[0.5``: ``]``), outside quotes; none where they pair up
    (or a closing one is extra: not a missing one)."""
    expected: list[str] = []
    quote = ""
    for char in value:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in CLOSING:
            expected.append(CLOSING[char])
        elif char in CLOSING.values() and (not expected or expected.pop() != char):
            return ""  # a closing bracket too many, or of another kind: not one missing
    return "".join(reversed(expected)) if not quote else ""


def fixed_overrides(overrides: list[str]) -> list[str]:
    """The command line less its sweeps: what every job of a multirun shares."""
    return [o.input_line for o in parse(overrides) if not o.is_sweep_override()]


def sweep_base(overrides: list[str]) -> DictConfig:
    """The config every job of a multirun shares, Hydra's node included (its sweeper, launcher and sweep directory):
    composed once a command and handed to ``job_overrides``, ``finished_jobs`` and ``concurrent_jobs``."""
    return compose_explained(fixed_overrides(overrides), hydra_node=True)


def job_overrides(overrides: list[str], multirun: bool, base: DictConfig | None = None) -> list[list[str]]:
    """The overrides of each job the command would run: one job, or the basic sweeper's expansion of the
    command line's sweeps together with the config's ``hydra.sweeper.params`` (the command line wins).
    ``base``: ``sweep_base(overrides)`` when the caller has it."""
    parse(overrides)  # a command line that does not parse stops here, single run or not
    if not multirun:
        return [overrides]
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    base = sweep_base(overrides) if base is None else base
    if "BasicSweeper" not in str(OmegaConf.select(base, "hydra.sweeper._target_", default="")):
        return [fixed_overrides(overrides)]  # another sweeper chooses its own jobs: check what every job shares
    params = OmegaConf.select(base, "hydra.sweeper.params", default=None) or {}
    lines = [f"{key}={value}" for key, value in params.items()] + overrides
    batches = BasicSweeper.split_arguments(parse(lines), None)
    return [list(job) for batch in batches for job in batch]


def finished_jobs(overrides: list[str], jobs: list[list[str]], base: DictConfig | None = None) -> set[int]:
    """The jobs (their indices) that ``ckpt_path=auto`` will skip: finished (``is_finished``) in the folder their
    overrides name under the sweep directory. A resumed sweep checks only the others: each check composes a config,
    about a second a job, minutes for a sweep of hundreds. A job finished only under another folder name (an older
    sweep's numbering) is checked: the check is conservative; its folder's name as poslab cut it before (``~``:
    ``folder_names``) is its own."""
    from poslab.runs.files import AUTO
    from poslab.runs.folders import existing_job_folder, is_finished, override_key

    base = sweep_base(overrides) if base is None else base
    try:
        sweep_dir = Path(str(OmegaConf.select(base, "hydra.sweep.dir")))
    except Exception:  # noqa: BLE001  (a resolver only Hydra's run sets up: then every job is checked)
        return set()
    finished = set()
    for index, job in enumerate(jobs):
        given = [line.partition("=")[2] for line in job if override_key(line) == "ckpt_path"]
        ckpt_path = given[-1] if given else base.get("ckpt_path")
        folder = existing_job_folder(sweep_dir, job) if str(ckpt_path) == AUTO else None
        if folder is not None and is_finished(folder):
            finished.add(index)
    return finished


def compose_explained(overrides: list[str], hydra_node: bool = False) -> DictConfig:
    """``compose``, with Hydra's composition errors said as poslab's: the bad key or option, a suggestion."""
    try:
        return compose(overrides, hydra_node)
    except ConfigError:  # poslab's own, already one sentence (a path setting's unset variable)
        raise
    except Exception as error:  # noqa: BLE001  (Hydra's and OmegaConf's composition errors alike)
        explain(overrides, error)
        raise AssertionError("unreachable") from None


def explain(overrides: list[str], error: Exception) -> None:
    """Raise a ``ConfigError`` saying which override Hydra could not apply, and what would be valid."""
    groups = config_groups()
    parsed = [o for o in parse(overrides) if not o.is_hydra_override()]
    for override in parsed:
        group = override.key_or_group
        if override.is_sweep_override():  # composed as one job: a single run, or --cfg
            raise ConfigError(
                f"{override.input_line}: a comma list sweeps its values, which only a multirun does (python train.py "
                f"-m {override.input_line}); a list value is written [a,b], a text holding commas quoted."
            ) from None
        if group in groups and not override.is_delete():
            value = str(override.value())
            if value not in groups[group]:
                raise ConfigError(
                    f"{override.input_line}: {group} has no option {value!r};{option_suggestion(group, value, groups)} "
                    f"allowed: {', '.join(groups[group])}."
                ) from None
    group_choices = [o.input_line for o in parsed if o.key_or_group in groups]
    try:
        base = compose(group_choices)
    except Exception:  # noqa: BLE001  (the groups themselves do not compose: Hydra's own words)
        raise ConfigError(first_line(error)) from None
    for override in parsed:
        key = override.key_or_group
        if key in groups or override.is_add() or override.is_force_add():
            continue
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(base, parent) if parent else base
        if isinstance(node, DictConfig) and leaf in node:
            continue
        if not isinstance(node, DictConfig):
            raise ConfigError(f"{override.input_line}: there is no section {parent!r} in the config.") from None
        known = [str(k) for k in node if not str(k).startswith("_") and not (parent == "encoding" and k == "name")]
        if not parent:
            options = sorted(set(known) | set(groups))
            raise ConfigError(
                f"{override.input_line}: there is no group or setting {key!r};{suggestion(key, options)} groups: "
                f"{', '.join(groups)}; settings: {', '.join(k for k in schema_types(RootSettings))}."
            ) from None
        raise ConfigError(f"{override.input_line}: {unknown_setting(override.input_line, base, known)}") from None
    raise ConfigError(first_line(error)) from None


def unknown_setting(line: str, base: DictConfig, known: list[str]) -> str:
    """Why the setting ``line`` names is not in its section of ``base`` (whose settings are ``known``), and what to
    give: a close setting; a new key on purpose (``+key=value``) only where the section takes keys it does not
    declare; for an encoding, the encodings that have it (``unknown_encoding_setting``)."""
    key, _, value = line.partition("=")
    parent, _, leaf = key.rpartition(".")
    if parent == "encoding":
        return unknown_encoding_setting(base.encoding.get("name"), leaf, value)
    added = "" if closed_section(parent) else f" (to add a new key on purpose: +{line})"
    return f"{parent} has no setting {leaf!r};{suggestion(leaf, known)} its settings: {', '.join(known)}{added}."


#: well-known other names of some options, offered by "did you mean" (not aliases: the command names the option)
OTHER_NAMES: dict[str, dict[str, str]] = {
    "encoding": {
        "nope": "none",
        "rotary": "rope",
        "relative": "t5_bias",
        "t5": "t5_bias",
        "absolute": "learned",
    },
}


def option_suggestion(group: str, value: str, groups: dict[str, list[str]]) -> str:
    """`` did you mean X?`` for an unknown option of ``group``: its well-known other name first (``OTHER_NAMES``:
    NoPE is ``none``), else the closest option."""
    known = OTHER_NAMES.get(group, {}).get(value.lower())
    return f" did you mean {known}?" if known in groups[group] else suggestion(value, groups[group])


def first_line(error: BaseException) -> str:
    """Hydra's message in one line: its first, and the options it lists after "Available options" joined."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    listed = [i for i, line in enumerate(lines) if line.startswith("Available options")]
    if listed:
        options = [line for line in lines[listed[0] + 1 :] if not line.endswith(":")]
        return f"{lines[0].rstrip('.')}; {lines[listed[0]].rstrip(':')}: {', '.join(options)}."
    return lines[0]


def extended(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """A context extension's config as its parent makes it (``poslab.running.extension``), any other as composed; either
    with debug=fast's evaluation cut (``smoke_config``)."""
    from poslab.running.compose import smoke_config
    from poslab.running.extension import extended_config

    return smoke_config(extended_config(cfg, overrides))


def check_directories(cfg: DictConfig, outputs: list[tuple[str, str]], sources: bool = False) -> None:
    """The directories a job writes (``outputs``: where Hydra makes its run or sweep directory; a language model's
    cache) can be made and written, and (``sources``) a language model's sources are found (``paths.data_dir``, a
    local corpus's ``corpus.path``): refused before Hydra makes anything, instead of inside the job."""
    for key, directory in outputs:
        check_writable(key, directory)
    task = cfg.get("task")
    if not isinstance(task, DictConfig) or "corpus" not in task or "cache_dir" not in task:
        return
    check_writable("paths.cache_dir", str(task.cache_dir))
    if not sources:
        return
    from poslab.datamodules.corpora import resolve_corpus

    corpus = OmegaConf.to_container(task.corpus, resolve=True)
    assert isinstance(corpus, dict)
    resolve_corpus(corpus, str(task.data_dir))  # globs the local sources (reads nothing): none found says so


#: the environment variable behind a path setting, named in its message
PATH_VARIABLES = {"paths.log_dir": "POSLAB_LOG_DIR", "paths.cache_dir": "POSLAB_CACHE_DIR"}


def check_writable(key: str, directory: str) -> None:
    """``directory`` (the value of ``key``) is one that exists and can be written, or one that can be made: its
    nearest existing parent is a directory this process may write into."""
    import os

    variable = PATH_VARIABLES.get(key)
    label = f"{key}={directory}" + (f" ({variable})" if variable else "")

    path = Path(directory).expanduser().absolute()
    existing = next(p for p in (path, *path.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        raise ConfigError(
            f"{label} cannot be made: {existing} is a file, not a directory; nothing was written: give "
            f"a directory path (or move the file)."
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ConfigError(
            f"{label} cannot be written: {existing} is read-only for this user; nothing was written: "
            f"give a directory you may write into."
        )


def output_directories(overrides: list[str], cfg: DictConfig, multirun: bool) -> list[tuple[str, str]]:
    """Where Hydra will make the command's directory: ``hydra.sweep.dir`` / ``hydra.run.dir`` where the command
    line gives it, else under ``paths.log_dir``."""
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    for override in reversed(parse(overrides)):
        if override.key_or_group == key and not override.is_sweep_override():
            return [(key, str(override.value()))]
    return [("paths.log_dir", str(cfg.paths.log_dir))]


def check_command_line(argv: list[str], sources: bool = False) -> list[str]:
    """Check the jobs ``python train.py ARGV`` would run; a bad one stops the command (one message, exit 2).
    ``sources``: a language model's data sources are looked for too (train.py; the configs alone need no data).
    Returns ARGV with ``~`` and ``$VAR`` expanded in path settings (``expanded_overrides``), for Hydra to read."""
    from poslab.config.overrides import expanded_overrides
    from poslab.runs.guard import stop

    try:
        expanded = expanded_overrides(argv)
    except ConfigError as error:
        stop(error)
    flags = [a for a in argv if a.startswith("-")]
    if any(flag not in RUN_FLAGS for flag in flags):
        try:
            hydra_mode(argv)  # --cfg, --info, -cn, ...: Hydra's own modes; --cfg's config checked first
        except ConfigError as error:
            stop(error)
        return expanded
    from poslab.running.checks import check_configs
    from poslab.runs.guard import secondary_rank
    from poslab.runs.launching import check_environment

    overrides = [a for a in argv if not a.startswith("-")]
    try:
        check_environment()
        base = sweep_base(overrides) if flags else None  # composed once: the expansion, the skip, the launcher
        jobs = job_overrides(overrides, multirun=bool(flags), base=base)
        if flags:
            from poslab.runs.folders import check_distinct_jobs

            check_distinct_jobs(jobs)  # two jobs never share a folder (a job given twice: its seed counted twice)
            skipped = finished_jobs(overrides, jobs, base)
            if skipped:
                print(f"{len(skipped)} of {len(jobs)} jobs finished earlier (ckpt_path=auto skips them): checking "
                      f"the other {len(jobs) - len(skipped)}", flush=True)  # fmt: skip
                jobs = [job for index, job in enumerate(jobs) if index not in skipped]
        configs = [extended(compose_explained(job), job) for job in jobs]
        # the four stages of poslab.running.checks, stage by stage over the jobs; stage 4 here: the directories each job
        # writes and the sources it reads (Hydra has not named the run directories yet), before the encodings'
        # stage: it needs no torch
        outputs = {
            id(cfg): output_directories(job, cfg, multirun=bool(flags)) for job, cfg in zip(jobs, configs, strict=True)
        }
        check_configs(configs, lambda cfg: check_directories(cfg, outputs[id(cfg)], sources), directories_first=True)
        if not secondary_rank():  # a DDP rank Lightning starts shares the memory rank 0 already checked (and holds)
            from poslab.running.memory import check_memory  # after the four stages: it builds no encoding that is bad

            check_memory(configs, concurrent_jobs(overrides, len(jobs), bool(flags), base))
    except ConfigError as error:
        stop(error)
    return expanded


#: Hydra's modes, of which a command gives at most one (Hydra: "Only one of --run, --multirun, --cfg, ...")
HYDRA_MODES = {
    "run": "--run",
    "multirun": "-m/--multirun",
    "cfg": "--cfg",
    "info": "--info",
    "shell_completion": "--shell-completion",
}


def hydra_mode(argv: list[str]) -> None:
    """A command with Hydra's own flags: two of Hydra's modes at once refused in one sentence (Hydra would end in a
    traceback); ``--cfg``'s config checked as a run's (stages 1 to 3 of ``poslab.running.checks``: nothing is
    written) before Hydra prints it, unless another config is named (``-cn``, ``-cp``, ``-cd``). Anything else is
    left to Hydra, a flag Hydra does not know included."""
    import contextlib
    import io

    from hydra._internal.utils import get_args_parser

    try:  # silent: what argparse would print (--version, a refusal), Hydra prints when it parses the same
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            args = get_args_parser().parse_args(argv)
    except SystemExit:
        return
    modes = [flag for name, flag in HYDRA_MODES.items() if getattr(args, name, None)]
    if len(modes) > 1:
        one_job = "; to see a job's config give its overrides without -m (python train.py encoding=rope --cfg job)"
        raise ConfigError(
            f"{' and '.join(modes)} cannot be given together: Hydra runs one of {', '.join(HYDRA_MODES.values())} at "
            f"a time{one_job if {'-m/--multirun', '--cfg'} <= set(modes) else ''}; nothing was run."
        )
    if args.cfg and not (args.config_name or args.config_path or args.config_dir or args.experimental_rerun):
        from poslab.running.checks import check_configs

        check_configs([extended(compose_explained(args.overrides), args.overrides)], lambda cfg: None)


def concurrent_jobs(overrides: list[str], jobs: int, multirun: bool, base: DictConfig | None = None) -> int:
    """How many of the command's jobs run at once on this machine (they share its memory): the local launchers'
    (``hydra/launcher=local_parallel``'s ``n_jobs``, ``submitit_local``: ``POSLAB_JOBS``, else one per GPU, else 2),
    at most the jobs there are; 1 for a single run, Hydra's one-by-one launcher, or a cluster's."""
    if not multirun or jobs < 2:
        return 1
    base = sweep_base(overrides) if base is None else base
    launcher = str(OmegaConf.select(base, "hydra.launcher._target_", default="")).lower()
    if "submitit_local" in launcher:  # poslab's local submitit launcher keeps POSLAB_JOBS running, as joblib's
        from poslab.runs.launching import parallel_jobs

        return min(parallel_jobs(base.trainer.devices), jobs)
    if "joblib" not in launcher:
        return 1
    n_jobs = OmegaConf.select(base, "hydra.launcher.n_jobs", default=1)
    return jobs if int(n_jobs) < 1 else min(int(n_jobs), jobs)  # joblib's -1: as many as there are


# ---- python train.py --help -----------------------------------------------------------------------------------
def option_description(path: Path) -> str:
    """The first sentence of the comment a config file opens with (``# @package`` lines aside)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text.startswith("@package"):
            lines.append(text)
    sentence = first_sentence(" ".join(lines))
    return sentence if len(sentence) <= 110 else sentence[:107].rsplit(" ", 1)[0].rstrip(",;:") + "..."


#: a full stop after these (case aside) ends no sentence: "Kazemnejad et al. (2023)", "e.g. rope"
ABBREVIATION = re.compile(r"(?:^|[^\w.])(?:et al|e\.g|i\.e|cf|vs|approx|resp|Fig|Eq|Sec)$", re.IGNORECASE)


def first_sentence(text: str) -> str:
    """``text`` up to the full stop that ends its first sentence, without it: one followed by a space or the end,
    outside brackets, not part of an ellipsis ("H_i ... H_j") and not after an abbreviation (``ABBREVIATION``)."""
    depth = 0
    for index, char in enumerate(text):
        depth = max(0, depth + {"(": 1, "[": 1, ")": -1, "]": -1}.get(char, 0))
        ends = char == "." and text[index + 1 : index + 2] in ("", " ")
        if ends and depth == 0 and "." not in text[index - 1 : index] and not ABBREVIATION.search(text[:index]):
            return text[:index]
    return text


GROUP_HELP = {
    "experiment": "a whole recipe of a write-up (patches only what it changes)",
    "encoding": "the position encoding",
    "task": "what is trained: a synthetic task, or language modelling (lm, set by a corpus)",
    "corpus": "the text to model (task=lm); corpus=local corpus.path=DIR for any folder of text",
    "model": "the transformer's size and parts",
    "scheme": "an encoding with one setting, as the extrapolation grid names them (+scheme=...)",
    "recipe": "shared sizes of the *_cpu experiments",
    "optimizer": "AdamW, its schedule and clipping",
    "trainer": "Lightning's Trainer: device, precision, steps",
    "logger": "where metrics go (CSV by default; W&B offline unless a key is set)",
    "callbacks": "progress bar, throughput/MFU, checkpoints",
    "paths": "data, cache and log directories (POSLAB_DATA_DIR, POSLAB_CACHE_DIR, POSLAB_LOG_DIR)",
    "debug": "a few steps: fast (any recipe, the smallest evaluation) or small (a synthetic task's every length)",
}


def yaml_value(value: Any) -> str:
    """A value as a command line writes it: null, true, [], 0."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def help_text() -> str:
    """``python train.py --help``: the groups with their options, the top-level settings, examples, outputs."""
    groups = config_groups()
    lines = [
        "poslab: train small transformers with interchangeable position encodings.",
        "",
        "usage: python train.py [-m] [group=option ...] [key=value ...]",
        "  -m/--multirun sweeps comma-separated values (encoding=rope,alibi seed=0,1); every job's config is",
        "  checked before any starts. Hydra's own flags: --cfg job (one job's composed config, printed once poslab's",
        "  checks pass; not with -m), --info, --hydra-help.",
        "",
        "config groups (group=option):",
    ]
    for group in sorted(groups, key=lambda g: list(GROUP_HELP).index(g) if g in GROUP_HELP else len(GROUP_HELP)):
        lines.append(f"  {group}: {GROUP_HELP.get(group, '')}")
        for option in groups[group]:
            lines.append(f"      {option:24s} {option_description(CONF_DIR / group / f'{option}.yaml')}")
    root = OmegaConf.load(CONF_DIR / "train.yaml")
    lines += ["", "top-level settings (key=value):"]
    defaults = OmegaConf.to_container(root, resolve=False)
    assert isinstance(defaults, dict)
    for key in schema_types(RootSettings):
        lines.append(f"  {key}={yaml_value(defaults.get(key))}")
    lines += [
        "  any setting of a group: optimizer.lr=3e-4, trainer.max_steps=500, encoding.base=500000, ...",
        "  (python train.py GROUPS --cfg job prints the whole composed config)",
        "",
        "examples:",
        "  python train.py encoding=rope task=seen                        one synthetic run (seconds)",
        "  python train.py encoding=hrope_axial corpus=wikitext2          a language model on WikiText-2",
        "  python train.py -m experiment=extrapolation_grid               the where_am_i grid (28 runs)",
        "",
        "results: a run writes <paths.log_dir>/runs/<time>_<name>/ (results.json, model.pt, metrics, checkpoints);",
        "a multirun <paths.log_dir>/multirun/<time>/<its overrides>/; paths.log_dir is $POSLAB_LOG_DIR or ./logs.",
        "The last line of a run names its results.json; `poslab --help` lists the reports and analyses.",
    ]
    return "\n".join(lines)
