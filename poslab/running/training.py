"""One training run from a composed config: build, train, evaluate, write ``results.json``."""

from __future__ import annotations

import contextlib
import logging
import math
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import DictConfig, OmegaConf

from poslab.errors import ConfigError, DivergedError, PoslabError, RunInterrupted
from poslab.io import write_json_atomic
from poslab.running.builders import build_datamodule, build_module, instantiate_all
from poslab.running.callbacks import RecordConfig, SaveOnInterrupt, Throughput
from poslab.running.checks import check_config
from poslab.running.compose import smoke_config, world_size
from poslab.running.evaluation_checkpoint import evaluation_checkpoint
from poslab.running.extension import checked_parent_data, extended_config, initialise_from_parent
from poslab.running.runtime import environment, keep_freed_memory, wandb_offline_unless_key
from poslab.runs import launching
from poslab.runs.checkpoints import AtomicCheckpointIO, resolve_checkpoint, save_model
from poslab.runs.files import AUTO, CHECKPOINT_DIR, FAILURE_FILE, LAST_CHECKPOINT, LOCK_FILE, MODEL_FILE, RESULTS_FILE
from poslab.runs.folders import earlier_folder_note
from poslab.runs.guard import RunDirectoryInUse, held_by, holding_run_directory, stop

log = logging.getLogger("poslab")


#: Lightning's start-up lines that say nothing about a poslab run (the accelerator poslab chose is in the config)
LIGHTNING_NOISE = (
    "litlogger",
    "TPU available",
    "HPU available",
    "`Trainer.fit` stopped",
    "GPU available: False",
    "Detected KeyboardInterrupt",  # poslab says what Ctrl-C did, and how to resume (``interrupted``)
)


def not_lightning_noise(record: logging.LogRecord) -> bool:
    return not any(noise in record.getMessage() for noise in LIGHTNING_NOISE)


#: the most characters of a poslab message on one console line: with Hydra's prefix (``[date time][poslab][INFO] -
#: ``, about 45), a line stays under 200
MESSAGE_WIDTH = 150


