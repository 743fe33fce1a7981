"""``--from SUMMARY`` draws a summary again; an option that only the computation reads is refused beside it,
never silently ignored (poslab/cli.py ``_compute_only``)."""

from __future__ import annotations

import argparse

import pytest

from poslab.cli import build_parser, command_parser, main, subcommands


def marked_options() -> list[tuple[tuple[str, ...], argparse.Action]]:
    """(command path, action) for every option marked compute-only on a command with ``--from``."""
    parser = build_parser()
    found = []
    for path in subcommands(parser):
        child = command_parser(parser, path)
        marked = child.get_default("compute_only") or {}
        found += [(path, a) for a in child._actions if a.dest in marked]
    return found


def other_value(action: argparse.Action) -> list[str]:
    """Arguments giving ``action`` a value other than its default."""
    if isinstance(action, argparse._StoreTrueAction):
        return [action.option_strings[0]]
    if action.choices:
        return [action.option_strings[0], next(c for c in action.choices if c != action.default)]
    if action.type is int:
        return [action.option_strings[0], str(action.default + 1)]
    return [action.option_strings[0], "some.txt"]


def test_the_analyses_that_compute_from_runs_or_corpora_mark_their_options():
    marked = {(" ".join(path), action.option_strings[0]) for path, action in marked_options()}
    assert {("analyze hrope", flag) for flag in ("--documents", "--shuffle-all", "--trend", "--seed")} <= marked
    assert {("analyze corpus", "--split"), ("analyze corpus", "--no-embeddings")} <= marked
    assert ("analyze increments", "--max-bytes") in marked
    assert {("report grid", "--reference"), ("report length", "--claim")} <= marked
    assert ("analyze corpus", "--ustar") not in marked  # drawn again against another U*: it applies


@pytest.mark.parametrize(
    "path, action", [pytest.param(p, a, id=f"{' '.join(p)} {a.option_strings[0]}") for p, a in marked_options()]
)
def test_a_compute_only_option_with_from_is_refused_by_name(tmp_path, capsys, path, action):
    summary = tmp_path / "summary.json"  # never read: the refusal comes first
    assert main([*path, "--from", str(summary), *other_value(action)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"poslab: poslab {' '.join(path)} --from: {action.option_strings[0]} sets how")
    assert "Drop" in error and len(error.strip().splitlines()) == 1


def test_an_option_at_its_default_is_not_refused(tmp_path, capsys):
    missing = tmp_path / "hrope.json"
    assert main(["analyze", "hrope", "--from", str(missing), "--documents", "200"]) == 2
    error = capsys.readouterr().err
    assert "--documents" not in error and str(missing) in error  # it got as far as reading the summary
