"""Runs that differ only in ``encoding`` train on the same batches under one seed: the zoo's paired statistics
(``poslab.analysis.stats.paired_difference``, the paired bootstrap of its ranking) rely on it.

Each check goes the way training goes (``poslab.running.training.run``): compose the real config,
``seed_everything(seed)``,
build the datamodule, then the module (whose initialisation draws from the global RNG, differently for each
encoding), then the training batches. Those batches must be the same tensor for tensor whatever the encoding, and
differ under another seed. The tasks, encodings and seeds are the zoo's own sweeps (conf/experiment/position_zoo.yaml
and position_zoo_variable.yaml, whose batches also differ in length).
"""

from __future__ import annotations

import itertools
from pathlib import Path

import lightning as L
import pytest
import torch

from poslab.running.builders import build_datamodule, build_module
from poslab.running.training import run
from tests.conftest import compose_config

N_BATCHES = 3
ZOO, VARIABLE, COPE = "position_zoo", "position_zoo_variable", "cope_counting"


def sweep(experiment: str, key: str = "task") -> tuple[list[str], list[str], list[int]]:
    """The values of ``key`` (the tasks), the encodings and the seeds experiment ``experiment`` sweeps over."""
    params = compose_config([f"experiment={experiment}"], hydra_node=True).hydra.sweeper.params
    return str(params[key]).split(","), str(params.encoding).split(","), [int(s) for s in str(params.seed).split(",")]


ZOO_TASKS, ZOO_ENCODINGS, ZOO_SEEDS = sweep(ZOO)
VARIABLE_TASKS, VARIABLE_ENCODINGS, _ = sweep(VARIABLE)
COPE_VARIABLES, COPE_ENCODINGS, _ = sweep(COPE, "task.num_variables")  # plain counting, 1, 3 and 5 variables
COUNTING = next(task for task in ZOO_TASKS if task.startswith("counting"))  # counting, or counting_filler
# every encoding of the zoo on lag and counting; on the other tasks (the same TrainingBatches, other samplers) a few:
# a bias, a content-dependent one, a learned kernel, one that takes a setting from the data
FEW = ["alibi", "cope", "kerple_power", "rand_axial"]
# (experiment, its task and other overrides, the encodings compared with rope)
CASES = [(ZOO, [f"task={task}"], ZOO_ENCODINGS if task in ("lag", COUNTING) else FEW) for task in ZOO_TASKS]
CASES += [(VARIABLE, [f"task={task}"], VARIABLE_ENCODINGS) for task in VARIABLE_TASKS]
CASES += [(COPE, ["task=counting", f"task.num_variables={n}"], COPE_ENCODINGS) for n in COPE_VARIABLES]


@pytest.fixture
def restore_seed_variables(monkeypatch):
    """``seed_everything`` writes ``PL_GLOBAL_SEED`` and ``PL_SEED_WORKERS`` into the environment, as training does;
    given back after the test, so that later tests (and their ``train.py`` subprocesses) do not inherit them."""
    for name in ("PL_GLOBAL_SEED", "PL_SEED_WORKERS"):
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)


# evaluation sets are built in setup() but are no part of training (their own seed): small ones, to keep this quick
SMALL_EVALUATION = ["task.eval_lengths=[32]", "task.eval_size=16", "task.eval_batch_size=16"]


def first_batches(overrides: list[str], output_dir: Path, n: int = N_BATCHES) -> list[tuple[torch.Tensor, ...]]:
    """The first ``n`` training batches of the run ``overrides`` describes, drawn as training would draw them."""
    cfg = compose_config([*overrides, *SMALL_EVALUATION], output_dir)
    L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)  # draws the model's initial parameters from the global RNG
    assert module.model.encoding.name == cfg.encoding.name
    datamodule.setup("fit")
    return [tuple(batch) for batch in itertools.islice(iter(datamodule.train_dataloader()), n)]


def same_batches(a: list[tuple[torch.Tensor, ...]], b: list[tuple[torch.Tensor, ...]]) -> bool:
    return len(a) == len(b) and all(
        len(x) == len(y) and all(torch.equal(s, t) for s, t in zip(x, y)) for x, y in zip(a, b)
    )


def test_the_sweeps_cover_several_tasks_encodings_and_seeds():
    """What the checks below go over: the zoo's own sweeps."""
    assert "lag" in ZOO_TASKS and len(ZOO_TASKS) >= 6 and len(ZOO_SEEDS) >= 2
    assert set(FEW) | {"rope"} <= set(ZOO_ENCODINGS) and len(ZOO_ENCODINGS) > 20
    assert "lag" in VARIABLE_TASKS and {"rope", "none", "randomized_rope"} <= set(VARIABLE_ENCODINGS)
    assert "cope" in COPE_ENCODINGS and len(COPE_VARIABLES) >= 2


