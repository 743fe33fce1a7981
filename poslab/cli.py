"""The poslab command (also `python -m poslab`): everything that is not training.

Every report and analysis prints its table first, then writes its files (tables, JSON, PNGs) into
--output-dir, by default beside what it read: RUN_DIR/analysis/<name>/ for one run, the first multirun
directory's analysis/<name>/ for several (analyze corpus: paths.log_dir/analysis/corpus/). Its last line
says where. Exit status: 0 done; 1 the report was printed but its files could not be written; 2 a bad
argument or a missing run (one message, no traceback). `poslab COMMAND --help` gives a command's options.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

from poslab.errors import MissingRunError, OutputNotWritableError, PoslabError, UsageError

# The analyses are imported inside their command's branch, not above: `poslab --help` and bad arguments
# answer without loading torch, Lightning and matplotlib.


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions keep their line breaks; an option's help ends with its default unless it says it already
    (an option whose default is None explains in its own words what it does without a value)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
            return text
        if isinstance(action, argparse._StoreTrueAction):
            return f"{text} (default: off)"
        return f"{text} (default: %(default)s)"


def _parser(commands: argparse._SubParsersAction, name: str, text: str) -> argparse.ArgumentParser:
    return commands.add_parser(name, help=text, description=text + ".", formatter_class=HelpFormatter)


def _add_output_dir(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--output-dir", default=None, metavar="DIR", help=f"where to write the files (default: {default})"
    )


def _add_claim(parser: argparse.ArgumentParser, figure: str, pairing: str, sides: str) -> None:
    parser.add_argument(
        "--claim",
        action="append",
        default=[],
        metavar="A<B",
        help=f"check that A's {figure} is lower than B's (A>B: higher) wherever both were scored: the paired "
        f"difference with its interval {pairing}, and its verdict (docs/verdicts.md); A and B as the rows are "
        f"named (rope), {sides}; repeatable",
    )


def _add_from(
    parser: argparse.ArgumentParser,
    summary: str,
    without: str = "the runs",
    merges: bool = False,
    files: str = "the tables and PNGs",
) -> None:
    """``--from SUMMARY``; ``merges``: several summaries (of runs analysed apart) make one report; ``files``: what
    the command writes (a report without figures says so)."""
    several = " (several: the report of all their runs, for --output-dir)" if merges else ""
    parser.add_argument(
        "--from",
        dest="from_summary",
        default=None,
        metavar="SUMMARY",
        **({"nargs": "+"} if merges else {}),
        help=f"re-render {files} from the {summary} this command wrote, without {without}{several} (default: compute)",
    )


def _compute_only(parser: argparse.ArgumentParser, *dests: str) -> None:
    """Mark options that only the computation reads: given with ``--from`` they would be silently ignored (the
    summary holds figures already computed), so ``_report_or_rerender`` refuses them instead."""
    flags = {a.dest: (a.option_strings[0], a.default) for a in parser._actions if a.dest in dests}
    missing = set(dests) - set(flags)
    if missing:
        raise ValueError(f"_compute_only: no option {sorted(missing)} on {parser.prog}")
    parser.set_defaults(compute_only=flags)


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command path below ``parser`` that runs something (``("analyze", "hrope")``, ``("encodings",)``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                if any(isinstance(a, argparse._SubParsersAction) for a in child._actions):
                    yield from subcommands(child, (*prefix, name))
                else:
                    yield (*prefix, name)


def command_parser(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> argparse.ArgumentParser:
    """The parser of the command ``path`` (as ``subcommands`` yields it)."""
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def _command_list(parser: argparse.ArgumentParser) -> str:
    """One line per command, its help text beside it: made from the parser, so no command is left out."""
    rows = []
    for path in subcommands(parser):
        child = command_parser(parser, path)
        parent = command_parser(parser, path[:-1])
        action = next(a for a in parent._actions if isinstance(a, argparse._SubParsersAction))
        help_text = next(c.help for c in action._choices_actions if c.dest == path[-1])
        positionals = " ".join(
            (a.metavar or a.dest.upper()) + (" ..." if a.nargs in ("+", "*") else "")
            for a in child._actions
            if not a.option_strings
        )
        rows.append((f"poslab {' '.join(path)} {positionals}".rstrip(), help_text))
    width = max(len(usage) for usage, _ in rows)
    return "\n".join(f"  {usage:<{width}s}  {text}" for usage, text in rows)


def _add_increments(analyses: argparse._SubParsersAction) -> None:
    """`poslab analyze increments`: a run analysed, or its summary rendered again (`--from`)."""
    increments = _parser(analyses, "increments", "learned position increments: byte categories, picture, word AUC")
    increments.add_argument(
        "run_dir", nargs="?", metavar="RUN_DIR", help="a finished train.py run directory (has model.pt)"
    )
    _add_from(increments, "increments_analysis.json", "a run or a model")
    increments.add_argument(
        "--text", default=None, metavar="FILE", help="text file for the category table (default: held-out data)"
    )
    increments.add_argument(
        "--sentence",
        action="append",
        default=None,
        help="a sentence to draw, repeatable (default: one English and one Chinese sentence)",
    )
    increments.add_argument(
        "--zh-text",
        default=None,
        metavar="FILE",
        help="Chinese text for the word-boundary AUC (default: the corpus's 'zh' group, if any)",
    )
    increments.add_argument("--max-bytes", type=int, default=200_000, help="held-out bytes to analyse")
    _add_output_dir(increments, "RUN_DIR/analysis/increments, or beside SUMMARY")
    _compute_only(increments, "text", "sentence", "zh_text", "max_bytes")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poslab", formatter_class=HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    report = _parser(commands, "report", "tables and plots from finished runs")
    _add_reports(report.add_subparsers(dest="report", required=True, metavar="REPORT"))
    analyze = _parser(commands, "analyze", "analyses of trained checkpoints and corpora")
    analyses = analyze.add_subparsers(dest="analysis", required=True, metavar="ANALYSIS")
    _add_increments(analyses)
    _add_corpus(analyses)
    _add_hrope(analyses)
    _add_wavelengths(commands)
    _parser(commands, "encodings", "the registered position encodings, their settings and defaults")
    runs = _parser(commands, "runs", "where the runs under a directory stand: finished, failed, or how far along")
    runs.add_argument("directory", metavar="DIR", help="a run or multirun directory (e.g. logs/multirun/lm_zoo)")
    runs.add_argument("--all", action="store_true", dest="every_run", help="list the finished runs too")
    parser.description = __doc__.split("\n\n", 1)[0] + "\n\ncommands:\n" + _command_list(parser)
    parser.epilog = __doc__.split("\n\n", 1)[1].strip()
    return parser


def _add_reports(reports: argparse._SubParsersAction) -> None:
    """``poslab report grid | zoo | length | losses``."""
    grid = _parser(reports, "grid", "the extrapolation grid of a multirun, in the where_am_i write-up's format")
    grid.add_argument(
        "directory", nargs="?", metavar="DIR", help="a multirun directory of train.py (e.g. logs/multirun/...)"
    )
    grid.add_argument(
        "--reference",
        default=None,
        help="'where_am_i' or a file of report lines, shown as a reference column (default: none)",
    )
    _add_from(grid, "grid.json")
    _compute_only(grid, "reference")  # a SUMMARY holds the reference it was made with
    _add_output_dir(grid, "DIR/analysis/grid, or beside SUMMARY")

    zoo = _parser(
        reports, "zoo", "the position zoo: every encoding on every synthetic task, ranked per task and overall"
    )
    zoo.add_argument("directory", metavar="DIR", help="the multirun directory of experiment=position_zoo")
    _add_claim(zoo, "accuracy", "over seeds, per task", "A<B@figure for another figure (read_error_pct_ffl0.98)")
    _add_output_dir(zoo, "DIR/analysis/zoo")

    smallest = _parser(
        reports, "smallest", "the smallest model (width or depth) that solves each diagnostic task, per encoding"
    )
    smallest.add_argument("directory", metavar="DIR", help="the multirun directory of experiment=diagnostic_tasks")
    _add_output_dir(smallest, "DIR/analysis/smallest")

    preregistered = _parser(
        reports, "preregistered", "the pre-registered claims' verdicts, each read at its one place, from two summaries"
    )
    preregistered.add_argument("length_json", metavar="LENGTH_JSON", help="length.json of report length --claim ...")
    preregistered.add_argument("zoo_json", metavar="ZOO_JSON", help="zoo.json of report zoo --claim ...")
    preregistered.add_argument(
        "--claims", default=None, metavar="FILE", help="the registry (default: docs/preregistered_claims.md)"
    )
    _add_output_dir(preregistered, "preregistered/ beside the registry")

    length = _parser(
        reports, "length", "language models by evaluation length: bits per byte, loss by position, passkey, ranked"
    )
    length.add_argument("directories", nargs="*", metavar="DIR", help="run or multirun directories of task=lm runs")
    _add_claim(
        length,
        "bits/byte",
        "over seeds and test documents",
        "or encoding/way (rope/test_yarn); A<B@ratio compares the ratio to 1x, B a row or a number (rope>1@ratio)",
    )
    _add_from(length, "length.json")
    _compute_only(length, "claim")  # a SUMMARY keeps the claims it was made with
    length.add_argument(
        "--rows",
        default=None,
        metavar="ENC,ENC",
        help="show only these encodings' rows (every way of each) in the tables and figures; needs --output-dir "
        "(default: every row)",
    )
    _add_output_dir(length, "the first directory's analysis/length, or beside SUMMARY")

    losses = _parser(reports, "losses", "validation loss and bits per byte of language-model runs side by side")
    losses.add_argument("directories", nargs="*", metavar="DIR", help="run or multirun directories")
    _add_from(losses, "losses.json", files="the tables (losses.md, losses.csv)")
    _add_output_dir(losses, "the first directory's analysis/losses, or beside SUMMARY")


def _add_corpus(analyses: argparse._SubParsersAction) -> None:
    """``poslab analyze corpus``."""
    corpus = _parser(analyses, "corpus", "corpus-only statistics (no model) against the U* ordering")
    corpus.add_argument("corpora", nargs="*", metavar="CORPUS", help="corpus config names (conf/corpus/) or paths")
    corpus.add_argument("--documents", type=int, default=200, help="documents per corpus (with 2+ paragraphs)")
    corpus.add_argument(
        "--split", default="validation", choices=("validation", "train", "all"), help="which documents to read"
    )
    corpus.add_argument(
        "--ustar",
        nargs="+",
        default=None,
        metavar="NAME=VALUE",
        help="U* per corpus to compare with; with --from, the summary's statistics compared again (default: the "
        "write-up's, or the summary's)",
    )
    corpus.add_argument("--no-embeddings", action="store_true", help="skip embedding coherence (no model load)")
    _add_from(corpus, "corpus_statistics.json", "the corpora or the embedder")
    _add_output_dir(corpus, "paths.log_dir/analysis/corpus, or beside SUMMARY")
    _compute_only(corpus, "documents", "split", "no_embeddings")


def _add_hrope(analyses: argparse._SubParsersAction) -> None:
    """``poslab analyze hrope``."""
    hrope = _parser(analyses, "hrope", "hRoPE: U* table, well curves, shuffle test, interventions")
    hrope.add_argument("runs", nargs="*", metavar="RUN_DIR", help="run directories, or multirun directories of them")
    hrope.add_argument("--documents", type=int, default=200, help="held-out documents per run")
    hrope.add_argument("--batch-size", type=int, default=8, help="documents per forward pass")
    hrope.add_argument(
        "--trend", choices=["linear", "log"], default="linear", help="distance trend fitted before the well"
    )
    hrope.add_argument("--max-displacement", type=int, default=16, help="largest paragraph displacement shown")
    hrope.add_argument("--min-pairs", type=int, default=200, help="pairs a displacement needs to count for U*")
    hrope.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples of documents")
    hrope.add_argument("--seed", type=int, default=0, help="seed of the shuffles and the bootstrap")
    hrope.add_argument(
        "--shuffle-all",
        action="store_true",
        help="shuffle every paragraph, the first and the truncated last too (default: only the whole paragraphs "
        "between them, the write-up's test)",
    )
    _add_from(hrope, "hrope.json", "the runs or a model", merges=True)
    _add_output_dir(hrope, "RUN_DIR/analysis/hrope, the first multirun directory's analysis/hrope, or beside SUMMARY")
    _compute_only(
        hrope, "documents", "batch_size", "trend", "max_displacement", "min_pairs", "bootstrap", "seed", "shuffle_all"
    )


def _add_wavelengths(commands: argparse._SubParsersAction) -> None:
    """``poslab wavelengths``."""
    waves = _parser(commands, "wavelengths", "RoPE wavelengths per pair, and the pairs that never turn in a context")
    waves.add_argument("--head-dim", type=int, default=128, help="head dimension (even: RoPE rotates pairs)")
    waves.add_argument("--bases", default="10000,500000", help="RoPE bases, comma-separated, each greater than 1")
    waves.add_argument("--context", default="8192,131072", help="context lengths, comma-separated, each positive")


def encoding_lines() -> list[str]:
    """One line per registered encoding: its summary, its settings with their defaults (its YAML's), and the
    attention paths it runs on (``sdpa`` and ``flex`` fused, ``explicit`` the scores materialised)."""
    from omegaconf import OmegaConf

    from poslab.encodings import ENCODINGS, length_setting_kinds
    from poslab.running.compose import compose_config

    lines = []
    for name, cls in sorted(ENCODINGS.items()):
        settings = OmegaConf.to_container(compose_config([f"encoding={name}"]).encoding, resolve=True)
        kinds = length_setting_kinds(cls)  # a length setting says what its null is filled with
        shown = ", ".join(
            f"{key}={_setting(value)}" + (f" ({kinds[key]})" if key in kinds else "")
            for key, value in settings.items()
            if key != "name"
        )
        paths = f" Paths: {', '.join(cls.attention_paths)}."  # model.attention options, the first the fastest
        lines.append(f"{name:18s} {cls.summary}" + (f" Settings: {shown}." if shown else " No settings.") + paths)
    return lines


def _setting(value: object) -> str:
    if value is None:
        return "auto"  # null in a YAML: filled in from the model or the corpus
    if isinstance(value, list):
        return "[" + ",".join(map(_setting, value)) + "]"
    return str(value)


def analysis_of(args: argparse.Namespace):
    """The ``AnalysisResult`` a report or analysis command asks for."""
    runs = "DIR (run or multirun directories)"
    if args.command == "report" and args.report == "grid":
        from poslab.analysis.grid_report import report_grid, rerender_grid

        inputs = [args.directory] if args.directory else []
        return _report_or_rerender(args, inputs, lambda: report_grid(args.directory, args.reference), rerender_grid,
                                   "DIR (a multirun directory)")  # fmt: skip
    if args.command == "report" and args.report == "zoo":
        from poslab.analysis.zoo_report import report_zoo

        return report_zoo(args.directory, args.claim)
    if args.command == "report" and args.report == "smallest":
        from poslab.analysis.smallest import report_smallest

        return report_smallest(args.directory)
    if args.command == "report" and args.report == "preregistered":
        from poslab.analysis.preregistered import report_preregistered

        return report_preregistered(args.length_json, args.zoo_json, args.claims)
    if args.command == "report" and args.report == "length":
        from poslab.analysis.length_report import report_length, rerender_length

        rows = [name.strip() for name in args.rows.split(",") if name.strip()] if args.rows else []
        if rows and args.output_dir is None:
            raise UsageError(
                f"poslab report length --rows {args.rows}: give --output-dir; the rows alone would overwrite the whole "
                f"report's files."
            )
        report = lambda: report_length(args.directories, args.claim, rows)  # noqa: E731
        return _report_or_rerender(args, args.directories, report, lambda path: rerender_length(path, rows), runs)
    if args.command == "report" and args.report == "losses":
        from poslab.analysis.losses_report import report_losses, rerender_losses

        return _report_or_rerender(args, args.directories, lambda: report_losses(args.directories), rerender_losses,
                                   runs)  # fmt: skip
    if args.analysis == "increments":
        return increments_analysis(args)
    if args.analysis == "corpus":
        return corpus_analysis(args)
    return hrope_analysis(args)


def increments_analysis(args: argparse.Namespace):
    """``analyze increments``: of RUN_DIR, or re-rendered ``--from`` a summary (no torch, no model)."""

    def analyze():
        from poslab.analysis.increments.compute import IncrementsOptions
        from poslab.analysis.increments.report import analyze_increments

        options = IncrementsOptions(
            text_file=args.text, sentences=args.sentence, zh_text_file=args.zh_text, max_bytes=args.max_bytes
        )
        return analyze_increments(args.run_dir, options)

    def rerender(summary: str):
        from poslab.analysis.increments.render import rerender_increments

        return rerender_increments(summary)

    inputs = [args.run_dir] if args.run_dir is not None else []
    return _report_or_rerender(args, inputs, analyze, rerender, "RUN_DIR (a finished run)")


def corpus_analysis(args: argparse.Namespace):
    from poslab.analysis.corpus_report import analyze_corpora, parse_ustar, rerender_corpora
    from poslab.analysis.corpus_statistics import CorpusOptions

    def analyze():
        ustar = parse_ustar(args.ustar)
        options = CorpusOptions(
            documents=args.documents, split=args.split, ustar=ustar, embeddings=not args.no_embeddings
        )
        return analyze_corpora(args.corpora, options)

    def rerender(summary: str):
        return rerender_corpora(summary, parse_ustar(args.ustar))

    return _report_or_rerender(args, args.corpora, analyze, rerender, "CORPUS (corpus names or paths of text)")


def hrope_analysis(args: argparse.Namespace):
    from poslab.analysis.hrope.report import analyze_hrope, rerender_hrope

    def analyze():
        return analyze_hrope(
            args.runs,
            documents=args.documents,
            batch_size=args.batch_size,
            trend=args.trend,
            max_displacement=args.max_displacement,
            min_pairs=args.min_pairs,
            bootstrap=args.bootstrap,
            seed=args.seed,
            keep_ends=not args.shuffle_all,
        )

    def rerender(paths: list[str]):
        if len(paths) > 1 and args.output_dir is None:
            raise UsageError(
                f"poslab analyze hrope --from {' '.join(paths)}: give --output-dir for the merged report; beside the "
                f"first summary it would overwrite that summary's files."
            )
        return rerender_hrope(paths)

    return _report_or_rerender(args, args.runs, analyze, rerender, "RUN_DIR (run or multirun directories)")


def _report_or_rerender(
    args: argparse.Namespace, inputs: list[str], report: Callable[[], Any], rerender: Callable, needs: str
):
    """A command with ``--from``: its files again from the SUMMARY it wrote (no runs, no model), or the report of
    ``inputs`` (``needs`` says what they are, for the message when none is given)."""
    command = f"poslab {args.command} {getattr(args, 'report', None) or args.analysis}"
    if args.from_summary is not None:
        if inputs:
            raise UsageError(f"{command}: give {needs.split()[0]} or --from SUMMARY, not both.")
        _refuse_compute_only(args, command, needs)
        return rerender(args.from_summary)
    if not inputs:
        raise MissingRunError(f"{command} needs {needs} or --from SUMMARY.")
    return report()


def _refuse_compute_only(args: argparse.Namespace, command: str, needs: str) -> None:
    """With ``--from``: refuse the options marked ``_compute_only`` that differ from their defaults."""
    marked = getattr(args, "compute_only", {})
    given = [flag for dest, (flag, default) in marked.items() if getattr(args, dest) != default]
    if not given:
        return
    names, one = ", ".join(given), len(given) == 1
    raise UsageError(
        f"{command} --from: {names} {'sets' if one else 'set'} how the figures are computed, and a SUMMARY holds "
        f"figures already computed (with the settings it records), so {'it' if one else 'they'} would be ignored. "
        f"Drop {names} to draw the summary again, or give {needs} instead of --from to compute with "
        f"{'it' if one else 'them'}."
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command in ("report", "analyze"):
            result = analysis_of(args)
            print(result.report, flush=True)  # before any file: a read-only run directory still gives the report
            directory, lines = result.write(args.output_dir)
            for line in lines:
                print(line)
            print(result.written_line(directory))
        elif args.command == "wavelengths":
            from poslab.analysis.wavelengths import check_head_dim, parse_bases, parse_contexts, wavelength_table

            head_dim, bases, contexts = (
                check_head_dim(args.head_dim),
                parse_bases(args.bases),
                parse_contexts(args.context),
            )
            print(wavelength_table(head_dim, bases, contexts))
        elif args.command == "encodings":
            print("\n".join(encoding_lines()))
        elif args.command == "runs":
            from poslab.analysis.overview import runs_overview

            print(runs_overview(args.directory, args.every_run))
    except OutputNotWritableError as error:
        print(f"poslab: {error}", file=sys.stderr)
        return 1
    except PoslabError as error:  # poslab's own errors only: anything else is a bug and keeps its traceback
        print(f"poslab: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
