"""Shared fixtures: compose the real configs with Hydra, in a temporary directory."""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir  # noqa: F401  (tests composing with the hydra config)
from hydra.core.global_hydra import GlobalHydra  # noqa: F401
from omegaconf import DictConfig

from poslab.running.compose import compose_config  # noqa: F401  (the tests import it from here)
from poslab.running.resolvers import register_resolvers

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
torch.set_num_threads(1)
# the configs' ${poslab.path:...} and friends: a test composing with Hydra's own compose (return_hydra_config=True)
# must not depend on another test of its worker having run train.py's composition first
register_resolvers()

#: the seed every test starts from (``seeded_rngs``)
SEED = 0


def seed_all(seed: int = SEED) -> None:
    """Seed every global RNG a test or the code it calls may draw from: torch's (CPU, and CUDA where there is one),
    Python's ``random`` and numpy's legacy global one. Not ``lightning.seed_everything``: that also sets
    ``PL_GLOBAL_SEED`` in the environment, which the subprocesses of ``run_train`` would inherit."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@pytest.fixture(autouse=True)
def seeded_rngs():
    """Every test starts from the same RNG state, whatever ran before it on the same worker: a model's initial
    parameters and any unseeded ``torch.randn`` draw are the same alone, after other tests, and in any order (the
    order is random: pytest-randomly). Autouse fixtures of a scope come first, so function-scoped fixtures that
    build models see this state too. Module-scoped fixtures are set up before it: one that draws must seed itself
    (``seed_all``); those here train through ``poslab.running.training.run`` or ``train.py``, which seed with
    ``seed_everything(cfg.seed)`` first.

    pytest-randomly, when installed, reseeds ``random`` and numpy's global generator again after this, as the test
    body starts, from its session seed and the test's id (torch it leaves alone): a test that draws from those
    seeds them itself or draws from its own ``random.Random(seed)`` / ``np.random.default_rng(seed)``."""
    seed_all()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the marks into the --dist loadgroup groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses a module-scoped fixture (a module of tiny trained runs) runs on its module's worker: the
    fixture is built once a module, not once a worker (``--dist loadgroup`` hands every other test out alone)."""
    for item in items:
        fixtures = getattr(item, "_fixtureinfo", None)
        if fixtures is None:
            continue
        if any(defs[-1].scope == "module" for defs in fixtures.name2fixturedefs.values() if defs):
            item.add_marker(pytest.mark.xdist_group(item.module.__name__))


def pytest_terminal_summary(terminalreporter, config) -> None:
    """The random order's seed, last (``-q`` hides pytest-randomly's header line, which says it first)."""
    seed = config.getoption("randomly_seed", None)
    if config.pluginmanager.hasplugin("randomly") and isinstance(seed, int):
        terminalreporter.write_line(f"random order: --randomly-seed={seed} replays it (-p no:randomly: file order)")


def tiny_model(
    encoding: str | dict,
    attention: str = "sdpa",
    *,
    n_layers: int = 2,
    n_heads: int = 2,
    d_model: int = 32,
    max_length: int = 64,
    **settings,
):
    """A seeded tiny Transformer (16 symbols) with ``encoding`` (its name, or its settings with ``name``) plus
    ``settings``: what the encoding tests build to compare paths, references and properties."""
    from poslab.model import ModelConfig, Transformer

    torch.manual_seed(0)
    spec = dict(encoding) if isinstance(encoding, dict) else {"name": encoding}
    cfg = ModelConfig(
        vocab_size=16,
        n_outputs=16,
        n_layers=n_layers,
        n_heads=n_heads,
        d_model=d_model,
        attention=attention,
        encoding={**spec, **settings},
    )
    return Transformer(cfg, max_length=max_length)


