"""``poslab analyze hrope`` on BiPE (issue 38: BiPE against hRoPE): its interventions change the coordinate it
reads as segments (the sentence index by default), its variants (BiPE-RoPE, BiPE-ALiBi) are arms of their own,
the report says what does not apply to it, and a tiny trained BiPE run of each variant is analysed end to end."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from poslab.analysis.hrope.compute import analyze_documents, hierarchy
from poslab.analysis.hrope.documents import segment_split_position, split_position
from poslab.analysis.hrope.render import intervention_note, runs_csv
from poslab.analysis.hrope.runs import RunAnalysis
from poslab.analysis.hrope.seeds import arm_summaries, claims
from poslab.model import ModelConfig, Transformer
from tests.analysis.test_hrope_analysis import document, train_tiny_lm_runs
from tests.analysis.test_hrope_readings import PlantedModel


def test_the_split_on_a_segment_coordinate_is_inside_a_segment_of_the_longest_paragraph():
    paragraph = np.array([0] * 4 + [1] * 10 + [2] * 3)
    sentence = np.array([0] * 4 + [1] * 5 + [2] * 3 + [3] * 2 + [4] * 3)  # the middle of paragraph 1 starts one
    middle = split_position(paragraph)
    assert middle == 9 and sentence[middle] != sentence[middle - 1]
    at = segment_split_position(paragraph, sentence)
    assert at == 8 and paragraph[at] == paragraph[at - 1] == 1 and sentence[at] == sentence[at - 1]
    # every token of the paragraph starts a sentence: nowhere to insert one
    assert segment_split_position(np.array([0, 0, 0, 0, 1]), np.array([0, 1, 2, 3, 4])) is None


def test_the_coordinate_intervened_on_follows_the_encoding():
    bipe = OmegaConf.create({"name": "bipe", "inter": "alibi", "segment": "sentence"})
    assert hierarchy(bipe) == ("alibi:sentence", "sentence")
    assert hierarchy(OmegaConf.merge(bipe, {"segment": "paragraph"})) == ("alibi:paragraph", "paragraph")
    assert hierarchy(OmegaConf.create({"name": "hrope_axial", "frequencies": "split"})) == (None, "paragraph")


@pytest.mark.parametrize("inter", ["rope", "alibi"])
def test_bipe_is_blind_to_the_paragraph_index_and_its_interventions_change_its_segments(inter):
    """BiPE with sentence segments reads no paragraph index: the write-up's interventions leave its attention
    exactly as it is. On its sentence index they move it, with tokens and the paragraph index the model sees
    unchanged."""
    docs = [document([9, 12, 7, 10], sentences_per_paragraph=3, seed=s) for s in range(3)]
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=50, n_outputs=50, d_model=48, n_heads=2, encoding={"name": "bipe", "inter": inter})
    model = Transformer(config, 64).eval()
    seen: list[dict[str, torch.Tensor]] = []

    def recording_forward(tokens, coordinates=None, original=model.forward, **kwargs):
        seen.append({"tokens": tokens.clone(), **{k: v.clone() for k, v in coordinates.items()}})
        return original(tokens, coordinates, **kwargs)

    model.forward = recording_forward
    settings = {"batch_size": 3, "min_pairs": 1, "bootstrap": 20, "progress": False}
    on_paragraphs = analyze_documents(model, iter(docs), **settings)["interventions"]
    assert all(e.value == 0.0 for by_kind in on_paragraphs.values() for e in by_kind.values())
    seen.clear()
    result = analyze_documents(model, iter(docs), intervene_on="sentence", **settings)
    base, _shuffled, merged, split = seen  # one batch: original, shuffled, fake-merge, fake-split
    for variant in (merged, split):
        assert torch.equal(variant["tokens"], base["tokens"]) and torch.equal(variant["paragraph"], base["paragraph"])
        assert not torch.equal(variant["sentence"], base["sentence"])
    assert torch.equal(merged["sentence"].amax(dim=1), base["sentence"].amax(dim=1) - 1)  # one boundary fewer
    assert torch.equal(split["sentence"].amax(dim=1), base["sentence"].amax(dim=1) + 1)  # one more
    same = result["interventions"]["same_pairs"]
    assert abs(same["merge"].value) > 1e-6 and abs(same["split"].value) > 1e-6  # untrained: small, not 0
    assert np.isfinite(result["depths"]["main"].well.depth)
    with pytest.raises(ValueError, match="intervene_on='token'"):
        analyze_documents(model, iter(docs), intervene_on="token", **settings)


def planted(encoding: str, variant: str | None, seed: int, penalty: dict[int, float]) -> RunAnalysis:
    docs = [document([7 + s, 9, 6 + (s % 3), 8, 5 + (s + seed) % 4], seed=s + 10 * seed) for s in range(6)]
    settings = {"min_pairs": 5, "bootstrap": 30, "batch_size": 3, "seed": 0, "progress": False}
    scaled = {k: v * (1 + 0.1 * seed) for k, v in penalty.items()}
    result = analyze_documents(PlantedModel(scaled), iter(docs), **settings)
    intervened = "paragraph" if variant is None else variant.split(":")[1]
    return RunAnalysis(f"/runs/{encoding}/{variant}/{seed}", encoding, "openwebtext", seed, frequencies=None,
                       variant=variant, intervened=intervened, **result)  # fmt: skip


def test_bipe_variants_are_arms_of_their_own_and_are_compared_with_hrope():
    """Two BiPE variants with the same seeds are two arms (not one arm with its seeds twice); hrope_axial's well,
    planted deeper, is compared with each by seed, and the summary, CSV and note keep the variant."""
    runs = [planted("hrope_axial", None, seed, {1: 1.5, 2: 1.0}) for seed in range(3)]
    runs += [planted("bipe", "rope:sentence", seed, {1: 0.2}) for seed in range(3)]
    runs += [planted("bipe", "alibi:sentence", seed, {1: 0.3}) for seed in range(3)]
    arms = {(s["arm"], tuple(s["seeds"])) for s in arm_summaries(runs)}
    assert arms == {(a, (0, 1, 2)) for a in ("hrope_axial", "bipe:rope:sentence", "bipe:alibi:sentence")}
    found = {c.text: c for c in claims(runs)}
    deeper = found["OpenWebText: hrope_axial's U* against bipe:rope:sentence's"]
    assert deeper.verdict() == "deeper" and deeper.differences["main"].interval.high < 0
    assert "OpenWebText: the shuffle moves hrope_axial's U* against bipe:alibi:sentence's" in found
    back = RunAnalysis.from_summary(json.loads(json.dumps(runs[3].entry())))
    assert (back.arm, back.intervened) == ("bipe:rope:sentence", "sentence")
    assert math.isclose(back.main.depth.value, runs[3].main.depth.value)
    header, *rows = (line.split(",") for line in runs_csv(runs).splitlines())
    assert [row[header.index("variant")] for row in rows[2:4]] == ["", "rope:sentence"]
    assert rows[3][header.index("intervened")] == "sentence"
    note = intervention_note(runs)
    assert note.startswith("Not applicable to bipe:alibi:sentence, bipe:rope:sentence:") and "hrope_axial" not in note
    assert intervention_note(runs[:3]) == ""  # the hRoPE arms' report reads as before


@pytest.mark.slow
def test_analyze_hrope_on_trained_bipe_runs(tmp_path, capsys):
    """A tiny BiPE-RoPE and BiPE-ALiBi run (the write-up's recipe, experiment=hrope_bipe_cpu), then the report:
    its summary holds both arms with every applicable analysis, and says what does not apply."""
    from poslab.cli import main

    train_tiny_lm_runs(
        tmp_path,
        {"rope": ["experiment=hrope_bipe_cpu"], "alibi": ["experiment=hrope_bipe_cpu", "encoding.inter=alibi"]},
    )
    out = tmp_path / "analysis"
    argv = ["--output-dir", str(out), "--documents", "6", "--min-pairs", "5", "--bootstrap", "50"]
    assert main(["analyze", "hrope", str(tmp_path / "rope"), str(tmp_path / "alibi"), *argv]) == 0
    summary = json.loads((out / "hrope.json").read_text())
    runs = {entry["variant"]: entry for entry in summary["runs"]}
    assert set(runs) == {"rope:sentence", "alibi:sentence"}
    for entry in runs.values():
        assert entry["encoding"] == "bipe" and entry["intervened"] == "sentence" and entry["documents"] == 6
        assert math.isfinite(entry["U*"]) and math.isfinite(entry["shuffle_change"])
        assert set(entry["readings"]) == {"main", "no_log_n", "no_key_0", "same_paragraph_trend", "log_trend"}
        for by_kind in entry["interventions"].values():
            assert math.isfinite(by_kind["merge"]) and math.isfinite(by_kind["split"])
    assert {a["arm"] for a in summary["arms"]} == {"bipe:rope:sentence", "bipe:alibi:sentence"}
    table = (out / "hrope_table.md").read_text()
    assert "Not applicable to bipe:alibi:sentence, bipe:rope:sentence:" in table and "Traceback" not in table
    capsys.readouterr()
    assert main(["analyze", "hrope", "--from", str(out / "hrope.json")]) == 0  # renders again from the summary
    assert "| bipe:rope:sentence | OpenWebText |" in capsys.readouterr().out


@pytest.mark.slow  # composes 6 configs: about 3 s each size
@pytest.mark.parametrize("size", ["", "_cpu"])
def test_the_bipe_recipe_is_the_write_ups_recipe_with_only_the_encoding_changed(size):
    """experiment=hrope_bipe(_cpu) against the hRoPE arms' (hrope_rope: hrope_axial's recipe with RoPE): every
    setting but the encoding the same, and train.py's checks pass (BiPE-ALiBi too)."""
    from poslab.running.compose import compose_config
    from poslab.running.precheck import check_command_line

    common = ["corpus=python_code", "seed=2"]
    bipe = compose_config([f"experiment=hrope_bipe{size}", *common])
    rope = compose_config([f"experiment=hrope_rope{size}", *common])
    as_written = lambda cfg: OmegaConf.to_container(cfg, resolve=False)
    assert {k: v for k, v in as_written(bipe).items() if k != "encoding"} == {
        k: v for k, v in as_written(rope).items() if k != "encoding"
    }
    assert bipe.encoding.name == "bipe" and bipe.encoding.segment == "sentence" and bipe.encoding.inter == "rope"
    for extra in ([], ["encoding.inter=alibi"]):
        check_command_line([f"experiment=hrope_bipe{size}", *common, "trainer.accelerator=cpu", *extra])
