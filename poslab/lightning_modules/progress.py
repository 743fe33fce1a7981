"""The test after training says what it will cost before it starts, and how far it got while it runs.

A language model's test (every held-out window at every length, in every way past the context; in two rounds where
a way is chosen on selection documents) or a synthetic task's (every length, way, selection set and mix) can run
minutes, and parallel jobs run without a bar (``callbacks.progress_bar.refresh_rate=0``). So each round of it logs,
through the ``poslab`` logger (the console and train.log):

- before it starts, its cost: batches and windows, and forward passes (a batch scored in one way, under one draw),
  in all and per length with the ways scored there, and an estimate of its time from the training step measured
  (``Throughput``: a forward pass taken as a third of a training step, per token);
- then, at most every ``PROGRESS_SECONDS``, a progress line: the length being scored, its batches done of all, the
  forward passes done of all, the time taken and the time left at the rate measured so far;
- and when it ends, its time.

The counts are this process's (a DDP rank scores its share of the batches). Nothing here changes what is scored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("poslab")

#: seconds between two progress lines of the test (the issue asks for a line every 10-30 s)
PROGRESS_SECONDS = 20.0
#: a forward pass's share of a training step (forward and backward) per token: the estimate's rule of thumb
FORWARD_SHARE = 1 / 3
#: the most characters of way names a cost line lists (the rest counted: ``+3 more``)
WAY_NAMES_CHARS = 90


def duration_text(seconds: float) -> str:
    """``42 s``, ``3 min 20 s``, ``2 h 05 min``: a duration as a person reads it."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@dataclass
class LengthCost:
    """What the test scores at one length (``name``: ``L512``; a synthetic task's selection set ``L64 selection``):
    its batches, their windows and tokens, and the ways each is scored in."""

    name: str
    length: int
    batches: int = 0
    windows: int = 0
    forwards: int = 0  # batches x ways x draws
    tokens: int = 0  # tokens run through the model: windows x length x ways x draws
    ways: list[str] = field(default_factory=list)

    def add(self, windows: int, ways: list[str], draws: int = 1, once: list[str] | tuple[str, ...] = ()) -> None:
        """One batch of ``windows`` windows, scored in ``ways`` under each of ``draws`` draws and in ``once`` (e.g. a
        synthetic task's evaluation mixes, the plain model on other sequences) once."""
        passes = len(ways) * draws + len(once)
        self.batches += 1
        self.windows += windows
        self.forwards += passes
        self.tokens += windows * self.length * passes
        self.ways += [way for way in [*ways, *once] if way not in self.ways]


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``1 batch``, ``1,024 batches``."""
    return f"{n:,} {word if n == 1 else plural or word + 's'}"


def way_names(ways: list[str]) -> str:
    """``plain, log_scaled, yarn (+2 more)``: the names that fit ``WAY_NAMES_CHARS``."""
    shown: list[str] = []
    for way in ways:
        if len(", ".join([*shown, way])) > WAY_NAMES_CHARS:
            break
        shown.append(way)
    more = f" (+{len(ways) - len(shown)} more)" if len(shown) < len(ways) else ""
    return ", ".join(shown) + more


def training_step(trainer: Any) -> tuple[float, int] | None:
    """(median seconds, tokens) of the training step the run's ``Throughput`` callback timed; None without one."""
    for callback in getattr(trainer, "callbacks", None) or []:
        seconds, tokens = getattr(callback, "step_seconds", None), getattr(callback, "tokens_per_step", 0)
        if isinstance(seconds, list) and seconds and tokens:
            return sorted(seconds)[len(seconds) // 2], int(tokens) // max(1, int(getattr(trainer, "world_size", 1)))
    return None


class EvaluationProgress:
    """The cost lines of one test round (``title``, e.g. ``test`` or ``test, round selection``) and its progress
    lines; ``costs`` by name (``LengthCost.name``), in the order scored; ``step``: the training step's (seconds,
    tokens), for the estimate (None: no estimate)."""

    def __init__(
        self, title: str, costs: dict[str, LengthCost], step: tuple[float, int] | None = None,
        every: float = PROGRESS_SECONDS, clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.title, self.costs, self.step, self.every, self.clock = title, costs, step, every, clock
        self.done = dict.fromkeys(costs, 0)
        self.forwards_done = 0
        self.total = sum(cost.forwards for cost in costs.values())
        self.started = self.logged = clock()

    def estimate(self) -> float | None:
        """Seconds the round should take: its tokens' forward passes at ``FORWARD_SHARE`` of the training step's
        time per token."""
        if self.step is None:
            return None
        seconds, tokens = self.step
        return sum(cost.tokens for cost in self.costs.values()) * FORWARD_SHARE * seconds / max(1, tokens)

    def start(self) -> None:
        """The round's cost: one line in all, then one a length."""
        self.started = self.logged = self.clock()
        batches = sum(cost.batches for cost in self.costs.values())
        windows = sum(cost.windows for cost in self.costs.values())
        seconds = self.estimate()
        about = ""
        if seconds is not None:
            about = f"; about {duration_text(seconds)} (from the training step, {self.step[0]:.3g} s)"
        log.info(
            "%s: %s (%s) in %s, %s%s",
            self.title, counted(batches, "batch", "batches"), counted(windows, "window"),
            counted(len(self.costs), "set"), counted(self.total, "forward pass", "forward passes"), about,
        )  # fmt: skip
        for cost in self.costs.values():
            log.info(
                "%s: %s %s (%s) x %s: %s",
                self.title, cost.name, counted(cost.batches, "batch", "batches"), counted(cost.windows, "window"),
                counted(len(cost.ways), "way"), way_names(cost.ways),
            )  # fmt: skip

    def advance(self, name: str, forwards: int) -> None:
        """One batch of ``name`` (``LengthCost.name``) scored in ``forwards`` forward passes; a progress line when
        one is due."""
        self.done[name] = self.done.get(name, 0) + 1
        self.forwards_done += forwards
        now = self.clock()
        if now - self.logged < self.every:
            return
        self.logged = now
        elapsed = now - self.started
        left = elapsed * (self.total - self.forwards_done) / max(1, self.forwards_done)
        cost = self.costs.get(name)
        share = 100 * self.forwards_done / max(1, self.total)
        log.info(
            "%s: %s %d/%d batches; all %s/%s forward passes (%.0f%%), %s in, about %s left",
            self.title, name, self.done[name], cost.batches if cost else 0, f"{self.forwards_done:,}",
            f"{self.total:,}", share, duration_text(elapsed), duration_text(left),
        )  # fmt: skip

    def finish(self) -> None:
        """The round's time, against the estimate made before it."""
        seconds = self.clock() - self.started
        estimate = self.estimate()
        said = f" (estimated {duration_text(estimate)})" if estimate is not None else ""
        log.info("%s: done in %s%s", self.title, duration_text(seconds), said)
