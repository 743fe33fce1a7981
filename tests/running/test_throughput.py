"""The Throughput callback's FLOPs and MFU (poslab.running.callbacks): the matrix weights and attention counted by
hand, position tables not counted, the head counted; each encoding's own matrix products (``extra_flops_per_token``)
as torch's FLOP counter measures them; MFU per device under DDP; the peak of the device and precision."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from poslab.encodings import ENCODINGS
from poslab.encodings.path import CHUNK, path_flops, path_scores
from poslab.model import ModelConfig, Transformer
from poslab.running import callbacks
from poslab.running.callbacks import Throughput, device_peak_flops, flops_per_token, matmul_weights
from tests.conftest import tiny_model


def model(encoding: str = "rope", max_length: int = 64, tie: bool = False, **settings) -> Transformer:
    """2 layers of width 32 (2 heads), a GELU MLP of 4 x 32, 16 symbols in and out, biases on."""
    torch.manual_seed(0)
    cfg = ModelConfig(
        vocab_size=16,
        n_outputs=16,
        n_layers=2,
        n_heads=2,
        d_model=32,
        mlp="gelu",
        mlp_hidden=None,
        tie_embeddings=tie,
        encoding={"name": encoding, **settings},
    )
    return Transformer(cfg, max_length=max_length)


def test_flops_per_token_is_the_hand_count_of_a_tiny_model():
    """6 per weight of q/k/v and output projections, the MLP and the head; 12 * layers * T * d for attention."""
    d, hidden, vocab, layers, length = 32, 128, 16, 2, 40
    block = 3 * d * d + d * d + d * hidden + hidden * d
    assert matmul_weights(model()) == layers * block + d * vocab
    expected = 6 * (layers * block + d * vocab) + 12 * layers * length * d
    assert flops_per_token(model(), length) == expected


def test_a_position_table_is_no_matrix_product():
    """A learned table is looked up, not multiplied: its rows (16x the context under task=lm) add no FLOPs."""
    plain = flops_per_token(model("none"), 40)
    assert flops_per_token(model("learned", max_length=64), 40) == plain
    assert flops_per_token(model("learned", max_length=1024), 40) == plain  # 16x the rows, the same FLOPs
    assert flops_per_token(model("t5_bias", max_length=1024), 40) == plain


@pytest.mark.parametrize("tie", [False, True])
def test_the_output_head_counts_tied_or_not(tie):
    """The head is a d x V product on every token, as PaLM and nanoGPT count it, whether its weight is the
    embeddings' or its own."""
    net = model(tie=tie)
    blocks = sum(p.numel() for n, p in net.blocks.named_parameters() if n.endswith("weight") and p.ndim == 2)
    attention = 12 * 2 * 40 * 32
    assert flops_per_token(net, 40) - 6 * blocks - attention == 6 * 32 * 16


def measured_forward_flops(name: str, length: int, batch: int) -> tuple[float, float]:
    """(torch's FLOP counter over one training-mode forward pass on the explicit path, per token; the counted
    training FLOPs per token / 3)."""
    settings = {key: 0.15 for key in ENCODINGS[name].corpus_settings}
    if name == "fope":
        settings["learnable"] = True  # fixed coefficients have no backward: the count is 1x, not 3x, for them
    net = tiny_model(name, "explicit", n_layers=2, n_heads=2, d_model=32, max_length=length, **settings).train()
    tokens = torch.randint(0, 16, (batch, length))
    zeros = torch.zeros(batch, length, dtype=torch.long)
    coordinates = {"paragraph": zeros, "sentence": zeros, "document": zeros, "row_seed": torch.arange(batch)[:, None]}
    with FlopCounterMode(display=False) as counter:
        net(tokens, coordinates)
    return counter.get_total_flops() / (batch * length), flops_per_token(net, length, batch) / 3


@pytest.mark.parametrize("name", sorted(set(ENCODINGS) - {"path", "path_fox"}))
def test_each_encodings_own_matrix_products_are_counted(name):
    """The counted forward FLOPs (training's / 3) are what torch's FLOP counter measures over a forward pass on the
    explicit path (its q k^T and weights v over the full T x T): CoPE's gates and table product, FIRE's and DAPE's
    MLPs, the increments' DeltaMLPs, ... (PaTH: the next test)."""
    measured, counted = measured_forward_flops(name, length=100, batch=3)
    assert measured == pytest.approx(counted, rel=1e-9)