def quiet_third_party_noise() -> None:
    """Each console line once, and none that does not apply: Lightning's logger has a console handler of its own
    besides Hydra's (every line printed twice, once in each format): its lines go through Hydra's alone (and
    into train.log); its tip advertising a cloud logger, the TPU/HPU lines, "GPU available: False" and "fit
    stopped: max_steps reached" are dropped; so are warnings about states poslab owns on purpose."""
    if logging.getLogger().handlers:  # Hydra's handlers are installed: they print and log Lightning's lines
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):  # each has a console handler of its own
            lightning_logger = logging.getLogger(name)
            for handler in list(lightning_logger.handlers):
                if type(handler) is logging.StreamHandler:
                    lightning_logger.removeHandler(handler)
            lightning_logger.propagate = True
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(not_lightning_noise)  # once: same object
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    # ModelCheckpoint warns, under manual optimisation, that its checkpoints hold the state after the
    # optimizer step: that (step N done, global_step N) is exactly the state a resume continues from.
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    # a resumed run's checkpoints/ holds its own earlier checkpoints: poslab's check_run_directory allows it so
    warnings.filterwarnings("ignore", message=".*Checkpoint directory .* exists and is not empty")
    # the evaluation figures are torchmetrics metrics, reduced across DDP ranks by compute(); self.log's
    # sync_dist would reduce them a second time
    warnings.filterwarnings("ignore", message="It is recommended to use `self.log")
    # the language-model dataloaders are in-process windows of a memory-mapped cache: workers would only copy
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train and evaluate one configuration; return (and write) its results. The run directory's lock is held
    throughout (``poslab.runs.guard``; train.py's took it before Hydra wrote there): another run into the directory
    stops with ``RunDirectoryInUse``."""
    with holding_run_directory(Path(cfg.paths.output_dir)):
        return run_holding_the_directory(cfg)


def run_holding_the_directory(cfg: DictConfig) -> dict[str, Any]:
    finished = finished_earlier(cfg)
    if finished is not None:
        return finished
    cfg = extended_config(cfg)  # a context extension: the config its parent makes (poslab/running/extension.py)
    cfg = smoke_config(cfg)  # debug=fast: the evaluation cut to a smoke test's
    check_config(cfg)
    quiet_third_party_noise()
    if cfg.threads:
        torch.set_num_threads(int(cfg.threads))
    if cfg.keep_freed_memory:
        keep_freed_memory()
    output_dir = Path(cfg.paths.output_dir)
    ckpt_path = resolve_checkpoint(cfg.get("ckpt_path"), output_dir)  # checked by check_config
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    extension = initialise_from_parent(module, cfg)  # a context extension starts from its parent's weights
    label = module.model.encoding.label()
    log.info("%s %s seed %s: %s parameters", cfg.task.name, label, cfg.seed, f"{module.model.num_parameters():,}")
    for note in untrained_at_test(module, datamodule):
        log.warning("note: %s", note)
    resolved = OmegaConf.to_container(cfg, resolve=True)  # what every checkpoint, logger and results.json record
    trainer, interrupt = build_trainer(cfg, datamodule, resolved)
    outcome = fit_and_test(trainer, module, datamodule, ckpt_path, interrupt)
    results = run_results(cfg, RunParts(trainer, module, datamodule, resolved), outcome, label, extension)
    if results["status"] == "success" and not results["figures"]:  # never a success that measured nothing
        raise ConfigError(f"the test after training gave no figures, so this run writes no {RESULTS_FILE}.")
    if (changed := checked_parent_data(results)) is not None:  # a context extension on other text than its parent's
        log.warning("note: %s", changed)
        results.setdefault("data_notes", []).append(changed)
    if trainer.is_global_zero:
        write_run_files(cfg, output_dir, module, results)
    if results["status"] != "success":  # every rank diverged alike (TransformerModule.step_is_finite)
        wait_for_rank_zero(trainer)
    if outcome.diverged is not None:
        raise outcome.diverged
    if results["status"] != "success":
        raise DivergedError(
            f"the evaluation figures are not finite ({format_figures(module.figures)}).", trainer.global_step
        )
    return results


def wait_for_rank_zero(trainer: L.Trainer) -> None:
    """Under DDP, hold this rank until rank zero has written the run's files: a rank that exits with an error
    first (a divergence) makes Lightning's child-process observer kill rank zero, which would leave no
    results.json saying "diverged"."""
    if trainer.world_size > 1 and torch.distributed.is_initialized():
        trainer.strategy.barrier("results written")


def build_trainer(
    cfg: DictConfig, datamodule: L.LightningDataModule, resolved: Any
) -> tuple[L.Trainer, SaveOnInterrupt]:
    """The Trainer of ``cfg.trainer`` with the config's loggers and callbacks, poslab's own (the config recorded
    in every checkpoint, Ctrl-C saved at a step's end) and atomic checkpoint writes."""
    if "wandb" in str(cfg.get("logger")).lower():
        wandb_offline_unless_key()
    callbacks = instantiate_all(cfg.get("callbacks"))
    callbacks.append(RecordConfig(resolved))  # every checkpoint records it: a resume checks it is the same model
    interrupt = SaveOnInterrupt()  # Ctrl-C: the step ends, last.ckpt is saved at it, the run stops (exit status 130)
    callbacks.append(interrupt)
    trainer: L.Trainer = hydra.utils.instantiate(
        cfg.trainer,
        logger=instantiate_all(cfg.get("logger")) or False,
        callbacks=callbacks,
        # checkpoints are written when the callbacks have a ModelCheckpoint (callbacks.checkpoint), atomically
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        plugins=[AtomicCheckpointIO()],
        **datamodule.trainer_arguments(),
    )
    for logger in trainer.loggers:
        logger.log_hyperparams(resolved)
    return trainer, interrupt


@dataclass
class Outcome:
    """How fitting and testing ended: ``status`` success, diverged or failed; the seconds of each part."""

    status: str
    train_seconds: float
    test_seconds: float | None = None
    diverged: DivergedError | None = None
    trained_steps: int | None = None  # optimizer steps this process trained (fewer than ``steps`` after a resume)


def test(trainer: L.Trainer, module: L.LightningModule, datamodule: L.LightningDataModule) -> None:
    """The test after training, in the rounds the datamodule asks for (a language model choosing test-time ways
    on selection documents: two, ``LanguageModelDataModule.test_rounds``; otherwise one), each a ``trainer.test``:
    the module's sums carry over, and each round ends on every DDP rank before the next starts."""
    rounds = getattr(datamodule, "test_rounds", None)
    names = rounds(bool(getattr(module, "chooses", False))) if rounds else [None]
    saving = evaluation_checkpoint(trainer)  # the test saved as it goes, and resumed where an earlier process left it
    done = saving.resume(trainer, module, datamodule) if saving is not None else []
    for index, test_round in enumerate(names):
        if test_round in done:
            continue  # finished by an earlier process: its choice and sums restored
        if test_round is not None:  # the module logs the round's cost and progress (lightning_modules/progress.py)
            module.test_round = datamodule.test_round = test_round
        trainer.test(module, datamodule=datamodule, verbose=False)
        check_scored(trainer, test_round)
        # the last round is never saved as done: its end writes the figures, so a process stopped after it (before
        # results.json) resumes that round with every batch scored and writes them again
        if saving is not None and index < len(names) - 1:
            saving.round_done(trainer, module, test_round)
    if saving is not None:
        saving.discard(trainer)


def check_scored(trainer: L.Trainer, test_round: str | None) -> None:
    """A test (round) with no batch is skipped by Lightning, warning only: the run would go on to write the figures
    of its last validation, or none, as a success. Stopped here instead, saying why."""
    if sum(trainer.num_test_batches):
        return
    what = f"the test's {test_round} round" if test_round else "the test"
    raise ConfigError(
        f"{what} had no batch to score, so this run has no test figures and writes no {RESULTS_FILE}: the "
        f"held-out sample is too small for it; score more (task.eval_tokens, corpus.validation_fraction, "
        f"task.eval_size) or give task.selection_fraction=0 (one round)."
    )


def fit_and_test(
    trainer: L.Trainer,
    module: L.LightningModule,
    datamodule: L.LightningDataModule,
    ckpt_path: Any,
    interrupt: SaveOnInterrupt,
) -> Outcome:
    """Train (resuming from ``ckpt_path``), then evaluate. A divergence is an outcome, written down as such; a
    Ctrl-C stops the run (its checkpoint saved, no results.json)."""
    status, start = "failed", time.perf_counter()
    try:
        if ckpt_path is not None:
            log.info("resuming from %s", ckpt_path)
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=True)
        train_seconds = time.perf_counter() - start
        test(trainer, module, datamodule)
        status = "success"
        outcome = Outcome(status, train_seconds, time.perf_counter() - start - train_seconds)
    except DivergedError as error:  # written down as such (results.json), never averaged as an ordinary run
        status = "diverged"
        outcome = Outcome(status, time.perf_counter() - start, diverged=error)
    except (SystemExit, KeyboardInterrupt):  # Lightning ends a KeyboardInterrupt with sys.exit(1), after on_exception
        if interrupt.interruption is None:
            raise
        ignore_interrupts()  # Lightning's teardown put Ctrl-C back: another would break the exit it is waiting for
        status = "interrupted"  # no results.json: the run did not finish
        raise interrupt.interruption from None
    finally:
        finish_loggers(trainer, status)
    if outcome.status == "success" and not all_finite(module.figures):
        outcome.status = "diverged"  # a NaN evaluation: the figures are null, the status says why
    # a process started after training ended trains nothing (Lightning then calls no on_train_start, which sets
    # first_step): counted from the batches it trained, not from a first step it never set
    outcome.trained_steps = int(trainer.global_step) - interrupt.first_step if interrupt.steps else 0
    return outcome


@dataclass
class RunParts:
    """What a run built: its trainer, module and data, and its config resolved (recorded by every checkpoint and
    logger, and in results.json)."""

    trainer: L.Trainer
    module: L.LightningModule
    datamodule: L.LightningDataModule
    config: Any


def run_results(
    cfg: DictConfig, parts: RunParts, outcome: Outcome, label: str, extension: dict[str, Any]
) -> dict[str, Any]:
    """What results.json holds: the outcome, every figure keyed by length, what ran (``label``: the encoding's, as
    logged at start; ``extension``: a context extension's parent and rule), and the resolved config."""
    trainer, module, datamodule, diverged = parts.trainer, parts.module, parts.datamodule, outcome.diverged
    return {
        "status": outcome.status,
        **({"diverged_at_step": diverged.step} if diverged is not None else {}),
        "task": cfg.task.name,
        "encoding": cfg.encoding.name,
        "label": label,
        "seed": int(cfg.seed),
        **datamodule.describe(),
        "steps": int(trainer.global_step),
        "parameters": module.model.num_parameters(),
        # training with its validations, of this process (a resume's part: trained_steps of steps)
        "train_seconds": round(outcome.train_seconds, 3),
        **({"trained_steps": outcome.trained_steps} if outcome.trained_steps is not None else {}),
        # the evaluation after training (every length and way, passkey retrieval): its share of the run's time
        **({"test_seconds": round(outcome.test_seconds, 3)} if outcome.test_seconds is not None else {}),
        # an evaluation resumed from an earlier process's save: the rounds and batches it took over
        **({"test_resumed": saving.resumed} if (saving := evaluation_checkpoint(trainer)) and saving.resumed else {}),
        "figures": module.figures,
        **module.evaluation_results(),  # a language model's loss by position
        **extension,  # a context extension's parent and rule
        # what ran where the config says null (length settings filled in), and what evaluation reads untrained
        "encoding_settings": module.model.encoding.resolved_settings,
        "untrained_at_test": untrained_at_test(module, datamodule),
        "throughput": next((c.summary() for c in trainer.callbacks if isinstance(c, Throughput)), {}),
        "environment": environment(),
        "config": parts.config,
    }


def write_run_files(cfg: DictConfig, output_dir: Path, module: L.LightningModule, results: dict[str, Any]) -> None:
    """model.pt (a finished, finite model only) and results.json, atomically; the figures logged."""
    if cfg.save_model and results["status"] == "success":  # a diverged model (NaN weights) is not kept
        save_model(output_dir / MODEL_FILE, module.model, results["config"])
    write_json_atomic(output_dir / RESULTS_FILE, results)
    # a data note was logged once, at start (a warning prints once per job); the figures point back at it
    notes = len(results.get("data_notes") or [])
    pointer = f" (data note{'s' if notes > 1 else ''} above, and in results.json's data_notes)" if notes else ""
    label = results["label"]
    log.info("%s %s seed %s: %s%s", cfg.task.name, label, cfg.seed, format_figures(module.figures), pointer)
    table = figures_table(module.figures)
    if table:  # one row a length, one column a way: every figure (groups, baselines, selection) is in results.json
        headline = table.split()[0]
        log.info("%s by length and way (every figure: results.json's figures and held_out):\n%s", headline, table)
    log.info("results: %s (run directory %s)", output_dir / RESULTS_FILE, output_dir)


def untrained_at_test(module: L.LightningModule, datamodule: L.LightningDataModule) -> list[str]:
    """The encoding's sentences on what evaluation reads that training never trained (``PositionEncoding.
    untrained_at_test``), from its current values: at start the initial ones, after training the trained ones."""
    return module.model.encoding.untrained_at_test(datamodule.train_length, datamodule.max_length)


def all_finite(figures: Any) -> bool:
    if isinstance(figures, dict):
        return all(all_finite(v) for v in figures.values())
    return not isinstance(figures, float) or math.isfinite(figures)


def finish_loggers(trainer: L.Trainer, status: str) -> None:
    """Close every logger; a W&B run is finished explicitly (with a non-zero exit code on failure), so its
    data is flushed and the next job of a multirun starts a run of its own."""
    for logger in trainer.loggers:
        logger.finalize(status)
        if type(logger).__name__ == "WandbLogger":
            import wandb

            if wandb.run is not None:
                wandb.finish(exit_code=0 if status == "success" else 1)


def format_figures(figures: dict[str, Any]) -> str:
    """The figures' short summary: the flat ones (``val_loss 1.234, val_bpb 1.78, step 100``), else the headline
    figure at each length (``accuracy: L32 1.000, L64 0.812``); every figure is in results.json."""
    flat = [f"{key} {value:.4g}" for key, value in figures.items() if not isinstance(value, dict)]
    if flat:
        return ", ".join(flat)
    rows = {key: value for key, value in figures.items() if isinstance(value, dict)}
    headline = headline_figure(rows)
    return f"{headline}: " + ", ".join(f"L{n} {row.get(headline, math.nan):.3f}" for n, row in rows.items())


def headline_figure(rows: dict[str, dict[str, Any]]) -> str:
    """The figure the table shows: bits per byte for a language model, accuracy for a synthetic task."""
    keys = {key for row in rows.values() for key in row}
    return "bpb" if "bpb" in keys else "accuracy" if "accuracy" in keys else sorted(keys)[0] if keys else "figure"


#: figures the table leaves to results.json: baselines, selection sets, per-group, spreads, past-training parts
TABLE_LEAVES_OUT = ("baseline_", "selection_")


def figures_table(figures: dict[str, Any], width: int = MESSAGE_WIDTH) -> str:
    """The headline figure (``headline_figure``) by length (rows) and way of evaluating (columns: the plain model,
    then each way past the training length), as lines of at most ``width`` characters; ways that do not fit and
    every other figure are in results.json. Empty for flat figures only."""
    rows = {key: value for key, value in figures.items() if isinstance(value, dict)}
    if not rows:
        return ""
    headline = headline_figure(rows)
    ways: list[str] = []
    for row in rows.values():
        for key in row:
            way = table_way(key, headline)
            if way is not None and way not in ways:
                ways.append(way)
    cell = max(8, *(len(w) + 1 for w in ways))
    fits = max(1, (width - 8) // cell)
    shown = ways[:fits]
    lines = [f"{headline:<8}" + "".join(f"{w:>{cell}}" for w in shown)]
    for length, row in rows.items():
        values = [row.get(headline if w == "plain" else f"{headline}_{w}") for w in shown]
        cells = (f"{v:>{cell}.3f}" if v is not None else f"{'-':>{cell}}" for v in values)
        lines.append(f"{'L' + length:<8}" + "".join(cells))
    if len(ways) > len(shown):
        lines.append(f"(+{len(ways) - len(shown)} more ways in results.json: {', '.join(ways[len(shown) :])})")
    return "\n".join(lines)


def table_way(key: str, headline: str) -> str | None:
    """The way a figure's key names (``plain`` for the headline itself), or None for a figure the table leaves out
    (another measure, a group's, a baseline, a selection set's, a spread, a past-training part)."""
    if key == headline:
        return "plain"
    if not key.startswith(f"{headline}_") or "[" in key or key.startswith(TABLE_LEAVES_OUT):
        return None
    way = key.removeprefix(f"{headline}_")
    return None if way.endswith(("_past_train", "draw_sd")) or way == "past_train" else way


def main(cfg: DictConfig) -> dict[str, Any] | None:
    """Entry point behind ``train.py``: a bad config exits with its message; in a multirun a
    failed job records why in ``failed.json`` and the other jobs go on."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    multirun = HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN
    if not multirun and HydraConfig.initialized() and (note := sweep_note(cfg)) is not None:
        log.warning("note: %s", note)
    if multirun and cfg.get("ckpt_path") == AUTO:  # the job's earlier folder, when found under another name
        note = earlier_folder_note(Path(cfg.paths.output_dir), list(HydraConfig.get().overrides.task))
        if note is not None:
            log.info(note)
    if multirun and job_needs_own_process(cfg):
        return run_job_in_own_process(cfg)
    try:
        return run(cfg)
    except KeyboardInterrupt as interrupted:  # Ctrl-C, in training (RunInterrupted) or before or after it
        ignore_interrupts()  # the exit below is what was asked for: a further Ctrl-C must not break it
        log.warning("%s", interrupted_message(cfg, interrupted, multirun))
        sys.exit(INTERRUPTED_STATUS)  # a multirun stops too: Ctrl-C asks for the whole command to stop
    except RunDirectoryInUse as error:  # another process's directory: nothing in it is touched (no failed.json)
        if not multirun:
            stop(error)
        log.error("this job did not run: %s", error)
    except DivergedError as error:  # results.json says "diverged"; the multirun summary counts it
        log.error("this run diverged: %s", error)
        if not multirun:
            print(f"poslab: {error}", file=sys.stderr)
            sys.exit(1)
    except PoslabError as error:  # a bad setting, a missing corpus or run: its message, no traceback
        if not multirun:
            remove_if_only_hydra_wrote(Path(cfg.paths.output_dir), Path(cfg.paths.log_dir))
            stop(error)
        log.error("this job failed: %s", error)  # to the console and the job's train.log; the others go on
        _record_failure(cfg, error)
    except OSError as error:  # a file or directory the run cannot read or write: one sentence naming it
        if not multirun:
            removed = remove_if_only_hydra_wrote(Path(cfg.paths.output_dir), Path(cfg.paths.log_dir))
            stop(PoslabError(os_error_sentence(error, None if removed else Path(cfg.paths.output_dir))))
        log.error("this job failed: %s", os_error_sentence(error, Path(cfg.paths.output_dir)))
        _record_failure(cfg, error)
    except Exception as error:
        if not multirun:
            remove_if_only_hydra_wrote(Path(cfg.paths.output_dir), Path(cfg.paths.log_dir))
            raise
        log.exception("this job failed; the other jobs of the multirun go on")
        _record_failure(cfg, error)
    return None


def sweep_note(cfg: DictConfig) -> str | None:
    """One line for a recipe that declares a sweep (``hydra.sweeper.params``) run without ``-m``: Hydra then trains
    one run at the config's own values, quietly. None where every swept key was given, or in a process that is
    one job of a multirun (``launching.CHILD_MARK``) or a DDP rank past the first."""
    import os

    from hydra.core.hydra_config import HydraConfig

    from poslab.runs.guard import secondary_rank

    hydra_cfg = HydraConfig.get()
    params = list(hydra_cfg.sweeper.get("params") or {})
    given = {str(o).split("=", 1)[0].lstrip("+~") for o in hydra_cfg.overrides.task}
    if not set(params) - given or os.environ.get(launching.CHILD_MARK) or secondary_rank():
        return None
    choices, experiment = hydra_cfg.runtime.choices, hydra_cfg.runtime.choices.get("experiment")
    values = " ".join(f"{k}={choices[k] if k in choices else OmegaConf.select(cfg, k)}" for k in params)
    recipe = f"experiment={experiment}" if experiment else "this config"
    sweep = f"python train.py -m {recipe}" if experiment else "add -m"
    return f"{recipe} is a sweep over {', '.join(params)}: without -m, one run ({values}); the sweep: {sweep}"


#: the exit status of a run stopped by Ctrl-C (SIGINT): 128 + 2, as a shell reports a process SIGINT ended; not 1
#: (a failure) or 2 (a refused setting), so a script can tell an interruption it may resume from
INTERRUPTED_STATUS = 130


def ignore_interrupts() -> Any:
    """Ctrl-C (SIGINT) ignored from here on (a run stopping on Ctrl-C: the rest is its orderly exit); returns the
    handler it replaced (None off the main thread, where no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def interrupts_ignored() -> Iterator[None]:
    previous = ignore_interrupts()
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def interrupted_message(cfg: DictConfig, interrupted: KeyboardInterrupt, multirun: bool) -> str:
    """One line for Ctrl-C: where it stopped, what was saved, and the command that resumes; a run stopped before it
    wrote anything of its own leaves no directory (``remove_if_only_hydra_wrote``)."""
    output_dir = Path(cfg.paths.output_dir)
    last = output_dir / CHECKPOINT_DIR / LAST_CHECKPOINT
    known = isinstance(interrupted, RunInterrupted)
    where = f" at step {interrupted.step}, during {interrupted.during}" if known else ""
    if not last.is_file():
        if remove_if_only_hydra_wrote(output_dir, Path(cfg.paths.log_dir)):
            return f"interrupted (Ctrl-C){where} before anything was trained or saved; its run directory was removed"
        return (
            f"interrupted (Ctrl-C){where} before a checkpoint was written (callbacks.checkpoint saves them): there "
            f"is nothing to resume from; what the run wrote is in {output_dir}"
        )
    saved = "saved at that step" if known and interrupted.saved else "kept"
    return f"interrupted (Ctrl-C){where}; {last} {saved}; resume with: {resume_command(cfg, multirun)}"


def resume_command(cfg: DictConfig, multirun: bool) -> str:
    """The command that continues this run from its ``last.ckpt`` in its own directory (``docs/resume.md``): the
    same arguments with ``ckpt_path=last hydra.run.dir=<run dir>``; a multirun's, the same command with
    ``hydra.sweep.dir=<sweep dir> ckpt_path=auto`` (its finished jobs are skipped, the others resume)."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    replaced = ("ckpt_path=", "hydra.run.dir=", "hydra.sweep.dir=")
    if multirun:
        sweep = HydraConfig.get().sweep.dir
        given = sys.argv[1:] if Path(sys.argv[0]).name == "train.py" else None
        if given is None:  # a job run by a launcher's worker process: its command line is not train.py's
            return f"the same multirun with hydra.sweep.dir={shlex.quote(str(sweep))} ckpt_path=auto"
        kept = [a for a in given if not a.startswith(replaced)]
        return shlex.join(["python", "train.py", *kept, f"hydra.sweep.dir={sweep}", "ckpt_path=auto"])
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    kept = [o for o in overrides if not o.startswith(replaced)]
    return shlex.join(["python", "train.py", *kept, "ckpt_path=last", f"hydra.run.dir={cfg.paths.output_dir}"])


def finished_earlier(cfg: DictConfig) -> dict[str, Any] | None:
    """Under ``ckpt_path=auto``, the results of a run directory that already holds them (the job is skipped,
    so a multirun given again trains only what is missing); None otherwise. A job that failed earlier (its
    ``failed.json``, no results) runs again, and its stale ``failed.json`` goes; so does a job whose results.json
    the reports cannot read (``poslab.runs.results.read_results``): it is unfinished, and the log says why."""
    from poslab.runs.results import ResultsFileError, read_results

    if cfg.get("ckpt_path") != AUTO:
        return None
    output_dir = Path(cfg.paths.output_dir)
    if (output_dir / RESULTS_FILE).is_file():
        try:
            results = read_results(output_dir)
        except ResultsFileError as error:
            last = f"{CHECKPOINT_DIR}/{LAST_CHECKPOINT}"
            start = f"from its {last}" if (output_dir / last).is_file() else f"from the start (it has no {last})"
            log.warning(
                "%s: ckpt_path=auto runs it again as unfinished, %s; the run writes a new %s when it ends",
                error,
                start,
                RESULTS_FILE,
            )
        else:
            log.info("finished earlier, skipped (ckpt_path=auto): %s", output_dir / RESULTS_FILE)
            return results
    (output_dir / FAILURE_FILE).unlink(missing_ok=True)
    return None


def os_error_sentence(error: OSError, kept: Path | None = None) -> str:
    """An OSError as one sentence naming the path, and what became of the run directory (``kept``: it stays)."""
    paths = " -> ".join(str(p) for p in (error.filename, error.filename2) if p is not None)
    left = f"what the run wrote is in {kept}" if kept is not None else "its run directory was removed"
    return (
        f"{paths or 'a file or directory'}: {error.strerror or error}; the run stopped ({left}): give paths this "
        f"user may read and write (paths.data_dir, paths.cache_dir, paths.log_dir; POSLAB_DATA_DIR, POSLAB_CACHE_DIR, "
        f"POSLAB_LOG_DIR)."
    )


#: the folders loggers make in a run directory at start (before a step is trained)
LOGGER_FOLDERS = ("csv", "tensorboard", "lightning_logs")


def written_before_training(entry: Path) -> bool:
    """What Hydra and the run's start write into a run directory: ``.hydra/``, the job's log, the run lock, and a
    logger's folder holding only its ``hparams.yaml`` (written as the Trainer starts, before any step)."""
    if entry.name in (".hydra", LOCK_FILE) or (entry.is_file() and entry.suffix == ".log"):
        return True
    if entry.is_dir() and entry.name in LOGGER_FOLDERS:
        return all(p.is_dir() or p.name == "hparams.yaml" for p in entry.rglob("*"))
    return False


def remove_if_only_hydra_wrote(output_dir: Path, log_dir: Path) -> bool:
    """A run that stopped before it trained leaves no directory: Hydra made it and wrote ``.hydra/`` and the
    job's log, the run its lock and its loggers' ``hparams.yaml``, nothing else (``written_before_training``);
    anything more (a checkpoint, metrics, results, a file of the user's) is kept, and so is the directory."""
    if not output_dir.is_dir():
        return True
    entries = list(output_dir.iterdir())
    if not all(written_before_training(e) for e in entries):
        return False
    close_log_files_in(output_dir)  # the job's log file is open: close it before its directory goes
    shutil.rmtree(output_dir, ignore_errors=True)
    for parent in output_dir.parents:  # and the folders Hydra made for it (runs/, the log dir), if now empty
        if log_dir.resolve() not in (parent.resolve(), *parent.resolve().parents):
            break
        try:
            parent.rmdir()
        except OSError:
            break
    return not output_dir.exists()


def close_log_files_in(directory: Path) -> None:
    """Close and detach the logging handlers writing into ``directory`` (Hydra's train.log): a line logged after
    the directory goes would otherwise reopen the file there, and fail."""
    inside = directory.resolve()
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in list(getattr(logger, "handlers", [])):
            filename = getattr(handler, "baseFilename", None)
            if filename and inside in Path(filename).resolve().parents:
                handler.close()
                logger.removeHandler(handler)


def job_needs_own_process(cfg: DictConfig) -> bool:
    """A local multirun job on one of several GPUs, or with DDP, runs as a single run in a fresh process
    (``poslab.runs.launching``: CUDA_VISIBLE_DEVICES per job; DDP ranks started from that job's command line)."""
    from hydra.core.hydra_config import HydraConfig

    world = world_size(cfg)
    uses_gpu = str(cfg.trainer.accelerator) in ("gpu", "cuda", "auto")
    return launching.needs_own_process(uses_gpu, world, str(HydraConfig.get().launcher.get("_target_", "")))


def run_job_in_own_process(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    hydra_cfg = HydraConfig.get()
    job, output_dir = int(hydra_cfg.job.num), Path(cfg.paths.output_dir)
    gpus = launching.gpus_for_job(job, cfg.trainer.devices)
    log.info("job %d runs in its own process%s", job, f" on GPU {','.join(gpus)}" if gpus else "")
    # Ctrl-C reaches the job's process too (one process group): it saves and exits 130 on its own, which this
    # process waits for (subprocess.run would kill it a quarter of a second after its own KeyboardInterrupt)
    with interrupts_ignored():
        status = launching.run_in_own_process(job, list(hydra_cfg.overrides.task), output_dir, cfg.trainer.devices)
    if status == INTERRUPTED_STATUS:  # the job said how to resume; the multirun stops, as Ctrl-C asks
        log.warning("job %d was interrupted (Ctrl-C); resume with: %s", job, resume_command(cfg, multirun=True))
        sys.exit(INTERRUPTED_STATUS)
    if status != 0:
        killed = f" (killed by signal {-status})" if status < 0 else ""
        message = f"the job's process exited with status {status}{killed}; its messages are above and in {output_dir}"
        log.error("job %d failed: %s", job, message)
        if not (output_dir / FAILURE_FILE).is_file() and held_by(output_dir) is None:
            # the job's own record (its error) is the better one; a directory another process holds (the job was
            # refused for it) is not this job's to write into
            write_json_atomic(output_dir / FAILURE_FILE, {"error": message})


def _record_failure(cfg: DictConfig, error: BaseException) -> None:
    try:
        output_dir = Path(cfg.paths.output_dir)
    except Exception:  # the config itself may be what failed
        return
    write_json_atomic(output_dir / FAILURE_FILE, {"error": f"{type(error).__name__}: {error}"})
