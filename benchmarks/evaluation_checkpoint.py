"""What saving the test as it goes costs (``callbacks.evaluation_checkpoint``, docs/resume.md): one save's seconds
and file size, and the weights' hash, for the lm_zoo model with the sums of a whole Python-split test.

    python benchmarks/evaluation_checkpoint.py [--quick] [--updates 6000] [--rounds 5]

The lm_zoo's language module (4 x 128, RoPE: seven ways past the context) has its evaluation sums filled as a whole
test of the Python split fills them: ``--updates`` batch-and-way updates (the Python test's 1,533 batches in one to
seven ways: about 6,000), each adding the per-document rows of three documents, at the five lengths in turn. Then,
``--rounds`` times: one ``EvaluationCheckpoint.save`` (the state copied, ``torch.save``, the atomic write and its
fsync) into a temporary directory, and the weights' SHA-256 alone (``fingerprint``, computed once a test). Printed:
the medians, the file's size, and a save's share of the 120 s between two saves. ``--quick``: 500 updates, 2 rounds.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.frontier_cost import BYTES, CONTEXT  # noqa: E402

LENGTHS = [CONTEXT * m for m in (1, 2, 4, 8, 16)]
EVERY_SECONDS = 120.0  # conf/callbacks/default.yaml


def filled_module(updates: int):
    """The lm_zoo language module with ``updates`` updates of its sums, as a test adds them."""
    import torch

    from poslab.config.settings import yaml_defaults
    from poslab.lightning_modules.language import LanguageModelModule
    from poslab.model import ModelConfig

    torch.manual_seed(0)
    shape = {key: value for key, value in yaml_defaults("model", "lm_zoo").items() if key != "defaults"}
    model = ModelConfig(vocab_size=BYTES, n_outputs=BYTES, **{**shape, "encoding": {"name": "rope"}})
    module = LanguageModelModule(model, {"lr": 1e-3}, max_length=LENGTHS[-1], train_length=CONTEXT,
                                 eval_lengths=LENGTHS)  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    for update in range(updates):
        length = LENGTHS[update % len(LENGTHS)]
        rows = max(1, 16 * CONTEXT // length)
        losses = torch.rand(rows, length, generator=generator)
        documents = torch.randint(0, 3, (rows, length), generator=generator) + update // 10  # three a batch
        way = update % len(module.ways(length))
        module.totals[str(length)].update(way, 0, 0, losses, torch.ones(rows, length), torch.ones(rows, length),
                                          documents)  # fmt: skip
    return module


def measure(updates: int, rounds: int) -> dict[str, float]:
    from poslab.running.evaluation_checkpoint import EvaluationCheckpoint, fingerprint

    module = filled_module(updates)
    trainer = SimpleNamespace(world_size=1, global_rank=0, global_step=720, datamodule=None)
    saves, hashes = [], []
    with tempfile.TemporaryDirectory() as folder:
        saving = EvaluationCheckpoint(folder, EVERY_SECONDS)
        for _ in range(rounds):
            start = time.perf_counter()
            fingerprint(trainer, module, None)
            hashes.append(time.perf_counter() - start)
            saving.known = None  # each save below hashes again: the first save of a test
            start = time.perf_counter()
            saving.save(trainer, module)
            saves.append(time.perf_counter() - start)
        size = saving.path(trainer).stat().st_size
    rows = sum(len(totals.document_rows) for totals in module.totals.values())
    return {"save": statistics.median(saves), "hash": statistics.median(hashes), "bytes": size, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 updates, 2 rounds")
    parser.add_argument("--updates", type=int, default=6000, help="batch-and-way updates of the sums")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    updates, rounds = (500, 2) if args.quick else (args.updates, args.rounds)
    found = measure(updates, rounds)
    print(f"{updates} updates ({found['rows']} row blocks of per-document sums), medians of {rounds} rounds:")
    print(f"  a save (state copied, torch.save, atomic write with fsync): {found['save'] * 1000:.1f} ms, "
          f"file {found['bytes'] / 1e6:.2f} MB")  # fmt: skip
    print(f"  the weights' SHA-256 (in every save above; once a test since): {found['hash'] * 1000:.1f} ms")
    print(f"  a save every {EVERY_SECONDS:.0f} s of test: {found['save'] / EVERY_SECONDS:.3%} of it")


if __name__ == "__main__":
    main()
