"""Peak memory of preparing a corpus: the 23 MB English Wikipedia sample against a 2 MB slice of it.

    POSLAB_DATA_DIR=../shared/corpora python benchmarks/prepare_memory.py [--file enwiki/enwiki_sample.jsonl]
                                                                          [--slice-mb 2] [--quick]

Each preparation runs in a fresh process (the peak RSS of a process only grows); prints its peak RSS, the
part of it the preparation added beyond the imports, the time and MB/s, the cache's bytes a token on disk, and
the ratio large/small (target <= 1.5). Preparation MB/s and bytes a token against the old layout, and the batch
cut: benchmarks/prepared_data.py. ``--quick``: a 0.5 MB slice against a 2 MB one instead of the whole file (the
same ratio of 4x less text: a smoke check, in seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
import numpy, filelock  # what preparation imports, before the baseline
from poslab.datamodules.corpora import prepare_corpus
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
corpus = {"name": "bench", "validation_fraction": 0.02, "groups": {"main": {"local": [{"pattern": sys.argv[1]}]}}}
groups = prepare_corpus(corpus, sys.argv[2], sys.argv[3])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tokens = sum(split["tokens"] for g in groups for split in g.meta["splits"].values())
text = sum(split["bytes"] for g in groups for split in g.meta["splits"].values())
disk = sum(p.stat().st_size for g in groups for p in g.directory.iterdir() if p.name != "meta.json")
print(json.dumps({"peak_kb": after, "added_kb": after - before, "seconds": time.perf_counter() - start,
                  "tokens": tokens, "text_bytes": text, "disk_bytes": disk}))
"""


def measure(pattern: str, data_dir: Path) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, pattern, str(data_dir), cache], capture_output=True, text=True, check=True
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure_slice(source: Path, directory: Path, megabytes: float) -> dict:
    """``measure`` of the first ``megabytes`` of ``source`` (whole lines), written into ``directory``."""
    part = directory / f"slice_{megabytes:g}.jsonl"
    with open(source, "rb") as f, open(part, "wb") as g:
        size = 0
        for line in f:
            if size >= megabytes * 1e6:
                break
            g.write(line)
            size += len(line)
    return measure(str(part), directory)


def show(name: str, r: dict) -> dict:
    """A line of one preparation's figures, as it ends; returns them."""
    print(
        f"{name:6s} {r['tokens'] / 1e6:6.1f} M bytes: peak RSS {r['peak_kb'] / 1024:7.1f} MB "
        f"(+{r['added_kb'] / 1024:6.1f} MB for preparing), {r['seconds']:.1f} s, "
        f"{r['text_bytes'] / 1e6 / r['seconds']:.2f} MB/s, {r['disk_bytes'] / r['tokens']:.3f} bytes a token on disk",
        flush=True,
    )
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", default="enwiki/enwiki_sample.jsonl", help="a .jsonl under POSLAB_DATA_DIR")
    parser.add_argument("--slice-mb", type=float, default=2.0)
    parser.add_argument("--quick", action="store_true", help="0.5 MB against 2 MB slices, not the whole file")
    args = parser.parse_args()
    data_dir = Path(os.environ.get("POSLAB_DATA_DIR", "data"))
    source = data_dir / args.file
    if not source.is_file():
        sys.exit(f"{source} not found: set POSLAB_DATA_DIR to the directory holding {args.file}")
    with tempfile.TemporaryDirectory() as tmp:
        small_result = show("slice", measure_slice(source, Path(tmp), 0.5 if args.quick else args.slice_mb))
        if args.quick:
            large_result = show("slice", measure_slice(source, Path(tmp), 2.0))
    if not args.quick:
        large_result = show("whole", measure(args.file, data_dir))
    print(
        f"peak RSS ratio large/small: {large_result['peak_kb'] / small_result['peak_kb']:.3f} (target <= 1.5); "
        f"data ratio {large_result['tokens'] / small_result['tokens']:.1f}x"
    )


if __name__ == "__main__":
    main()
