"""The hRoPE analyses' readings: what "cross-paragraph attention" means under an intervention, the U* readings
of the robustness table, and the intervals over seeds and documents (seed term + document term with a t on
seeds − 1 df; paired by seed and document resample on one corpus, Welch's across corpora; the t-interval over
seeds alone beside them). Each on planted values whose answer is known."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from poslab.analysis.hrope.attention import intervention_readings, pair_statistics
from poslab.analysis.hrope.compute import analyze_documents
from poslab.analysis.hrope.documents import Document, fake_merge, fake_split, merge_boundary, split_position
from poslab.analysis.hrope.intervals import (
    SEEDS_ONLY,
    over_seeds_documents,
    paired_seeds_documents,
    welch_seeds_documents,
)
from poslab.analysis.hrope.readings import INTERVENTION_READINGS, u_readings
from poslab.analysis.hrope.render import comparison_table, depth_cell, render_summary, robustness_tables
from poslab.analysis.hrope.runs import Depth, RunAnalysis, RunFacts
from poslab.analysis.hrope.seeds import arm_summaries, claims
from poslab.analysis.hrope.well import Well, well_from
from poslab.analysis.stats import Estimate, crossed_interval, resample_weights, seed_difference
from tests.analysis.test_hrope_analysis import document, planted_attention


class PlantedModel(torch.nn.Module):
    """Causal attention ``softmax_j(-penalty[k] - 0.01 d)``, ``k`` the paragraph displacement between key and
    query by the paragraph coordinate it is given (``penalty``: displacement -> logit penalty; 0 beyond the
    dict's largest key uses its last value), ``d`` the token distance. ``{}``: blind to paragraphs."""

    def __init__(self, penalty: dict[int, float]) -> None:
        super().__init__()
        self.penalty = penalty

    def forward(self, tokens: torch.Tensor, coordinates: dict[str, torch.Tensor], return_attention: bool = True):
        T = tokens.shape[1]
        p = coordinates["paragraph"]
        k = (p[:, :, None] - p[:, None, :]).clamp_min(0)
        top = max(self.penalty, default=0)
        table = torch.tensor([self.penalty.get(min(v, top), 0.0) for v in range(int(k.max()) + 1)])
        i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
        logits = -table[k] - 0.01 * (i - j)
        logits = logits.masked_fill(j > i, float("-inf"))
        return SimpleNamespace(attention=[torch.softmax(logits.double(), dim=-1)[:, None]])


def documents(n: int = 6) -> list[Document]:
    return [document([7 + s, 9, 6 + (s % 3), 8, 5 + s], seed=s) for s in range(n)]


def interventions(model: torch.nn.Module) -> dict[str, dict[str, float]]:
    result = analyze_documents(model, iter(documents()), batch_size=3, min_pairs=1, bootstrap=50, progress=False)
    return {r: {kind: e.value for kind, e in by_kind.items()} for r, by_kind in result["interventions"].items()}


def test_each_intervention_reading_has_its_sign_on_a_model_that_suppresses_attention_across_paragraphs():
    """A boundary costs attention (penalty 1 at every displacement >= 1). Merging a real boundary lifts the
    pairs across it, and the softmax takes that mass from everything else; splitting does the opposite."""
    readings = interventions(PlantedModel({1: 1.0}))
    assert set(readings) == set(INTERVENTION_READINGS)
    # same pairs: the pairs across the boundary gain when it is merged away, lose when one is inserted
    assert readings["same_pairs"]["merge"] > 0.1 and readings["same_pairs"]["split"] < -0.1
    # persistent cross mass: keys in another paragraph before and after lose to the merged pairs, gain from the
    # split ones (the write-up's sentence: merge lowers, split raises cross-paragraph attention)
    assert readings["persistent_mass"]["merge"] < -0.005 and readings["persistent_mass"]["split"] > 0.005
    # real cross mass: merged, the queries attend more outside their real paragraph (the merged pairs are
    # across a real boundary); split, their own paragraph's first half is now penalised: more outside it too
    assert readings["real_cross_mass"]["merge"] > 0.005 and readings["real_cross_mass"]["split"] > 0.005


def test_every_intervention_reading_is_exactly_zero_for_a_model_blind_to_the_paragraph_index():
    readings = interventions(PlantedModel({}))
    assert all(value == 0.0 for by_kind in readings.values() for value in by_kind.values())


def test_mass_by_the_labels_after_the_intervention_moves_for_a_blind_model_so_it_is_not_a_reading():
    """Why poslab offers no "cross mass by the new labels": relabelling alone moves it."""
    doc = documents(1)[0]
    blind = PlantedModel({})
    tokens = torch.as_tensor(doc.tokens)[None]
    attention = blind(tokens, {"paragraph": torch.as_tensor(doc.paragraph)[None]}).attention[0][0, 0]
    at = merge_boundary(doc.paragraph)
    merged = fake_merge(doc.paragraph, at)
    queries = np.flatnonzero(merged == merged[at])
    queries = queries[queries >= at]

    def cross_mass(labels: np.ndarray) -> float:
        mask = torch.as_tensor(labels[queries][:, None] != labels[None, :]) & torch.as_tensor(
            np.arange(len(labels))[None, :] <= queries[:, None]
        )
        return float((attention[torch.as_tensor(queries)] * mask).sum(dim=1).mean())

    assert abs(cross_mass(merged) - cross_mass(doc.paragraph)) > 0.05  # the attention did not move at all
    readings = intervention_readings(attention, attention, doc.paragraph, merged, at)
    assert all(v == 0.0 for v in readings.values())


def test_intervention_readings_use_the_queries_just_after_the_boundary():
    """Only queries after the manipulated boundary can change; a split's readings use its queries."""
    doc = documents(1)[0]
    model = PlantedModel({1: 2.0})
    at = split_position(doc.paragraph)
    split = fake_split(doc.paragraph, at)

    def attention(paragraph: np.ndarray) -> torch.Tensor:
        return model(torch.as_tensor(doc.tokens)[None], {"paragraph": torch.as_tensor(paragraph)[None]}).attention[0][
            0, 0
        ]

    before, after = attention(doc.paragraph), attention(split)
    assert torch.allclose(before[:at], after[:at])  # queries before the new boundary: untouched
    readings = intervention_readings(before, after, doc.paragraph, split, at)
    queries = np.flatnonzero((doc.paragraph == doc.paragraph[at]) & (np.arange(len(doc)) >= at))
    keys = np.flatnonzero((doc.paragraph == doc.paragraph[at]) & (np.arange(len(doc)) < at))
    expected = (torch.log(after[queries][:, keys]) - torch.log(before[queries][:, keys])).mean()
    assert readings["same_pairs"] == pytest.approx(float(expected))


def test_each_u_reading_recovers_a_well_planted_for_it():
    planted = {1: -0.3, 2: -0.6, 3: -0.9, 4: -0.6, 5: -0.3}
    readings = {r.name: r for r in u_readings("linear")}
    assert list(readings) == ["main", "no_log_n", "no_key_0", "same_paragraph_trend", "log_trend"]
    attention, doc = planted_attention([12] * 16, planted)

    def depth(reading_name: str, a: torch.Tensor) -> float:
        r = readings[reading_name]
        stats = pair_statistics(a, [len(doc)], [doc.paragraph], r, max_displacement=10)
        return well_from(stats, min_pairs=1, trend_on=r.trend_on).depth

    for name in ("main", "same_paragraph_trend", "log_trend"):
        assert depth(name, attention) == pytest.approx(-0.9, abs=1e-9), name
    # a planted sink: key 0 gets 3x its attention. Only the reading without key 0 still finds the well exactly
    sink = attention.clone()
    sink[..., 0] *= 3.0
    assert depth("main", sink) != pytest.approx(-0.9, abs=1e-3)
    assert depth("no_key_0", sink) == pytest.approx(-0.9, abs=1e-9)
    # attention planted without the 1/n of a softmax over n keys: the reading without + log n finds it
    i = torch.arange(len(doc), dtype=torch.float64)[:, None]
    raw = attention * (i + 1)
    assert depth("no_log_n", raw) == pytest.approx(-0.9, abs=1e-9)
    assert depth("main", raw) != pytest.approx(-0.9, abs=1e-3)
    assert [r.name for r in u_readings("log")][-1] == "linear_trend"


def test_the_trend_fitted_on_same_paragraph_pairs_ignores_the_cross_paragraph_pairs():
    """A trend fitted on all pairs alone absorbs part of a well; on same-paragraph pairs it cannot."""
    attention, doc = planted_attention([12] * 16, {k: -0.5 for k in range(1, 12)}, slope=-0.01)
    r = u_readings("linear")[3]
    stats = pair_statistics(attention, [len(doc)], [doc.paragraph], r, max_displacement=12)
    well = well_from(stats, min_pairs=1, trend_on="same_paragraph")
    assert np.allclose(well.coefficients, [0.5, -0.01], atol=1e-9)
    assert np.allclose(well.residual[1:12], -0.5, atol=1e-9)


def test_the_interval_over_seeds_and_documents_adds_the_documents_to_the_seed_scatter():
    """Three seeds spread 0.3 apart on shared documents whose resamples move every seed by the same 0.01 (sd): the
    document term is that variance, not a third of it (the seeds read the same documents), and the interval is the
    t over 2 df on the two terms together, never narrower than the t-interval over the seeds alone."""
    noise = 0.01 * np.random.default_rng(0).standard_normal(500)
    runs = {seed: Estimate.of(v, v + noise) for seed, v in enumerate((-0.6, -0.3, 0.0))}
    crossed = over_seeds_documents(runs)
    assert crossed.seed_term == pytest.approx(0.09 / 3) and crossed.document_term == pytest.approx(
        np.var(noise, ddof=1)
    )
    half = 4.303 * math.sqrt(0.09 / 3 + np.var(noise, ddof=1))
    assert (crossed.interval.low, crossed.interval.high) == pytest.approx((-0.3 - half, -0.3 + half))
    assert crossed.interval.low < crossed.seeds_only.low and crossed.interval.high > crossed.seeds_only.high
    assert crossed.df == 2 and crossed.resamples == 500 and crossed.over == "seeds and documents"
    # resamples drawn apart for each seed would average out: their document term is a third
    apart = {s: Estimate.of(e.value, e.value + np.roll(noise, 150 * s)) for s, e in runs.items()}
    assert over_seeds_documents(apart).document_term < crossed.document_term / 2
    # no replicates (a summary written before they were kept): no interval over seeds and documents, said so
    bare = over_seeds_documents({s: Estimate(e.value, (0.0, 0.0)) for s, e in runs.items()})
    assert bare.over == SEEDS_ONLY and not bare.interval.has_interval and bare.seeds_only.has_interval
    one = over_seeds_documents({0: runs[0]})
    assert one.interval.n == 1 and not one.interval.has_interval


def test_the_document_term_is_the_crossed_tables_for_a_mean_over_documents():
    """For a figure that is a mean over documents, the interval is ``stats.crossed_interval``'s on the seeds x
    documents table (its stated equivalent): the same seed term, and the document term within the bootstrap's
    error (the resamples of a mean vary as the documents' column means do)."""
    rng = np.random.default_rng(3)
    documents = 40
    table = 0.2 * rng.standard_normal((3, 1))[:, :1] + 0.5 * rng.standard_normal((1, documents))
    table = table + 0.05 * rng.standard_normal((3, documents))
    weights = resample_weights(documents, 4000, 1)  # one set of resamples for every seed, as the analysis draws
    runs = {s: Estimate.of(row.mean(), weights @ row / documents) for s, row in enumerate(table)}
    crossed, reference = over_seeds_documents(runs), crossed_interval(table)
    assert crossed.seed_term == pytest.approx(reference.seed_term)
    assert crossed.document_term == pytest.approx(reference.document_term * (documents - 1) / documents, rel=0.1)


def test_a_difference_paired_by_resample_cancels_what_a_document_does_to_both_arms():
    """Two arms on the same documents: what a resample does to both cancels replicate by replicate, so the paired
    interval is the t-interval over the per-seed differences; across corpora (Welch's) the two groups' document
    terms add."""
    noise = 0.05 * np.random.default_rng(1).standard_normal(400)
    a = {s: Estimate.of(v, v + noise) for s, v in enumerate((-0.50, -0.48, -0.53))}
    b = {s: Estimate.of(v, v + noise) for s, v in enumerate((-0.30, -0.31, -0.29))}
    paired = paired_seeds_documents(a, b)
    assert (
        paired.document_term == pytest.approx(0.0, abs=1e-15) and paired.test == "paired over 3 seeds and the documents"
    )
    assert (paired.interval.low, paired.interval.high) == pytest.approx((paired.seeds_only.low, paired.seeds_only.high))
    assert paired.difference().side == -1
    welch = welch_seeds_documents(a, b)
    assert welch.document_term == pytest.approx(2 * np.var(noise, ddof=1)) and welch.test.startswith("Welch over")
    assert welch.interval.high - welch.interval.low > 2 * (paired.interval.high - paired.interval.low)


def test_a_difference_paired_by_seed_cancels_what_a_seed_does_to_both_arms():
    """ΔU* of an arm minus RoPE's on one corpus: seed s trains both on the same batches and both read the same
    documents, so a seed's shared effect cancels in the per-seed difference; Welch's (no pairing) keeps it."""
    seed_effect = {0: -0.2, 1: 0.0, 2: 0.25}
    arm = {s: 0.10 + e + 0.002 * s for s, e in seed_effect.items()}
    rope = {s: 0.04 + e for s, e in seed_effect.items()}
    paired = seed_difference(arm, rope, paired=True)
    assert paired.test == "paired over 3 seeds" and paired.interval.mean == pytest.approx(0.062)
    assert 0.05 < paired.interval.low < paired.interval.high < 0.075 and paired.side == 1
    unpaired = seed_difference(arm, rope, paired=False)
    assert unpaired.test.startswith("Welch, ") and unpaired.side == 0  # not separated
    assert unpaired.t == pytest.approx(0.062 / math.sqrt(2 * np.var(list(rope.values()), ddof=1) / 3), rel=0.05)
    one_common = seed_difference({0: 0.1, 1: 0.2}, {1: 0.0, 2: 0.1}, paired=True)
    assert one_common.test.startswith("Welch")  # one common seed: nothing to pair


def test_the_interval_over_seeds_is_the_t_interval_the_referee_computes():
    """rand_axial's U* on OpenWebText with a seed sd of 0.17: a t-interval over 3 seeds is ±0.42, the documents held
    fixed (runs without document replicates: said "seeds only")."""
    bare = lambda values: [Estimate(v, (math.nan, math.nan)) for v in values]
    assert depth_cell(bare([-0.50, -0.33, -0.16])) == "−0.33 [−0.75, +0.09] sd 0.17 (3) (seeds only)"
    assert depth_cell(bare([-0.30])) == "−0.30 (1)" and depth_cell(bare([math.nan])) == "n/a"
    # seeds that split into two outcomes are listed one by one
    assert depth_cell(bare([-0.02, -0.05, -0.90])).endswith("(3) (seeds only) (split: −0.02 / −0.05 / −0.90)")
    # with document replicates the documents' share is added: sd 0.01 per resample, shared by the seeds
    noise = 0.01 * np.random.default_rng(0).standard_normal(500)
    cell = depth_cell([Estimate.of(v, v + noise) for v in (-0.50, -0.33, -0.16)])
    assert cell == "−0.33 [−0.75, +0.09] sd 0.17 (3)"  # the seeds' 0.0096 dwarfs the documents' 0.0001


def fake_analysis(tmp_path, encoding: str, corpus: str, seed: int, depths: dict[str, float], shuffle: float,
                  frequencies: str | None = None, bpb: float = 2.0) -> RunAnalysis:  # fmt: skip
    """A run's analysis with the given U* per reading and ΔU* (replicates: the value plus shared noise)."""
    run_dir = tmp_path / f"{encoding}_{frequencies}_{corpus}_{seed}"
    noise = np.random.default_rng(0).standard_normal(300) * 0.01  # the same document resamples in every run
    well = Well(np.array([0.0, -0.2]), np.array([1000, 500]), -0.2, 1, np.zeros(2))
    readings = {
        name: Depth(well, well, Estimate.of(value, value + noise), Estimate.of(shuffle, shuffle + noise))
        for name, value in depths.items()
    }
    zero = Estimate.of(0.0, np.zeros(300))
    return RunAnalysis(
        str(run_dir), encoding, corpus, seed, 30, 25, readings,
        {r: {"merge": zero, "split": zero} for r in INTERVENTION_READINGS}, frequencies, facts=RunFacts(val_bpb=bpb),
    )  # fmt: skip


def test_the_report_says_under_which_readings_a_claim_holds_and_compares_each_shuffle_with_ropes(tmp_path):
    names = [r.name for r in u_readings("linear")]
    runs = []
    for seed in range(3):
        # hrope_axial deeper than rand_axial under every reading but the last (by 0.3 - 0.03 x seed); its shuffle
        # moves 0.10 + 0.01 x seed, RoPE's 0.04 and rand_axial's 0.04 in every seed (a difference of no width)
        hrope = {name: value + 0.02 * seed for name, value in zip(names, [-0.8, -0.7, -0.8, -0.6, -0.1])}
        rand = {name: value - 0.01 * seed for name, value in zip(names, [-0.5, -0.4, -0.5, -0.3, -0.4])}
        runs.append(fake_analysis(tmp_path, "hrope_axial", "python_code", seed, hrope, 0.10 + 0.01 * seed, "split"))
        runs.append(fake_analysis(tmp_path, "rand_axial", "python_code", seed, rand, 0.04, "split"))
        runs.append(fake_analysis(tmp_path, "hrope_axial", "python_code", seed, hrope, 0.04, "interleaved", 1.9))
        runs.append(fake_analysis(tmp_path, "rope", "python_code", seed, dict.fromkeys(names, -0.3), 0.04))
    text = robustness_tables(runs)
    rule = "paired over 3 seeds and the documents; the difference's 95% interval over seeds and documents"
    assert f"Code: hrope_axial:split deeper than rand_axial:split ({rule} below 0): holds under main, no_log_n, " \
        "no_key_0, same_paragraph_trend; not under log_trend" in text  # fmt: skip
    assert f"the shuffle moves hrope_axial:split's U* beyond RoPE's ({rule} excludes 0): holds under all 5 " \
        "readings" in text  # fmt: skip
    # rand_axial's shuffle equals RoPE's in every seed: an interval of no width decides nothing (docs/verdicts.md)
    assert f"the shuffle moves rand_axial:split's U* beyond RoPE's ({rule} excludes 0): holds under none" in text
    assert f"the shuffle moves hrope_axial:split's U* beyond rand_axial:split's ({rule} excludes 0)" in text
    table = render_summary(arm_summaries(runs)).splitlines()
    degenerate = "[degenerate: all 3 seeds equal]"  # bits/byte the same in every seed: said, not a [2.00, 2.00]
    row = next(line for line in table if line.startswith(f"| hrope_axial:split | Code | 3 | 2.000 {degenerate} |"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    # over seeds and documents: mean ± t(2) 4.303 x sqrt(sd² / 3 + 0.01²) (U*: sd 0.02, ΔU*: sd 0.01; every run's
    # resamples move it by the same noise of sd 0.01, which cancels in ΔU* minus RoPE's, paired by resample)
    assert cells[5] == "−0.78 [−0.85, −0.71]" and cells[6] == "+0.11 [+0.06, +0.16]"
    assert cells[7] == "+0.07 [+0.05, +0.09]"  # ΔU* minus RoPE's, paired by seed and resample
    assert cells[-2:] == ["−0.78 [−0.83, −0.73]", "+0.11 [+0.09, +0.13]"]  # over seeds only: t(2) x sd / sqrt(3)
    assert cells[4] == "+0.000 [+0.000, +0.000]"  # bits/byte − RoPE's, over seeds only
    assert any(line.startswith(f"| hrope_axial:interleaved | Code | 3 | 1.900 {degenerate} |") for line in table)
    assert any(line.startswith("| rope | Code | 3 |") and "| — |" in line for line in table)
    compared = comparison_table(claims(runs))
    # −0.27 ± 4.303 x 0.03 / sqrt(3) (the documents cancel); t = −0.27 / (0.03 / sqrt(3)) = −15.59
    assert "| Code: hrope_axial:split deeper than rand_axial:split | −0.27 [−0.34, −0.20] | −0.27 [−0.34, −0.20] | " \
        "paired over 3 seeds and the documents | −15.59 | deeper |" in compared  # fmt: skip
    assert "beyond RoPE's | +0.00 [+0.00, +0.00] | +0.00 [+0.00, +0.00] | paired over 3 seeds and the documents | " \
        "n/a | n/a (degenerate: every seed and resample the same difference) |" in compared  # fmt: skip


def test_deeper_by_seed_means_alone_is_not_separated(tmp_path):
    """hrope_axial's seed mean is deeper than rand_axial's, but the seeds scatter: the paired interval of the
    difference holds 0, and the claim does not hold. Across corpora the comparison is Welch's."""
    names = [r.name for r in u_readings("linear")]
    runs = []
    for seed, (h, r, w) in enumerate([(-0.9, -0.5, -0.30), (-0.3, -0.55, -0.32), (-0.6, -0.45, -0.28)]):
        runs.append(fake_analysis(tmp_path, "hrope_axial", "python_code", seed, dict.fromkeys(names, h), 0.1))
        runs.append(fake_analysis(tmp_path, "rand_axial", "python_code", seed, dict.fromkeys(names, r), 0.1))
        runs.append(fake_analysis(tmp_path, "hrope_axial", "wikitext2", seed, dict.fromkeys(names, w), 0.1))
    found = {c.text: c for c in claims(runs)}
    versus = found["Code: hrope_axial deeper than rand_axial"]
    assert versus.differences["main"].interval.mean == pytest.approx(-0.1)
    assert versus.verdict() == "not separated" and not versus.holds("main")
    corpora = found["hrope_axial: deeper on Code than on WikiText-2"]
    difference = corpora.differences["main"].difference()
    assert difference.test.startswith("Welch over seeds and the documents, ")
    # each group's seed variance / 3 and its document term (the shared noise: sd 0.01, 1e-4)
    documents = np.var(0.01 * np.random.default_rng(0).standard_normal(300), ddof=1)
    assert difference.t == pytest.approx(-0.3 / math.sqrt(0.09 / 3 + 0.0004 / 3 + 2 * documents))
    assert 2.0 < difference.df < 2.1
    assert corpora.verdict() == "not separated"  # t −1.7 on 2 df
    rule = "paired over 3 seeds and the documents; the difference's 95% interval over seeds and documents below 0"
    assert f"Code: hrope_axial deeper than rand_axial ({rule}): holds under none" in robustness_tables(runs)
    summary = {(s["arm"], s["corpus"]): s for s in arm_summaries(runs)}
    depth = summary[("hrope_axial", "Code")]["U*"]
    assert depth["per_seed"] == [-0.9, -0.3, -0.6] and depth["n"] == 3 and not depth["split"]
    assert depth["over"] == "seeds and documents" and depth["seeds_only"]["n"] == 3
    assert depth["mean"] == pytest.approx(-0.6)
    assert depth["high"] - depth["mean"] == pytest.approx(4.303 * math.sqrt(0.09 / 3 + documents))
    assert depth["seeds_only"]["high"] - depth["mean"] == pytest.approx(4.303 * 0.3 / 3**0.5)
    json.dumps(summary[("hrope_axial", "Code")], allow_nan=False)  # the arms' JSON holds no NaN


def test_a_run_without_document_replicates_decides_no_claim(tmp_path):
    """Runs read back from a summary that kept no document replicates (written before they were): their figures are
    over seeds only, said so, and no claim gets a verdict from them (docs/verdicts.md: over seeds and documents)."""
    names = [r.name for r in u_readings("linear")]
    runs = []
    for seed in range(3):
        runs.append(
            fake_analysis(tmp_path, "hrope_axial", "python_code", seed, dict.fromkeys(names, -0.9 + 0.01 * seed), 0.1)
        )
        runs.append(fake_analysis(tmp_path, "rand_axial", "python_code", seed, dict.fromkeys(names, -0.3), 0.1))
    bare = [RunAnalysis.from_summary(r.summary()) for r in runs]  # an hrope_runs.json entry: no replicates
    claim = {c.text: c for c in claims(bare)}["Code: hrope_axial deeper than rand_axial"]
    assert claim.verdict() == "n/a (no document replicates: over seeds only)" and not claim.holds("main")
    assert claim.differences["main"].seeds_only.high < 0  # over seeds alone it would separate
    row = "| n/a (no document replicates) | −0.59 [−0.61, −0.57] | paired over 3 seeds | n/a |"
    assert row in comparison_table([claim])
    summary = {(s["arm"], s["corpus"]): s for s in arm_summaries(bare)}[("hrope_axial", "Code")]
    assert summary["U*"]["over"] == "seeds only" and summary["U*"]["low"] is None
    assert "(seeds only)" in render_summary([summary])
    kept = [RunAnalysis.from_summary(json.loads(json.dumps(r.entry()))) for r in runs]  # the summary's entries
    assert {c.text: c for c in claims(kept)}["Code: hrope_axial deeper than rand_axial"].verdict() == "deeper"
    back = kept[0]
    assert len(back.depths["no_key_0"].depth.replicates) == 300  # every reading's replicates are kept
    assert len(back.interventions["persistent_mass"]["merge"].replicates) == 300
