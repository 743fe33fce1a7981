"""``poslab analyze corpus CORPUS...``: the corpora read and measured (``poslab.analysis.corpus_statistics``), then
drawn (``poslab.analysis.corpus_render``) into ``--output-dir`` (default: ``paths.log_dir/analysis/corpus/``):
``corpus_statistics.md`` (printed too), ``.csv``, ``.json`` (the summary) and ``.png``. ``--from
corpus_statistics.json`` renders the same files again from the summary alone (no corpus, no embedder), beside it
by default. The summary now also holds ``corpora`` (their order), ``ustar_source`` and ``embeddings``, which the
report's lines need."""

from __future__ import annotations

from pathlib import Path

from poslab.analysis.corpus_render import render_corpora
from poslab.analysis.corpus_statistics import (
    SUMMARY_FILE,
    CorpusOptions,
    compare_to_ustar,
    corpus_summary,
    no_nan,
    reference_ustar,
)
from poslab.analysis.output import AnalysisResult, read_summary
from poslab.errors import ConfigError
from poslab.io import number_or_nan


def analyze_corpora(corpora: list[str], options: CorpusOptions) -> AnalysisResult:
    """Statistics per corpus and their agreement with U*: the report, and its files for
    ``paths.log_dir/analysis/corpus/`` (or ``--output-dir``)."""
    return render_corpora(*corpus_summary(corpora, options))


def rerender_corpora(path: str | Path, ustar: dict[str, float] | None = None) -> AnalysisResult:
    """``--from``: the files again from a ``corpus_statistics.json`` this analysis wrote; with ``ustar``
    (``--ustar``) its statistics compared with that U* instead of the one it was written with. The comparison is
    made again from the summary's statistics and differences either way (they do not depend on U*, so nothing is
    read from the corpora): a summary written before the rows held their verdict gets today's rows, and one written
    before the intervals over documents its point readings only."""
    needed = ("rows", "corpora", "ustar_source", "embeddings")  # one written before --from lacks the last three
    summary = read_summary(path, "corpus", needed, SUMMARY_FILE, "poslab analyze corpus")
    if ustar is not None:
        ustar, source = reference_ustar(summary["corpora"], ustar)
        summary |= {"ustar": ustar, "ustar_source": source}
    stats = {  # the summary writes a quantity not computed (NaN) as null
        corpus: {name: number_or_nan(value) for name, value in values.items()}
        for corpus, values in summary["statistics"].items()
    }
    summary["rows"] = compare_to_ustar(stats, summary["ustar"], summary.get("differences"))
    return render_corpora(no_nan(summary), Path(path).parent)


def parse_ustar(items: list[str] | None) -> dict[str, float] | None:
    """``["python_code=-0.77", ...]`` (``--ustar NAME=VALUE``) as a dict; None when none were given."""
    if not items:
        return None
    ustar = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            ustar[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ConfigError(f"--ustar {item!r} is not NAME=VALUE with a number (e.g. --ustar python_code=-0.77).")
    return ustar