@pytest.mark.parametrize(("length", "head_dim"), [(100, 16), (128, 16), (300, 24)])
def test_path_flops_are_its_scores_products_less_the_q_k_ones(length, head_dim):
    """``path_flops`` is torch's count of ``path_scores`` without its q . k products (inside a block, and across
    blocks) and with the triangular solve (C^3 a block, which the counter does not count)."""
    q, k, w = (torch.randn(1, 1, length, head_dim) for _ in range(3))
    with FlopCounterMode(display=False) as counter:
        path_scores(q, k, w, torch.rand(1, 1, length))
    blocks = -(-length // CHUNK)
    q_k = 2 * blocks * CHUNK * CHUNK * head_dim + blocks * (blocks - 1) * CHUNK * CHUNK * head_dim
    assert path_flops(length, head_dim) == counter.get_total_flops() - q_k + blocks * CHUNK**3


class Clock:
    """``time.perf_counter`` for the callback: ``step`` seconds a step."""

    def __init__(self, step: float) -> None:
        self.now, self.step, self.calls = 0.0, step, 0

    def __call__(self) -> float:
        self.calls += 1
        if self.calls % 2 == 0:  # the end of a step
            self.now += self.step
        return self.now


def timed(monkeypatch, world_size: int, lengths: list[int], precision: str = "bf16-mixed") -> Throughput:
    """A Throughput callback over steps of 8 rows of ``lengths[i]`` tokens on each of ``world_size`` ranks, 10 ms
    a step, the peak set to 1 TFLOP/s."""
    monkeypatch.setattr(callbacks.time, "perf_counter", Clock(0.01))
    callback = Throughput(warmup=0, peak_flops=1e12)
    net = model()
    trainer = SimpleNamespace(world_size=world_size, global_step=0, log_every_n_steps=1, precision=precision)
    logged = {}
    module = SimpleNamespace(model=net, device=torch.device("cpu"), log=lambda key, value: logged.update({key: value}))
    callback.on_train_start(trainer, module)
    for length in lengths:
        batch = {"tokens": torch.zeros(8, length + 1, dtype=torch.long)}  # inputs: all but the last
        callback.on_train_batch_start(trainer, module, batch, 0)
        trainer.global_step += 1
        callback.on_train_batch_end(trainer, module, None, batch, 0)
    callback.logged = logged
    return callback


def test_mfu_under_ddp_is_each_devices_share_of_its_peak(monkeypatch):
    """4 ranks each doing one rank's work in the same time: 4x the tokens/s, the same MFU (every rank's FLOP/s over
    every rank's peak), not 4x."""
    one, four = timed(monkeypatch, 1, [32] * 3).summary(), timed(monkeypatch, 4, [32] * 3).summary()
    assert four["tokens_per_s"] == pytest.approx(4 * one["tokens_per_s"])
    assert four["mfu"] == pytest.approx(one["mfu"])
    expected = 8 * 32 * flops_per_token(model(), 32, 8) / 0.01 / 1e12
    assert one["mfu"] == pytest.approx(expected)
    assert timed(monkeypatch, 4, [32]).logged["throughput/mfu"] == pytest.approx(expected)


def test_flops_are_counted_at_the_lengths_trained(monkeypatch):
    """Lengths drawn per batch (task.train_lengths): each step's FLOPs at its own length (attention grows with
    it); the summary's FLOPs per token is their mean over the tokens trained."""
    callback = timed(monkeypatch, 1, [8, 32, 32])
    net = model()
    per_step = [8 * n * flops_per_token(net, n, 8) for n in (8, 32, 32)]
    assert callback.step_flops == pytest.approx(per_step)
    assert callback.summary()["flops_per_token"] == pytest.approx(sum(per_step) / (8 * (8 + 32 + 32)))
    assert flops_per_token(net, 32) > flops_per_token(net, 8)


@pytest.fixture
def cuda_named(monkeypatch):
    """Make ``torch.cuda.get_device_name`` answer a given name (no GPU needed)."""

    def name(value: str) -> torch.device:
        monkeypatch.setattr(callbacks.torch.cuda, "get_device_name", lambda device=None: value)
        return torch.device("cuda")

    return name


@pytest.mark.parametrize(
    ("device", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756.5e12),
        ("NVIDIA H100 NVL", 835.5e12),
        ("NVIDIA H100", None),  # which form is not said: unknown, not the SXM's peak
        ("NVIDIA H200", 989e12),
        ("NVIDIA H200 NVL", 835.5e12),
        ("NVIDIA GH200 480GB", None),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", None),  # a slice: a fraction of the peak
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("Tesla V100-SXM2-16GB", None),  # V100 has no bf16 tensor cores
        ("NVIDIA A10G", None),
    ],
)
def test_the_bf16_peak_of_each_device_name(cuda_named, device, peak):
    assert device_peak_flops(cuda_named(device), "bf16-mixed") == peak


def test_the_peak_follows_the_runs_precision(cuda_named):
    """A 32-true run is held against the TF32 peak (torch's float32 matmul precision below highest) or the FP32
    peak (highest), 16-mixed against the fp16 one; 64-true has none; ``peak_flops`` overrides all; no CPU peak."""
    h100, v100 = cuda_named("NVIDIA H100 80GB HBM3"), torch.device("cuda")
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert device_peak_flops(h100, "32-true") == 67e12
        torch.set_float32_matmul_precision("high")
        assert device_peak_flops(h100, "32-true") == 494.5e12
        assert device_peak_flops(h100, "64-true") is None
        assert device_peak_flops(h100, "16-mixed") == 989e12
        cuda_named("Tesla V100-SXM2-16GB")
        assert device_peak_flops(v100, "16-mixed") == 125e12
        assert device_peak_flops(v100, "32-true") == 15.7e12  # no TF32 on a V100: its FP32 peak
    finally:
        torch.set_float32_matmul_precision(before)
    assert device_peak_flops(h100, "64-true", override=5e12) == 5e12
    assert device_peak_flops(torch.device("cpu"), "bf16-mixed") is None
