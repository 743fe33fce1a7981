"""``poslab report length --claim "A<B"``: the paired difference of two rows' bits/byte over seeds and test documents,
its interval and the verdict of docs/verdicts.md, on planted runs whose truth is known."""

from __future__ import annotations

import copy
import json
import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from poslab.analysis.claims import parse_claim
from poslab.analysis.length import load_length_runs
from poslab.analysis.length_claims import claim_summary
from poslab.analysis.length_report import report_length
from poslab.analysis.stats import Interval, direction_verdict
from poslab.cli import main
from poslab.errors import UsageError

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = next(iter(sorted((ROOT / "docs/lm_zoo_rerun/runs").glob("*_seed-0/results.json"))))


def planted(root: Path, encoding: str, seed: int, bpb: float, noise: float, rise: float = 0.0) -> np.ndarray:
    """A finished run whose every test document scores ``bpb`` plus seeded noise at the training length, and
    ``bpb * (1 + rise * log2(multiple))`` plus noise at each multiple of it; returns the per-document bits of its
    first length (for the expected difference)."""
    result: dict[str, Any] = copy.deepcopy(json.loads(TEMPLATE.read_text()))
    result.update(encoding=encoding, label=encoding, seed=seed)
    result["config"]["seed"], result["config"]["encoding"]["name"] = seed, encoding
    draw = np.random.default_rng(zlib.crc32(f"{encoding}-{seed}".encode()))  # the same draws in every process
    group = result["held_out"]["documents"]["main"]
    first = None
    train = min(int(length) for length in group["by_length"])
    for length, at in group["by_length"].items():
        sizes = np.array(at["bytes"], dtype=float)
        level = bpb * (1 + rise * math.log2(int(length) / train))
        bits = sizes * (level + noise * draw.standard_normal(len(sizes)))
        at["loss"] = {"plain": list(bits * math.log(2))}  # nats, as a run writes them
        result["figures"][length] = {"bpb": float(bits.sum() / sizes.sum()), "loss": 1.0, "bytes": int(sizes.sum())}
        first = bits if first is None else first
    directory = root / f"{encoding}_{seed}"
    directory.mkdir(parents=True)
    (directory / "results.json").write_text(json.dumps(result))
    return first


def claims(root: Path, *texts: str) -> dict[str, dict]:
    runs, _ = load_length_runs([root])
    return {text: claim_summary(runs, text) for text in texts}


def test_a_clear_difference_is_reproduced_one_way_and_contradicted_the_other(tmp_path):
    for seed in range(3):
        planted(tmp_path, "lower", seed, 2.0, 0.05)
        planted(tmp_path, "higher", seed, 2.1, 0.05)
    found = claims(tmp_path, "lower<higher", "lower>higher")
    for multiple, cell in found["lower<higher"]["by_multiple"].items():
        assert cell["verdict"] == "reproduced", multiple
        assert cell["n"] == 3 and cell["documents"] > 30 and cell["paired_on"] == "seeds and documents"
        assert cell["low"] < -0.1 < cell["high"] and cell["high"] < 0
    assert {c["verdict"] for c in found["lower>higher"]["by_multiple"].values()} == {"contradicted"}
    assert list(found["lower<higher"]["by_multiple"]) == ["1x", "2x", "4x", "8x", "16x"]


def test_the_difference_is_the_byte_weighted_one_over_the_test_documents(tmp_path):
    a = [planted(tmp_path, "a", seed, 2.0, 0.3) for seed in range(2)]
    b = [planted(tmp_path, "b", seed, 2.0, 0.3) for seed in range(2)]
    cell = claims(tmp_path, "a<b")["a<b"]["by_multiple"]["1x"]
    group = json.loads(TEMPLATE.read_text())["held_out"]["documents"]["main"]
    test = [not chosen for chosen in group["selection"]]
    sizes = np.array(group["by_length"][min(group["by_length"], key=int)]["bytes"], dtype=float)[test]
    expected = np.mean([(x[test].sum() - y[test].sum()) / sizes.sum() for x, y in zip(a, b)])
    assert cell["mean"] == pytest.approx(expected, rel=1e-9)
    assert cell["documents"] == int(sum(test))


def test_no_difference_is_not_resolved_and_one_seed_is_not_testable(tmp_path):
    for seed in range(4):
        planted(tmp_path, "a", seed, 2.0, 0.2)
        planted(tmp_path, "b", seed, 2.0, 0.2)
    planted(tmp_path, "c", 0, 1.0, 0.01)
    found = claims(tmp_path, "a<b", "c<a")
    assert "not resolved" in {c["verdict"] for c in found["a<b"]["by_multiple"].values()}
    assert {c["verdict"] for c in found["c<a"]["by_multiple"].values()} == {"not testable"}  # c: one seed


def test_a_missing_side_is_named_and_a_bad_claim_stops_before_any_run_is_read(tmp_path):
    for seed in range(2):
        planted(tmp_path, "a", seed, 2.0, 0.1)
    missing = claims(tmp_path, "a<nothing")["a<nothing"]
    assert missing["missing"] == ["nothing"] and missing["by_multiple"] == {}
    with pytest.raises(UsageError, match="is not a claim; write A<B"):
        report_length([tmp_path / "does-not-exist"], ["a<<b"])
    claim = parse_claim(" rope/test_yarn > alibi ")
    assert (claim.a, claim.b, claim.sign, claim.figure) == ("rope/test_yarn", "alibi", 1, None)
    with pytest.raises(UsageError, match="@accuracy is neither"):
        report_length([tmp_path], ["a<b@accuracy"])
    with pytest.raises(UsageError, match="a number as B is a ratio's level; write a<1@ratio"):
        report_length([tmp_path], ["a<1"])


