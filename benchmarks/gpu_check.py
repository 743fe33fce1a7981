"""One prepared check for a lent GPU (an H200): does every GPU recipe run, how fast (bf16 tokens/s, MFU, peak
memory), torch.compile, and ALiBi's FlexAttention path against the bias mask. Under 8 minutes; writes as it goes.

    python benchmarks/gpu_check.py OUT_DIR [--steps 80] [--budget-s 420]
    python benchmarks/gpu_check.py OUT_DIR --dry-run        # CPU, tiny sizes, a few steps: checks the script
    python benchmarks/gpu_check.py OUT_DIR --quick          # --dry-run's train section only (about 2 minutes)

Sections (each recorded in OUT_DIR/gpu_check.json and OUT_DIR/gpu_check.md after it finishes; one that
fails records its error and the next one runs; once ``--budget-s`` seconds have passed the rest are skipped):

1. ``train``: every GPU recipe of ``conf/experiment/`` (those whose trainer is a GPU one: increments_rope,
   increments_shared, increments_layer, hrope_axial, rand_axial, period_axial, hrope_rope; found by composing
   each file, so a recipe added later is checked too) at its own size, precision (bf16-mixed), optimizer,
   clipping, schedule and tokenizer, for its first 50 steps (10 warm-up + ``--steps`` timed) through poslab's
   own training loop (Lightning, the Throughput callback; ``trainer.fit`` only, not the evaluation a run does
   after its steps): whether it runs, median tokens/s, MFU against the device's dense peak for the precision
   (poslab.running.callbacks.PEAK_FLOPS: an H200's bf16, 989 TFLOP/s), and peak GPU memory (reset, after the
   previous recipe's memory is freed, before each recipe). The corpus is generated (``byte_model.vocabulary_corpus``:
   paragraphs of sentences over 20,000 made-up words, enough for a BPE to reach the hRoPE recipes' 8192
   symbols); the batch and the vocabulary are the recipe's own (``byte_model.recipe_vocabulary``, shared with
   bf16_speed), in a dry run too (a recipe whose BPE stops short of its ``corpus.vocab_size`` is recorded as not
   run, not measured at another size: ``byte_model.check_vocabulary``).
2. ``compile``: the byte model's training step (rope) with and without ``model.compile`` (benchmarks/compile.py),
   compile time apart, and one step of ALiBi with attention=flex under model.compile (both together).
3. ``alibi_flex``: bias mask against flex, forward + backward in bf16, the attention operation and the whole
   model, at 512 and 2048 (benchmarks/alibi_flex.py); the logits of both paths compared in fp32.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import alibi_flex  # noqa: E402
import compile as compile_bench  # noqa: E402
from byte_model import (  # noqa: E402
    check_vocabulary,
    fit_only,
    measurement_config,
    recipe_vocabulary,
    throughput,
    vocabulary_corpus,
)

# --dry-run: a model small enough to compile and train in seconds on a CPU
DRY_MODEL = ["model.n_layers=2", "model.d_model=64", "model.n_heads=4", "model.mlp_hidden=128"]


EXPERIMENTS = Path(__file__).resolve().parents[1] / "conf" / "experiment"


def freed_memory() -> None:
    """The previous recipe's memory released and the peak reset, so a recipe's peak is its own."""
    gc.collect()  # a finished trainer and model live on in reference cycles until collected
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def gpu_recipes() -> list[str]:
    """The experiments whose own trainer runs on a GPU (composed, not guessed from file names)."""
    from poslab.running.compose import compose_config

    names = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        if compose_config([f"experiment={path.stem}"]).trainer.get("accelerator") == "gpu":
            names.append(path.stem)
    return names


def train_throughput(experiment: str, args: argparse.Namespace, data: Path, out: Path) -> dict[str, Any]:
    """tokens/s, MFU and peak memory of ``experiment`` through poslab's training loop (``byte_model.fit_only``:
    the steps, not the evaluation a run does after them), at the recipe's own batch and context (smaller in a dry
    run)."""
    from omegaconf import open_dict

    from poslab.running.compose import compose_config

    recipe = compose_config([f"experiment={experiment}"])
    sizes = argparse.Namespace(**vars(args))
    if not args.dry_run:
        sizes.batch, sizes.context = int(recipe.task.batch_size), int(recipe.task.context_length)
    trainer = ["trainer=cpu", "trainer.precision=bf16-mixed"] if args.dry_run else []  # the recipe's own trainer
    cfg = measurement_config([f"experiment={experiment}", *trainer, *args.model], sizes, data, out)
    with open_dict(cfg):
        cfg.callbacks.pop("checkpoint", None)  # no checkpoint writes in a throughput check
        cfg.callbacks.pop("progress_bar", None)
    recipe_vocabulary(cfg, experiment)  # the recipe's tokenizer and vocabulary, on the generated corpus
    freed_memory()
    start = time.perf_counter()
    trainer, module = fit_only(cfg)
    vocab_size = check_vocabulary(experiment, cfg.corpus, module.model.cfg.vocab_size)
    return {
        "experiment": experiment,
        "parameters": module.model.num_parameters(),
        "vocab_size": vocab_size,
        "steps": trainer.global_step,
        "batch": sizes.batch,
        "context": sizes.context,
        "precision": cfg.trainer.precision,
        "tokenizer": cfg.corpus.get("tokenizer", "bytes"),
        **throughput(trainer),
        "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if torch.cuda.is_available() else None,
        "fit_seconds": time.perf_counter() - start,  # data, model and trainer built, and the steps
    }


def compile_check(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """The byte model's training step with and without model.compile, and ALiBi + flex under model.compile."""
    bench = argparse.Namespace(
        encoding="rope",
        steps=args.compile_steps,
        warmup=3,
        batch=args.batch,
        context=args.context,
        overrides=args.model,
    )
    torch._dynamo.reset()  # a clean compile cache: the section measures (and fails) on its own
    results: dict[str, Any] = compile_bench.compare(bench, device)
    results["compiled/eager"] = results["compiled"]["tokens_per_s"] / results["eager"]["tokens_per_s"]
    try:  # recorded apart, so that a failure here keeps the figures above
        results.update(alibi_flex_compiled(args, device))
    except Exception:
        results["alibi_flex_compiled_error"] = traceback.format_exc()
        print(results["alibi_flex_compiled_error"], flush=True)
    return results


