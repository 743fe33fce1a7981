"""Figures a reader can read: Chinese drawn with a font that has its glyphs, no text cut off at the figure's edge,
the extrapolation grid's seed spread shown. Each figure is built from small inputs by its own plotting function."""

from __future__ import annotations

import copy
import json
import math
import warnings
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib import font_manager
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from poslab.analysis.corpus_render import plot_statistics
from poslab.analysis.corpus_statistics import QUANTITIES, compare_to_ustar
from poslab.analysis.extrapolation import grid_summary, parse_lines
from poslab.analysis.fonts import CJK_FAMILY, bundled_font_file, cjk_font, find_cjk_font, has_glyph
from poslab.analysis.grid_render import plot_grid
from poslab.analysis.hrope.plots import plot_wells
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.increments import render as increments_render
from poslab.analysis.increments.compute import DEFAULT_SENTENCES, positions_learned
from poslab.analysis.increments.readings import CategoryRow, positions_from_deltas
from poslab.analysis.increments.render import format_category_table, positions_figure, positions_title
from poslab.analysis.increments.text import byte_categories
from poslab.analysis.length import LengthRun, length_summary
from poslab.analysis.length_render import plot_bpb, plot_positions
from poslab.analysis.passkey_render import plot_passkey
from poslab.analysis.plotting import plt
from poslab.analysis.preregistered_figure import preregistered_figure
from poslab.analysis.zoo import ZooRun, baselines, task_rows
from poslab.analysis.zoo_diagnostics import plot_diagnostics
from poslab.analysis.zoo_render import plot_accuracy, plot_heatmap
from tests.conftest import tiny_model

ENGLISH, CHINESE = DEFAULT_SENTENCES  # what `poslab analyze increments` draws


def positions_picture(text: str) -> Any:
    """The increments picture of ``text`` for three layers of different scales (Chinese lead bytes wider)."""
    tokens = list(text.encode("utf-8"))
    deltas = np.where(byte_categories(tokens) == "zh_lead", 2.0, 0.8)
    positions = positions_from_deltas(np.stack([deltas, 1.7 * deltas, np.linspace(0.5, 1.5, len(tokens))]))
    title = positions_title("increments_layer", learned=True, unit_steps=False, steps="50 of 2000")
    return positions_figure(text, tokens, positions, title=title)


def rope_positions_picture(text: str) -> Any:
    """The picture `analyze increments` draws of a plain RoPE run: one row, δ = 1 per byte."""
    tokens = list(text.encode("utf-8"))
    positions = positions_from_deltas(np.ones((1, len(tokens))))
    title = positions_title("rope", learned=False, unit_steps=True, steps="50 of 2000")
    return positions_figure(text, tokens, positions, title=title, layer_names=["shared"])


def run_analysis(summary: dict[str, Any]) -> RunAnalysis:
    """A RunAnalysis back from its ``hrope_runs.json`` entry (``RunAnalysis.summary``)."""
    return RunAnalysis.from_summary(summary)


def docs_wells() -> list[RunAnalysis]:
    """The 36 runs of docs/hrope (4 models x 3 corpora x 3 seeds)."""
    path = Path(__file__).parents[2] / "docs" / "hrope" / "hrope_runs.json"
    return [run_analysis(s) for s in json.loads(path.read_text())]


def synthetic_wells(corpora: list[str], seeds: int = 3) -> list[RunAnalysis]:
    rng = np.random.default_rng(0)
    runs = []
    for corpus in corpora:
        for depth, model in zip([-0.6, -0.3, -0.1, 0.05], ["hrope_axial", "rand_axial", "period_axial", "rope"]):
            for seed in range(seeds):
                residual = [0.0, *(depth * np.exp(-np.arange(1, 9) / 3) + 0.05 * rng.standard_normal(8))]
                summary = {
                    "run_dir": f"/runs/{model}_{corpus}_{seed}",
                    "encoding": model,
                    "corpus": corpus,
                    "seed": seed,
                    "documents": 50,
                    "U*": min(residual[1:]),
                    "U*_at": 1,
                    "U*_ci": [-1.0, 0.0],
                    "shuffled_U*": 0.0,
                    "shuffle_change": 0.1,
                    "shuffle_ci": [0.0, 0.2],
                    "merge_change": 0.0,
                    "merge_ci": [-0.1, 0.1],
                    "split_change": 0.0,
                    "split_ci": [-0.1, 0.1],
                    "residual": residual,
                    "shuffled_residual": [0.0, *(0.3 * np.array(residual[1:]))],
                    "pairs": [500] * 9,
                }
                runs.append(run_analysis(summary))
    return runs


