"""Prepared data at the size of its content: bytes a token on disk, preparation MB/s, and the batch cut, before/after.

    POSLAB_DATA_DIR=/work/shared/corpora python benchmarks/prepared_data.py [--corpora python_code wiki_en_zh]
        [--old /tmp/old] [--batches 100] [--batch-size 32] [--context 512] [--quick]

For each corpus, in a fresh cache under ``--tmp`` (default: the system's temporary directory):

- *preparation*: the corpus prepared by this checkout, its wall time and MB/s (UTF-8 text bytes, and the
  bytes of the files read); with ``--old DIR`` (a clone at the commit before the boundary layout, e.g.
  ``git clone . /tmp/old && git -C /tmp/old checkout <commit>``) the same with that code, in a subprocess.
- *bytes a token on disk*: every file of the prepared splits over their tokens; before: the old code's cache
  measured when ``--old`` is given, else the old layout's arithmetic (uint16 + 3 x int32 = 14).
- *batch cut*: ``TrainingWindows.batch`` (B windows of context + 1) on the new cache against the same batches
  cut the old way (slices of memory-mapped per-token int32 arrays, written from the new cache in the old
  layout); both checked equal, the median of interleaved rounds, and the ratio new / old.

``--quick``: python_code only (the smallest), 10 batches a round of the cut timing (a smoke check).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.datamodules.test_prepared_data import old_batch  # noqa: E402  (version 3's batch cut: one copy, in the test)

OLD_BYTES_PER_TOKEN = 2 + 3 * 4  # the layout before cache version 4: uint16 token + int32 document, paragraph, sentence

CHILD = r"""
import json, sys, time
from pathlib import Path
import poslab
from poslab.datamodules.corpora import prepare_corpus
corpus, data_dir, cache = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
start = time.perf_counter()
groups = prepare_corpus(corpus, data_dir, cache)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "poslab": poslab.__file__,
                  "directories": [str(g.directory) for g in groups], "weights": [g.weight for g in groups]}))
