"""The synthetic tasks copy, associative_recall, flip_flop and counting (and lag, seen unchanged): targets follow
each rule on planted sequences and on samples (recomputed here by a plain loop over the tokens), the data is a
function of its seeds, every length from 32 to 256 works, and a tiny model trains on each through the configs."""

from __future__ import annotations

import pytest
import torch

from poslab.datamodules.synthetic import SyntheticDataModule, TrainingBatches
from poslab.datamodules.tasks import (
    IGNORE,
    TASKS,
    AssociativeRecall,
    Copy,
    Counting,
    FlipFlop,
    SyntheticTask,
    make_task,
)
from poslab.errors import ConfigError
from poslab.running.builders import build_datamodule, build_module
from tests.conftest import compose_config, fit_quietly

I = IGNORE  # noqa: E741  (short, so that the planted targets line up with their tokens)
NEW = {  # name: settings, as the task's YAML gives them
    "copy": {"vocab_size": 16},
    "associative_recall": {"vocab_size": 129},
    "flip_flop": {"vocab_size": 6, "p_write": 0.1, "p_ignore": 0.8, "p_read": 0.1},
    "counting": {"vocab_size": 21, "num_variables": 3},
}


def new_task(name: str, **changes):
    settings = {**NEW[name], **changes}
    return make_task(name, **settings)


# ---- the rules, recomputed by a plain loop over one row of tokens ---------------------------------------------
def copy_by_loop(row: list[int], task: Copy) -> list[int]:
    separator = row.index(task.separator)
    prefix = row[:separator]
    assert row[separator + 1 : separator + 1 + len(prefix)] == prefix  # the second half is the copy
    targets = [I] * len(row)
    for t in range(separator, len(row) - 1):
        if row[t + 1] != task.padding:  # the next token is in the copy
            targets[t] = row[t + 1]
    return targets


def associative_recall_by_loop(row: list[int], task: AssociativeRecall) -> list[int]:
    pairs = len(row) // 4
    memory = {}
    for i in range(0, 2 * pairs, 2):
        key, value = row[i], row[i + 1]
        assert key < task.num_keys <= value < task.blank and key not in memory  # distinct keys, then values
        memory[key] = value - task.num_keys
    targets = [I] * len(row)
    for t in range(2 * pairs, len(row)):
        if row[t] != task.blank:
            targets[t] = memory[row[t]]
    return targets


