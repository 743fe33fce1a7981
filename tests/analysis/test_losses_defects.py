"""The review of ``poslab report losses`` (its item 1): runs that read different text were averaged as seeds, mixed
hosts were not stated, and the means had no interval. Planted runs (``test_report_summaries.lm_result``) with the
data hash, host and held-out documents' sums the real runs record."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from poslab.analysis.losses import compute_losses
from poslab.analysis.losses_render import losses_markdown
from poslab.analysis.stats import Interval, crossed_interval, linearised_ratio
from tests.analysis.test_report_summaries import lm_result

CONTEXT = 64
TOKENS = [120, 80, 200, 50]
BYTES = [130, 90, 210, 70]


def document_losses(seed: int) -> list[float]:
    """Each held-out document's summed loss (nats): every seed a little apart, every document its own."""
    return [round(t * (1.2 + 0.05 * seed + 0.03 * d), 6) for d, t in enumerate(TOKENS)]


def plant(root: Path, name: str, seed: int, *, sha: str = "a" * 64, cpu: str = "AMD EPYC", documents: bool = True):
    """A finished lm run of rope on wikitext2 whose figures are its documents' (held_out.documents at the context,
    every document in the plain way) read from source files of hash ``sha`` on a ``cpu`` host."""
    losses = document_losses(seed)
    figures = {"val_loss": sum(losses) / sum(TOKENS), "val_bpb": sum(losses) / math.log(2) / sum(BYTES), "step": 100}
    extra = {
        "context_length": CONTEXT,
        "sources": {"main": {"files": 1, "file_bytes": 1000, "sha256": sha}},
        "environment": {"cpu": cpu},
    }
    if documents:
        by_length = {str(CONTEXT): {"tokens": TOKENS, "bytes": BYTES, "loss": {"plain": losses}}}
        extra["held_out"] = {"documents": {"main": {"selection": [1, 0, 0, 1], "by_length": by_length}}}
    result = lm_result(root / name, "rope", seed, 32, **extra)
    result["figures"] = figures
    (root / name).mkdir(parents=True)
    (root / name / "results.json").write_text(json.dumps(result))


def test_runs_that_read_different_text_are_corpora_of_their_own(tmp_path):
    plant(tmp_path, "0", 0)
    plant(tmp_path, "1", 1)
    plant(tmp_path, "2", 2, sha="b" * 64)  # the corpus files changed under the third seed
    summary = compute_losses([tmp_path])
    corpora = sorted((c["corpus"], c["seeds"]) for c in summary["configs"])
    assert [seeds for _, seeds in corpora] == [2, 1] and all("[data " in corpus for corpus, _ in corpora)
    assert any("2 different versions of its data" in note for note in summary["notes"])


def test_mixed_hosts_are_stated_with_the_rows_whose_seeds_mix(tmp_path):
    plant(tmp_path, "0", 0)
    plant(tmp_path, "1", 1, cpu="Intel Xeon")
    summary = compute_losses([tmp_path])
    assert summary["configs"][0]["hosts"] == ["AMD EPYC", "Intel Xeon"]
    note = next(note for note in summary["notes"] if note.startswith("hosts mixed"))
    assert "AMD EPYC, Intel Xeon" in note and "wikitext2 rope" in note
    one_host = tmp_path / "one"
    plant(one_host, "0", 0)
    plant(one_host, "1", 1)
    assert not any("hosts mixed" in note for note in compute_losses([one_host])["notes"])


def test_the_means_carry_their_interval_over_seeds_and_over_seeds_and_documents(tmp_path):
    for seed in (0, 1, 2):
        plant(tmp_path, str(seed), seed)
    summary = compute_losses([tmp_path])
    config = summary["configs"][0]
    per_seed = [run["val_bpb"] for run in summary["runs"]]
    assert Interval.from_dict(config["val_bpb"]) == Interval.of(per_seed)
    losses = np.array([document_losses(seed) for seed in (0, 1, 2)])
    crossed = crossed_interval(linearised_ratio(losses / math.log(2), np.array(BYTES, dtype=float)))
    assert config["seeds_x_documents"]["val_bpb"] == crossed.as_dict()
    assert config["seeds_x_documents"]["val_bpb"]["mean"] == np.mean(per_seed)  # each seed's figure, over seeds
    crossed_loss = crossed_interval(linearised_ratio(losses, np.array(TOKENS, dtype=float)))
    assert config["seeds_x_documents"]["val_loss"] == crossed_loss.as_dict()
    text = losses_markdown(summary)
    assert Interval.of(per_seed).cell(4) in text and "mean [95% over seeds x documents]" in text
    assert f"{crossed.interval.cell(4)} (3 seeds x 4 documents)" in text


def test_runs_without_document_sums_have_the_interval_over_seeds_alone(tmp_path):
    plant(tmp_path, "0", 0, documents=False)
    plant(tmp_path, "1", 1)
    summary = compute_losses([tmp_path])
    assert summary["configs"][0]["seeds_x_documents"] is None and summary["configs"][0]["val_loss"]["n"] == 2
    assert "over seeds x documents" not in losses_markdown(summary)


def test_document_sums_that_do_not_give_the_runs_figure_are_not_used(tmp_path):
    for seed in (0, 1):
        plant(tmp_path, str(seed), seed)
    path = tmp_path / "1" / "results.json"
    result = json.loads(path.read_text())
    result["figures"]["val_loss"] += 0.5  # the figure is not what these documents give
    path.write_text(json.dumps(result))
    assert compute_losses([tmp_path])["configs"][0]["seeds_x_documents"] is None


def test_a_summary_written_before_the_intervals_renders_as_it_can(tmp_path):
    for seed in (0, 1):
        plant(tmp_path, str(seed), seed)
    summary = compute_losses([tmp_path])
    for config in summary["configs"]:
        del config["seeds_x_documents"], config["hosts"]
    for run in summary["runs"]:
        del run["host"], run["data_hash"]
    assert "mean [95% over seeds]" in losses_markdown(summary)
