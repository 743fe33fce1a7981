"""One run of the extrapolation grid: poslab against a minimal plain-PyTorch loop, in one process.

    python benchmarks/grid_run.py [--steps 2000] [--scheme rope] [--task lag] [--repeats 1] [--quick]

The plain loop is the write-up's script as written (its model's forward,
explicit attention, its rope() with strided writes, nn.GELU, AdamW with
PyTorch's defaults, a causal mask built every call), on the same model
sizes, batches and evaluation. Both use one thread, as each job of the grid
does. Prints each one's seconds per run and per step and the ratio
poslab / plain; the target is <= 0.8. A run here is the whole run, evaluation included, on both sides (the grid's
evaluation is 3 short lengths, and the write-up's script evaluates as well). ``--quick``: 100 steps (a smoke
check: at that length start-up dominates, and the ratio is not the target's).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

D, SCHEMES = (
    64,
    {
        "none": ("none", None),
        "sinusoid": ("sinusoid", None),
        "learned": ("learned", None),
        "rope": ("rope", 10_000.0),
        "rope_base1m": ("rope", 1_000_000.0),
        "alibi_slope1_2": ("alibi", 0.5),
        "alibi_slope1_16": ("alibi", 0.0625),
    },
)


# ---- the write-up's model, as its script writes it ---------------------------------------------------------
def sinusoids(T: int, dim: int) -> torch.Tensor:
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10_000.0) / dim))
    pe = torch.zeros(T, dim)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe


def rope(x: torch.Tensor, base: float) -> torch.Tensor:
    T, half = x.shape[1], x.shape[-1] // 2
    theta = base ** (-torch.arange(half, dtype=torch.float32) / half)
    ang = torch.arange(T, dtype=torch.float32)[:, None] * theta
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * torch.cos(ang) - x2 * torch.sin(ang)
    out[..., 1::2] = x1 * torch.sin(ang) + x2 * torch.cos(ang)
    return out


class Layer(nn.Module):
    def __init__(self, kind: str, arg: float | None) -> None:
        super().__init__()
        self.kind, self.arg, self.scale = kind, arg, 1.0
        self.n1, self.qkv, self.o = nn.LayerNorm(D), nn.Linear(D, 3 * D), nn.Linear(D, D)
        self.n2, self.mlp = nn.LayerNorm(D), nn.Sequential(nn.Linear(D, 4 * D), nn.GELU(), nn.Linear(4 * D, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        T = x.shape[1]
        q, k, v = self.qkv(self.n1(x)).chunk(3, -1)
        if self.kind == "rope":
            q, k = rope(q, self.arg), rope(k, self.arg)
        s = self.scale * q @ k.transpose(1, 2) / math.sqrt(D)
        if self.kind == "alibi":
            dist = torch.arange(T)[:, None] - torch.arange(T)[None]
            s = s - self.arg * dist.clamp(min=0)
        s = s.masked_fill(torch.ones(T, T).triu(1).bool(), float("-inf"))
        x = x + self.o(torch.softmax(s, -1) @ v)
        return x + self.mlp(self.n2(x))


class PlainModel(nn.Module):
    def __init__(self, kind: str, arg: float | None, vocab: int, n_out: int) -> None:
        super().__init__()
        self.kind = kind
        self.emb, self.pos = nn.Embedding(vocab, D), nn.Embedding(128, D)
        self.layers = nn.ModuleList(Layer(kind, arg) for _ in range(2))
        self.out = nn.Linear(D, n_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.emb(x)
        T = x.shape[1]
        if self.kind == "sinusoid":
            h = h + sinusoids(T, D)
        if self.kind == "learned":
            h = h + self.pos(torch.arange(T))
        for layer in self.layers:
            h = layer(h)
        return self.out(h)


def plain_run(task_name: str, scheme: str, seed: int, steps: int) -> float:
    from poslab.datamodules.synthetic import EvaluationSet
    from poslab.datamodules.tasks import IGNORE, SyntheticTask

    task = SyntheticTask(task_name, 16 if task_name == "lag" else 96)
    start = time.perf_counter()
    torch.manual_seed(seed)
    kind, arg = SCHEMES[scheme]
    model = PlainModel(kind, arg, task.vocab_size, task.num_classes)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(steps):
        x = torch.randint(0, task.vocab_size, (64, 32))
        y = task.targets(x)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), ignore_index=IGNORE)
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        for length in (32, 64, 128):
            data = EvaluationSet(task, 256, length, seed=12_345)
            for scale in (1.0, math.log(length) / math.log(32)):
                for layer in model.layers:
                    layer.scale = scale
                model(data.tokens).argmax(-1)
    return time.perf_counter() - start


def poslab_run(task_name: str, scheme: str, seed: int, steps: int, workdir: Path) -> float:
    from poslab.running.compose import compose_config
    from poslab.running.training import run

    overrides = ["experiment=extrapolation_grid", f"+scheme={scheme}", f"task={task_name}", f"seed={seed}"]
    cfg = compose_config([*overrides, f"trainer.max_steps={steps}"], workdir)
    start = time.perf_counter()
    run(cfg)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--task", default="lag", choices=["lag", "seen"])
    parser.add_argument("--scheme", default="rope", choices=sorted(SCHEMES))
    parser.add_argument("--repeats", type=int, default=1, help="alternate the two this many times; medians")
    parser.add_argument("--quick", action="store_true", help="100 steps, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = min(args.steps, 100), 1
    torch.set_num_threads(1)
    import logging
    import tempfile
    import warnings

    warnings.filterwarnings("ignore")
    logging.getLogger("lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    plain, ours = [], []
    poslab_run(args.task, args.scheme, 0, 5, Path(tempfile.mkdtemp()))  # warm imports and caches for both
    plain_run(args.task, args.scheme, 0, 5)
    for repeat in range(args.repeats):
        plain.append(plain_run(args.task, args.scheme, 0, args.steps))
        print(f"repeat {repeat + 1}/{args.repeats}: plain loop {plain[-1]:.2f} s", flush=True)
        ours.append(poslab_run(args.task, args.scheme, 0, args.steps, Path(tempfile.mkdtemp())))
        print(f"repeat {repeat + 1}/{args.repeats}: poslab {ours[-1]:.2f} s", flush=True)
    p, o = statistics.median(plain), statistics.median(ours)
    print(
        f"device: cpu, 1 thread, torch {torch.__version__}; task {args.task}, scheme {args.scheme}, "
        f"{args.steps} steps, batch 64 x 32, evaluation at 32/64/128 (x2 for log scaling)"
    )
    print(f"plain PyTorch loop (write-up style): {p:7.2f} s per run, {1000 * p / args.steps:6.2f} ms per step")
    print(f"poslab (train.py run):               {o:7.2f} s per run, {1000 * o / args.steps:6.2f} ms per step")
    print(f"ratio poslab / plain: {o / p:.3f}  (target <= 0.8)")


if __name__ == "__main__":
    main()
