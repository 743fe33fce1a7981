"""Time from the command to the first line of a refused config's message (issue 15: within 1.5 s).

    python benchmarks/error_latency.py [--repeats 5] [--quick] [COMMAND ARGS ...]

Runs each bad ``train.py`` command ``--repeats`` times in a fresh process and prints the median seconds until
its first line of output, beside the time of ``python -c pass`` (the interpreter's own start) measured in the
same run. ``--quick``: the first bad command only, 2 processes each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BAD_COMMANDS = (
    ["trainer.max_steps=abc"],
    ["optimizer.schedule=cosin"],
    ["trainer.max_step=50"],
    ["encodng=rope"],
    ["encoding=rope", "encoding.base=-5"],
)


def first_line_seconds(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    process = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    process.stdout.readline()
    seconds = time.perf_counter() - start
    process.communicate()
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="fresh processes per command (default: 5)")
    parser.add_argument("command", nargs="*", help="one bad train.py command's arguments (default: five of them)")
    parser.add_argument("--quick", action="store_true", help="one bad command, 2 processes each")
    args = parser.parse_args()
    if args.quick:
        args.repeats = min(args.repeats, 2)
    logs = tempfile.mkdtemp()
    env = {**os.environ, "POSLAB_LOG_DIR": logs, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    commands = [args.command] if args.command else list(BAD_COMMANDS[:1] if args.quick else BAD_COMMANDS)
    baseline = statistics.median(
        first_line_seconds([sys.executable, "-c", "print()"], env) for _ in range(args.repeats)
    )
    print(f"python -c 'print()': {baseline:.2f} s (median of {args.repeats})")
    for command in commands:
        times = [first_line_seconds([sys.executable, "train.py", *command], env) for _ in range(args.repeats)]
        median = statistics.median(times)
        print(f"train.py {' '.join(command)}: first line after {median:.2f} s (median of {args.repeats})")
    left = sorted(str(p.relative_to(logs)) for p in Path(logs).rglob("*") if p.is_dir())
    print(f"directories left under POSLAB_LOG_DIR: {len(left)}{' (' + ', '.join(left[:6]) + ')' if left else ''}")


if __name__ == "__main__":
    main()
