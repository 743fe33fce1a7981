"""Trivial baselines on the first zoo's evaluation sets (docs/position_zoo.md, "What changed since the first zoo").

    .venv/bin/python docs/position_zoo/first_zoo_baselines.py > docs/position_zoo/first_zoo_baselines.md

Each length's evaluation set rebuilt as the first zoo built it (``EvaluationSet``: 256 sequences from seed
``eval_seed + length``, the task at experiment=position_zoo's settings); the sets are the same tensors as those of
ab8e9ac, the commit the first zoo trained at. For every length: the best constant answer over all scored positions
(what the first zoo's accuracies average over) and over the positions past the training length (the new score),
counting's always-0 and always-10, and the task's trivial rules (``Task.trivial_rules``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from poslab.datamodules.synthetic import EvaluationSet
from poslab.datamodules.tasks import IGNORE
from poslab.running.builders import build_datamodule
from poslab.running.compose import compose_config

TRAIN = 32


def scored(targets: torch.Tensor) -> torch.Tensor:
    return targets[targets != IGNORE]


def best_constant(targets: torch.Tensor) -> tuple[float, int]:
    counts = torch.bincount(scored(targets))
    return counts.max().item() / counts.sum().item(), int(counts.argmax())


def main() -> None:
    print("# Trivial baselines on the first zoo's evaluation sets\n")
    print("Written by `docs/position_zoo/first_zoo_baselines.py`. Each cell: accuracy, with the constant's answer")
    print("in brackets. 'All scored': the positions the first zoo's accuracies averaged over; 'past 32': the")
    print("positions the new extrapolation score averages over.\n")
    print("| task | length | best constant (all scored) | best constant (past 32) | other rules (all / past 32) |")
    print("|---|---|---|---|---|")
    for name in ("lag", "seen", "copy", "associative_recall", "flip_flop", "counting", "counting_filler"):
        cfg = compose_config(["experiment=position_zoo", f"task={name}"], Path(tempfile.mkdtemp()))
        task = build_datamodule(cfg).task
        for length in (32, 64, 128, 256):
            data = EvaluationSet(task, 256, length, cfg.task.eval_seed)
            past = data.targets.clone()
            past[:, :TRAIN] = IGNORE
            value, answer = best_constant(data.targets)
            past_cell = "" if length == TRAIN else "{:.3f} ({})".format(*best_constant(past))
            rules = []
            if name.startswith("counting"):
                for constant in (0, 10):
                    rules.append(f"always {constant}: {(scored(data.targets) == constant).float().mean():.3f}")
            for rule, predicted in task.trivial_rules(data.tokens).items():
                cell = f"{rule}: {(predicted == data.targets)[data.targets != IGNORE].float().mean():.3f}"
                if length > TRAIN:
                    cell += f" / {(predicted == past)[past != IGNORE].float().mean():.3f}"
                rules.append(cell)
            print(f"| {name} | {length} | {value:.3f} ({answer}) | {past_cell} | {'; '.join(rules)} |")


if __name__ == "__main__":
    main()
