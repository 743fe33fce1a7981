"""The ``poslab`` command: everything that is not training.

poslab report grid DIR [--reference where_am_i] [--plot FILE]
poslab analyze hrope RUN_DIR... [--documents 200] [--out DIR]
poslab analyze corpus CORPUS... [--documents 200] [--split all]
poslab wavelengths --head-dim 128 --bases 10000,500000 --context 8192,131072
poslab encodings
"""

from __future__ import annotations

import argparse
import sys


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x]


def _ints(text: str) -> list[int]:
    return [int(float(x)) for x in text.split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="poslab", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    report = commands.add_parser("report", help="tables and plots from finished runs")
    reports = report.add_subparsers(dest="report", required=True)
    grid = reports.add_parser("grid", help="the extrapolation grid of a multirun directory")
    grid.add_argument("directory", help="a multirun directory of train.py (e.g. logs/multirun/...)")
    grid.add_argument("--reference", default=None, help="'where_am_i' or a file of report lines to compare with")
    grid.add_argument("--plot", default=None, help="PNG path (default: DIR/extrapolation_grid.png)")

    losses = reports.add_parser("losses", help="validation loss and bits per byte of language-model runs")
    losses.add_argument("directories", nargs="+", help="run or multirun directories")

    analyze = commands.add_parser("analyze", help="analyses of trained checkpoints")
    analyses = analyze.add_subparsers(dest="analysis", required=True)
    increments = analyses.add_parser("increments", help="learned position increments: categories, picture, AUC")
    increments.add_argument("run_dir", help="a finished train.py run directory (has model.pt)")
    increments.add_argument("--text", default=None, help="text file for the category table (default: held-out data)")
    increments.add_argument("--sentence", action="append", default=None, help="sentence(s) to draw (repeatable)")
    increments.add_argument("--zh-text", default=None, help="Chinese text for the word-boundary AUC")
    increments.add_argument("--max-bytes", type=int, default=200_000, help="held-out bytes to analyse")
    increments.add_argument("--output-dir", default=None, help="where to write (default: RUN_DIR)")
    corpus = analyses.add_parser("corpus", help="corpus-only statistics (no model) against the U* ordering")
    corpus.add_argument("corpora", nargs="+", metavar="CORPUS", help="corpus config names (conf/corpus/)")
    corpus.add_argument("--documents", type=int, default=200, help="documents per corpus (with 2+ paragraphs)")
    corpus.add_argument("--split", default="validation", choices=("validation", "train", "all"))
    corpus.add_argument("--ustar", nargs="+", default=None, metavar="NAME=VALUE", help="default: the write-up's")
    corpus.add_argument("--out", default=None, help="where to write (default: paths.log_dir/corpus_statistics)")
    corpus.add_argument("--no-embeddings", action="store_true", help="skip embedding coherence (no model load)")

    hrope = analyses.add_parser("hrope", help="hRoPE: U* table, well curves, shuffle test, interventions")
    hrope.add_argument("runs", nargs="+", help="run directories, or multirun directories holding them")
    hrope.add_argument("--out", default="hrope_analysis", help="output directory (default: ./hrope_analysis)")
    hrope.add_argument("--documents", type=int, default=200, help="held-out documents per run (default 200)")
    hrope.add_argument("--batch-size", type=int, default=8, help="documents per forward pass")
    hrope.add_argument("--trend", choices=["linear", "log"], default="linear", help="distance trend (see docs)")
    hrope.add_argument("--max-displacement", type=int, default=16, help="largest paragraph displacement shown")
    hrope.add_argument("--min-pairs", type=int, default=200, help="pairs a displacement needs to count for U*")
    hrope.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples of documents")
    hrope.add_argument("--seed", type=int, default=0, help="seed of the shuffles and the bootstrap")

    waves = commands.add_parser("wavelengths", help="RoPE wavelength table")
    waves.add_argument("--head-dim", type=int, default=128)
    waves.add_argument("--bases", type=_floats, default=[10_000.0, 500_000.0])
    waves.add_argument("--context", type=_ints, default=[8192, 131_072])

    commands.add_parser("encodings", help="list the registered position encodings")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "report" and args.report == "grid":
            from poslab.analysis.extrapolation import report_grid

            print(report_grid(args.directory, args.reference, args.plot))
        elif args.command == "report" and args.report == "losses":
            from poslab.analysis.losses import report_losses

            print(report_losses(args.directories))
        elif args.command == "analyze" and args.analysis == "increments":
            from poslab.analysis.increments_report import analyze_increments

            print(
                analyze_increments(
                    args.run_dir, args.text, args.sentence, args.zh_text, args.max_bytes, args.output_dir
                )
            )
        elif args.command == "analyze" and args.analysis == "corpus":
            from poslab.analysis.corpus_statistics import analyze_corpora, parse_ustar

            ustar = parse_ustar(args.ustar)
            print(analyze_corpora(args.corpora, args.documents, args.split, ustar, args.out, not args.no_embeddings))
        elif args.command == "analyze" and args.analysis == "hrope":
            from poslab.analysis.hrope_report import analyze_hrope

            print(
                analyze_hrope(
                    args.runs,
                    args.out,
                    documents=args.documents,
                    batch_size=args.batch_size,
                    trend=args.trend,
                    max_displacement=args.max_displacement,
                    min_pairs=args.min_pairs,
                    replicates=args.bootstrap,
                    seed=args.seed,
                )
            )
        elif args.command == "wavelengths":
            from poslab.analysis.wavelengths import wavelength_table

            if args.head_dim < 2 or args.head_dim % 2:
                raise ValueError(f"--head-dim {args.head_dim} must be a positive even number (RoPE rotates pairs).")
            print(wavelength_table(args.head_dim, args.bases, args.context))
        elif args.command == "encodings":
            from poslab.encodings import ENCODINGS

            for name, cls in sorted(ENCODINGS.items()):
                print(f"{name:20s} {(cls.__doc__ or '').strip().splitlines()[0] if cls.__doc__ else ''}")
    except (FileNotFoundError, ValueError) as error:  # ConfigError is a ValueError
        print(f"poslab: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