"""


def corpus_config(name: str, data_dir: str) -> dict:
    from omegaconf import OmegaConf

    from poslab.running.compose import compose_config

    cfg = compose_config([f"corpus={name}", f"paths.data_dir={data_dir}"])
    return OmegaConf.to_container(cfg.corpus, resolve=True)


def disk_figures(directories: list[Path]) -> dict[str, float]:
    """Bytes of every split file (all but meta.json) over the tokens, and the text and file bytes prepared."""
    on_disk = tokens = text = files = 0
    for directory in directories:
        meta = json.loads((directory / "meta.json").read_text())
        on_disk += sum(p.stat().st_size for p in directory.iterdir() if p.name != "meta.json")
        tokens += sum(s["tokens"] for s in meta["splits"].values())
        text += sum(s["bytes"] for s in meta["splits"].values())
        files += (meta.get("source_files") or {}).get("file_bytes", 0)
    return {"on_disk": on_disk, "tokens": tokens, "text_bytes": text, "file_bytes": files}


def prepare(corpus: dict, data_dir: str, cache: Path, pythonpath: str | None = None) -> dict:
    """Prepare in a subprocess (this checkout's poslab, or the one at ``pythonpath``): a cold, honest timing."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(corpus), data_dir, str(cache)],
        capture_output=True,
        text=True,
        env=env,
        cwd=pythonpath or ROOT,  # `python -c` puts the working directory first on sys.path
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if pythonpath and not result["poslab"].startswith(str(Path(pythonpath).resolve())):
        sys.exit(f"--old {pythonpath}: the subprocess imported {result['poslab']}, not that checkout's poslab")
    return {**result, **disk_figures([Path(d) for d in result["directories"]])}


def old_layout_groups(groups: list, directory: Path) -> list:
    """The groups with version 3's splits: the per-token arrays written to disk and memory-mapped, as it read them."""
    from poslab.datamodules.corpora import PreparedGroup

    class OldSplit(SimpleNamespace):
        def __len__(self) -> int:
            return len(self.tokens)

    out = []
    for group in groups:
        splits = {}
        for name, split in group.splits.items():
            arrays = {"tokens": split.tokens}
            for key in ("paragraphs", "sentences"):  # documents are not read by a window
                path = directory / f"{group.name}.{name}.{key}.i32"
                np.asarray(getattr(split, key), dtype="<i4").tofile(path)
                arrays[key] = np.memmap(path, dtype="<i4", mode="r", shape=(len(split),))
            splits[name] = OldSplit(**arrays)
        out.append(PreparedGroup(group.name, group.weight, group.directory, group.meta, splits))
    return out


def batch_cut(groups: list, scratch: Path, n_batches: int, batch_size: int, context: int) -> dict[str, float]:
    import poslab.datamodules.language as language
    from poslab.config.passkey_settings import passkey_defaults

    key_length = passkey_defaults()["key_length"]
    new = language.TrainingWindows(
        groups, batch_size, context, seed=0, passkey_fraction=0.0, key_length=key_length, passkey_warmup=0
    )
    old = old_layout_groups(groups, scratch)

    def timed(cut, first: int) -> tuple[float, list]:
        start = time.perf_counter()
        batches = [cut(first + i) for i in range(n_batches)]
        return (time.perf_counter() - start) / n_batches, batches

    new_times, old_times, identical = [], [], True
    for round_ in range(5):  # interleaved rounds: both paths see the same machine load and page cache
        t_new, a = timed(new.batch, round_ * n_batches)
        t_old, b = timed(lambda i: old_batch(new, old, i), round_ * n_batches)
        new_times.append(t_new)
        old_times.append(t_old)
        identical &= all(torch.equal(x[k], y[k]) for x, y in zip(a, b) for k in ("tokens", "paragraph", "sentence"))
    new_s, old_s = statistics.median(new_times), statistics.median(old_times)
    return {"new_ms": 1e3 * new_s, "old_ms": 1e3 * old_s, "ratio": new_s / old_s, "identical": identical}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=["python_code", "wiki_en_zh"])
    parser.add_argument("--old", help="a checkout of poslab before the boundary layout: prepare with it too")
    parser.add_argument("--batches", type=int, default=100, help="training batches a round of the cut timing")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--context", type=int, default=512)
    parser.add_argument("--tmp", default=None, help="where the temporary caches go (default: the system's)")
    parser.add_argument("--quick", action="store_true", help="python_code only, 10 batches a round")
    args = parser.parse_args()
    if args.quick:
        args.corpora, args.batches = ["python_code"], min(args.batches, 10)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(1)
    data_dir = os.environ.get("POSLAB_DATA_DIR", "data")

    from poslab.datamodules.corpora import load_prepared

    rows = []
    for name in args.corpora:
        corpus = corpus_config(name, data_dir)
        with tempfile.TemporaryDirectory(dir=args.tmp, prefix=f"poslab-prepared-{name}-") as tmp:
            new = prepare(corpus, data_dir, Path(tmp) / "new")
            old = prepare(corpus, data_dir, Path(tmp) / "old", args.old) if args.old else None
            groups = [load_prepared(Path(d), w) for d, w in zip(new["directories"], new["weights"])]
            cut = batch_cut(groups, Path(tmp), args.batches, args.batch_size, args.context)
        rows.append((name, new, old, cut))
        mb = new["text_bytes"] / 1e6
        print(f"\n{name}: {new['tokens']:,} tokens, {mb:.1f} MB of text ({new['file_bytes'] / 1e6:.1f} MB of files)")
        before = old["on_disk"] / old["tokens"] if old else OLD_BYTES_PER_TOKEN
        how = "measured, old code" if old else "the old layout: 2 + 3 x 4"
        print(
            f"  bytes a token on disk: before {before:.2f} ({how}), after {new['on_disk'] / new['tokens']:.3f} "
            f"(target <= 2.5); cache {new['on_disk'] / 1e6:.1f} MB (before {before * new['tokens'] / 1e6:.1f} MB)"
        )
        line = f"  preparation: {new['seconds']:.1f} s, {mb / new['seconds']:.2f} MB/s of text"
        if old:
            line += f" (old code: {old['seconds']:.1f} s, {old['text_bytes'] / 1e6 / old['seconds']:.2f} MB/s)"
        print(line)
        print(
            f"  batch cut ({args.batch_size} x {args.context + 1}): {cut['new_ms']:.2f} ms new, {cut['old_ms']:.2f} ms "
            f"old (per-token arrays), ratio new/old {cut['ratio']:.2f}; batches identical: {cut['identical']}"
        )
    print("\n| corpus | bytes/token before | after | preparation MB/s | batch cut new/old |")
    print("|---|---|---|---|---|")
    for name, new, old, cut in rows:
        before = old["on_disk"] / old["tokens"] if old else OLD_BYTES_PER_TOKEN
        rate = new["text_bytes"] / 1e6 / new["seconds"]
        print(f"| {name} | {before:.2f} | {new['on_disk'] / new['tokens']:.3f} | {rate:.2f} | {cut['ratio']:.2f} |")


if __name__ == "__main__":
    main()
