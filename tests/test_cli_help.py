"""`poslab --help`, every command's options, `poslab encodings` and the checks of `poslab wavelengths`."""

from __future__ import annotations

import argparse
import re

import pytest

from poslab.cli import build_parser, command_parser, encoding_lines, main, subcommands
from tests.conftest import CONF

RST = re.compile(r"``|:(class|func|meth|mod|attr):`")


def every_parser() -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    parser = build_parser()
    paths = list(subcommands(parser))
    # the groups (report, analyze) as well as the commands that run something
    groups = {path[:i] for path in paths for i in range(1, len(path))}
    return [((), parser)] + [(path, command_parser(parser, path)) for path in sorted(set(paths) | groups)]


def test_help_lists_every_command_with_its_line():
    parser = build_parser()
    paths = list(subcommands(parser))
    assert ("analyze", "increments") in paths and ("report", "losses") in paths and ("encodings",) in paths
    text = parser.format_help()
    for path in paths:
        line = next((line for line in text.splitlines() if line.strip().startswith(f"poslab {' '.join(path)}")), None)
        assert line is not None, path
        assert len(line.split("  ")) > 1 and line.rstrip() != f"  poslab {' '.join(path)}"  # a description beside it


@pytest.mark.parametrize("path, parser", every_parser(), ids=lambda p: " ".join(p) if isinstance(p, tuple) else "")
def test_every_option_has_a_description_and_shows_its_default(path, parser):
    formatter = parser._get_formatter()
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        assert action.help, f"poslab {' '.join(path)} {action.dest}: no help text"
        if action.option_strings:
            shown = formatter._get_help_string(action) % {"default": action.default}
            assert "default" in shown, f"poslab {' '.join(path)} {action.option_strings[0]}: no default shown"
    assert parser.description, f"poslab {' '.join(path)}: no description"


@pytest.mark.slow
def test_encodings_prints_one_clean_line_per_registered_encoding(capsys):
    from poslab.encodings import ENCODINGS, PositionEncoding

    assert PositionEncoding.summary == ""  # the base has none: every encoding must write its own
    assert main(["encodings"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == sorted(ENCODINGS)
    for line, (name, cls) in zip(lines, sorted(ENCODINGS.items())):
        assert (CONF / "encoding" / f"{name}.yaml").is_file(), name
        assert cls.summary and cls.summary in line and cls.summary != cls.__doc__, name
        assert not RST.search(line), line
        assert line.endswith(f" Paths: {', '.join(cls.attention_paths)}."), line
    rope = next(line for line in lines if line.startswith("rope "))
    assert "base=10000" in rope and "pairing=interleaved" in rope  # the YAML's defaults, shared ones included
    assert "max_delta=10.0" in next(line for line in lines if line.startswith("increments_layer "))
    assert "No settings." in next(line for line in lines if line.startswith("none "))
    assert "Paths: sdpa, explicit." in next(line for line in lines if line.startswith("cope "))  # a score term
    assert "Paths: sdpa, explicit, flex." in next(line for line in lines if line.startswith("alibi "))
    assert lines == encoding_lines()


@pytest.mark.parametrize(
    "argv, option, value",
    [
        (["--bases", "10000,-5"], "--bases", "10000,-5"),
        (["--bases", "0"], "--bases", "0"),
        (["--bases", "1"], "--bases", "1"),
        (["--bases", "nan"], "--bases", "nan"),
        (["--bases", "ten"], "--bases", "ten"),
        (["--bases", "10000,"], "--bases", "10000,"),
        (["--context", "0"], "--context", "0"),
        (["--context", "8192,-1"], "--context", "8192,-1"),
        (["--context", "1.5"], "--context", "1.5"),
        (["--head-dim", "7"], "--head-dim", "7"),
        (["--head-dim", "0"], "--head-dim", "0"),
    ],
)
def test_wavelengths_refuses_bad_options_in_one_sentence(capsys, argv, option, value):
    assert main(["wavelengths", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    error = captured.err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"poslab: {option} {value}: allowed ")


def test_wavelengths_accepts_good_options(capsys):
    assert main(["wavelengths", "--head-dim", "64", "--bases", "10000, 1.5", "--context", "1000,2000"]) == 0
    out = capsys.readouterr().out
    assert "base 1.5: " in out and "of 32 pairs never finish one turn within 1,000 positions" in out
