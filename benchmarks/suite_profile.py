"""Where the test suite's time goes, from pytest's JUnit XML (docs/tests_profile.md is this script's output).

    PYTEST_ADDOPTS=--junitxml=/tmp/junit.xml make test
    python benchmarks/suite_profile.py /tmp/junit.xml [--modules 25] [--tests 40] [--quick]

Prints the summed test time (over all xdist workers: the wall time is about this sum over the worker count, as
the tests are CPU-bound on a machine with as many cores as workers), then the modules and the tests that take
longest, as markdown tables. ``--quick``: the 5 slowest modules and 10 slowest tests (it reads a file: seconds
either way).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ElementTree
from collections import defaultdict


def test_times(junit_xml: str) -> dict[str, float]:
    """``module::test`` -> seconds, for every test case in the file."""
    times = {}
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        times[f"{case.get('classname')}::{case.get('name')}"] = float(case.get("time", 0.0))
    return times


def table(rows: list[tuple[str, float]], header: str) -> str:
    lines = [f"| {header} | seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds:.1f} |" for name, seconds in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit_xml")
    parser.add_argument("--modules", type=int, default=25, help="how many modules to list")
    parser.add_argument("--tests", type=int, default=40, help="how many tests to list")
    parser.add_argument("--quick", action="store_true", help="the 5 slowest modules and 10 slowest tests")
    args = parser.parse_args()
    if args.quick:
        args.modules, args.tests = min(args.modules, 5), min(args.tests, 10)
    times = test_times(args.junit_xml)
    by_module: dict[str, float] = defaultdict(float)
    for name, seconds in times.items():
        by_module[name.split("::")[0]] += seconds
    print(f"total test time (sum over the workers): {sum(times.values()):.0f} s over {len(times)} tests\n")
    print(table(sorted(by_module.items(), key=lambda kv: -kv[1])[: args.modules], "module"), end="\n\n")
    print(table(sorted(times.items(), key=lambda kv: -kv[1])[: args.tests], "test"))


if __name__ == "__main__":
    main()
