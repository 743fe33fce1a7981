"""Issue 37, item 7: the seven ways ``poslab report length`` was silently wrong, each on planted runs (results.json
files made from one committed lm_zoo run, figures replaced), and the extension's data check."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poslab.analysis.length import length_summary, load_length_runs
from poslab.analysis.length_render import bpb_table, length_csv, length_markdown, passkey_table
from poslab.analysis.passkey_render import plot_passkey
from poslab.analysis.stats import Interval
from poslab.running.extension import checked_parent_data
from poslab.runs.results import data_hash
from tests.close_text import assert_text_close

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "docs/lm_extrapolation/runs/corpus-wikitext2_encoding-rope_experiment-lm_zoo_seed-0/results.json"
LENGTHS = (128, 256, 512, 1024, 2048)


def planted(
    root: Path,
    encoding: str,
    seed: int,
    bpb: dict[int, float],
    *,
    sha: str = "a" * 64,
    sliding: dict[int, float] | None = None,
    stride: int | None = None,
    cpu: str = "AMD EPYC",
) -> Path:
    """A finished lm run of ``encoding`` and ``seed`` with bits per byte ``bpb`` by length (and sliding ones)."""
    result: dict[str, Any] = copy.deepcopy(json.loads(TEMPLATE.read_text()))
    result.update(encoding=encoding, label=encoding, seed=seed)
    result["config"]["seed"], result["config"]["encoding"]["name"] = seed, encoding
    result["config"]["task"]["eval_stride"] = stride
    result["sources"]["main"]["sha256"] = sha
    result["environment"] = {"torch": "2.13.0+cpu", "cpu": cpu}
    result["evaluation"]["stride"] = stride
    figures = {key: value for key, value in result["figures"].items() if not key.isdigit()}
    for length, value in bpb.items():
        figures[str(length)] = {"loss": value * 0.69, "bpb": value}
        if sliding is not None and length in sliding:
            figures[str(length)]["bpb_sliding"] = sliding[length]
    result["figures"] = figures
    result.pop("passkey", None)
    directory = root / f"{encoding}_{seed}_{sha[:4]}_{stride}"
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(result))
    return directory


def rising(base: float, slope: float, lengths=LENGTHS) -> dict[int, float]:
    return {n: base + slope * i for i, n in enumerate(lengths)}


def summary_of(root: Path) -> dict[str, Any]:
    runs, notes = load_length_runs([root])
    return length_summary(runs, notes)


def test_1_runs_on_other_data_are_shown_apart_never_averaged_as_seeds(tmp_path):
    for seed in (0, 1):
        planted(tmp_path, "rope", seed, rising(2.0 + 0.01 * seed, 0.2))
    planted(tmp_path, "rope", 2, rising(3.0, 0.2), sha="b" * 64)  # the corpus files changed
    summary = summary_of(tmp_path)
    assert len(summary["corpora"]) == 2 and all("[data " in corpus for corpus in summary["corpora"])
    assert sorted(part["rows"][0]["seeds"] for part in summary["corpora"].values()) == [1, 2]
    assert any("2 different versions of its data" in note for note in summary["notes"])


def test_2_an_extension_on_changed_data_is_said_at_the_run_and_in_the_report(tmp_path):
    result = json.loads(TEMPLATE.read_text())
    result["parent"] = {"path": "/runs/parent", "data_sha256": data_hash(result)}
    assert checked_parent_data(result) is None
    result["parent"]["data_sha256"] = "0123456789ab"
    said = checked_parent_data(result)
    assert said is not None and "other data than its parent /runs/parent" in said and "0123456789ab" in said
    del result["parent"]["data_sha256"]  # a parent from before the hash was recorded: said, not silently passed
    assert "could not be checked against its parent /runs/parent's" in checked_parent_data(result)
    del result["parent"]
    assert checked_parent_data(result) is None  # no extension, nothing to check


def test_3_the_score_averages_the_multiples_every_row_has_and_says_which(tmp_path):
    for seed in (0, 1):
        planted(tmp_path, "rope", seed, rising(2.0, 0.2))
        planted(tmp_path, "alibi", seed, rising(2.1, 0.0, LENGTHS[:4]))  # not evaluated at 16x
    part = summary_of(tmp_path)["corpora"]["wikitext2"]
    assert part["score_multiples"] == [2, 4, 8]
    assert all(row["score_multiples"] == [2, 4, 8] for row in part["rows"])
    rope = next(row for row in part["rows"] if row["name"] == "rope")
    assert rope["score"]["mean"] == pytest.approx(np.mean([2.2, 2.4, 2.6]))  # 16x left out for every row
    assert "score: mean of 2x, 4x, 8x" in length_markdown(summary_of(tmp_path))


def grid(context: int, distances: list[int], trials: int, value: float) -> dict[str, Any]:
    return {
        "context_length": context, "distances": distances, "distance_multiples": [d / context for d in distances],
        "depths": [0.0, 1.0], "trials": trials, "key_length": 5, "phrase": " The pass key is {key}. ",
        "chance_digit": 0.1, "chance_exact": 1e-5, "exact": [[value, value] for _ in distances],
        "digits": [[value, value] for _ in distances], "seeds": 1,
    }  # fmt: skip


def test_4_passkey_rows_keep_their_distances_and_panels_their_own_axis(tmp_path):
    grids = {
        "rope": grid(128, [64, 128, 256], 4, 0.5),
        "rope extended yarn x4": grid(512, [256, 512, 1024, 2048], 2, 0.0),
    }
    table = passkey_table("wikitext2", {"passkey": grids, "train_length": 128})
    lines = [line for line in table.splitlines() if line.startswith("|")]
    assert len({line.count("|") for line in lines}) == 1  # every row as many cells as the header
    header = lines[0]
    assert all(f"| {m} |" in header or f"| {m}" in header for m in ("0.5x", "1x", "2x", "4x", "8x", "16x"))
    assert "0 at every distance and depth" in table
    figure = plot_passkey(grids)
    titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
    assert any("L = 512" in t and "2 trials" in t and "0 in every cell" in t for t in titles)
    assert any("L = 128" in t and "4 trials" in t for t in titles)
    assert "trials per cell in each panel's title" in figure._suptitle.get_text()


def test_5_sliding_rows_have_their_stride_and_are_ranked_apart(tmp_path):
    for seed in (0, 1, 2):
        sliding = {"rope": rising(1.0 + 0.02 * seed, 0.1), "alibi": rising(1.5 - 0.01 * seed, 0.0)}
        planted(tmp_path, "rope", seed, rising(2.5 + 0.01 * seed, 0.1), sliding=sliding["rope"], stride=64)
        planted(tmp_path, "alibi", seed, rising(2.0 + 0.013 * seed, 0.0), sliding=sliding["alibi"], stride=64)
    summary = summary_of(tmp_path)
    rows = {row["name"]: row for row in summary["corpora"]["wikitext2"]["rows"]}
    assert rows["rope + sliding"]["stride"] == 64 and rows["rope"]["stride"] is None
    assert (rows["alibi"]["rank"], rows["rope"]["rank"]) == (1, 2)  # among the non-overlapping rows only
    assert (rows["rope + sliding"]["rank"], rows["alibi + sliding"]["rank"]) == (1, 2)
    assert "stride" in length_csv(summary).splitlines()[0]
    said = "| 1 [degenerate: every paired comparison separated] | rope + sliding | 64 |"  # a zero width, said why
    assert said in length_markdown(summary)


def test_6_every_rank_interval_holds_its_rank(tmp_path):
    rng = np.random.default_rng(0)
    for e in range(7):
        for seed in range(3):
            planted(tmp_path, f"enc{e}", seed, rising(2.0 + 0.02 * e + rng.normal(0, 0.05), 0.1))
    for row in summary_of(tmp_path)["corpora"]["wikitext2"]["rows"]:
        low, high = row["rank_interval"]
        assert low <= row["rank"] <= high, row["name"]


def test_7_every_report_states_its_sample_steps_stride_seeds_and_hosts(tmp_path):
    planted(tmp_path, "rope", 0, rising(2.0, 0.2), cpu="AMD EPYC")
    planted(tmp_path, "rope", 1, rising(2.1, 0.2), cpu="Intel Xeon")
    summary = summary_of(tmp_path)
    sample = summary["corpora"]["wikitext2"]["sample"]
    assert sample["documents"] == 1 and sample["tokens"] == 16384 and sample["steps"] == 720  # the old 16 KB sample
    assert sample["seeds"] == [0, 1] and sample["mixed_hosts"]
    text = length_markdown(summary)
    assert "held-out documents 1, tokens 16,384 (bytes not recorded)" in text
    assert "training steps 720; seeds 0, 1 (2)" in text
    assert "hosts mixed: AMD EPYC, Intel Xeon" in text


def test_a_degenerate_interval_is_printed_as_such():
    assert Interval.of([2.0, 2.0, 2.0]).cell(2) == "2.00 [degenerate: all 3 seeds equal]"
    assert_text_close(Interval.of([2.0, 2.1, 2.0]).cell(2), "2.03 [1.9, 2.2]")  # numbers with a tolerance


def test_a_row_whose_seeds_ran_on_different_hosts_is_named(tmp_path):
    """The corpus line says hosts are mixed; which rows mix them is said too (a row on one host is not named)."""
    planted(tmp_path, "rope", 0, rising(2.0, 0.2), cpu="AMD EPYC")
    planted(tmp_path, "rope", 1, rising(2.1, 0.2), cpu="Intel Xeon")
    planted(tmp_path, "alibi", 0, rising(2.0, 0.1), cpu="AMD EPYC")
    planted(tmp_path, "alibi", 1, rising(2.1, 0.1), cpu="AMD EPYC")
    summary = summary_of(tmp_path)
    hosts = {row["name"]: row["hosts"] for row in summary["corpora"]["wikitext2"]["rows"]}
    assert hosts == {"rope": ["AMD EPYC", "Intel Xeon"], "alibi": ["AMD EPYC"]}
    text = length_markdown(summary)
    assert "Rows whose seeds ran on different hosts ('unknown': a run that recorded none): rope." in text
    planted(tmp_path, "alibi", 2, rising(2.2, 0.1), cpu="Intel Xeon")  # now both rows mix hosts
    text = length_markdown(summary_of(tmp_path))
    assert "on different hosts ('unknown': a run that recorded none): every row." in text


def test_6_a_rank_is_never_outside_its_interval_when_scores_nearly_tie(tmp_path):
    """The old report ranked scores rounded to 4 decimals (near-ties share the best place) and took the interval
    from bootstrap percentiles of the exact scores: five rows 1e-6 apart read ``1 [2-2]``. The rank and its
    interval now come from the same exact scores."""
    base = {0: 2.0, 1: 2.1, 2: 1.95}  # each seed its own level; the rows differ by the same 1e-6 in every seed
    for e in range(5):
        for seed, level in base.items():
            planted(tmp_path, f"enc{e}", seed, rising(level + 1e-6 * e, 0.1))
    rows = {row["name"]: row for row in summary_of(tmp_path)["corpora"]["wikitext2"]["rows"]}
    for row in rows.values():
        low, high = row["rank_interval"]
        assert low <= row["rank"] <= high, (row["name"], row["rank"], row["rank_interval"])
    assert [rows[f"enc{e}"]["rank"] for e in range(5)] == [1, 2, 3, 4, 5]  # the exact seed-mean order


def test_7_the_sample_states_the_bytes_a_run_scored(tmp_path):
    """The bytes scored at the training length (figures' ``bytes``, beside bpb) are the sample's bytes."""
    for seed in (0, 1):
        run = planted(tmp_path, "rope", seed, rising(2.0, 0.2))
        result = json.loads((run / "results.json").read_text())
        result["figures"]["128"]["bytes"] = 29_000
        (run / "results.json").write_text(json.dumps(result))
    summary = summary_of(tmp_path)
    assert summary["corpora"]["wikitext2"]["sample"]["bytes"] == 29_000
    assert "tokens 16,384 (bytes 29,000)" in length_markdown(summary)


def test_the_effective_context_length_is_a_column_with_its_interval(tmp_path):
    """Issue 38: the longest length whose bits/byte stays within 1.05x of 1x's (every length on the way too)."""
    planted(tmp_path, "rope", 0, rising(2.0, 0.08))  # 2x 1.04 of 1x, 4x 1.08: 256 tokens
    planted(tmp_path, "rope", 1, rising(2.0, 0.2))  # 2x 1.10: 128 tokens (the training length)
    planted(tmp_path, "alibi", 0, rising(2.0, 0.0))
    planted(tmp_path, "alibi", 1, rising(2.0, 0.0))  # flat: every length, 2,048 (degenerate: said so)
    summary = summary_of(tmp_path)
    rows = {row["name"]: row for row in summary["corpora"]["wikitext2"]["rows"]}
    assert rows["rope"]["effective_length"]["mean"] == 192 and rows["alibi"]["effective_length"]["mean"] == 2048
    text = length_markdown(summary)
    assert "effective length (bpb <= 1.05x 1x's)" in text and "| 2048 [degenerate: all 2 seeds equal] |" in text


def with_documents(run_dir: Path, loss_bits: list[list[float]], sizes: list[int], selection: list[int]) -> None:
    """Add results.json's ``held_out.documents`` to a planted run: per length, each document's summed loss (nats)
    and bytes (one group), the selection documents marked."""
    path = run_dir / "results.json"
    result = json.loads(path.read_text())
    by_length = {
        str(length): {"tokens": sizes, "bytes": sizes, "loss": {"plain": [b * np.log(2) for b in bits]}}
        for length, bits in zip(LENGTHS, loss_bits)
    }
    result["held_out"] = {"documents": {"main": {"selection": selection, "by_length": by_length}}}
    path.write_text(json.dumps(result))


def test_text_figures_get_an_interval_over_seeds_and_documents(tmp_path):
    """Issue 37, item 4: with per-document sums, the test documents' bits/byte and its crossed interval."""
    rng = np.random.default_rng(0)
    sizes = np.array([int(s) for s in rng.integers(500, 5000, size=12)])
    selection = [1, 0] * 6  # documents 1, 3, ... are test
    test = np.array(selection) == 0
    per_seed = []
    for seed in (0, 1, 2):
        run = planted(tmp_path, "rope", seed, rising(2.0, 0.1))
        rate = 2.0 + rng.normal(0, 0.2, size=12) + 0.02 * seed
        with_documents(run, [list(rate * sizes * (1 + 0.05 * i)) for i in range(5)], sizes.tolist(), selection)
        per_seed.append((rate * sizes)[test].sum() / sizes[test].sum())  # the seed's test bits/byte at 1x
    summary = summary_of(tmp_path)
    one_x = summary["corpora"]["wikitext2"]["rows"][0]["bpb_documents"]["1x"]
    assert one_x["documents"] == 6 and one_x["seeds"] == 3
    assert one_x["mean"] == pytest.approx(np.mean(per_seed), rel=1e-9)  # byte-weighted, test documents only
    assert one_x["low"] < one_x["mean"] < one_x["high"] and one_x["document_term"] > 0 and one_x["seed_term"] > 0
    assert "interval over seeds and documents" in length_markdown(summary)


# ---- issue 37, item 5: the way chosen on selection, reported on test ---------------------------------------------
def with_two_rounds(directory: Path, chosen: str, test_bpb: dict[int, float], rule_bpb: float) -> None:
    """Make a planted run one whose test ran in two rounds: ``chosen`` picked on its selection documents (its test
    figures ``test_bpb`` by length), the other rules scored on selection only, yet a stale whole-sample figure of
    one (``rule_bpb``) left in ``figures`` that the report must not show."""
    path = directory / "results.json"
    result = json.loads(path.read_text())
    past = [n for n in LENGTHS if n > 128]
    result["held_out"] = {
        "chosen": {"way": chosen, "over_lengths": past, "selection_mean_bpb": 1.0,
                   "test": {str(n): {"bpb": test_bpb[n], "loss": 0.0, "documents": 3, "tokens": 9, "bytes": 9}
                            for n in past}},
        "test_ways": {str(n): ([chosen] if n > 128 else []) for n in LENGTHS},
        "lengths": {}, "documents": {},
    }  # fmt: skip
    for n in past:
        result["figures"][str(n)]["bpb_test_linear"] = rule_bpb
    path.write_text(json.dumps(result))


def test_the_way_chosen_on_selection_is_one_row_of_test_figures_and_the_unchosen_rules_none(tmp_path):
    for seed, chosen in ((0, "test_ntk"), (1, "test_yarn")):
        directory = planted(tmp_path, "rope", seed, rising(2.0, 0.3))
        with_two_rounds(directory, chosen, rising(1.5 + 0.1 * seed, 0.05), rule_bpb=0.5)
    corpus, summary = next(iter(summary_of(tmp_path)["corpora"].items()))
    rows = summary["rows"]
    names = [row["name"] for row in rows]
    assert sorted(names) == ["rope", "rope + chosen on selection (test_ntk, test_yarn)"]
    table = bpb_table(corpus, summary, [2, 4, 8, 16])  # beside rows of the whole sample, its own documents named
    assert "| rope + chosen on selection (test_ntk, test_yarn), test documents only |" in table
    assert "| rope |" in table
    chosen = next(row for row in rows if row["way"] == "chosen on selection")
    assert chosen["rank"] is None  # a choice: never ranked beside the models
    assert chosen["bpb"]["16x"]["mean"] == pytest.approx(np.mean([1.7, 1.8]), rel=1e-9)  # 4 steps of 0.05
    assert "1x" not in chosen["bpb"]  # past the context only
    assert not any("test_linear" in name for name in names)  # scored on selection documents only: no row


def test_a_chosen_row_s_ratio_divides_by_the_plain_model_s_1x_on_the_test_documents(tmp_path):
    """Its figures are on the test documents: its ratio to 1x divides by the plain model's 1x there (1.6, 1.8 by
    seed), not by the whole sample's (2.0), which holds the selection documents too."""
    for seed, plain_test in ((0, 1.6), (1, 1.8)):
        directory = planted(tmp_path, "rope", seed, rising(2.0, 0.3))
        with_two_rounds(directory, "test_ntk", rising(1.5, 0.05), rule_bpb=0.5)
        path = directory / "results.json"
        result = json.loads(path.read_text())
        result["held_out"]["lengths"] = {"128": {"test": {"plain": {"bpb": plain_test}}}}
        path.write_text(json.dumps(result))
    rows = next(iter(summary_of(tmp_path)["corpora"].values()))["rows"]
    chosen = next(row for row in rows if row["way"] == "chosen on selection")
    assert chosen["ratio_to_1x"]["16x"]["mean"] == pytest.approx(np.mean([1.7 / 1.6, 1.7 / 1.8]), rel=1e-9)
    plain = next(row for row in rows if row["way"] == "plain")
    assert plain["ratio_to_1x"]["16x"]["mean"] == pytest.approx(3.2 / 2.0, rel=1e-9)  # whole sample by whole sample


def test_text_ranks_are_over_seeds_and_documents_where_every_row_recorded_them(tmp_path):
    """b is worse than a by 0.05 bits/byte on the whole text, nearly the same in every seed, but document by
    document the gap scatters (sd 0.4): the seeds alone separate the two places, the held-out documents do not."""
    rng = np.random.default_rng(1)
    sizes = rng.integers(500, 5000, size=12)
    base = 2.0 + rng.normal(0, 0.3, size=12)  # documents differ in difficulty
    gap = rng.normal(0, 0.4, size=12)
    gap += 0.05 - (gap * sizes).sum() / sizes.sum()  # byte-weighted: 0.05 exactly
    for encoding, shift in (("a", 0.0), ("b", 1.0)):
        for seed in range(3):
            rate = base + shift * gap + rng.normal(0, 0.002)
            bits = [list(rate * sizes * (1 + 0.05 * i)) for i in range(len(LENGTHS))]
            bpb = {n: float(np.sum(b) / sizes.sum()) for n, b in zip(LENGTHS, bits)}  # the whole sample's figure
            with_documents(planted(tmp_path / "documents", encoding, seed, bpb), bits, sizes.tolist(), [1, 0] * 6)
            planted(tmp_path / "seeds", encoding, seed, bpb)
    by_documents = summary_of(tmp_path / "documents")["corpora"]["wikitext2"]["rows"]
    by_seeds = summary_of(tmp_path / "seeds")["corpora"]["wikitext2"]["rows"]
    assert [row["name"] for row in by_documents] == [row["name"] for row in by_seeds] == ["a", "b"]
    assert {row["rank_over"] for row in by_documents} == {"seeds and documents"}
    assert {row["rank_over"] for row in by_seeds} == {"seeds"}
    assert [row["rank_interval"] for row in by_seeds] == [[1, 1], [2, 2]]  # the seeds alone: separated
    assert [row["rank_interval"] for row in by_documents] == [[1, 2], [1, 2]]  # with the documents: not
    assert "over seeds and held-out documents" in length_markdown(summary_of(tmp_path / "documents"))


def test_runs_trained_with_other_passkey_pairs_are_rows_of_their_own(tmp_path):
    """task.passkey.train_fraction plants key pairs in training windows: runs that differ in it are other models,
    never seeds of one row (the passkey settings were all left out of what tells rows apart)."""
    for seed in (0, 1):
        for fraction in (0.0, 0.1):
            run = planted(tmp_path / f"f{fraction}", "rope", seed, rising(2.0 + fraction + 0.01 * seed, 0.1))
            result = json.loads((run / "results.json").read_text())
            result["config"]["task"]["passkey"]["train_fraction"] = fraction
            (run / "results.json").write_text(json.dumps(result))
    rows = summary_of(tmp_path)["corpora"]["wikitext2"]["rows"]
    names = sorted(row["name"] for row in rows)
    assert len(names) == 2 and any("train_fraction" in name for name in names), names
    assert [row["seeds"] for row in rows] == [2, 2]


def test_a_passkey_grid_averages_only_seeds_of_the_same_trials():
    """Two seeds' grids of 4 and 8 trials a cell once averaged as equals under the first one's "4 trials"; only
    grids of the same distances, depths, trials, draws and key length are one mean."""
    from types import SimpleNamespace

    from poslab.analysis.length import passkey_mean

    runs = [SimpleNamespace(result={"passkey": grid(128, [64, 128], trials, value)}) for trials, value in
            ((4, 0.5), (8, 1.0), (4, 0.25))]  # fmt: skip
    mean = passkey_mean(runs)
    assert mean["seeds"] == 2 and mean["trials"] == 4
    assert mean["exact"][0][0] == pytest.approx((0.5 + 0.25) / 2)


def test_a_row_ranked_alone_reads_only_row_not_a_separated_comparison():
    """A corpus (or stride) with one ranked row has no comparison to separate: ``1 [only row]``, as report zoo."""
    import json
    from pathlib import Path

    from poslab.analysis.length_render import bpb_table
    from poslab.analysis.stats import ONLY_ROW

    summary = json.loads(Path("docs/lm_extrapolation/length.json").read_text())["corpora"]["python_code"]
    plain = [row for row in summary["rows"] if row["way"] == "plain" and row.get("rank") is not None]
    alone = {**summary, "rows": [{**plain[0], "rank": 1, "rank_interval": [1, 1]}], "not_separated": []}
    assert f"| 1 [{ONLY_ROW}] | {plain[0]['name']} |" in bpb_table("python_code", alone, [2, 4])
    two = {
        **summary,
        "rows": [{**row, "rank": i + 1, "rank_interval": [i + 1, i + 1]} for i, row in enumerate(plain[:2])],
    }
    assert ONLY_ROW not in bpb_table("python_code", two, [2, 4])
