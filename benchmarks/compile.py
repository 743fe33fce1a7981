"""The byte model's training step with and without ``model.compile`` (torch.compile), in one process.

    python benchmarks/compile.py [--encoding rope] [--steps 10] [--warmup 3] [--batch 4] [--context 256]
                                 [--threads 2] [--device cpu] [--quick]

The byte model (conf/model/byte.yaml, 6.4M parameters) as ``experiment=increments_rope`` builds it, one
training step = forward + cross-entropy + backward + fused AdamW on random bytes (data loading is not
what is compared). The compiled model is compiled as training compiles it (``nn.Module.compile``); its
first warm-up step includes the compilation, reported apart. Prints tokens/s of each (median of
``--steps`` steps after ``--warmup``) and compiled / eager. On CUDA the step runs under bf16 autocast,
as ``trainer=gpu`` (bf16-mixed) does. ``--quick``: 2 steps after 1, batch 2, context 128 (a smoke check; its
figures are not the comparison).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BYTES = 257  # 256 byte values and the document separator


def byte_model(encoding: str = "rope", overrides: Sequence[str] = ()) -> torch.nn.Module:
    """poslab's Transformer for ``experiment=increments_rope encoding=<encoding>`` plus ``overrides``."""
    from poslab.model import Transformer
    from poslab.running.builders import build_model_config
    from poslab.running.compose import compose_config

    cfg = compose_config(["experiment=increments_rope", f"encoding={encoding}", *overrides])
    return Transformer(build_model_config(cfg, BYTES, BYTES), int(cfg.task.context_length))


def autocast(device: torch.device) -> contextlib.AbstractContextManager:
    """bf16 autocast on CUDA (as Lightning's bf16-mixed), nothing on CPU (fp32, as trainer=cpu)."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def median_seconds(step: Callable[[], object], steps: int, warmup: int, device: torch.device) -> tuple[float, float]:
    """(median seconds of ``steps`` calls after ``warmup`` calls, seconds of the first call)."""
    times = []
    for _ in range(warmup + steps):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times[warmup:]), times[0]


def training_step(
    model: torch.nn.Module, batch: int, context: int, device: torch.device, coordinates: dict | None = None
) -> Callable[[], object]:
    """One optimisation step of ``model`` on random bytes: forward, loss, backward, fused AdamW; ``coordinates``:
    the per-token coordinates an encoding reads (``PositionInputs.coordinates``), if any."""
    model.to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, fused=True)
    generator = torch.Generator(device="cpu").manual_seed(0)
    tokens = torch.randint(0, BYTES, (batch, context + 1), generator=generator).to(device)

    def step() -> float:
        with autocast(device):
            logits = model(tokens[:, :-1], coordinates).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def compare(args: argparse.Namespace, device: torch.device) -> dict[str, dict[str, float]]:
    """tokens/s of the eager and the compiled training step; each entry also has the first step's seconds."""
    tokens = args.batch * args.context
    results = {}
    for name in ("eager", "compiled"):
        torch.manual_seed(0)
        model = byte_model(args.encoding, args.overrides)
        if name == "compiled":
            model.compile()  # what model.compile=true does when training starts
        seconds, first = median_seconds(
            training_step(model, args.batch, args.context, device), args.steps, args.warmup, device
        )
        results[name] = {"tokens_per_s": tokens / seconds, "step_seconds": seconds, "first_step_seconds": first}
        print(
            f"{name:9s} {tokens / seconds:9.0f} tokens/s   step {seconds * 1e3:8.1f} ms   first step {first:6.1f} s",
            flush=True,
        )
    return results


def describe_device(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)}), bf16 autocast, torch {torch.__version__}"
    return f"cpu, {threads} threads, fp32, torch {torch.__version__}"


def measurement_parser(doc: str | None, steps: int, warmup: int, batch: int) -> argparse.ArgumentParser:
    """A speed benchmark's command line with the options every one takes: steps, warm-up, batch and threads."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--warmup", type=int, default=warmup)
    parser.add_argument("--batch", type=int, default=batch)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="a smoke check in seconds: " + QUICK_TEXT)
    return parser


#: what ``--quick`` caps each measurement option at (those the benchmark has): a check that it runs, not a figure
QUICK = {"steps": 2, "warmup": 1, "batch": 2, "context": 128, "rounds": 1, "lengths": [128]}
QUICK_TEXT = "2 steps after 1, batch 2, context 128, 1 round, length 128"


def parse_measurement(parser: argparse.ArgumentParser) -> argparse.Namespace:
    """The arguments of ``parser`` (``measurement_parser``'s), ``--quick``'s caps applied; sets the thread count and
    quiets warnings."""
    args = parser.parse_args()
    if args.quick:
        for key, cap in QUICK.items():
            if hasattr(args, key):
                setattr(args, key, cap if isinstance(cap, list) else min(getattr(args, key), cap))
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    return args


def parse_measurement_arguments(
    doc: str | None, steps: int, warmup: int, batch: int, extra: Callable[[argparse.ArgumentParser], None]
) -> tuple[argparse.Namespace, torch.device]:
    """``measurement_parser``'s options, the device and config overrides, plus the benchmark's own (``extra``);
    sets the thread count and quiets warnings."""
    parser = measurement_parser(doc, steps, warmup, batch)
    extra(parser)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("overrides", nargs="*", help="more config overrides, e.g. model.n_layers=2")
    args = parse_measurement(parser)
    return args, torch.device(args.device)


def main() -> None:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--encoding", default="rope")
        parser.add_argument("--context", type=int, default=256)

    args, device = parse_measurement_arguments(__doc__, steps=10, warmup=3, batch=4, extra=options)
    results = compare(args, device)
    print(
        f"device: {describe_device(device, args.threads)}; byte model, encoding {args.encoding}, batch {args.batch} x "
        f"{args.context}, median of {args.steps} steps after {args.warmup}"
    )
    ratio = results["compiled"]["tokens_per_s"] / results["eager"]["tokens_per_s"]
    print(f"compiled / eager tokens/s: {ratio:.3f}")


if __name__ == "__main__":
    main()
