"""The well's shape (claim H3) and the bits/byte with their document replicates: each run's growth r(2) − r(1) and
recovery r(last) − U* from the bootstrap resamples' curves, the bits/byte from the per-document losses of its
results.json, both kept in the summary and read back, so that their figures over seeds get intervals over seeds
and documents like U*'s."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from poslab.analysis.hrope.compute import analyze_documents, bits_per_byte_replicates, read_run_facts
from poslab.analysis.hrope.render import render_summary, shape_table, summary_json
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.hrope.seeds import arm_summaries
from poslab.analysis.hrope.shape import last_displacement, shape_of, shape_values
from poslab.analysis.hrope.well import Well
from poslab.analysis.stats import resample_weights
from tests.analysis.test_hrope_pinned import DOCUMENT_BYTES, DOCUMENT_OFFSETS, fake_run_dir
from tests.analysis.test_hrope_readings import documents

#: a well that deepens from one paragraph to two and shrinks again by four (the write-up's H3)
GROWS_THEN_SHRINKS = {1: -0.4, 2: -1.0, 3: -0.6, 4: -0.2}


class WellModel(torch.nn.Module):
    """Attention whose log relative to uniform is ``0.5 - 0.02 d + well[k]`` (``k`` the paragraph displacement by
    the coordinate it is given, ``d`` the token distance; ``tests.analysis.test_hrope_analysis.planted_attention``
    as a model): the main reading's residual curve is ``well`` exactly, in every document."""

    def __init__(self, well: dict[int, float]) -> None:
        super().__init__()
        self.well = well

    def forward(self, tokens: torch.Tensor, coordinates: dict[str, torch.Tensor], return_attention: bool = True):
        T = tokens.shape[1]
        p = coordinates["paragraph"]
        k = (p[:, :, None] - p[:, None, :]).clamp_min(0)
        table = torch.tensor([self.well.get(v, 0.0) for v in range(int(k.max()) + 1)], dtype=torch.float64)
        i, j = torch.arange(T, dtype=torch.float64)[:, None], torch.arange(T, dtype=torch.float64)[None, :]
        attention = torch.exp(0.5 - 0.02 * (i - j) + table[k] - torch.log(i + 1)).masked_fill(j > i, 0.0)
        return SimpleNamespace(attention=[attention[:, None]])


def analysis(well: dict[int, float], seed: int = 0, bootstrap: int = 60, corpus: str = "python_code",
             encoding: str = "hrope_axial") -> RunAnalysis:  # fmt: skip
    result = analyze_documents(WellModel(well), iter(documents()), batch_size=3, min_pairs=1,
                               bootstrap=bootstrap, progress=False)  # fmt: skip
    return RunAnalysis(f"/runs/{encoding}_{seed}", encoding, corpus, seed, **result)


def test_growth_and_recovery_read_the_planted_curve():
    """Growth is r(2) − r(1) and recovery r(last) − U* on the main reading's curve: a planted well deepest at two
    paragraphs gives growth −0.6 and recovery +0.8 at the last displacement the documents have (4)."""
    run = analysis(GROWS_THEN_SHRINKS)
    residual = run.well.residual
    assert last_displacement(residual) == 4 and run.well.location == 2
    assert run.shape["growth"].value == pytest.approx(residual[2] - residual[1])
    assert run.shape["recovery"].value == pytest.approx(residual[4] - run.main.depth.value)
    assert run.shape["growth"].value == pytest.approx(-0.6, abs=1e-9)
    assert run.shape["recovery"].value == pytest.approx(0.8, abs=1e-9)
    # a curve with nothing at 2, or none at all: nan, not an error
    assert math.isnan(shape_values(Well(np.array([0.0, -0.3]), np.array([9, 9]), -0.3, 1, np.zeros(2)))["growth"])
    assert last_displacement(np.array([0.0, np.nan])) == -1