def sparse_wells(shuffled_documents: int = 0) -> list[RunAnalysis]:
    """What `analyze hrope` finds on a small run: enough query/key pairs at displacement 1 alone (one point of
    the well), and no document with the four or more paragraphs a shuffle needs (an empty shuffle panel)."""
    runs = []
    for model in ("hrope_axial", "rope"):
        for seed in (0, 1):
            summary = {
                "run_dir": f"/runs/{model}_{seed}",
                "encoding": model,
                "corpus": "wikitext2",
                "seed": seed,
                "documents": 3,
                "shuffled_documents": shuffled_documents,
                "U*": -0.3 - 0.1 * seed,
                "U*_at": 1,
                "U*_ci": None,
                "shuffled_U*": None,
                "shuffle_change": None,
                "shuffle_ci": None,
                "merge_change": None,
                "merge_ci": None,
                "split_change": None,
                "split_ci": None,
                "residual": [0.0, -0.3 - 0.1 * seed, *([None] * 15)],
                "shuffled_residual": [None] * 17,
                "pairs": [900, 250, *([40] * 15)],
            }
            runs.append(run_analysis(summary))
    return runs


def zoo_runs(tasks: list[str], encodings: list[str], seeds: int = 2) -> list[ZooRun]:
    """A zoo's runs with made-up figures: accuracy at 1x and past the training length at 2x, 4x and 8x."""
    runs = []
    for t, task in enumerate(tasks):
        for e, encoding in enumerate(encodings):
            for seed in range(seeds):
                base = 0.95 - 0.1 * e - 0.05 * t + 0.01 * seed
                figures = {1: {"accuracy": base, "baseline_chance": 0.5, "baseline_constant": 0.6}}
                for m in (2, 4, 8):
                    accuracy = max(0.0, base - 0.1 * m)
                    figures[m] = {"accuracy": accuracy, "accuracy_past_train": accuracy, "baseline_chance": 0.5}
                    figures[m] |= {"baseline_constant_past_train": 0.6}
                runs.append(ZooRun(task, encoding, seed, 32, True, figures, (1000, 1000), 60.0))
    return runs


def zoo_tables(runs: list[ZooRun]) -> tuple[dict, dict, dict, list[str]]:
    tasks = list(dict.fromkeys(r.task for r in runs))
    tables = {task: task_rows([r for r in runs if r.task == task]) for task in tasks}
    floors = {task: baselines([r for r in runs if r.task == task]) for task in tasks}
    order = list(dict.fromkeys(r.encoding for r in runs))
    return tables, {task: 32 for task in tasks}, floors, order


def zoo_heatmap(tasks: list[str], encodings: list[str]) -> Any:
    tables, _, _, order = zoo_tables(zoo_runs(tasks, encodings))
    return plot_heatmap(tables, order)


def zoo_accuracy(tasks: list[str], encodings: list[str]) -> Any:
    return plot_accuracy(*zoo_tables(zoo_runs(tasks, encodings)))


#: a small zoo (2 tasks, 3 encodings) and the whole zoo's shape (7 tasks, 21 encodings)
SMALL_ZOO = (["copy", "flip_flop"], ["rope", "alibi", "nope"])
WHOLE_ZOO = (
    ["copy", "flip_flop", "lag", "seen", "counting_filler", "sort", "retrieval"],
    ["rope", "alibi", "none", "sinusoid", "learned", "xpos", "randomized_rope", "rope_nope_mix", "increments_shared",
     "increments_layer", "hrope_axial", "rand_axial", "period_axial", "t5_bias", "kerple_log", "kerple_power",
     "fire", "sandwich", "cope", "forget_gate", "ssmax"],
)  # fmt: skip


def writeup_grid() -> list:
    """The where_am_i write-up's 28 runs: 2 tasks x 7 schemes x 2 seeds."""
    return parse_lines((resources.files("poslab.analysis.resources") / "where_am_i_grid.txt").read_text())