def alibi_flex_compiled(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Both speed options together: ALiBi through flex inside the compiled model, one training step (forward only
    on CPU, where flex has no backward pass)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = compile_bench.byte_model("alibi", ["model.attention=flex", *args.model]).to(device)
    model.compile()
    tokens = torch.randint(0, compile_bench.BYTES, (args.batch, args.context + 1), device=device)
    start = time.perf_counter()
    with torch.set_grad_enabled(device.type == "cuda"), compile_bench.autocast(device):
        logits = model(tokens[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten())
    if device.type == "cuda":
        loss.backward()
        torch.cuda.synchronize()
    return {
        "alibi_flex_compiled_first_step_seconds": time.perf_counter() - start,
        "alibi_flex_compiled_loss": loss.item(),
    }


def flex_check(args: argparse.Namespace, device: torch.device) -> dict[str, Any]:
    """Bias mask against flex (tokens/s, bf16 on CUDA), and the two paths' logits compared in fp32."""
    bench = argparse.Namespace(
        lengths=args.flex_lengths, batch=args.flex_batch, steps=args.flex_steps, warmup=3, overrides=args.model
    )
    torch._dynamo.reset()
    results: dict[str, Any] = alibi_flex.compare(bench, device)
    # parity in true fp32: TF32 (on for the speed figures) alone moves logits by ~1e-3 on a GPU
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, False
    parity = {}
    for length in args.flex_lengths:
        models = {}
        for attention in ("sdpa", "flex"):
            torch.manual_seed(0)
            models[attention] = compile_bench.byte_model("alibi", [f"model.attention={attention}", *args.model])
            models[attention].to(device)
        tokens = torch.randint(0, compile_bench.BYTES, (2, length), device=device)
        with torch.no_grad():
            for score_scale in (1.0, 1.5):
                a = models["sdpa"](tokens, score_scale=score_scale).logits
                b = models["flex"](tokens, score_scale=score_scale).logits
                parity[f"T={length} score_scale={score_scale}"] = (a - b).abs().max().item()
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = True, True
    results["fp32_max_logit_difference"] = parity
    return results


def write_summary(out: Path, summary: dict[str, Any]) -> None:
    (out / "gpu_check.json").write_text(json.dumps(summary, indent=2, default=str))
    lines = [f"# GPU check ({summary['device']})", "", f"torch {summary['torch']}; {summary['settings']}", ""]
    train = summary["sections"].get("train", {})
    if isinstance(train, dict) and "results" in train:
        lines += [
            "| experiment | runs | batch x context | tokens/s | MFU | step ms | peak memory | parameters | vocab |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, r in train["results"].items():
            if "error" in r:
                lines.append(f"| {name} | no: {r['error'].strip().splitlines()[-1]} | | | | | | | |")
                continue
            mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "n/a"
            memory = f"{r['peak_memory_gib']:.2f} GiB" if r.get("peak_memory_gib") is not None else "n/a"
            lines.append(
                f"| {name} | yes ({r['steps']} steps, {r['precision']}) | {r['batch']} x {r['context']} | "
                f"{r['tokens_per_s']:,.0f} | {mfu} | {r['step_seconds'] * 1e3:.1f} | {memory} | {r['parameters']:,} | "
                f"{r['vocab_size']:,} |"
            )
        lines.append("")
    compiled = summary["sections"].get("compile", {})
    if isinstance(compiled, dict) and "results" in compiled:
        r = compiled["results"]
        together = (
            f"first step {r['alibi_flex_compiled_first_step_seconds']:.1f} s, loss {r['alibi_flex_compiled_loss']:.3f}"
            if "alibi_flex_compiled_loss" in r
            else "failed: " + r["alibi_flex_compiled_error"].strip().splitlines()[-1]
        )
        lines += [
            f"compile (rope, training step): eager {r['eager']['tokens_per_s']:,.0f} tokens/s, compiled "
            f"{r['compiled']['tokens_per_s']:,.0f} tokens/s, compiled/eager {r['compiled/eager']:.3f} (first "
            f"compiled step {r['compiled']['first_step_seconds']:.1f} s); ALiBi + flex + compile: {together}",
            "",
        ]
    flex = summary["sections"].get("alibi_flex", {})
    if isinstance(flex, dict) and "results" in flex:
        lines += ["| ALiBi | bias mask tokens/s | flex tokens/s | flex / bias mask |", "|---|---|---|---|"]
        for name, r in flex["results"].items():
            if name != "fp32_max_logit_difference":
                lines.append(f"| {name} | {r['bias_mask']:,.0f} | {r['flex']:,.0f} | {r['flex/bias_mask']:.3f} |")
        parity = flex["results"]["fp32_max_logit_difference"]
        lines += [
            "",
            "fp32 max |logit difference| flex vs bias mask: " + ", ".join(f"{k}: {v:.1e}" for k, v in parity.items()),
            "",
        ]
    for name, section in summary["sections"].items():
        if isinstance(section, dict) and "error" in section:
            lines.append(f"section {name} failed: {section['error'].strip().splitlines()[-1]}")
        elif section == "skipped":
            lines.append(f"section {name} skipped (time budget)")
    (out / "gpu_check.md").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="directory for gpu_check.json and gpu_check.md (e.g. $OUT)")
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny model and sizes, a few steps")
    parser.add_argument("--quick", action="store_true", help="--dry-run with a 30 s budget: the train section only")
    parser.add_argument("--steps", type=int, default=40, help="timed training steps per recipe (after 10 warm-up)")
    parser.add_argument("--budget-s", type=float, default=420.0, help="skip the sections left after this long")
    parser.add_argument(
        "--sections", default="train,compile,alibi_flex", help="comma-separated: which of train, compile, alibi_flex"
    )
    args = parser.parse_args()
    if args.quick:  # the dry run's compile section alone compiles for minutes on a CPU
        args.dry_run, args.budget_s = True, min(args.budget_s, 30.0)
    warnings.filterwarnings("ignore")
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    start = time.perf_counter()
    if args.dry_run:
        device = torch.device("cpu")
        args.steps, args.warmup, args.batch, args.context, args.model = 3, 1, 2, 64, DRY_MODEL
        args.compile_steps, args.flex_lengths, args.flex_batch, args.flex_steps = 2, [64, 100], 2, 2
        torch.set_num_threads(2)
    else:
        if not torch.cuda.is_available():
            sys.exit("gpu_check: no CUDA device; use --dry-run to check the script on a CPU")
        device = torch.device("cuda")
        args.warmup, args.batch, args.context, args.model = 10, 32, 512, []
        args.compile_steps, args.flex_lengths, args.flex_batch, args.flex_steps = 30, [512, 2048], 8, 20
        torch.backends.cuda.matmul.allow_tf32 = True
    args.out.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {
        "device": compile_bench.describe_device(device, torch.get_num_threads()),
        "torch": torch.__version__,
        "settings": f"recipes at their own batch and context, {args.steps} timed steps after {args.warmup}; "
        f"compile and flex sections: byte model, batch {args.batch} x {args.context}"
        + (" (dry run: tiny model on CPU)" if args.dry_run else ""),
        "sections": {},
    }
    data = Path(tempfile.mkdtemp())
    vocabulary_corpus(data, 300_000 if args.dry_run else 3_000_000)

    def train_all() -> dict[str, Any]:
        results = {}
        for experiment in gpu_recipes():
            try:
                results[experiment] = train_throughput(experiment, args, data, Path(tempfile.mkdtemp()))
            except Exception:
                results[experiment] = {"error": traceback.format_exc()}
            print(experiment, json.dumps(results[experiment], default=str), flush=True)
        return results

    sections = {
        "train": train_all,
        "compile": lambda: compile_check(args, device),
        "alibi_flex": lambda: flex_check(args, device),
    }
    wanted = args.sections.split(",")
    if unknown := sorted(set(wanted) - set(sections)):
        sys.exit(f"gpu_check: --sections {','.join(unknown)} unknown; allowed: {', '.join(sections)}")
    for name, section in sections.items():
        if name not in wanted:
            continue
        elapsed = time.perf_counter() - start
        if elapsed > args.budget_s:
            summary["sections"][name] = "skipped"
        else:
            print(f"== {name} (at {elapsed:.0f} s)", flush=True)
            try:
                summary["sections"][name] = {"results": section(), "seconds": time.perf_counter() - start - elapsed}
            except Exception:
                summary["sections"][name] = {"error": traceback.format_exc()}
                print(summary["sections"][name]["error"], flush=True)
        summary["seconds"] = time.perf_counter() - start
        write_summary(args.out, summary)
    print((args.out / "gpu_check.md").read_text())


if __name__ == "__main__":
    main()
