"""The grid's summary (``grid.json``) rebuilt from the per-run report lines docs/extrapolation_grid.md prints (the
grid's run directories are not committed), beside the write-up's reference; the doc's table and figure are drawn
from it:

    python docs/extrapolation_grid_summary.py > docs/extrapolation_grid/grid.json
    poslab report grid --from docs/extrapolation_grid/grid.json

The report lines hold each run's task, scheme, seed, lengths and figures. They do not hold its steps, evaluation
sequences, host or the baselines of its evaluation sets: the steps and sequences are the doc's (2,000 and 256, the
recipe's), the host is ``unknown`` and there are no baselines (the doc states always-"no" for seen).
"""

import json
import re
from dataclasses import replace
from pathlib import Path

from poslab.analysis.extrapolation import grid_summary, parse_lines, reference_runs
from poslab.analysis.output import REFERENCE_LABEL

DOC = Path(__file__).with_name("extrapolation_grid.md")
STEPS, SEQUENCES = 2000, 256  # the recipe's, as the doc states them (experiment=extrapolation_grid)
NOTE = (
    "rebuilt from the report lines of docs/extrapolation_grid.md (python docs/extrapolation_grid_summary.py; the "
    "run directories are not committed): steps and sequences are the doc's (2,000 and 256), the hosts are not in "
    "the lines, nor are the baselines of the evaluation sets (always-'no' for seen: 0.854 at 32, 0.55 at 128, as "
    "the doc says)."
)


def report_block(text: str) -> str:
    """The first fenced block under '## The report (our runs)': one line per run."""
    section = text.split("## The report (our runs)", 1)[1]
    return re.search(r"```\n(.*?)```", section, flags=re.S)[1]


def main() -> None:
    runs = parse_lines(report_block(DOC.read_text(encoding="utf-8")))
    runs = [replace(run, steps=(STEPS, STEPS), eval_size=SEQUENCES) for run in runs]
    summary = grid_summary(runs, [NOTE], reference_runs("where_am_i"), REFERENCE_LABEL)
    print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
    main()