def grid_picture(runs: list) -> Any:
    """The grid's PNG as its report draws it: from the summary of ``runs``."""
    return plot_grid(grid_summary(runs, []))


def corpus_statistics_picture() -> Any:
    # a local corpus is named after its folder, which may well be Chinese
    corpora = {"python_code": -0.77, "wikitext2": -0.48, "openwebtext": -0.31, "中文小说": -0.2}
    stats = {c: {q: 0.1 * (i + 1) + 0.01 * j for j, (q, _, _) in enumerate(QUANTITIES)} for i, c in enumerate(corpora)}
    stats["中文小说"]["cosine_document"] = float("nan")  # not computed (too few paragraphs embedded)
    intervals = {c: {q: [v - 0.02, v + 0.03] for q, v in values.items()} for c, values in stats.items()}
    summary = {"statistics": stats, "ustar": corpora, "intervals": intervals, "rows": compare_to_ustar(stats, corpora)}
    return plot_statistics(summary)


def passkey_result(reach: float, trials: int = 8, context: int = 512) -> dict[str, Any]:
    """A passkey result as results.json holds it (``passkey_result``'s keys), made up: exact match 1 up to ``reach``
    contexts of distance, falling beyond, a little lower at depth 1; one cell not scored."""
    multiples = [0.125, 0.25, 0.5, 1, 2, 4, 8, 16]
    depths = [0.0, 0.25, 0.5, 0.75, 1.0]
    exact = [[min(1.0, reach / m) ** 2 * (1 - 0.1 * q) for q in depths] for m in multiples]
    exact[-1][-1] = float("nan")
    return {
        "context_length": context, "distances": [round(m * context) for m in multiples],
        "distance_multiples": multiples, "depths": depths, "trials": trials, "draws": 1, "key_length": 5,
        "phrase": " The pass key is {key}. ", "chance_digit": 0.1, "chance_exact": 1e-5,
        "exact": exact, "digits": exact, "ways": {"test_yarn": {"exact": exact, "digits": exact}},
    }  # fmt: skip


def passkey_picture(encodings: list[str], way: str | None = None) -> Any:
    results = {name: passkey_result(2.0 ** (i % 6 - 1)) for i, name in enumerate(encodings)}
    if len(encodings) > 1:
        del results[encodings[-1]]["ways"]  # an encoding without test-time variants: its panel says so
    return plot_passkey(results, way)


def length_runs(corpora: list[str], encodings: list[str], seeds: int = 3) -> dict[str, Any]:
    """A made-up ``length.json`` summary: per corpus and encoding, bits per byte rising with the length (more for
    the later encodings), a loss-by-position curve to 16x and a passkey grid, over ``seeds`` seeds."""
    runs = []
    starts = [0, 1, 2, 3, 4, 6, 8, 11, 16, 22, 32, 45, 64, 90, 128, 181, 256, 362, 512, 724, 1024, 1448, 2048]
    for c, corpus in enumerate(corpora):
        for e, encoding in enumerate(encodings):
            for seed in range(seeds):
                base = 1.2 + 0.1 * c + 0.02 * seed
                plain = {m: base + 0.05 * e * math.log2(m) for m in (1, 2, 4, 8, 16)}
                bpb = {"plain": plain, "sliding": {m: plain[m] - 0.01 for m in (1, 2)}}
                curve = {"start": starts, "stop": [*starts[1:], 2048], "tokens": [1] * len(starts),
                         "loss": [1.0 + 2 / (1 + s) + 0.001 * e * max(0, s - 128) for s in starts]}  # fmt: skip
                result = {"loss_by_position": {"lengths": {"2048": curve}}, "passkey": passkey_result(2.0**-e)}
                runs.append(LengthRun(corpus, encoding, seed, 128, bpb, result, Path()))
    return length_summary(runs, [])