def test_the_report_shows_the_claims_and_refuses_them_with_a_summary(tmp_path, capsys):
    for seed in range(2):
        planted(tmp_path, "a", seed, 2.0, 0.05)
        planted(tmp_path, "b", seed, 2.5, 0.05)
    out = tmp_path / "out"
    claims = ["--claim", "a<b", "--claim", "b>1@ratio"]
    assert main(["report", "length", str(tmp_path), *claims, "--output-dir", str(out)]) == 0
    text = (out / "length.md").read_text()
    assert "claims (A - B bits/byte, or with @ratio of the ratio to 1x; paired" in text
    assert "| a<b | 4x |" in text and "reproduced" in text
    assert "| b>1@ratio | 2x |" in text and "| b>1@ratio | 1x |" not in text  # a plain ratio is 1 at 1x
    summary = json.loads((out / "length.json").read_text())
    assert next(iter(summary["corpora"].values()))["claims"][0]["claim"] == "a<b"
    capsys.readouterr()
    assert main(["report", "length", "--from", str(out / "length.json"), "--claim", "a<b"]) == 2
    assert "--from: --claim sets how the figures are computed" in capsys.readouterr().err


def test_ratio_claims_read_the_rise_past_the_context_on_seeds_and_documents(tmp_path):
    """The ALiBi paper's shape: ``r>1@ratio`` (r rises), ``f<r@ratio`` (f rises less), a flat row against 1 not
    resolved; past the context only, since every plain ratio is 1 at 1x."""
    bits = {name: [planted(tmp_path, name, seed, 2.0, 0.05, rise) for seed in range(3)]
            for name, rise in (("r", 0.1), ("f", 0.0))}  # fmt: skip
    found = claims(tmp_path, "r>1@ratio", "f<r@ratio", "f>1@ratio", "r<f@ratio")
    assert list(found["r>1@ratio"]["by_multiple"]) == ["2x", "4x", "8x", "16x"]
    assert found["r>1@ratio"]["figure"] == "ratio to 1x" and found["r>1@ratio"]["missing"] == []
    for multiple, cell in found["r>1@ratio"]["by_multiple"].items():
        rise = 0.1 * math.log2(int(multiple[:-1]))
        assert cell["verdict"] == "reproduced" and cell["paired_on"] == "seeds and documents", multiple
        assert cell["low"] < rise < cell["high"] and cell["documents"] > 30
        assert found["f<r@ratio"]["by_multiple"][multiple]["verdict"] == "reproduced"
        assert found["r<f@ratio"]["by_multiple"][multiple]["verdict"] == "contradicted"
    assert "not resolved" in {c["verdict"] for c in found["f>1@ratio"]["by_multiple"].values()}
    # the mean is the seeds' mean of each seed's ratio on the test documents: its bits at 2x over its bits at 1x
    runs, _ = load_length_runs([tmp_path])
    group = next(r for r in runs if r.encoding == "f").result["held_out"]["documents"]["main"]
    test = np.array([not chosen for chosen in group["selection"]])
    two_x = [np.array(r.result["held_out"]["documents"]["main"]["by_length"]["256"]["loss"]["plain"])[test]
             for r in sorted((r for r in runs if r.encoding == "f"), key=lambda r: r.seed)]  # fmt: skip
    seed_ratios = [x.sum() / math.log(2) / b[test].sum() for x, b in zip(two_x, bits["f"])]
    assert found["f>1@ratio"]["by_multiple"]["2x"]["mean"] == pytest.approx(np.mean(seed_ratios) - 1, rel=1e-9)


def test_every_row_shows_its_rise_on_the_test_documents(tmp_path):
    """The ratio table on the test documents: each row's ratio to its 1x past the context, with the interval over
    seeds and documents that ``@ratio`` claims read (the same numbers)."""
    for seed in range(3):
        planted(tmp_path, "r", seed, 2.0, 0.05, 0.1)
    out = tmp_path / "out"
    assert main(["report", "length", str(tmp_path), "--claim", "r>1@ratio", "--output-dir", str(out)]) == 0
    part = next(iter(json.loads((out / "length.json").read_text())["corpora"].values()))
    row = next(row for row in part["rows"] if row["name"] == "r")
    assert list(row["ratio_documents"]) == ["2x", "4x", "8x", "16x"]
    claim = part["claims"][0]["by_multiple"]
    for multiple, cell in row["ratio_documents"].items():
        assert cell["mean"] - 1 == pytest.approx(claim[multiple]["mean"], rel=1e-9)
        assert cell["low"] - 1 == pytest.approx(claim[multiple]["low"], rel=1e-9) and cell["documents"] > 30
    assert row["ratio_documents"]["16x"]["low"] > 1.3  # 1 + 0.1 * log2(16), less the noise
    text = (out / "length.md").read_text()
    assert "ratio to the plain model's 1x bits per byte on the test documents" in text


def test_direction_verdicts_follow_docs_verdicts():
    assert direction_verdict(Interval(-0.2, -0.3, -0.1, 3), -1) == "reproduced"
    assert direction_verdict(Interval(-0.2, -0.3, -0.1, 3), 1) == "contradicted"
    assert direction_verdict(Interval(0.1, -0.1, 0.3, 3), -1) == "not resolved"
    assert direction_verdict(Interval(0.1, math.nan, math.nan, 1), -1) == "not testable"
    assert direction_verdict(Interval(0.1, 0.1, 0.1, 3), 1) == "not testable"  # degenerate: all seeds equal
