"""benchmarks/peer_step.py compares poslab's step with x-transformers' at equal shape: the two models it builds have
the byte model's layers, width, heads, MLP, norm and vocabulary, and the position method each encoding names
(the benchmark itself is not run here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("x_transformers")

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark():
    spec = importlib.util.spec_from_file_location("peer_step", ROOT / "benchmarks" / "peer_step.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def linear_shapes(model: nn.Module) -> list[tuple[int, ...]]:
    return sorted(tuple(m.weight.shape) for m in model.modules() if isinstance(m, nn.Linear))


@pytest.mark.parametrize("encoding", ["plain", "rope", "alibi", "t5"])
def test_peer_model_has_the_byte_models_shape_and_the_encodings_method(encoding):
    bench = load_benchmark()
    shape = bench.byte_shape()
    torch.manual_seed(0)
    ours, peer = bench.poslab_model(encoding, context=64), bench.peer_model(encoding, context=64)
    width, layers, hidden = shape["d_model"], shape["n_layers"], shape["mlp_hidden"]
    assert ours.cfg.n_layers == layers and ours.cfg.d_model == width and ours.cfg.vocab_size == bench.VOCAB
    # poslab's fused qkv is x-transformers' three d x d matrices; every other matrix has the same shape
    qkv = (3 * width, width)
    ours_shapes = [s for s in linear_shapes(ours) if s != qkv] + [(width, width)] * 3 * layers
    assert linear_shapes(ours).count(qkv) == layers
    assert sorted(ours_shapes) == linear_shapes(peer)
    # x-transformers' SwiGLU input projection has a bias (no setting removes it): the only parameter count difference
    peer_params = sum(p.numel() for p in peer.parameters())
    assert peer_params - ours.num_parameters() == layers * 2 * hidden
    decoder = peer.attn_layers
    assert ours.encoding.name == bench.ENCODINGS[encoding][0]
    assert (decoder.rotary_pos_emb is not None) == (encoding == "rope")
    assert (decoder.rel_pos is not None) == (encoding in ("alibi", "t5"))
    if encoding == "rope":  # every feature of a 32-wide head rotated, as poslab's rotary_dim null
        assert decoder.rotary_pos_emb.inv_freq.numel() * 2 == ours.encoding.rotary_dim == width // shape["n_heads"]
    if encoding == "t5":  # poslab's defaults at this length: min(32, L) buckets, max distance L - 1
        assert decoder.rel_pos.num_buckets == ours.encoding.num_buckets == 32
        assert decoder.rel_pos.max_distance == ours.encoding.max_distance == 63


def test_profile_prints_operators_side_by_side_with_totals(capsys, monkeypatch):
    bench = load_benchmark()
    monkeypatch.setattr(bench, "BATCH", 1)
    monkeypatch.setattr(bench, "CONTEXT", 16)
    columns = bench.profile_columns("plain,rope")
    assert list(columns) == ["poslab/plain", "poslab/rope"]
    times = {label: bench.operator_times(build, steps=1) for label, build in columns.items()}
    # the rotation's complex product is RoPE's own operator: absent from the plain step, present in RoPE's
    assert "aten::view_as_complex" not in times["poslab/plain"] and times["poslab/rope"]["aten::view_as_complex"][1] > 0
    monkeypatch.setattr(
        bench, "operator_times", lambda build, steps: times[next(k for k in columns if columns[k] is build)]
    )
    bench.profile(columns, rows=4, steps=1)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| operator | poslab/plain ms (calls) | poslab/rope ms (calls) |"
    assert len(lines) == 2 + 4 + 1 and lines[-1].startswith("| **total** |")
    largest = max(times["poslab/rope"], key=lambda op: times["poslab/rope"][op][0])
    assert any(line.startswith(f"| {largest[:50]} |") for line in lines[2:6])


def test_profile_refuses_an_unknown_encoding_naming_the_allowed():
    bench = load_benchmark()
    assert list(bench.profile_columns("rope")) == ["poslab/rope", "x-transformers/rope"]
    with pytest.raises(SystemExit, match="unknown encoding 'rop'; allowed: plain, rope, alibi, t5"):
        bench.profile_columns("plain,rop")