def preregistered_summary(registry_rows: int | None = None) -> dict[str, Any]:
    """The committed registry's claims (or its first ``registry_rows``) on two corpora, every verdict present."""
    from poslab.analysis.preregistered import read_registry

    claims = read_registry((Path(__file__).parents[2] / "docs" / "preregistered_claims.md").read_text("utf-8"))
    verdicts = ["reproduced", "contradicted", "not resolved", "not testable"]
    rows = []
    for i, claim in enumerate(claims[:registry_rows]):
        for place in ["openwebtext", "python_code"] if claim.task is None else [claim.task]:
            mean = 0.3 * math.sin(i + len(rows)) * (20 if claim.task else 1)
            one_seed = verdicts[len(rows) % 4] == "not testable"
            low, high = (None, None) if one_seed else (mean - 0.1 * abs(mean) - 0.01, mean + 0.1 * abs(mean) + 0.01)
            rows.append({"claim": claim.claim, "report": "zoo" if claim.task else "length", "place": place,
                         "multiple": claim.multiple, "mean": mean, "low": low, "high": high, "n": 1 if one_seed else 5,
                         "verdict": verdicts[len(rows) % 4], "why": "", "source": claim.source})  # fmt: skip
    return {"rows": rows}


def diagnostics_summary(encodings: list[str]) -> dict[str, Any]:
    """flip-flop's three mixes and MQAR's three pair counts for ``encodings``, 16 pairs not evaluated at 1x."""
    multiples = ["1x", "2x", "4x", "8x"]
    tasks = {"flip_flop": ["read_error_pct", "read_error_pct_ffl0.1", "read_error_pct_ffl0.98"],
             "associative_recall": ["accuracy_pairs4", "accuracy_pairs8", "accuracy_pairs16"]}  # fmt: skip
    summary = {}
    for task, figures in tasks.items():
        rows = {}
        for i, encoding in enumerate(encodings):
            rows[encoding] = {
                figure: {m: {"mean": None if figure.endswith("16") and m == "1x" else
                             (5.0 * i * j if task == "flip_flop" else 1.0 - 0.02 * i * j), "low": None, "high": None,
                             "n": 1} for j, m in enumerate(multiples)}
                for figure in figures
            }  # fmt: skip
        summary[task] = {"train_length": 32, "figures": figures, "multiples": multiples, "rows": rows}
    return summary


LENGTH_SMALL = (["wikitext2", "python_code"], ["rope", "alibi", "nope"])
LENGTH_WHOLE = (["wikitext2", "python_code"], WHOLE_ZOO[1])