def flip_flop_by_loop(row: list[int], task: FlipFlop) -> list[int]:
    targets = [I] * len(row)
    remembered = None
    for j in range(len(row) // 2):
        instruction, bit = row[2 * j], row[2 * j + 1]
        if instruction == task.WRITE:
            remembered = bit
        elif instruction == task.READ:
            targets[2 * j] = remembered
    return targets


def counting_by_loop(row: list[int], task: Counting) -> list[int]:
    """Run the program statement by statement, then read the printed variable."""
    values: dict[int, int] = {}
    i = 0
    while i < len(row) - 2:
        if row[i] == task.PASS:
            i += 1
        elif row[i + 1] == task.EQUALS:
            assert row[i + 2 : i + 4] == [0, task.SEMICOLON]
            values[row[i]] = 0
            i += 4
        else:
            assert row[i + 1] == task.INCREMENT and row[i] in values  # only a variable already set is incremented
            values[row[i]] += 1
            i += 2
    assert i == len(row) - 2 and row[-2] == task.PRINT
    return [I] * (len(row) - 1) + [values[row[-1]]]


BY_LOOP = {
    "copy": copy_by_loop,
    "associative_recall": associative_recall_by_loop,
    "flip_flop": flip_flop_by_loop,
    "counting": counting_by_loop,
}


# ---- planted sequences ------------------------------------------------------------------------------------------
def test_copy_scores_the_separator_and_the_copy_with_the_next_copied_token():
    task = make_task("copy", 6)  # content 0..3, separator 4, padding 5
    tokens = torch.tensor([[2, 0, 3, 4, 2, 0, 3, 5], [1, 1, 4, 1, 1, 5, 5, 5]])  # the second not of the draw's form
    assert task.targets(tokens[:1]).tolist() == [[I, I, I, 2, 0, 3, I, I]]
    assert task.num_classes == 4 and task.min_length == 3
    odd = torch.tensor([[3, 1, 4, 3, 1]])
    assert task.targets(odd).tolist() == [[I, I, 3, 1, I]]


def test_associative_recall_answers_each_query_with_its_keys_value():
    task = make_task("associative_recall", 9, eval_pairs=[])  # keys 0..3, values 4..7 (classes 0..3), blank 8
    tokens = torch.tensor([[1, 6, 3, 4, 8, 3, 8, 1], [2, 7, 0, 7, 0, 8, 2, 8]])
    assert task.targets(tokens).tolist() == [[I, I, I, I, I, 0, I, 2], [I, I, I, I, 3, I, 3, I]]
    assert task.num_classes == 4 and task.num_keys == 4


def test_flip_flop_reads_the_most_recent_write_not_an_ignore():
    task = make_task("flip_flop", 6)
    w, i, r = task.WRITE, task.IGNORE_OP, task.READ
    # w1 i0 r? w0 i1 r? r?: the first read's bit token is wrong on purpose: the target is the write's bit
    tokens = torch.tensor([[w, 1, i, 0, r, 0, w, 0, i, 1, r, 0, r, 0, task.PAD]])
    assert task.targets(tokens).tolist() == [[I, I, I, I, 1, I, I, I, I, I, 0, I, 0, I, I]]


def test_counting_counts_the_increments_since_the_printed_variables_last_set():
    task = make_task("counting", 21, num_variables=3)
    a, b = task.FIRST_VARIABLE, task.FIRST_VARIABLE + 1
    set_a, set_b = [a, task.EQUALS, 0, task.SEMICOLON], [b, task.EQUALS, 0, task.SEMICOLON]
    inc_a, inc_b = [a, task.INCREMENT], [b, task.INCREMENT]
    program = [*set_a, *set_b, *inc_a, task.PASS, *inc_a, *inc_b, *set_a, *inc_a, *inc_b]  # a: 2, reset, 1; b: 2
    tokens = torch.tensor([[*program, task.PRINT, a], [*program, task.PRINT, b]])
    targets = task.targets(tokens)
    assert targets[:, -1].tolist() == [1, 2]
    assert (targets[:, :-1] == I).all()
    assert task.num_classes == 11


def test_lag_and_seen_draw_the_same_tokens_as_before_the_registry():
    """Published tables depend on these sequences: uniform tokens from one randint call, the same rules."""
    for name, vocab_size in (("lag", 16), ("seen", 96)):
        task = SyntheticTask(name, vocab_size, k=3)
        tokens, targets = task.sample(4, 40, torch.Generator().manual_seed(7))
        expected = torch.randint(0, vocab_size, (4, 40), generator=torch.Generator().manual_seed(7))
        assert torch.equal(tokens, expected)
        if name == "lag":
            assert torch.equal(targets[:, 3:], tokens[:, :-3]) and (targets[:, :3] == I).all()
        else:
            assert targets[0, 0] == 0 and targets.max() <= 1


# ---- samples ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(NEW))
def test_sampled_targets_follow_the_rule_recomputed_by_a_loop(name):
    task = new_task(name)
    for length in (32, 45, 64):
        tokens, targets = task.sample(16, length, torch.Generator().manual_seed(length))
        assert tokens.shape == targets.shape == (16, length)
        assert tokens.min() >= 0 and tokens.max() < task.vocab_size
        for row, target in zip(tokens.tolist(), targets.tolist()):
            assert target == BY_LOOP[name](row, task)
        scored = targets[targets != I]
        assert scored.min() >= 0 and scored.max() < task.num_classes


def test_flip_flop_draws_the_papers_form():
    task = new_task("flip_flop")
    tokens, _ = task.sample(512, 64, torch.Generator().manual_seed(0))
    instructions, bits = tokens[:, 0::2], tokens[:, 1::2]
    assert (instructions[:, 0] == task.WRITE).all() and (instructions[:, -1] == task.READ).all()
    assert ((bits == 0) | (bits == 1)).all()
    inner = instructions[:, 1:-1]  # i.i.d. with (p_write, p_ignore, p_read) = (0.1, 0.8, 0.1)
    for instruction, p in ((task.WRITE, 0.1), (task.IGNORE_OP, 0.8), (task.READ, 0.1)):
        assert (inner == instruction).float().mean().item() == pytest.approx(p, abs=0.01)
    for row in tokens.tolist():  # a read's bit is the most recent write's
        remembered = None
        for instruction, bit in zip(row[0::2], row[1::2]):
            if instruction == task.WRITE:
                remembered = bit
            elif instruction == task.READ:
                assert bit == remembered


def test_counting_answers_grow_with_the_programs_length_up_to_ten():
    task = new_task("counting")
    means = []
    for length in (32, 256):
        _, targets = task.sample(256, length, torch.Generator().manual_seed(1))
        answers = targets[:, -1]
        assert answers.min() >= 0 and answers.max() <= 10  # count_data_gen.py's MAX_VAL: no increment past 10
        means.append(answers.float().mean().item())
    assert means[1] > means[0] + 1  # a longer program holds more increments: longer counts to carry
    assert answers.max() == 10  # at 256 the cap is reached


# ---- lengths ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(NEW))
def test_every_length_from_32_to_256_scores_the_positions_the_rule_names(name):
    task = new_task(name)
    generator = torch.Generator().manual_seed(3)
    for length in range(32, 257):
        tokens, targets = task.sample(2, length, generator)
        assert tokens.shape == (2, length)
        scored = (targets != I).nonzero()[:, 1].view(2, -1) if name != "flip_flop" else None
        if name == "copy":
            n = (length - 1) // 2
            assert scored.tolist() == [list(range(n, 2 * n))] * 2
        elif name == "associative_recall":
            pairs = length // 4
            assert scored.shape[1] == pairs and (scored >= 2 * pairs).all()
            assert torch.equal(targets[:, 2 * pairs :] != I, tokens[:, 2 * pairs :] != task.blank)
        elif name == "flip_flop":
            reads = torch.zeros_like(tokens, dtype=torch.bool)
            reads[:, 0 : 2 * (length // 2) : 2] = tokens[:, 0 : 2 * (length // 2) : 2] == task.READ
            assert torch.equal(targets != I, reads) and reads[:, 2 * (length // 2) - 2].all()
        else:
            assert scored.tolist() == [[length - 1]] * 2
        for row, target in zip(tokens.tolist(), targets.tolist()):
            assert target == BY_LOOP[name](row, task)


@pytest.mark.parametrize(
    ("name", "shortest"), [("copy", 3), ("associative_recall", 4), ("flip_flop", 4), ("counting", 6)]
)
def test_each_task_works_from_its_minimum_length_and_names_it_below(name, shortest):
    task = new_task(name)
    task.validate([shortest, 32])
    tokens, targets = task.sample(4, shortest, torch.Generator().manual_seed(0))
    assert (targets != I).any(dim=1).all()  # every sequence has an answer
    with pytest.raises(ConfigError, match=f"length {shortest - 1} is too short .*shortest sequence is {shortest}"):
        SyntheticDataModule(name, train_length=32, eval_lengths=[shortest - 1, 64], **NEW[name])


# ---- seeds ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(NEW))
def test_batches_follow_the_seed_and_evaluation_sets_only_eval_seed_and_length(name):
    task = new_task(name)
    first = next(iter(TrainingBatches(task, 8, 32, seed=3)))
    again = next(iter(TrainingBatches(task, 8, 32, seed=3)))
    other = next(iter(TrainingBatches(task, 8, 32, seed=4)))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])
    modules = [
        SyntheticDataModule(name, train_length=32, eval_lengths=[32, 64], eval_size=8, seed=seed, **NEW[name])
        for seed in (0, 1)
    ]
    for module in modules:
        module.setup()
    for length, a, b in zip((32, 64), *(m.eval_sets for m in modules)):
        expected = task.sample(8, length, torch.Generator().manual_seed(12_345 + length))
        assert torch.equal(a.tokens, b.tokens) and torch.equal(a.tokens, expected[0])
        assert torch.equal(a.targets, expected[1])
    elsewhere = SyntheticDataModule(name, train_length=32, eval_lengths=[32], eval_size=8, eval_seed=1, **NEW[name])
    elsewhere.setup()
    assert not torch.equal(elsewhere.eval_sets[0].tokens, modules[0].eval_sets[0].tokens)


# ---- bad settings -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "settings", "fragment"),
    [
        ("copy", {"vocab_size": 3}, r"task.vocab_size=3 is too small for task 'copy'.*allowed: vocab_size >= 4"),
        ("flip_flop", {"p_write": 0.2}, r"= 1.1; allowed: probabilities that sum to 1"),
        ("flip_flop", {"p_read": -0.1, "p_ignore": 1.0}, r"task.p_read=-0.1 is not a probability"),
        ("flip_flop", {"vocab_size": 5}, r"task.vocab_size=5 is too small for task 'flip_flop'"),
        ("counting", {"num_variables": 0}, r"task.num_variables=0 must be at least 1"),
        ("counting", {"num_variables": 6}, r"task.vocab_size=21 is too small .* need 22; allowed: vocab_size >= 22"),
        ("counting", {"num_variable": 3}, r"task.num_variable is not a setting of any synthetic task; allowed for "),
    ],
)
def test_bad_settings_stop_with_one_sentence(name, settings, fragment):
    with pytest.raises(ConfigError, match=fragment):
        new_task(name, **settings)


def test_associative_recall_needs_a_key_per_pair_at_the_longest_length():
    SyntheticDataModule("associative_recall", 129, 32, [64, 256])  # 64 pairs at 256: 64 keys
    message = (
        r"task.vocab_size=128 gives 63 distinct keys, but the longest length 256 holds 64 key-value pairs .*"
        r"allowed: vocab_size >= 129"
    )
    with pytest.raises(ConfigError, match=message):
        SyntheticDataModule("associative_recall", 128, 32, [64, 256])


def test_unknown_task_lists_every_registered_one():
    with pytest.raises(
        ConfigError, match="unknown synthetic task 'kopy'; allowed: lag, seen, copy, associative_recall"
    ):
        SyntheticTask("kopy", 16)
    assert set(NEW) | {"lag", "seen", "state_tracking"} == set(TASKS)  # state_tracking: test_state_tracking.py


# ---- through the real configs -----------------------------------------------------------------------------------
TINY = ["model.d_model=16", "model.n_heads=2", "model.n_layers=1", "task.batch_size=8", "task.eval_size=8"]


@pytest.mark.parametrize("name", sorted(NEW))
def test_a_tiny_model_trains_and_evaluates_on_the_composed_task(name, tmp_path):
    cfg = compose_config([f"task={name}", *TINY, "task.eval_batch_size=8", "task.eval_lengths=[32,64]"], tmp_path)
    datamodule = build_datamodule(cfg)
    module = build_module(cfg, datamodule)
    assert type(datamodule.task).name == name and datamodule.vocab_size == NEW[name]["vocab_size"]
    assert module.model.cfg.n_outputs == datamodule.task.num_classes
    before = [p.detach().clone() for p in module.parameters()]
    trainer = fit_quietly(module, datamodule, steps=3)
    assert any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))
    trainer.test(module, datamodule=datamodule, verbose=False)
    assert set(module.figures) == {"32", "64"} and "accuracy_past_train" in module.figures["64"]
    rows = module.figures.values()  # read error is in %; a mix that does not fit a length is NaN
    fractions = [v for row in rows for k, v in row.items() if not k.startswith("read_error_pct") and v == v]
    assert all(0.0 <= value <= 1.0 for value in fractions)


