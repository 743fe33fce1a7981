"""The poslab command (also `python -m poslab`): everything that is not training.

poslab report grid DIR [--reference where_am_i]              the extrapolation grid of a multirun
poslab report losses DIR [DIR ...]                           validation loss and bits/byte side by side
poslab analyze increments RUN_DIR [--zh-text FILE] ...       learned increments: categories, picture, AUC
poslab analyze hrope RUN_DIR|MULTIRUN_DIR ... [--documents]  hRoPE: U* table, wells, shuffle test
poslab analyze corpus CORPUS ... [--documents] [--split]     corpus-only statistics against U*
poslab wavelengths --head-dim 128 --bases 10000,500000 --context 8192,131072
poslab encodings                                             the registered position encodings

Every report and analysis prints its table first, then writes its files (tables, JSON, PNGs) into
--output-dir, by default beside what it read: RUN_DIR/analysis/<name>/ for one run, the first multirun
directory's analysis/<name>/ for several (analyze corpus: paths.log_dir/analysis/corpus/). Its last line
says where. Exit status: 0 done; 1 the report was printed but its files could not be written; 2 a bad
argument or a missing run (one message, no traceback).
"""

from __future__ import annotations

import argparse
import sys

from poslab.errors import OutputNotWritableError, PoslabError, UsageError

# The analyses are imported inside their command's branch, not above: `poslab --help`, `poslab encodings`
# and bad arguments answer without loading torch, Lightning and matplotlib.


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def _add_output_dir(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--output-dir", default=None, metavar="DIR", help=f"where to write the files (default: {default})"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poslab", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="tables and plots from finished runs")
    reports = report.add_subparsers(dest="report", required=True)
    grid = reports.add_parser("grid", help="the extrapolation grid of a multirun directory")
    grid.add_argument("directory", help="a multirun directory of train.py (e.g. logs/multirun/...)")
    grid.add_argument("--reference", default=None, help="'where_am_i' or a file of report lines to compare with")
    _add_output_dir(grid, "DIR/analysis/grid")

    losses = reports.add_parser("losses", help="validation loss and bits per byte of language-model runs")
    losses.add_argument("directories", nargs="+", help="run or multirun directories")
    _add_output_dir(losses, "the first directory's analysis/losses")

    analyze = commands.add_parser("analyze", help="analyses of trained checkpoints")
    analyses = analyze.add_subparsers(dest="analysis", required=True)
    increments = analyses.add_parser("increments", help="learned position increments: categories, picture, AUC")
    increments.add_argument("run_dir", help="a finished train.py run directory (has model.pt)")
    increments.add_argument("--text", default=None, help="text file for the category table (default: held-out data)")
    increments.add_argument("--sentence", action="append", default=None, help="sentence(s) to draw (repeatable)")
    increments.add_argument("--zh-text", default=None, help="Chinese text for the word-boundary AUC")
    increments.add_argument("--max-bytes", type=int, default=200_000, help="held-out bytes to analyse")
    _add_output_dir(increments, "RUN_DIR/analysis/increments")

    corpus = analyses.add_parser("corpus", help="corpus-only statistics (no model) against the U* ordering")
    corpus.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus config names (conf/corpus/)")
    corpus.add_argument("--documents", type=int, default=200, help="documents per corpus (with 2+ paragraphs)")
    corpus.add_argument("--split", default="validation", choices=("validation", "train", "all"))
    corpus.add_argument("--ustar", nargs="+", default=None, metavar="NAME=VALUE", help="default: the write-up's")
    corpus.add_argument("--no-embeddings", action="store_true", help="skip embedding coherence (no model load)")
    _add_output_dir(corpus, "paths.log_dir/analysis/corpus")

    hrope = analyses.add_parser("hrope", help="hRoPE: U* table, well curves, shuffle test, interventions")
    hrope.add_argument("runs", nargs="+", help="run directories, or multirun directories holding them")
    hrope.add_argument("--documents", type=int, default=200, help="held-out documents per run (default 200)")
    hrope.add_argument("--batch-size", type=int, default=8, help="documents per forward pass")
    hrope.add_argument("--trend", choices=["linear", "log"], default="linear", help="distance trend (see docs)")
    hrope.add_argument("--max-displacement", type=int, default=16, help="largest paragraph displacement shown")
    hrope.add_argument("--min-pairs", type=int, default=200, help="pairs a displacement needs to count for U*")
    hrope.add_argument(
        "--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples of documents (default 1000)"
    )
    hrope.add_argument("--seed", type=int, default=0, help="seed of the shuffles and the bootstrap")
    _add_output_dir(hrope, "RUN_DIR/analysis/hrope, or the first multirun directory's analysis/hrope")

    waves = commands.add_parser("wavelengths", help="RoPE wavelength table")
    waves.add_argument("--head-dim", type=int, default=128)
    waves.add_argument("--bases", type=_floats, default=[10_000.0, 500_000.0])
    waves.add_argument("--context", type=_ints, default=[8192, 131_072])

    commands.add_parser("encodings", help="list the registered position encodings")
    return parser


def analysis_of(args: argparse.Namespace):
    """The ``AnalysisResult`` a report or analysis command asks for."""
    if args.command == "report" and args.report == "grid":
        from poslab.analysis.extrapolation import report_grid

        return report_grid(args.directory, args.reference)
    if args.command == "report" and args.report == "losses":
        from poslab.analysis.losses import report_losses

        return report_losses(args.directories)
    if args.analysis == "increments":
        from poslab.analysis.increments_report import analyze_increments

        return analyze_increments(args.run_dir, args.text, args.sentence, args.zh_text, args.max_bytes)
    if args.analysis == "corpus":
        from poslab.analysis.corpus_statistics import analyze_corpora, parse_ustar

        return analyze_corpora(
            args.corpora, args.documents, args.split, parse_ustar(args.ustar), embeddings=not args.no_embeddings
        )
    from poslab.analysis.hrope_report import analyze_hrope

    return analyze_hrope(
        args.runs,
        documents=args.documents,
        batch_size=args.batch_size,
        trend=args.trend,
        max_displacement=args.max_displacement,
        min_pairs=args.min_pairs,
        bootstrap=args.bootstrap,
        seed=args.seed,
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
            from poslab.analysis.wavelengths import wavelength_table

            if args.head_dim < 2 or args.head_dim % 2:
                raise UsageError(f"--head-dim {args.head_dim} must be a positive even number (RoPE rotates pairs).")
            print(wavelength_table(args.head_dim, args.bases, args.context))
        elif args.command == "encodings":
            from poslab.encodings import ENCODINGS

            for name, cls in sorted(ENCODINGS.items()):
                print(f"{name:20s} {(cls.__doc__ or '').strip().splitlines()[0] if cls.__doc__ else ''}")
    except OutputNotWritableError as error:
        print(f"poslab: {error}", file=sys.stderr)
        return 1
    except PoslabError as error:  # poslab's own errors only: anything else is a bug and keeps its traceback
        print(f"poslab: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
