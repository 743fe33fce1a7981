"""The reports of the finished rerun (docs/rerun.md, "When it is whole"), each command as its doc writes it: the
registry's (docs/preregistered_claims.md), the PaTH directions' (docs/path_directions.md), then the list in
docs/rerun.md's section. ``sweeps/rerun.sh reports [OUT]`` runs it, after checking that the sweeps are whole.

    python sweeps/rerun_reports.py [--out OUT] [--dry-run]

With OUT every file a command writes (its ``--output-dir``) and every summary it reads from an earlier command
(a ``.json``) moves from ``docs/X`` to ``OUT/X``; the runs are still read from docs/, and a command whose run
folder holds no finished run yet is skipped, saying so. Every command runs; those that fail are named at the end
(exit status 1), as a partial rerun lacks rows some commands name."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from poslab.analysis.preregistered import doc_commands

REPO = Path(__file__).resolve().parents[1]
#: where the commands are, in the order they run; (doc, the section holding them or None for the whole doc)
SOURCES = [
    ("docs/preregistered_claims.md", None),
    ("docs/path_directions.md", None),
    ("docs/rerun.md", "## When it is whole"),
]


def section(text: str, heading: str | None) -> str:
    """``text`` from ``heading`` to the next heading of its level (the whole text for None)."""
    if heading is None:
        return text
    start = text.index(heading + "\n")
    level = heading.split(" ")[0] + " "
    end = text.find("\n" + level, start + len(heading))
    return text[start : end if end >= 0 else len(text)]


def report_commands(repo: Path = REPO) -> list[list[str]]:
    """Every command, in order, as its doc writes it."""
    return [
        command
        for doc, heading in SOURCES
        for command in doc_commands(section((repo / doc).read_text(encoding="utf-8"), heading))
    ]


def relocated(command: list[str], out: Path) -> list[str]:
    """``command`` writing under ``out``: its ``--output-dir`` and the summaries it reads (``.json``) moved from
    docs/ to ``out``; the runs and the registries it reads stay where they are."""
    moved = []
    for previous, arg in zip([None, *command], command, strict=False):
        writes = previous == "--output-dir" or arg.endswith(".json")
        moved.append(str(out / arg.removeprefix("docs/")) if writes and arg.startswith("docs/") else arg)
    return moved


def runs_missing(command: list[str], repo: Path = REPO) -> list[str]:
    """The run folders ``command`` reads (its arguments ending in ``/runs``) that hold no run yet."""
    folders = [repo / arg for arg in command[3:] if arg.rstrip("/").endswith("/runs")]
    return [str(f.relative_to(repo)) for f in folders if not any(f.glob("*/results.json"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="write under OUT instead of docs/ (default: docs/)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run none")
    args = parser.parse_args(argv)
    failed = []
    for command in report_commands():
        command = relocated(command, args.out.resolve()) if args.out is not None else command
        print("$", shlex.join(command), flush=True)
        if args.dry_run:
            continue
        missing = runs_missing(command)
        if missing:  # a partial rerun (OUT): what has no run yet has no report yet
            print(f"rerun_reports: skipped: no finished run in {', '.join(missing)} yet", flush=True)
            continue
        done = subprocess.run([sys.executable, "-m", "poslab", *command[1:]], cwd=REPO, check=False)
        if done.returncode != 0:
            failed.append(f"{' '.join(command[:3])} (status {done.returncode})")
            print(f"rerun_reports: the command above exited with status {done.returncode}", file=sys.stderr)
    if failed:  # the others ran: a partial rerun lacks some rows (a command reading a failed one's summary fails too)
        print(f"rerun_reports: {len(failed)} of the commands failed: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