def run_train(args: list[str], cwd: Path, timeout: int = 300, env: dict[str, str] | None = None, jobs: int | None = 1):
    """``python train.py args`` in ``cwd``, as a user would run it (in a forked copy of this process:
    tests/script_runs.py), logs under ``cwd/logs`` and the environment plus ``env``; the CompletedProcess.
    ``jobs``: ``POSLAB_JOBS``, how many jobs of a multirun run at once. 1 (most tests): one after another in the
    run's own process, as ``POSLAB_JOBS=1`` runs them for a user, without starting and importing into a worker
    process per multirun; None: the launcher's own choice, for the tests of parallel launching."""
    from tests.script_runs import run_script

    return run_script(ROOT / "train.py", args, cwd, train_environment(cwd, env, jobs), timeout)


def start_train(args: list[str], cwd: Path, console: Path | None = None):
    """``run_train`` in the background: a process with ``subprocess.Popen``'s methods (stdout and stderr into
    ``console`` when given, readable while it runs; tests/script_runs.py's ``start_script``)."""
    from tests.script_runs import start_script

    return start_script(ROOT / "train.py", args, cwd, train_environment(cwd, None, 1), console)


def train_environment(cwd: Path, env: dict[str, str] | None, jobs: int | None) -> dict[str, str]:
    """The environment of a train.py run in ``cwd``: this one, logs under ``cwd/logs``, ``POSLAB_JOBS=jobs``
    unless None, then ``env``."""
    full = {**os.environ, "POSLAB_LOG_DIR": str(cwd / "logs"), "PYTHONWARNINGS": "ignore"}
    if jobs is not None:
        full["POSLAB_JOBS"] = str(jobs)
    return {**full, **(env or {})}


def fit_quietly(module, datamodule, steps: int, callbacks: list | None = None, **settings):
    """Train ``module`` for ``steps`` steps on the CPU with a bare Lightning Trainer (no logs, no checkpoints;
    ``settings``: more Trainer arguments, e.g. a precision); returns the Trainer."""
    import lightning as L

    trainer = L.Trainer(
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        callbacks=callbacks or [],
        **settings,
    )
    trainer.fit(module, datamodule=datamodule)
    return trainer


WORDS = ["the", "a", "position", "encoding", "rotary", "model", "context", "length", "token", "attention"]


def write_word_documents(folder: Path, paragraphs: int, words: int, name: str = "doc{i:02d}.txt") -> Path:
    """40 text files in ``folder`` of seeded words from ``WORDS``: ``paragraphs`` of ``words`` each, a full stop
    ending each, blank lines between them."""
    draw = random.Random(0)
    folder.mkdir()
    for i in range(40):
        text = "\n\n".join(" ".join(draw.choice(WORDS) for _ in range(words)) + "." for _ in range(paragraphs))
        (folder / name.format(i=i)).write_text(text + "\n")
    return folder


def local_corpus(name: str, groups: dict[str, tuple[float, str]], validation_fraction: float = 0.25) -> dict:
    """A corpus config of local files: group -> (its weight, the glob of its files under the data directory)."""
    return {
        "name": name,
        "validation_fraction": validation_fraction,
        "groups": {
            group: {"weight": weight, "local": [{"pattern": pattern}]} for group, (weight, pattern) in groups.items()
        },
    }


def make_unwritable(run_dir: Path) -> None:
    """A run directory nobody may write into: read-only, and a file where ``analysis/`` would go (root, who
    runs CI here, ignores file modes). The caller gives the mode back (``chmod(0o755)``) when done."""
    import shutil

    blocker = run_dir / "analysis"
    if blocker.is_dir():
        shutil.rmtree(blocker)
    blocker.write_text("not a directory")
    run_dir.chmod(0o555)


@pytest.fixture
def compose_cfg(tmp_path):
    def make(*overrides: str) -> DictConfig:
        return compose_config(list(overrides), tmp_path)

    return make


def job_dir(sweep: Path, job: int) -> Path:
    """Job ``job``'s folder of a multirun (named by its overrides: the number is the one its ``.hydra`` records)."""
    from poslab.runs.files import job_number

    matches = [p for p in sweep.iterdir() if p.is_dir() and job_number(p) == job]
    assert len(matches) == 1, f"job {job} of {sweep}: {sorted(p.name for p in sweep.iterdir())}"
    return matches[0]
