"""Verdicts for docs/extrapolation_grid.md from its printed per-seed report (the grid's runs are not committed).

    python docs/extrapolation_grid_verdicts.py

Per row: each column's 95% t-interval over the 2 seeds (``Interval.of``) against the write-up's mean (a magnitude:
reproduced where every column's interval holds it, contradicted where one excludes it; a zero-width interval is
named). Per conclusion of the write-up: a paired difference by seed (``paired_difference``: both schemes share
the seed's batches and the evaluation sets), or one interval against the stated threshold.
"""

import re
from pathlib import Path

from poslab.analysis.stats import Interval, paired_difference

DOC = Path(__file__).with_name("extrapolation_grid.md")
COLUMNS = ["32", "64", "128", "past 32", "x log"]


def per_seed_figures(text: str) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(task, scheme) -> seed -> the five figures of the report block."""
    out: dict[tuple[str, str], dict[int, list[float]]] = {}
    figures = r"length 32 / 64 / 128: ([\d.]+) / ([\d.]+) / ([\d.]+); .*?: ([\d.]+); .*?: ([\d.]+)$"
    pattern = r"^(lag|seen)\s+(\S+)\s+seed (\d): " + figures
    for m in re.finditer(pattern, text, flags=re.M):
        out.setdefault((m[1], m[2]), {})[int(m[3])] = [float(x) for x in m.groups()[3:]]
    return out


def write_up_means(text: str) -> dict[tuple[str, str], list[float]]:
    """(task, scheme) -> the write-up's five means (the bracketed figures of the seed-means table)."""
    out = {}
    for m in re.finditer(r"^\| (lag|seen) \| (\S+) \| 2 \|(.*)\|$", text, flags=re.M):
        out[(m[1], m[2])] = [float(x) for x in re.findall(r"\(([\d.]+)\)", m[3])]
    return out


BOUND = {"lag": 0.05, "seen": 0.10}  # the tolerances, fixed before the runs


def row_verdict(task: str, seeds: dict[int, list[float]], reference: list[float]) -> str:
    """Ours within the write-up's mean +- the bound, column by column, on the interval over seeds."""
    cells = [Interval.of(s[c] for s in seeds.values()) for c in range(len(COLUMNS))]
    low = [reference[c] - BOUND[task] for c in range(len(COLUMNS))]
    high = [reference[c] + BOUND[task] for c in range(len(COLUMNS))]
    out = [COLUMNS[c] for c, i in enumerate(cells) if i.high < low[c] or i.low > high[c]]
    wide = [COLUMNS[c] for c, i in enumerate(cells) if not (low[c] <= i.low and i.high <= high[c])]
    degenerate = [COLUMNS[c] for c, i in enumerate(cells) if i.high == i.low]
    if out:
        verdict = f"contradicted at {', '.join(out)}"
    elif wide:
        verdict = (
            f"not resolved at {', '.join(wide)} ("
            + ", ".join(
                f"{COLUMNS[c]} [{cells[c].low:.3f}, {cells[c].high:.3f}]"
                for c in range(len(COLUMNS))
                if COLUMNS[c] in wide
            )
            + ")"
        )
    else:
        verdict = "reproduced"
    return verdict + (f"; degenerate at {', '.join(degenerate)}: both seeds the same figure" if degenerate else "")


def main() -> None:
    text = DOC.read_text(encoding="utf-8")
    seeds, reference = per_seed_figures(text), write_up_means(text)
    for key in sorted(seeds):
        print(f"{key[0]} {key[1]}: {row_verdict(key[0], seeds[key], reference[key])}")
    column = {name: c for c, name in enumerate(COLUMNS)}

    def at(task: str, scheme: str, name: str) -> dict[int, float]:
        return {s: v[column[name]] for s, v in seeds[(task, scheme)].items()}

    show = lambda label, i: print(f"{label}: {i.mean:.3f} [{i.low:.3f}, {i.high:.3f}] n={i.n}")
    show("seen none x log (claim >= 0.93)", Interval.of(at("seen", "none", "x log").values()))
    show("seen rope - none, x log", paired_difference(at("seen", "rope", "x log"), at("seen", "none", "x log")))
    show("seen rope:1e6 - rope, 128", paired_difference(at("seen", "rope:1000000", "128"), at("seen", "rope", "128")))
    always_no = {0: 0.854, 1: 0.854}
    show("seen alibi:0.5 - always-no, 32 (claim < 0.12)", paired_difference(at("seen", "alibi:0.5", "32"), always_no))
    six = [0.866, 0.647, 0.646, 0.648, 0.651, 0.626]  # seen, ALiBi 1/16, x log: seeds 0-5 (the table of seeds 2-5)
    show("seen alibi:0.0625 x log, 6 seeds (write-up 0.657 +- 0.10)", Interval.of(six))
    for low in ("sinusoid", "learned"):
        for high in ("none", "rope"):
            show(f"seen {low} - {high}, 128", paired_difference(at("seen", low, "128"), at("seen", high, "128")))


if __name__ == "__main__":
    main()