def test_the_shape_replicates_are_the_same_statistic_on_each_resample():
    """Each replicate is growth and recovery of that resample's curve, its U* that curve's minimum (the U*
    replicate): one set of resamples for every statistic of the run."""
    run = analysis({1: -0.3, 2: -0.7, 3: -0.5, 4: -0.1})
    curves = np.stack([np.r_[0.0, -0.3, -0.5, -0.4, -0.1], np.r_[0.0, -0.2, -0.9, np.nan, -0.6]])
    found = shape_of(curves, np.array([-0.5, -0.9]), 4)
    assert found["growth"] == pytest.approx([-0.2, -0.7]) and found["recovery"] == pytest.approx([0.4, 0.3])
    growth, recovery = run.shape["growth"].replicates, run.shape["recovery"].replicates
    assert len(growth) == len(recovery) == 60 and np.all(np.isfinite(growth))
    assert np.all(recovery >= 0)  # r(last) − the resample's own minimum
    # the planted well is the same in every document: every resample gives it
    assert np.allclose(growth, -0.4, atol=1e-9) and np.allclose(recovery, 0.6, atol=1e-9)


def test_the_shape_of_three_seeds_has_an_interval_over_seeds_and_documents_and_reads_back_from_the_summary():
    """Three seeds of a planted well (deeper at 2 the larger the seed) and RoPE's flat curve: growth and recovery over
    seeds and documents, growth paired with RoPE's by seed and resample; the summary's entries keep the replicates,
    and an entry written before they were kept gives the values from its curve, over seeds only, said so."""
    runs = []
    for seed in range(3):
        scaled = {k: v * (1 + 0.2 * seed) for k, v in GROWS_THEN_SHRINKS.items()}
        runs.append(analysis(scaled, seed))
        runs.append(analysis({}, seed, encoding="rope"))
    arm = {s["arm"]: s for s in arm_summaries(runs)}["hrope_axial"]["shape"]
    assert arm["deepest_at"] == [2, 2, 2] and arm["last"] == [4, 4, 4]
    assert arm["growth"]["over"] == "seeds and documents" and arm["growth"]["high"] < 0
    assert arm["growth"]["per_seed"] == pytest.approx([-0.6, -0.72, -0.84], abs=1e-6)
    assert arm["recovery"]["over"] == "seeds and documents" and arm["recovery"]["low"] > 0
    assert arm["growth_minus_rope"]["over"] == "seeds and documents"
    assert arm["growth_minus_rope"]["mean"] == pytest.approx(-0.72, abs=1e-6)
    table = shape_table(arm_summaries(runs))
    assert "| hrope_axial | Code | 2 / 2 / 2 | 4 | −0.72 [" in table and "(seeds only)" not in table.splitlines()[0]
    back = [RunAnalysis.from_summary(json.loads(json.dumps(r.entry()))) for r in runs]
    assert np.allclose(back[0].shape["growth"].replicates, runs[0].shape["growth"].replicates, atol=1e-5)
    assert back[0].shape["growth"].interval == pytest.approx(runs[0].shape["growth"].interval)
    again = json.loads(json.dumps(arm_summaries(back)))[0]["shape"]["growth"]
    bounds = ("low", "mean", "high")
    assert [again[k] for k in bounds] == pytest.approx([arm["growth"][k] for k in bounds])
    old = []
    for r in runs:  # an entry written before the shape's replicates were kept
        entry = r.entry()
        del entry["replicates"]["shape"], entry["shape"]
        old.append(RunAnalysis.from_summary(entry))
    assert old[0].shape is None and old[0].well_shape["growth"].value == pytest.approx(runs[0].shape["growth"].value)
    bare = {s["arm"]: s for s in arm_summaries(old)}["hrope_axial"]["shape"]["growth"]
    assert bare["over"] == "seeds only" and bare["low"] is None and bare["seeds_only"]["high"] < 0
    assert "| r(2) − r(1) (seeds only) |" in shape_table(arm_summaries(old))


