"""The test after training, saved as it goes: a run stopped during its evaluation (a session's end, a preempted
job, Ctrl-C) resumes that evaluation where it stopped instead of scoring every batch again (docs/resume.md).

A language model's test scores every held-out window at every length, in two rounds, and can take longer than the
training (docs/lm_zoo_cost.md). While it runs, ``EvaluationCheckpoint`` writes, at most every ``every_seconds``
and at the end of each round, ``<dirpath>/evaluation.pt`` (``evaluation-rank<r>.pt`` for DDP rank r), atomically:
the module's sums on this process (``evaluation_state``), the rounds finished, the batches of the current round
scored, and what those belong to (``fingerprint``): the trained weights (a hash), the data and its held-out sample
(the datamodule's ``describe()``), the lengths, ways and draws, the world size.

A run started again after its training ended (``ckpt_path=auto`` or ``last``) goes on from there when every rank's
file matches its trained model and data; otherwise it scores the whole test again, with a line saying why. The
sums are float64, restored as saved, and the remaining batches come in the same order, so the figures are those of
an uninterrupted test. The file is removed when the test ends. A module without ``evaluation_state`` (a synthetic
task: its test is short) is tested as before.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

from poslab.io import write_atomic
from poslab.runs.files import evaluation_state_name, saved_test_progress

log = logging.getLogger("poslab")

#: the saved file's layout; another is not resumed
FORMAT = 1
#: the datamodule's settings that decide which windows each test batch holds (``LanguageModelDataModule``)
BATCHING = ("eval_batch_size", "evaluation_settings", "every_way_on_test", "context_length")


class EvaluationCheckpoint(L.Callback):
    """Saves the test's sums as it goes and resumes them (module docstring). ``dirpath`` None or ``every_seconds``
    None: off."""

    def __init__(self, dirpath: str | None, every_seconds: float | None = 120.0) -> None:
        self.dirpath = Path(dirpath) if dirpath else None
        self.every_seconds = None if every_seconds is None else float(every_seconds)
        self.rounds_done: list[str | None] = []  # rounds of this test finished (their sums kept by the module)
        self.scored = 0  # batches of the current round in the module's sums
        self.saved_at = time.monotonic()
        self.resumed: dict[str, Any] | None = None  # what this process took over (results.json's test_resumed)
        self.known: dict[str, Any] | None = None  # this test's fingerprint: the weights do not change while it runs
        self.datamodule: Any = None  # the test's data (``resume``'s: the trainer holds it only once a test runs)

    def active(self, module: L.LightningModule) -> bool:
        return self.dirpath is not None and self.every_seconds is not None and hasattr(module, "evaluation_state")

    def path(self, trainer: L.Trainer) -> Path:
        assert self.dirpath is not None
        return self.dirpath / evaluation_state_name(trainer.global_rank, trainer.world_size)

    # ---- while the test runs ----------------------------------------------------------------------------------

    def on_test_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.scored = int(getattr(module, "scored_earlier", 0))
        self.saved_at = time.monotonic()

    def on_test_batch_end(
        self, trainer: L.Trainer, module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:  # fmt: skip
        self.scored = max(self.scored, int(batch_idx) + 1)
        if self.active(module) and time.monotonic() - self.saved_at >= self.every_seconds:
            self.save(trainer, module)

    def round_done(self, trainer: L.Trainer, module: L.LightningModule, test_round: str | None) -> None:
        """A round of the test ended (its choice made, its sums kept for the next round): saved as finished."""
        self.rounds_done.append(test_round)
        self.scored = 0
        if hasattr(module, "scored_earlier"):
            module.scored_earlier = 0
        if self.active(module):
            self.save(trainer, module)

    def save(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        state = {
            "format": FORMAT,
            "fingerprint": self.fingerprint(trainer, module),
            "rounds_done": list(self.rounds_done),
            "scored": self.scored,
            "module": module.evaluation_state(),
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)  # plain containers and tensors: it loads with weights_only=True, as checkpoints do
        write_atomic(self.path(trainer), buffer.getvalue())
        self.saved_at = time.monotonic()

    def fingerprint(self, trainer: L.Trainer, module: L.LightningModule) -> dict[str, Any]:
        """``fingerprint``, computed once a test (hashing the weights of a large model takes seconds)."""
        if self.known is None:
            self.known = fingerprint(trainer, module, self.datamodule or trainer.datamodule)
        return self.known

    def discard(self, trainer: L.Trainer) -> None:
        """The test ended: its sums are in the results, the file would only mislead a later run."""
        if self.dirpath is not None:
            self.path(trainer).unlink(missing_ok=True)

    # ---- when the test starts -----------------------------------------------------------------------------------

    def resume(self, trainer: L.Trainer, module: L.LightningModule, datamodule: Any) -> list[str | None]:
        """The rounds an earlier process of this run finished, with the module's sums restored to where it saved
        them (the batches of its current round already scored skipped); none where there is nothing to resume."""
        self.rounds_done, self.scored, self.known, self.datamodule, self.resumed = [], 0, None, datamodule, None
        if not self.active(module):
            return []
        state, why = self.saved_state(trainer, module)
        rounds = None if state is None else tuple(state["rounds_done"])
        answers = all_ranks(trainer, rounds)  # every rank resumes the same rounds, or none resumes
        if state is None or len(set(answers)) > 1:
            if state is not None or why is not None:
                log.info("test: the saved evaluation (%s) is not resumed: %s; scoring the whole test",
                         self.path(trainer), why or "the ranks saved different points of it")  # fmt: skip
            return []
        module.load_evaluation_state(state["module"], state["scored"])
        self.rounds_done, self.scored = list(state["rounds_done"]), int(state["scored"])
        self.resumed = {"rounds_done": list(self.rounds_done), "batches_scored_earlier": self.scored}
        log.info("test: resuming the evaluation an earlier process of this run saved (%s): %s scored",
                 self.path(trainer), saved_test_progress(state))  # fmt: skip
        return list(self.rounds_done)

    def saved_state(self, trainer: L.Trainer, module: L.LightningModule) -> tuple[dict[str, Any] | None, str | None]:
        """This rank's saved state, and why it cannot be resumed (None: it can; no file: nothing said)."""
        path = self.path(trainer)
        if not path.is_file():
            return None, None
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as error:  # noqa: BLE001  (a damaged file: the test is scored whole, as without one)
            return None, f"it cannot be read ({type(error).__name__}: {error})"
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            return None, f"it is not format {FORMAT}"
        saved, now = state["fingerprint"], self.fingerprint(trainer, module)
        changed = [key for key in now if saved.get(key) != now[key]]
        if changed:
            return None, f"its {', '.join(changed)} differ from this run's"
        return state, None


