"""poslab's own error types. A leaf module: it imports nothing from poslab, so raising an error never loads
torch or the encodings.

The ``poslab`` command and ``train.py`` turn these into one message and exit status 2; any other exception
is a bug and keeps its traceback.
"""

from __future__ import annotations


class PoslabError(Exception):
    """Base of the errors poslab raises on purpose: the message says what was wrong and what is allowed."""


class ConfigError(PoslabError, ValueError):
    """A configuration value is not allowed; the message says which and why."""


class UsageError(PoslabError, ValueError):
    """A command-line argument of ``poslab`` is not allowed (not a config value); the message says which."""


class MissingRunError(PoslabError, FileNotFoundError):
    """A path given as a run, a multirun or a reference does not hold what it should (``model.pt``,
    ``results.json``, ...); the message names the path and what was looked for."""


class OutputNotWritableError(PoslabError, OSError):
    """An analysis or report could not write its files; the message names the directory and the setting
    (``--output-dir``) that points elsewhere."""


class DataError(PoslabError, ValueError):
    """A data file or the prepared cache cannot be read as it should: a malformed line, invalid UTF-8, a damaged
    array; the message names the file (and the line or byte offset) and what to do."""


class DivergedError(PoslabError, ArithmeticError):
    """Training produced a non-finite loss (NaN or inf); the message names the step and the likely causes.
    The run writes ``results.json`` with ``"status": "diverged"`` and exits with status 1."""

    def __init__(self, message: str, step: int) -> None:
        super().__init__(message)
        self.step = step


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) stopped a run (``poslab.running.callbacks.SaveOnInterrupt``): ``step``, the optimizer steps done;
    ``saved``, whether ``last.ckpt`` was written at that step; ``during``, training or evaluation. A
    KeyboardInterrupt, so nothing that handles errors takes it for one: ``poslab.running.training.main`` says how to
    resume and exits with status 130, a multirun included (Ctrl-C stops the sweep)."""

    def __init__(self, step: int, saved: bool, during: str) -> None:
        super().__init__(f"interrupted at step {step} during {during}")
        self.step, self.saved, self.during = step, saved, during