def test_bits_per_byte_replicates_resample_the_held_out_documents_losses(tmp_path):
    """Bits/byte of each resample of the validation documents (their summed loss over their summed bytes), drawn as
    the analysis draws its own (seed + 1): the same resamples in every run of a corpus. None where the results hold
    no per-document sums, or sums that do not add up to the run's figure."""
    run_dir = fake_run_dir(tmp_path, 0, "rope", "python_code", 0)  # with per-document sums
    saved = json.loads((run_dir / "results.json").read_text())
    bpb = saved["figures"]["val_bpb"]
    facts = read_run_facts(run_dir, bootstrap=50, seed=3)
    weights, sizes = resample_weights(4, 50, 4), np.array(DOCUMENT_BYTES)
    loss = (bpb + np.array(DOCUMENT_OFFSETS)) * sizes * math.log(2)
    expected = weights @ loss / (weights @ sizes) / math.log(2)
    assert facts.val_bpb == bpb and np.allclose(facts.val_bpb_replicates, expected)
    assert len(read_run_facts(run_dir).val_bpb_replicates) == 0  # bootstrap 0: none asked for
    assert len(bits_per_byte_replicates(saved, bpb + 0.01, 50, 0)) == 0  # the sums are another figure's
    del saved["held_out"]["documents"]["main"]["by_length"]["256"]["loss"]
    assert len(bits_per_byte_replicates(saved, bpb, 50, 0)) == 0
    del saved["held_out"]
    assert len(bits_per_byte_replicates(saved, bpb, 50, 0)) == 0  # results written before they were kept


def test_bits_per_byte_over_seeds_and_documents_in_the_summary_table(tmp_path):
    """Runs whose results hold per-document losses: bits/byte and its difference from RoPE's (paired by seed and
    resample) over seeds and documents; kept in the entries and read back; the header says "(seeds only)" only
    where no run keeps them."""
    runs = []
    for number, (encoding, seed) in enumerate((e, s) for s in range(3) for e in ("hrope_axial", "rope")):
        run_dir = fake_run_dir(tmp_path, number, encoding, "python_code", seed)
        run = analysis({1: -0.5} if encoding == "hrope_axial" else {}, seed, 20, encoding=encoding)
        run.facts = read_run_facts(run_dir, bootstrap=20)
        runs.append(run)
    back = [RunAnalysis.from_summary(json.loads(json.dumps(r.entry()))) for r in runs]
    assert np.allclose(back[0].facts.val_bpb_replicates, runs[0].facts.val_bpb_replicates, rtol=1e-5)
    summary = {s["arm"]: s for s in arm_summaries(back)}["hrope_axial"]
    assert summary["val_bpb"]["over"] == "seeds and documents" and summary["val_bpb"]["low"] is not None
    # the same per-document offsets in every run: the paired difference is the seeds' alone (0.01 apart per run)
    assert summary["val_bpb_minus_rope"]["mean"] == pytest.approx(-0.01)
    assert summary["val_bpb_minus_rope"]["document_term"] == pytest.approx(0.0, abs=1e-12)
    header = render_summary(arm_summaries(back)).splitlines()[0]
    assert "| val bits/byte | − RoPE's | U* |" in header
    for r in back:
        r.facts = replace(r.facts, val_bpb_replicates=np.zeros(0))
    header = render_summary(arm_summaries(back)).splitlines()[0]
    assert "| val bits/byte (seeds only) | − RoPE's (seeds only) |" in header


def test_the_summary_file_puts_each_list_of_numbers_on_one_line():
    """``hrope.json`` is the same JSON with its lists of numbers (a thousand replicates each) on one line."""
    summary = {"runs": [{"run_dir": "a [1,\n 2]", "U*": [-0.5, None, 1e-07], "x": [[1, 2], []], "s": ["a", "b"]}]}
    text = summary_json(summary).decode()
    assert json.loads(text) == summary
    assert '"U*": [-0.5, null, 1e-07]' in text and "[\n        1,\n" not in text
    assert '"s": [\n' in text  # strings keep one a line