#: every figure the project writes, by the file it is written to
FIGURES: dict[str, Callable[[], Any]] = {
    "increments_positions (English)": lambda: positions_picture(ENGLISH),
    "increments_positions (Chinese)": lambda: positions_picture(CHINESE),
    "increments_positions (plain RoPE)": lambda: rope_positions_picture(CHINESE),
    "hrope_well.png": lambda: plot_wells(docs_wells()),
    "hrope_shuffle.png": lambda: plot_wells(docs_wells(), shuffled=True),
    "hrope_well.png (one corpus)": lambda: plot_wells(synthetic_wells(["wikitext2"])),
    "hrope_shuffle.png (one corpus)": lambda: plot_wells(synthetic_wells(["wikitext2"]), shuffled=True),
    "hrope_well.png (small run: one point)": lambda: plot_wells(sparse_wells()),
    "hrope_shuffle.png (small run: no data)": lambda: plot_wells(sparse_wells(), shuffled=True),
    "extrapolation_grid.png": lambda: grid_picture(writeup_grid()),
    "extrapolation_grid.png (one task)": lambda: grid_picture([r for r in writeup_grid() if r.task == "seen"]),
    "extrapolation_grid.png (one seed)": lambda: grid_picture([r for r in writeup_grid() if r.seed == 0]),
    "corpus_statistics.png": corpus_statistics_picture,
    "zoo_heatmap.png (small zoo)": lambda: zoo_heatmap(*SMALL_ZOO),
    "zoo_heatmap.png (whole zoo)": lambda: zoo_heatmap(*WHOLE_ZOO),
    "zoo_heatmap.png (one task, one encoding)": lambda: zoo_heatmap(["copy"], ["rope"]),
    "zoo_accuracy.png (small zoo)": lambda: zoo_accuracy(*SMALL_ZOO),
    "zoo_accuracy.png (whole zoo)": lambda: zoo_accuracy(*WHOLE_ZOO),
    "zoo_diagnostics.png (whole zoo)": lambda: plot_diagnostics(diagnostics_summary(WHOLE_ZOO[1])),
    "zoo_diagnostics.png (one encoding)": lambda: plot_diagnostics(diagnostics_summary(["rope"])),
    "passkey_heatmap.png (one encoding)": lambda: plot_passkey(passkey_result(1.0)),
    "length_bpb.png (two corpora, 3 encodings)": lambda: plot_bpb(length_runs(*LENGTH_SMALL)),
    "length_bpb.png (two corpora, whole zoo)": lambda: plot_bpb(length_runs(*LENGTH_WHOLE)),
    "length_position.png (two corpora, 3 encodings)": lambda: plot_positions(length_runs(*LENGTH_SMALL)),
    "length_position.png (two corpora, whole zoo)": lambda: plot_positions(length_runs(*LENGTH_WHOLE)),
    "length_passkey_0.png (3 encodings, seed means)": lambda: plot_passkey(
        length_runs(*LENGTH_SMALL)["corpora"]["wikitext2"]["passkey"]
    ),
    "length_passkey_0.png (whole zoo, seed means)": lambda: plot_passkey(
        length_runs(*LENGTH_WHOLE)["corpora"]["wikitext2"]["passkey"]
    ),
    "passkey_heatmap.png (small zoo)": lambda: passkey_picture(SMALL_ZOO[1]),
    "passkey_heatmap.png (whole zoo)": lambda: passkey_picture(WHOLE_ZOO[1]),
    "passkey_heatmap.png (whole zoo, test_yarn)": lambda: passkey_picture(WHOLE_ZOO[1], "test_yarn"),
    "preregistered.png (the committed registry)": lambda: preregistered_figure(preregistered_summary()),
    "preregistered.png (two claims)": lambda: preregistered_figure(preregistered_summary(2)),
}
#: the PNG files the reports and analyses write (``AnalysisResult.add_figure``), each drawn above
REPORT_FIGURES = {
    "increments_positions_0.png",
    "hrope_well.png",
    "hrope_shuffle.png",
    "extrapolation_grid.png",
    "corpus_statistics.png",
    "zoo_accuracy.png",
    "zoo_heatmap.png",
    "zoo_diagnostics.png",
    "length_bpb.png",
    "length_position.png",
    "length_passkey_0.png",
    "preregistered.png",
}


@pytest.fixture
def figure(request) -> Iterator[Any]:
    fig = FIGURES[request.param]()
    yield fig
    plt.close(fig)


def drawn_texts(fig: Any) -> list[Text]:
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text()]


def fonts_of(text: Text) -> list[str]:
    """The font files matplotlib takes ``text``'s glyphs from, in order (a glyph the first lacks comes from the
    next: matplotlib's per-glyph fallback over the family list)."""
    props = text.get_fontproperties()
    if props.get_file() is not None:
        return [props.get_file()]
    fonts = []
    for family in props.get_family():
        single = props.copy()
        single.set_family(family)
        fonts.append(font_manager.findfont(single, fallback_to_default=False))
    return fonts


def text_boxes(fig: Any) -> Iterator[tuple[str, Bbox]]:
    """Every piece of text on the figure as drawn, as (what it is, its box in pixels)."""
    fig.canvas.draw()  # the layout (tight_layout, constrained) is applied when drawing
    renderer = fig.canvas.get_renderer()
    for text in drawn_texts(fig):
        if text.axes is None and text.figure is fig and text in fig.texts:
            yield f"figure text {text.get_text()!r}", text.get_window_extent(renderer)
    for number, ax in enumerate(fig.axes):
        where = f"axes {number} ({ax.get_title()!r})"
        for text in [ax.title, *ax.texts]:
            if text.get_visible() and text.get_text():
                yield f"{where}: text {text.get_text()!r}", text.get_window_extent(renderer)
        for name, axis in (("x", ax.xaxis), ("y", ax.yaxis)):
            box = axis.get_tightbbox(renderer)  # the tick labels drawn, and the axis label
            if box is not None:
                yield f"{where}: {name} axis {axis.get_label_text()!r}", box
        if ax.get_legend() is not None:
            yield f"{where}: legend", ax.get_legend().get_window_extent(renderer)
    for legend in fig.legends:
        yield "figure legend", legend.get_window_extent(renderer)