@pytest.mark.slow
@pytest.mark.parametrize(("experiment", "task", "encodings"), CASES, ids=[f"{e}-{'-'.join(t)}" for e, t, _ in CASES])
def test_every_encoding_of_a_sweep_sees_the_same_training_batches_under_a_seed(
    experiment, task, encodings, tmp_path, restore_seed_variables
):
    n = 8 if experiment == VARIABLE else N_BATCHES  # variable lengths: enough batches to see several
    reference = first_batches([f"experiment={experiment}", *task, "encoding=rope"], tmp_path / "rope", n)
    assert len(reference) == n
    tokens, targets = reference[0]
    assert tokens.shape[0] == 64 and targets.shape[0] == 64  # the zoo's batch size
    assert not torch.equal(reference[0][0], reference[1][0])  # batch i is drawn afresh for every i
    lengths = {batch[0].shape[1] for batch in reference}
    if experiment == VARIABLE:  # each batch's length drawn from task.train_lengths: [8, 32]
        assert len(lengths) > 1 and min(lengths) >= 8 and max(lengths) <= 32, lengths
    else:
        assert lengths == {32}
    for encoding in encodings:
        batches = first_batches([f"experiment={experiment}", *task, f"encoding={encoding}"], tmp_path / encoding, n)
        assert same_batches(batches, reference), f"{experiment} {task}: encoding={encoding} has other batches"


@pytest.mark.slow
@pytest.mark.parametrize("task", ["lag", COUNTING])
def test_another_seed_draws_other_batches_for_every_encoding(task, tmp_path, restore_seed_variables):
    """The pairing is by seed: another seed gives other batches (else the seeds would not be replicates), and the
    same ones again whatever the encoding."""
    by_seed = {}
    for seed in ZOO_SEEDS:
        for encoding in ("rope", "alibi", "kerple_power"):
            overrides = [f"experiment={ZOO}", f"task={task}", f"encoding={encoding}", f"seed={seed}"]
            batches = first_batches(overrides, tmp_path / f"{encoding}_{seed}")
            if seed in by_seed:
                assert same_batches(batches, by_seed[seed]), f"seed={seed}: encoding={encoding} differs from rope"
            else:
                by_seed[seed] = batches
    for a, b in itertools.combinations(ZOO_SEEDS, 2):
        assert not any(torch.equal(x[0], y[0]) for x, y in zip(by_seed[a], by_seed[b])), f"seeds {a} and {b}"


def test_the_global_rng_does_not_reach_the_training_batches(tmp_path, restore_seed_variables):
    """What makes the pairing hold: the batches come from their own generator of (seed, index), not from the
    global RNG that the model's initialisation moves; here it is moved on purpose, a different amount each time."""
    overrides = [f"experiment={VARIABLE}", "task=lag", "encoding=rope"]
    reference = first_batches(overrides, tmp_path / "a")
    cfg = compose_config([*overrides, *SMALL_EVALUATION], tmp_path / "b")
    for draws in (1, 1000):
        L.seed_everything(cfg.seed + 17, verbose=False)
        torch.rand(draws)
        datamodule = build_datamodule(cfg)
        datamodule.setup("fit")
        batches = [tuple(b) for b in itertools.islice(iter(datamodule.train_dataloader()), N_BATCHES)]
        assert same_batches(batches, reference)


class RecordBatches(L.Callback):
    """Writes the first ``n`` batches the training loop hands the module to ``path`` (``torch.save``)."""

    def __init__(self, path: str, n: int = N_BATCHES) -> None:
        self.path, self.n, self.batches = path, n, []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if len(self.batches) < self.n:
            self.batches.append(tuple(t.detach().cpu().clone() for t in batch))

    def on_train_end(self, trainer, pl_module) -> None:
        torch.save(self.batches, self.path)


@pytest.mark.parametrize(
    ("experiment", "task", "encodings"),
    [
        (ZOO, "lag", ("rope", "alibi", "kerple_power")),
        (ZOO, COUNTING, ("rope", "alibi", "kerple_power")),
        (VARIABLE, "lag", ("rope", "none", "randomized_rope")),  # randomized RoPE: positions drawn per row
    ],
    ids=["zoo-lag", "zoo-counting", "variable-lag"],
)
@pytest.mark.slow
def test_tiny_trainings_of_several_encodings_train_on_the_same_batches(
    experiment, task, encodings, tmp_path, restore_seed_variables
):
    """The same through ``poslab.running.training.run`` (its seeding, its Trainer, the datamodule's dataloader): a
    callback
    records the batches each run trains on; they are the datamodule's, and the same for each encoding."""
    recorded = {}
    for encoding in encodings:
        record = tmp_path / f"{encoding}.pt"
        overrides = [
            f"experiment={experiment}",
            f"task={task}",
            f"encoding={encoding}",
            "trainer.max_steps=3",
            *SMALL_EVALUATION,
            "save_model=false",
            "~logger",
            "~callbacks",
            f"+callbacks.record._target_={RecordBatches.__module__}.RecordBatches",
            f"+callbacks.record.path={record}",
        ]
        results = run(compose_config(overrides, tmp_path / encoding))
        assert results["status"] == "success" and results["steps"] == 3
        recorded[encoding] = torch.load(record, weights_only=True)
        assert len(recorded[encoding]) == N_BATCHES
    for encoding in encodings[1:]:
        assert same_batches(recorded[encoding], recorded["rope"]), f"encoding={encoding} trained on other batches"
    drawn = first_batches([f"experiment={experiment}", f"task={task}", "encoding=rope"], tmp_path / "drawn")
    assert same_batches(recorded["rope"], drawn)  # what the checks above compare is what training trains on
