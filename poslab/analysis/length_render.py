"""Rendering of the length report (``poslab.analysis.length``): markdown tables, the CSV and the PNGs from the
summary (``length.json``) alone: no runs, no model, so ``poslab report length --from length.json`` re-renders."""

from __future__ import annotations

from collections import Counter
from typing import Any

from poslab.analysis.plotting import length_axis, plain_number, plt, powers_of_two
from poslab.analysis.stats import Interval, rank_cell
from poslab.analysis.tables import csv_text, markdown_table


def multiples_of(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({m for row in rows for m in row["bpb"]}, key=lambda m: float(m.removesuffix("x")))


def interval_cells(figures: dict[str, Any], multiples: list[str]) -> list[str]:
    """A row's cells at ``multiples``: seed mean [95% t-interval], empty where the row was not evaluated."""
    return [Interval.from_dict(figures[m]).cell() if m in figures else "" for m in multiples]


def _shown(value: Any) -> str:
    """A sample figure: ``1,234``, several values ``2 / 3`` where runs differ, ``not recorded`` where none has it."""
    if value is None or value == []:
        return "not recorded"
    values = value if isinstance(value, list) else [value]
    return " / ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in values)


def _documents(value: Any) -> str:
    """``1 document``, ``2 / 3 documents`` (``_shown``'s figure with its noun: singular only for one)."""
    shown = _shown(value)
    return shown if shown == "not recorded" else f"{shown} document{'' if shown == '1' else 's'}"


def sample_line(summary: dict[str, Any]) -> str:
    """What the corpus's figures rest on (``length.sample_summary``): the held-out sample, stride, steps, seeds and
    hosts, one sentence; an older summary without it says so."""
    sample = summary.get("sample")
    if not sample:
        return "Sample: not recorded in this summary."
    windows = "non-overlapping windows"
    if sample["stride"] is not None:
        windows += f" (sliding rows: stride {_shown(sample['stride'])})"
    seeds, hosts = sample["seeds"], ", ".join(sample["hosts"])
    split = ""
    if sample.get("test_documents") is not None:  # runs that split their held-out documents (issue 37)
        split = (
            f"; of them the test split {_documents(sample['test_documents'])} ({_shown(sample['test_bytes'])} "
            f"bytes) and the selection split {_documents(sample.get('selection_documents'))} "
            f"({_shown(sample.get('selection_bytes'))} bytes), which chooses the test-time way"
        )
    host = (
        f"hosts mixed: {hosts} (bf16 kernels differ in their last digits)"
        if sample["mixed_hosts"]
        else f"host: {hosts}"
    )
    return (
        f"Sample at the training length: held-out documents {_shown(sample['documents'])}, tokens "
        f"{_shown(sample['tokens'])} (bytes {_shown(sample['bytes'])}), the same at every length, in {windows}{split}; "
        f"training steps {_shown(sample['steps'])}; seeds {', '.join(map(str, seeds))} ({len(seeds)}); {host}."
    )


#: the effective-context-length column (poslab/analysis/effective_length.py): tokens, mean over seeds [95%]
EFFECTIVE = "effective length (bpb <= 1.05x 1x's)"


def place_cell(row: dict[str, Any], methods: int | None = None) -> str:
    """``3 [2-5]``: the rank and its interval (from paired differences: it always holds the rank); ``-`` for a row
    that is not ranked (a test-time variant); ``1 [only row]`` where ``methods`` (the rows ranked with it) is 1."""
    if row.get("rank") is None:
        return "-"
    interval = row.get("rank_interval")
    return rank_cell(row["rank"], *interval, methods=methods) if interval else f"{row['rank']}"


def rank_note(rows: list[dict[str, Any]]) -> str:
    """What a rank interval covers, and over what (``length.rank_rows``: a row's ``rank_over``)."""
    seeds_only = [row["name"] for row in rows if row.get("rank_over") == "seeds"]
    over = "seeds and held-out documents" if not seeds_only else (
        f"seeds alone for {', '.join(seeds_only)} (no per-document sums recorded), seeds and documents for the rest"
        if len(seeds_only) < sum(row.get("rank") is not None for row in rows) else "seeds alone (no per-document sums)"
    )  # fmt: skip
    return (
        f"A rank's interval holds that row's place with 95% confidence (its paired differences with every other row "
        f"of its class, Bonferroni over them; over {over}); it is not a statement about every place at once."
    )


def _stride_key(row: dict[str, Any]) -> Any:
    return row.get("stride") if row["way"] == "sliding" else None


def bpb_table(corpus: str, summary: dict[str, Any], ranked: list[int]) -> str:
    """Bits per byte by multiple (seed mean [95% t-interval]), the score over the multiples every row shares, and
    the rank with its interval among the rows of the same stride, best first."""
    rows, multiples = summary["rows"], multiples_of(summary["rows"])
    shared = summary.get("score_multiples", ranked)
    score_header = f"score: mean of {', '.join(f'{m}x' for m in shared)}" if shared else "score: no multiple shared"
    header = ["rank [95%]", "encoding", "stride", *multiples, score_header, EFFECTIVE, "seeds"]
    table = []
    ranked_by_stride = Counter(_stride_key(row) for row in rows if row.get("rank") is not None)
    for row in rows:
        stride = "" if row["way"] != "sliding" else str(row.get("stride"))
        methods = ranked_by_stride[_stride_key(row)]  # rows are ranked among those of their stride
        score = Interval.from_dict(row["score"]).cell()
        effective = "" if not row.get("effective_length") else Interval.from_dict(row["effective_length"]).cell(0)
        cells = [*interval_cells(row["bpb"], multiples), score, effective, row["seeds"]]
        # a chosen row's figures are on the test documents, the others' on the whole held-out sample: said in the
        # row itself, as the two sit side by side and differ by their documents as well as their way
        name = f"{row['name']}, test documents only" if row.get("chosen_ways") else row["name"]
        table.append([place_cell(row, methods), name, stride, *cells])
    groups = summary["not_separated"]
    shown = "; ".join(", ".join(group) for group in groups) if groups else "none (every place separated)"
    title = f"### {corpus}: bits per byte (trained at {summary['train_length']} tokens; lower is better)"
    ranks = (
        "Ranks are among the encodings' plain models, and apart among sliding rows of one stride; test-time "
        "variants (log scaling, RoPE's rules) are shown, not ranked (picking the best of them on these figures "
        f"would be a choice made on test). Not separated by the rank intervals: {shown}. {rank_note(rows)}"
    )
    if any(row.get("chosen_ways") for row in rows):
        ranks += (
            " A 'chosen on selection' row is each seed's way chosen on the selection documents (named in brackets),"
            " its figures on the test documents only; the other rows are on the whole held-out sample, so a chosen"
            " row is compared with its plain model in the test documents' table below, not in this one."
        )
    mixed = [row["name"] for row in rows if len(row.get("hosts") or []) > 1]
    if mixed:  # the sample line says the corpus mixes hosts; this says which rows' seeds do
        named = "every row" if len(mixed) == len(rows) else ", ".join(mixed)
        ranks += f" Rows whose seeds ran on different hosts ('unknown': a run that recorded none): {named}."
    return "\n".join([title, "", sample_line(summary), "", markdown_table(header, table), "", ranks])


#: a row's figures on the test documents (``length.row_summary``): the key and what its table's title calls it
DOCUMENT_FIGURES = {"bpb_documents": "bits per byte", "ratio_documents": "ratio to the plain model's 1x bits per byte"}


def documents_table(corpus: str, summary: dict[str, Any], key: str = "bpb_documents") -> str:
    """A figure on the test documents with the interval over seeds *and* documents (``crossed_interval``), for the
    rows whose runs recorded per-document sums; empty when none did (runs before issue 37). ``key``: bits per byte,
    or its ratio to the plain model's 1x (``ratio_documents``, past the context)."""
    rows = [row for row in summary["rows"] if row.get(key)]
    if not rows:
        return ""
    multiples = multiples_of([{"bpb": row[key]} for row in rows])
    digits = 4 if key == "ratio_documents" else 3  # a ratio near 1 needs its bounds' third place
    cells = lambda row: [Interval.from_dict(row[key][m]).cell(digits) if m in row[key] else ""  # noqa: E731
                         for m in multiples]  # fmt: skip
    first = next(iter(rows[0][key].values()))
    title = (
        f"### {corpus}: {DOCUMENT_FIGURES[key]} on the test documents ({first['documents']} documents), 95% "
        "interval over seeds and documents (stats.crossed_interval)"
    )
    return "\n".join(
        [title, "", markdown_table(["encoding", *multiples], [[row["name"], *cells(row)] for row in rows])]
    )


def ratio_table(corpus: str, summary: dict[str, Any]) -> str:
    """Each row's bits per byte over its encoding's plain model at 1x, per seed then over seeds."""
    rows, multiples = summary["rows"], multiples_of(summary["rows"])
    table = [[row["name"], *interval_cells(row["ratio_to_1x"], multiples)] for row in rows]
    title = f"### {corpus}: ratio to the plain model's 1x bits per byte"
    return "\n".join([title, "", markdown_table(["encoding", *multiples], table)])


def passkey_table(corpus: str, summary: dict[str, Any]) -> str:
    """Per encoding, passkey exact match averaged over depths at each distance (seed means; chance beside). The
    columns are distances in multiples of the corpus's training length, the union over the grids (an extension's
    grid, at its own context, has other ones): a grid's cell sits under its own distance, blank where it has none.
    A grid that is 0 everywhere is said to be."""
    grids = summary["passkey"]
    if not grids:
        return ""
    train = summary["train_length"]
    columns = sorted({d / train for grid in grids.values() for d in grid["distances"]})
    header = ["encoding", *(f"{m:g}x" for m in columns), "seeds", "note"]
    table = []
    for encoding, grid in grids.items():
        by_distance = {d / train: sum(row) / len(row) for d, row in zip(grid["distances"], grid["exact"])}
        cells = [f"{by_distance[m]:.2f}" if m in by_distance else "" for m in columns]
        note = "0 at every distance and depth" if not any(any(row) for row in grid["exact"]) else ""
        table.append([encoding, *cells, grid["seeds"], note])
    first = next(iter(grids.values()))
    title = f"### {corpus}: passkey exact match by distance (mean over depths; chance {first['chance_exact']:g})"
    return "\n".join([title, "", markdown_table(header, table)])


def extension_table(corpus: str, summary: dict[str, Any]) -> str:
    """Each context extension's bits per byte beside its parent under the same rule at test time only."""
    comparisons = summary.get("extensions") or []
    if not comparisons:
        return ""
    multiples = multiples_of([{"bpb": {**c["bpb_extension"], **c["bpb_test_time"]}} for c in comparisons])
    table = [
        [c["rule"], name, *interval_cells(bpb, multiples)]
        for c in comparisons
        for name, bpb in ((c["extension"], c["bpb_extension"]), (c["test_time"], c["bpb_test_time"]))
    ]
    title = f"### {corpus}: context extension (fine-tuned) against the same rule at test time only"
    return "\n".join([title, "", markdown_table(["rule", "run", *multiples], table)])


def claims_table(corpus: str, summary: dict[str, Any]) -> str:
    """Each ``--claim``: A - B bits/byte at every multiple both have, its paired interval and its verdict."""
    claims = summary.get("claims") or []
    if not claims:
        return ""
    table = []
    for claim in claims:
        if claim["missing"]:
            table.append([claim["claim"], "", "no runs of " + ", ".join(claim["missing"]), "", "", "not testable"])
        for multiple, cell in claim["by_multiple"].items():
            documents = "" if cell["documents"] is None else f"{cell['documents']:,}"
            digits = 4 if claim.get("figure") == "ratio to 1x" else 3  # a ratio's rise can be a few thousandths
            difference = Interval.from_dict(cell).cell(digits)
            table.append([claim["claim"], multiple, difference, str(cell["n"]), documents, cell["verdict"]])
    figures = "A - B bits/byte, or with @ratio of the ratio to 1x"
    title = f"### {corpus}: claims ({figures}; paired; verdicts as docs/verdicts.md)"
    header = ["claim", "multiple", "A - B [95%]", "seeds", "documents", "verdict"]
    note = (
        "Paired on the seeds both have and, where the runs recorded their test documents, on those documents "
        "(a crossed interval); one seed has no interval, so its verdict is not testable."
    )
    return "\n".join([title, "", markdown_table(header, table), "", note])


def cost_table(corpus: str, summary: dict[str, Any]) -> str:
    """Seconds of training and of the evaluation after it per encoding, and the evaluation's share of the run."""
    costs = summary.get("cost") or {}
    if not costs:
        return ""
    header = ["encoding", "training", "evaluation after training", "of it: passkey", "evaluation share", "seeds"]
    table = []
    for encoding, c in costs.items():
        if c["train_seconds"] is None:  # every run resumed
            table.append([encoding, "-", "-", "", "-", f"0 ({c['resumed']} resumed, left out)"])
            continue
        passkey = "" if c.get("passkey_seconds") is None else f"{c['passkey_seconds']:.1f}"
        cells = [f"{c['train_seconds']:.1f}", f"{c['test_seconds']:.1f}", passkey, f"{c['evaluation_share']:.1%}"]
        seeds = f"{c['seeds']} ({c['resumed']} resumed, left out)" if c.get("resumed") else c["seeds"]
        table.append([encoding, *cells, seeds])
    lines = [f"### {corpus}: cost (seconds, mean over seeds)", "", markdown_table(header, table)]
    if any(c.get("resumed") for c in costs.values()):
        lines += ["", "A resumed run's training was timed in parts (its last process's only): left out of the means."]
    return "\n".join(lines)


def length_markdown(summary: dict[str, Any]) -> str:
    ranked = summary["ranked_multiples"]
    parts = []
    for corpus, part in summary["corpora"].items():
        parts += [bpb_table(corpus, part, ranked)]
        parts += [table for table in (documents_table(corpus, part, key) for key in DOCUMENT_FIGURES) if table]
        parts += [ratio_table(corpus, part)]
        tables = [extension_table(corpus, part), claims_table(corpus, part), passkey_table(corpus, part)]
        tables.append(cost_table(corpus, part))
        parts += [table for table in tables if table]
    notes = summary.get("notes") or []
    return "\n\n".join(parts + (["\n".join(notes)] if notes else []))


def length_csv(summary: dict[str, Any]) -> str:
    """One line per corpus, row and multiple: bits per byte and the ratio to 1x with their intervals, the score."""
    stats = ("mean", "low", "high")
    header = ["corpus", "row", "encoding", "way", "stride", "multiple", "seeds", *(f"bpb_{s}" for s in stats),
              *(f"ratio_{s}" for s in stats), "score_mean", "rank"]  # fmt: skip
    rows = [
        [corpus, row["name"], row["encoding"], row["way"], row.get("stride"), multiple, bpb["n"],
         *(bpb[s] for s in stats), *(row["ratio_to_1x"][multiple][s] for s in stats), row["score"]["mean"],
         row["rank"]]
        for corpus, part in summary["corpora"].items()
        for row in part["rows"]
        for multiple, bpb in row["bpb"].items()
    ]  # fmt: skip
    return csv_text(header, rows)


def _panels(count: int, lines: int, width: float = 4.2) -> tuple[Any, list[Any]]:
    """A row of ``count`` panels, tall enough for one legend of ``lines`` entries beside them (``_legend``)."""
    height = max(3.2, 0.15 * lines + 1.0)
    fig, axes = plt.subplots(1, count, figsize=(width * count + 2.6, height), squeeze=False, layout="constrained")
    return fig, list(axes[0])


def _legend(fig: Any, axes: list[Any]) -> None:
    """One legend for every panel, right of them (a whole zoo's 21 lines would cover a panel's curves)."""
    labels: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            labels.setdefault(label, handle)
    fig.legend(labels.values(), labels.keys(), loc="outside right upper", fontsize=6)


def line_style(i: int) -> dict[str, Any]:
    """The i-th line's colour and dash: ten distinct hues, then the same hues dashed, then dotted, so 21 encodings
    give 21 lines a reader can tell apart (tab20's paired shades are near-twins, and its 21st repeats the 1st)."""
    return {"color": f"C{i % 10}", "ls": ("-", "--", ":")[(i // 10) % 3]}


def seeds_text(summary_part: dict[str, Any], counts: set[int]) -> str:
    """``mean of seeds 0, 1, 2`` from the corpus's sample (``sample_line``), or of ``counts`` seeds where the
    summary has no sample (``3 seeds``, ``1-3 seeds`` where encodings differ)."""
    seeds = (summary_part.get("sample") or {}).get("seeds")
    if seeds:
        return f"mean of seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else f"seed {seeds[0]}"
    low, high = min(counts, default=0), max(counts, default=0)
    return f"mean of {low} seeds" if low == high else f"mean of {low}-{high} seeds"


def plot_bpb(summary: dict[str, Any]) -> Any:
    """Bits per byte by evaluation length, one panel per corpus, a line per plain encoding (seed means, the
    t-interval shaded), the training length marked; each panel titled with its seeds and held-out sample, the
    lengths ticked in plain numbers."""
    lines = max(sum(row["way"] == "plain" for row in part["rows"]) for part in summary["corpora"].values())
    fig, axes = _panels(len(summary["corpora"]), lines)
    for ax, (corpus, part) in zip(axes, summary["corpora"].items()):
        train = part["train_length"]
        plain = sorted((row for row in part["rows"] if row["way"] == "plain"), key=lambda row: row["name"])
        drawn: set[float] = {train}
        for i, row in enumerate(plain):
            multiples = sorted(row["bpb"], key=lambda m: float(m.removesuffix("x")))
            lengths = [float(m.removesuffix("x")) * train for m in multiples]
            drawn |= set(lengths)
            cells = [Interval.from_dict(row["bpb"][m]) for m in multiples]
            style = line_style(i)
            ax.plot(lengths, [c.mean for c in cells], marker="o", ms=3, lw=1.2, label=row["name"], **style)
            if all(c.has_interval for c in cells):
                ax.fill_between(lengths, [c.low for c in cells], [c.high for c in cells], color=style["color"],
                                alpha=0.12)  # fmt: skip
        ax.axvline(train, color="grey", ls="--", lw=1)
        length_axis(ax, sorted(drawn))
        tokens = (part.get("sample") or {}).get("tokens")
        sample = f"; {plain_number(tokens)} held-out tokens a length" if isinstance(tokens, int) else ""
        seeds = seeds_text(part, {row["seeds"] for row in plain})
        title = f"{corpus}: bits per byte (trained at {plain_number(train)})\n{seeds}{sample}"
        ax.set(xlabel="evaluation length (tokens)", ylabel="bits per byte", title=title)
        ax.title.set_fontsize(8)
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    return fig


def positions_title(corpus: str, part: dict[str, Any]) -> str:
    """A loss-by-position panel's title: the evaluation length its curves show, their seeds, and how many tokens
    a point averages per seed (the bins widen with the position: the first point is one position of every
    window, a later one several)."""
    curves = list(part["loss_by_position"].values())
    if not curves:
        return f"{corpus}: no loss by position recorded"
    lengths = sorted({curve["length"] for curve in curves})
    shown = " / ".join(plain_number(n) for n in lengths)
    train = part["train_length"]
    multiple = " / ".join(f"{n / train:g}x" for n in lengths)
    seeds = seeds_text(part, {curve["seeds"] for curve in curves})
    tokens = [n for curve in curves for n in curve.get("tokens") or []]
    if tokens:
        sample = f"a point: {plain_number(min(tokens))}-{plain_number(max(tokens))} tokens per seed"
    elif isinstance(sample_tokens := (part.get("sample") or {}).get("tokens"), int):
        sample = f"{plain_number(sample_tokens)} held-out tokens per seed (per point: not recorded)"
    else:
        sample = "tokens per point: not recorded"
    return f"{corpus}: loss by position at length {shown} ({multiple} the {train} trained)\n{seeds}; {sample}"


def plot_positions(summary: dict[str, Any]) -> Any:
    """Loss by position (log x, plain ticks), one panel per corpus, a line per encoding (mean over seeds), the
    training length marked by a vertical line: past it, positions the models never trained at. Each panel's title
    says the evaluation length, the seeds and the tokens behind a point (``positions_title``)."""
    lines = max(len(part["loss_by_position"]) for part in summary["corpora"].values()) + 1
    fig, axes = _panels(len(summary["corpora"]), lines)
    for ax, (corpus, part) in zip(axes, summary["corpora"].items()):
        longest = 1.0
        for i, (encoding, curve) in enumerate(sorted(part["loss_by_position"].items())):
            middles = [(start + stop + 1) / 2 for start, stop in zip(curve["start"], curve["stop"])]  # 1-based
            ax.plot(middles, curve["loss"], lw=1.2, label=encoding, **line_style(i))
            longest = max(longest, curve["length"])
        ax.axvline(part["train_length"], color="black", ls="--", lw=1, label="training length")
        length_axis(ax, [*powers_of_two(1, longest), part["train_length"]])
        ax.set(xlabel="position (tokens, log)", ylabel="loss (nats per token)", title=positions_title(corpus, part))
        ax.title.set_fontsize(8)
        ax.grid(alpha=0.3)
    _legend(fig, axes)
    return fig


def safe_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name)