def fingerprint(trainer: L.Trainer, module: L.LightningModule, datamodule: Any) -> dict[str, Any]:
    """What a saved evaluation belongs to: the weights tested, the data and its held-out sample, what the sums are
    sums of, and the processes sharing the batches."""
    weights = hashlib.sha256()
    for name, tensor in module.model.state_dict().items():
        weights.update(name.encode())
        weights.update(tensor.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    describe = getattr(datamodule, "describe", None)
    data = json.dumps(describe() if describe else None, sort_keys=True, default=str)
    # what cuts the windows into batches: a batch index names the same windows only under the same settings
    batching = {key: getattr(datamodule, key, None) for key in BATCHING}
    return {
        "weights": weights.hexdigest(),
        "data": hashlib.sha256(data.encode()).hexdigest(),
        "batching": json.loads(json.dumps(batching, sort_keys=True, default=str)),
        "evaluation": module.evaluation_signature(),
        "world_size": int(trainer.world_size),
        "step": int(trainer.global_step),
    }


def all_ranks(trainer: L.Trainer, value: Any) -> list[Any]:
    """``value`` from every DDP rank (a picklable one), in rank order; ``[value]`` in a single process."""
    if trainer.world_size == 1 or not torch.distributed.is_initialized():
        return [value]
    gathered: list[Any] = [None] * trainer.world_size
    torch.distributed.all_gather_object(gathered, value)
    return gathered


def evaluation_checkpoint(trainer: L.Trainer) -> EvaluationCheckpoint | None:
    return next((c for c in trainer.callbacks if isinstance(c, EvaluationCheckpoint)), None)