def test_every_png_a_report_writes_is_among_the_figures_checked():
    """Each ``add_figure("<name>.png", ...)`` of poslab is drawn by an entry of FIGURES (the increments
    pictures' names end in their number)."""
    import re

    root = Path(__file__).parents[2] / "poslab"
    written = set()
    for path in root.rglob("*.py"):
        written |= set(re.findall(r'add_figure\(\s*f?"([^"]+\.png)"', path.read_text()))
    written = {re.sub(r"\{[^}]*\}", "0", name) for name in written}
    assert written == REPORT_FIGURES
    drawn = {name.split(" ")[0] for name in FIGURES} | {"increments_positions_0.png"}  # positions_picture
    assert drawn >= REPORT_FIGURES


@pytest.mark.slow
@pytest.mark.parametrize("figure", list(FIGURES), indirect=True)
def test_no_text_is_cut_off_and_every_character_drawn_has_a_glyph_in_its_font(figure):
    """Both checks on one drawing of the figure (building and drawing it is this test's time): every piece of text
    lies inside the frame; every character has a glyph in the fonts its text uses, and drawing warns of none."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        boxes = list(text_boxes(figure))  # draws the figure
    frame = figure.bbox
    outside = [
        f"{what}: {np.round(box.extents, 1).tolist()} not inside {frame.extents.tolist()} (x0, y0, x1, y1 in pixels)"
        for what, box in boxes
        # half a pixel for rounding
        if box.x0 < frame.x0 - 0.5 or box.y0 < frame.y0 - 0.5 or box.x1 > frame.x1 + 0.5 or box.y1 > frame.y1 + 0.5
    ]
    assert not outside, "\n".join(outside)
    missing = [
        f"{c!r} (U+{ord(c):04X}) in {text.get_text()!r}: none of {fonts_of(text)}"
        for text in drawn_texts(figure)
        for c in set(text.get_text()) - {" ", "\n"}
        if not any(has_glyph(font, c) for font in fonts_of(text))
    ]
    assert not missing, "\n".join(missing)
    assert not [str(w.message) for w in caught if "missing from" in str(w.message)]


def test_the_chinese_picture_draws_the_characters_in_noto_sans_cjk_sc():
    fig = positions_picture(CHINESE)
    texts = drawn_texts(fig)
    labels = {t.get_text() for t in texts}
    assert set(CHINESE) <= labels  # the characters themselves, every one of them
    assert not [label for label in labels if label.startswith("U+")]  # no code point stands in for one
    font = cjk_font()
    assert font is not None and font.family == CJK_FAMILY
    assert Path(str(font.path)) == bundled_font_file()  # the font the install step brings, not a system one
    for text in texts:
        if text.get_text() in set(CHINESE) - {"。"}:
            assert fonts_of(text) == [font.path]
            assert has_glyph(font.path, text.get_text())
    plt.close(fig)


def test_latin_text_keeps_dejavu_sans_and_falls_back_to_the_cjk_font_per_glyph():
    fig, ax = plt.subplots()
    title = ax.set_title("corpus 小说")
    fonts = fonts_of(title)
    assert Path(fonts[0]).name == "DejaVuSans.ttf"
    assert fonts[-1] == cjk_font().path  # where DejaVu Sans has no glyph for 小 and 说
    assert not has_glyph(fonts[0], "小") and has_glyph(fonts[-1], "小")
    plt.close(fig)


def test_without_the_package_or_a_system_cjk_font_there_is_none(monkeypatch):
    manager = copy.copy(font_manager.fontManager)  # a stand-in: the real one is left as it is
    manager.ttflist = [entry for entry in manager.ttflist if "CJK" not in entry.name]
    assert find_cjk_font(manager, None) is None
    found = find_cjk_font(manager, bundled_font_file())  # registering the file is all it takes
    assert found is not None and found.family == CJK_FAMILY and has_glyph(found.path, "骨")
    # and with no CJK font the increments picture writes code points, rotated, instead of empty boxes
    monkeypatch.setattr(increments_render, "cjk_font_path", lambda: None)
    fig = positions_picture(CHINESE)
    labels = {t.get_text(): t.get_rotation() for t in drawn_texts(fig)}
    assert labels["U+4EBA"] == 90 and "人" not in labels
    plt.close(fig)


def test_the_grid_plot_shows_every_seed_and_their_mean():
    runs = writeup_grid()
    fig = grid_picture(runs)
    points = set()
    for ax in fig.axes:
        for line in ax.get_lines():
            points |= {(ax.get_title().split()[0], float(x), round(float(y), 6)) for x, y in line.get_xydata()}
    for run in runs:  # each seed of each scheme at each length is a point of the figure
        for length, accuracy in run.accuracy.items():
            assert (run.task, float(length), round(accuracy, 6)) in points, (run.line(), length)
    lag_none = [r for r in runs if r.task == "lag" and r.label == "none"]
    mean = round(np.mean([r.accuracy[128] for r in lag_none]), 6)
    assert ("lag", 128.0, mean) in points  # and so is the seed mean
    (legend,) = fig.legends
    assert "mean of 2 seeds" in legend.get_title().get_text() and "each seed" in legend.get_title().get_text()
    plt.close(fig)


def test_a_corpus_statistic_not_computed_reads_n_a_not_a_bar_of_zero():
    fig = corpus_statistics_picture()
    panel = next(ax for ax in fig.axes if ax.get_title().startswith("cosine_document"))
    heights = [bar.get_height() for bar in panel.patches]
    assert np.isnan(heights[-1]) and all(h > 0 for h in heights[:-1])  # the Chinese corpus, last: no bar
    assert [t.get_text() for t in panel.texts] == ["n/a"]
    assert panel.get_xlim()[1] > len(heights) - 1  # its place on the axis is kept, inside the panel
    assert "all pairs in a document" in panel.get_title()  # the quantity's definition, not only its name
    plt.close(fig)


def panel_notes(ax: Any) -> list[str]:
    """The texts written on a panel, each on one line."""
    return [" ".join(t.get_text().split()) for t in ax.texts if t.get_visible()]


def visible_ticks(ax: Any, axis: str = "x") -> list[float]:
    ax.figure.canvas.draw()
    low, high = sorted(ax.get_xlim() if axis == "x" else ax.get_ylim())
    ticks = ax.get_xticks() if axis == "x" else ax.get_yticks()
    return [float(t) for t in ticks if low - 1e-9 <= t <= high + 1e-9]


WELL_FIGURES = [name for name in FIGURES if name.startswith(("hrope_well", "hrope_shuffle"))]


@pytest.mark.parametrize("figure", WELL_FIGURES, indirect=True)
def test_the_wells_count_displacements_in_whole_numbers(figure):
    for ax in figure.axes:
        ticks = visible_ticks(ax)
        assert all(t == int(t) for t in ticks), (ax.get_title(), ticks)
        labels = {float(t): label.get_text() for t, label in zip(ax.get_xticks(), ax.get_xticklabels())}
        assert all(labels[t] == str(int(t)) for t in ticks), (ax.get_title(), labels)


def test_a_well_of_one_point_says_so_and_an_empty_shuffle_panel_says_no_data():
    fig = plot_wells(sparse_wells())
    (ax,) = fig.axes
    assert any(note.startswith("one point") for note in panel_notes(ax)), panel_notes(ax)
    assert visible_ticks(ax) == [1.0]  # the one displacement drawn, not 0.945, 0.960, ...
    plt.close(fig)

    fig = plot_wells(sparse_wells(), shuffled=True)
    (ax,) = fig.axes
    notes = panel_notes(ax)
    assert any(note.startswith("no data") for note in notes), notes
    assert any("four or more paragraphs" in note for note in notes)  # and why: no document could be shuffled
    plt.close(fig)

    fig = plot_wells(synthetic_wells(["wikitext2"]))  # a well of many points has no such note
    assert not panel_notes(fig.axes[0])
    plt.close(fig)


def test_the_grid_legend_of_single_seed_runs_says_one_seed_not_a_mean_of_1_seeds():
    fig = grid_picture([r for r in writeup_grid() if r.seed == 0])
    (legend,) = fig.legends
    title = legend.get_title().get_text()
    assert "1 seeds" not in title and "mean" not in title and "one seed" in title, title
    plt.close(fig)


@pytest.mark.parametrize("shape", [SMALL_ZOO, WHOLE_ZOO, (["copy"], ["rope"])], ids=["small", "whole", "one"])
def test_the_zoo_heatmap_colour_bar_label_is_whole_and_inside_the_figure(shape):
    fig = zoo_heatmap(*shape)
    (bar,) = [ax for ax in fig.axes if ax is not fig.axes[0]]  # the colour bar's axes
    fig.canvas.draw()
    label = bar.yaxis.label
    box = label.get_window_extent(fig.canvas.get_renderer())
    frame = fig.bbox
    assert frame.y0 - 0.5 <= box.y0 and box.y1 <= frame.y1 + 0.5 and frame.x0 <= box.x0 and box.x1 <= frame.x1
    assert "accuracy" in label.get_text() and "8x" in label.get_text()
    plt.close(fig)


def test_the_increments_picture_of_plain_rope_is_not_titled_learned_positions():
    rope, learned = tiny_model("rope"), tiny_model("increments_layer")
    assert not positions_learned(rope) and positions_learned(learned)
    title = positions_title("rope", learned=False, unit_steps=True, steps="50 of 2000")
    assert "learned positions" not in title and "not learned" in title and "δ = 1" in title, title
    title = positions_title("increments_layer", learned=True, unit_steps=False, steps="50 of 2000")
    assert title.startswith("increments_layer: positions learned") and "50 of 2000" in title, title


def test_the_increments_picture_draws_every_character_apart_when_positions_start_at_zero():
    """Plain RoPE counts 0, 1, 2, ...: δ_0 = 0, so the first character must not be drawn where the second is."""
    text = "Artificial"
    tokens = list(text.encode("utf-8"))
    positions = np.arange(len(tokens), dtype=float)[None]  # what token_increments' δ sum to for RoPE
    fig = positions_figure(text, tokens, positions, layer_names=["shared"])
    (ax,) = fig.axes
    xs = [t.get_position()[0] for t in ax.texts]
    assert [t.get_text() for t in ax.texts] == list(text)
    assert all(b - a == pytest.approx(1.0) for a, b in zip(xs, xs[1:])), xs
    low, high = ax.get_xlim()
    assert low < xs[0] and xs[-1] < high
    plt.close(fig)


def test_the_increments_table_of_plain_rope_is_not_headed_learned():
    rows = [CategoryRow(layer="shared", category="en_lower", count=3, mean=1.0, range_min=1.0, range_max=1.0)]
    assert format_category_table(rows, learned=False).splitlines()[0] == "Counted increment δ, not learned (shared)"
    assert format_category_table(rows).splitlines()[0] == "Learned Increment δ (shared)"


@pytest.mark.parametrize("figure", [name for name in FIGURES if name.startswith("passkey_heatmap")], indirect=True)
def test_the_passkey_colour_bar_says_exact_match_inside_the_figure_and_every_panel_marks_the_context(figure):
    *panels, bar = figure.axes  # the colour bar's axes come last
    figure.canvas.draw()
    label = bar.yaxis.label
    box, frame = label.get_window_extent(figure.canvas.get_renderer()), figure.bbox
    assert frame.y0 - 0.5 <= box.y0 and box.y1 <= frame.y1 + 0.5 and frame.x0 <= box.x0 and box.x1 <= frame.x1 + 0.5
    assert "exact match" in label.get_text() and "5 digits" in label.get_text()
    drawn = [ax for ax in panels if ax.axison and not any("not evaluated" in t.get_text() for t in ax.texts)]
    assert drawn and all(len(ax.get_lines()) == 1 for ax in drawn)  # the dashed line: the training context
    assert all(ax.get_xticklabels()[0].get_text() == "1/8" for ax in drawn)


WHOLE_ZOO_LINES = [name for name in FIGURES if "whole zoo" in name and name.startswith("length")]


@pytest.mark.parametrize("figure", WHOLE_ZOO_LINES, indirect=True)
def test_every_encoding_of_the_whole_zoo_has_a_line_of_its_own_look(figure):
    """21 encodings in one panel: no two lines share both colour and dash, so the legend names one line each."""
    for ax in figure.axes:
        lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
        lines = [line for line in lines if line.get_label() != "training length"]
        if not lines:
            continue
        looks = {(str(line.get_color()), str(line.get_linestyle())) for line in lines}
        assert len(looks) == len(lines) >= 21, (len(looks), len(lines))
