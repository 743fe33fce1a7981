"""The test after training logs its cost before it starts and its progress while it runs
(``poslab.lightning_modules.progress``), whatever the progress bar's setting."""

from __future__ import annotations

import logging

from poslab.lightning_modules.progress import EvaluationProgress, LengthCost, training_step, way_names


def costs() -> dict[str, LengthCost]:
    """Two lengths: 3 batches of 8 windows at 64 in the plain model, 2 of 4 at 128 in three ways."""
    short, long = LengthCost("L64", 64), LengthCost("L128", 128)
    for _ in range(3):
        short.add(8, ["plain"])
    for _ in range(2):
        long.add(4, ["plain", "log_scaled", "yarn"])
    return {"L64": short, "L128": long}


def messages(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "poslab"]


def test_a_cost_counts_batches_windows_forward_passes_and_tokens_per_way_and_draw():
    cost = LengthCost("L128", 128)
    cost.add(4, ["plain", "yarn"], draws=3, once=["ffl0.98"])
    cost.add(2, ["plain"], draws=3)
    assert (cost.batches, cost.windows, cost.forwards) == (2, 6, 7 + 3)
    assert cost.tokens == 4 * 128 * 7 + 2 * 128 * 3
    assert cost.ways == ["plain", "yarn", "ffl0.98"]


def test_the_cost_is_logged_before_the_round_with_an_estimate_from_the_training_step(caplog):
    # 1,000 tokens a 30 s step: a token's forward pass is 30 / 3 / 1000 s; the round runs 3*8*64 + 2*4*128*3 tokens
    progress = EvaluationProgress("test, round selection", costs(), step=(30.0, 1000), clock=lambda: 0.0)
    with caplog.at_level(logging.INFO, logger="poslab"):
        progress.start()
    first, short, long = messages(caplog)
    tokens = 3 * 8 * 64 + 2 * 4 * 128 * 3
    assert abs(progress.estimate() - tokens * 10 / 1000) < 1e-9  # 46.08 s
    assert first == (
        "test, round selection: 5 batches (32 windows) in 2 sets, 9 forward passes; about 46 s (from the training "
        "step, 30 s)"
    )
    assert short == "test, round selection: L64 3 batches (24 windows) x 1 way: plain"
    assert long == "test, round selection: L128 2 batches (8 windows) x 3 ways: plain, log_scaled, yarn"


def test_progress_lines_come_at_most_every_interval_with_done_to_do_and_time_left(caplog):
    now = [0.0]
    progress = EvaluationProgress("test", costs(), every=20.0, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="poslab"):
        progress.start()
        caplog.clear()
        for second in (5.0, 10.0, 15.0):  # the three short batches, each a forward pass: too soon for a line
            now[0] = second
            progress.advance("L64", 1)
        assert messages(caplog) == []
        now[0] = 30.0
        progress.advance("L128", 3)  # 6 of 9 forward passes in 30 s: 15 s left at that rate
        now[0] = 35.0
        progress.advance("L128", 3)  # 5 s after the last line: none
        now[0] = 36.0
        progress.finish()
    assert messages(caplog) == [
        "test: L128 1/2 batches; all 6/9 forward passes (67%), 30 s in, about 15 s left",
        "test: done in 36 s",
    ]


def test_without_a_timed_training_step_there_is_no_estimate(caplog):
    progress = EvaluationProgress("test", costs(), step=None, clock=lambda: 0.0)
    with caplog.at_level(logging.INFO, logger="poslab"):
        progress.start()
    assert progress.estimate() is None and "about" not in messages(caplog)[0]


def test_the_training_step_is_read_from_the_throughput_callback_as_its_median():
    class Timer:  # Throughput's attributes: the timed steps, the tokens a step (all ranks)
        step_seconds, tokens_per_step = [0.5, 0.1, 0.2], 2048

    class Trainer:
        callbacks, world_size = [object(), Timer()], 2

    assert training_step(Trainer()) == (0.2, 1024)
    Timer.step_seconds = []  # fewer steps than its warm-up: nothing timed
    assert training_step(Trainer()) is None


def test_way_names_are_cut_to_fit_a_line():
    ways = [f"variant_number_{i}" for i in range(12)]
    text = way_names(ways)
    assert len(text) < 110 and text.endswith("more)") and text.startswith("variant_number_0, ")