def test_the_typed_settings_know_every_task_and_each_tasks_own_settings():
    """The task list and each task's settings are declared twice, in the task classes (with torch) and in
    poslab.config.settings (torch-free, for train.py's check before anything loads): they must agree."""
    import dataclasses

    from poslab.config.settings import SYNTHETIC_TASKS, TASK_SCHEMAS, SyntheticTaskSettings
    from poslab.datamodules.tasks import TASKS

    assert set(TASKS) == set(SYNTHETIC_TASKS) == set(TASK_SCHEMAS) - {"lm"}
    shared = {f.name for f in dataclasses.fields(SyntheticTaskSettings)}
    for name, task in TASKS.items():
        own = {f.name for f in dataclasses.fields(task)} - {"vocab_size", "k"}  # k: lag's, declared for every task
        declared = {f.name for f in dataclasses.fields(TASK_SCHEMAS[name])} - shared
        assert own == declared, name


def test_a_run_long_enough_to_train_on_its_test_sequences_is_refused():
    """Training batch i comes from generator seed ``seed * 1_000_003 + i``, the test set at length L from
    ``eval_seed + L``: at seed 0, eval_seed 12345, batch 12,377 would draw the length-32 test set's generator."""
    from poslab.datamodules.synthetic import batch_generator, check_disjoint_streams

    same = batch_generator(0, 12_377).initial_seed() == torch.Generator().manual_seed(12_345 + 32).initial_seed()
    assert same  # the collision the check refuses
    check_disjoint_streams(0, 12_377, 12_345, [32, 64])  # batches 0 .. 12,376: none is an evaluation set's
    with pytest.raises(ConfigError, match=r"training batch 12377 .* the test set's at length 32"):
        check_disjoint_streams(0, 20_000, 12_345, [32, 64])
    with pytest.raises(ConfigError, match=r"the selection set's at length 32.*task.eval_seed=1020003"):
        check_disjoint_streams(1, 20_000, 12_345, [32])  # seed 1's batches meet the selection sets' seeds
