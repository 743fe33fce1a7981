"""bf16-mixed training: gradient clipping with fused AdamW equal to ``clip_grad_norm_``, 16-mixed with its
GradScaler, unsupported precisions refused at start, positions/angles/ALiBi bias in fp32 under autocast, every
encoding trained and loaded back (fp32 model.pt), and exact resume under bf16 (``model.compile`` under bf16:
tests/lightning_modules/test_speed_options.py, beside the other compiled run)."""

from __future__ import annotations

import copy
import json

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from lightning.pytorch.plugins.precision import MixedPrecision

from poslab.config.settings import check_precision
from poslab.encodings import ENCODINGS
from poslab.encodings.rotary import Rotation, apply_rotary, rotation_angles
from poslab.errors import ConfigError
from poslab.lightning_modules.base import clip_gradient_norm
from poslab.model import ModelConfig, Transformer, sdpa
from poslab.running.builders import build_datamodule, build_module, load_run
from poslab.running.training import run
from poslab.runs.files import MODEL_FILE
from tests.conftest import compose_config, fit_quietly, run_train
from tests.runs.test_resume import N, check, resume_overrides, weights

ROTARY = ("rope", "increments_shared", "increments_layer", "hrope_axial", "rand_axial", "period_axial")
DENSITY = {"rand_axial": ["encoding.paragraph_density=0.05"], "period_axial": ["encoding.paragraph_density=0.05"]}


def tiny(tmp_path, encoding: str = "rope", *extra: str) -> list[str]:
    return ["debug=small", f"encoding={encoding}", *DENSITY.get(encoding, []), "task.batch_size=8", *extra]


def module_and_data(tmp_path, encoding: str = "rope", *extra: str):
    cfg = compose_config(tiny(tmp_path, encoding, *extra), tmp_path)
    L.seed_everything(0, verbose=False)
    datamodule = build_datamodule(cfg)
    return build_module(cfg, datamodule), datamodule


def fused_adamw(model: torch.nn.Module) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)


def bf16_gradients(model: Transformer, tokens: torch.Tensor) -> None:
    with torch.autocast("cpu", torch.bfloat16):
        loss = F.cross_entropy(model(tokens).logits.flatten(0, 1).float(), tokens.flatten())
    loss.backward()


def test_clip_gradient_norm_equals_clip_grad_norm_with_fused_adamw():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=20, n_outputs=20, d_model=32, n_heads=2, encoding={"name": "rope"}), 16)
    reference = copy.deepcopy(model)
    tokens = torch.randint(0, 20, (4, 16))
    for m in (model, reference):
        bf16_gradients(m, tokens)
    norm = clip_gradient_norm(fused_adamw(model), 0.05)
    expected = torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.05)
    assert norm > 0.05 and torch.equal(norm, expected)  # the clip was active
    for p, q in zip(model.parameters(), reference.parameters()):
        assert torch.equal(p.grad, q.grad)

    # with a GradScaler (16-mixed): the gradients stay scaled by S; clipped at S * 0.05 they are S times the
    # true gradients clipped at 0.05
    scaled, unscaled = copy.deepcopy(model), copy.deepcopy(model)
    for m in (scaled, unscaled):
        m.zero_grad()
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with torch.autocast("cpu", torch.bfloat16):
        loss = F.cross_entropy(scaled(tokens).logits.flatten(0, 1).float(), tokens.flatten())
    scaler.scale(loss).backward()
    bf16_gradients(unscaled, tokens)
    optimizer = fused_adamw(scaled)
    norm = clip_gradient_norm(optimizer, 0.05, scaler)
    expected = torch.nn.utils.clip_grad_norm_(unscaled.parameters(), 0.05)
    assert torch.allclose(norm, expected, rtol=1e-5)  # the true norm; the sums may differ in the last ulp
    for p, q in zip(scaled.parameters(), unscaled.parameters()):
        assert torch.allclose(p.grad / 1024.0, q.grad, rtol=1e-5, atol=1e-9)
    scaler.step(optimizer)  # the fused step unscales (and would skip on overflow)
    scaler.update()


class GradientsBeforeStep(L.Callback):
    """The gradients the optimizer is about to apply, and the batch of that step."""

    def __init__(self) -> None:
        self.batches: list = []
        self.gradients: list[dict[str, torch.Tensor]] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx) -> None:
        self.batches.append(copy.deepcopy(batch))

    def on_before_optimizer_step(self, trainer, module, optimizer) -> None:
        self.gradients.append({n: p.grad.clone() for n, p in module.named_parameters() if p.grad is not None})


def fit(module, datamodule, steps: int, callback: L.Callback, **trainer) -> L.Trainer:
    return fit_quietly(module, datamodule, steps, [callback], **trainer)


@pytest.mark.parametrize("encoding", ["rope", "increments_layer"])
def test_a_bf16_mixed_training_step_clips_exactly_as_clip_grad_norm_does(tmp_path, encoding):
    """Lightning's own bf16-mixed path with fused AdamW (which it refuses to clip): the update's gradients are
    those of the same forward under autocast, clipped by torch.nn.utils.clip_grad_norm_."""
    module, datamodule = module_and_data(tmp_path, encoding, "optimizer.grad_clip=0.01", "optimizer.fused=true")
    reference = copy.deepcopy(module)
    spy = GradientsBeforeStep()
    fit(module, datamodule, 1, spy, precision="bf16-mixed")
    with torch.autocast("cpu", torch.bfloat16, cache_enabled=False):  # as Lightning's MixedPrecision runs it
        loss = reference.loss(spy.batches[0])
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(list(reference.parameters()), 0.01)
    assert norm > 0.01  # the clip was active
    got = spy.gradients[0]
    expected = {n: p.grad for n, p in reference.named_parameters() if p.grad is not None}
    assert got.keys() == expected.keys()
    assert all(torch.equal(got[n], expected[n]) for n in got), [n for n in got if not torch.equal(got[n], expected[n])]


@pytest.mark.parametrize("fused", [True, False])
def test_16_mixed_with_a_grad_scaler_clips_the_true_gradients(tmp_path, fused):
    """fp16 with a GradScaler (Lightning's 16-mixed; on a CPU only as an explicit plugin), with fused AdamW (it
    unscales inside its step) and plain AdamW (Lightning unscales just before the step): the gradients the step
    applies are the true ones clipped to the norm, and the weights change."""
    module, datamodule = module_and_data(tmp_path, "rope", "optimizer.grad_clip=0.01", f"optimizer.fused={fused}")
    before = copy.deepcopy(module.state_dict())
    spy = GradientsBeforeStep()
    scale = 2.0**16
    plugin = MixedPrecision("16-mixed", "cpu", scaler=torch.amp.GradScaler("cpu", init_scale=scale))
    trainer = fit(module, datamodule, 3, spy, plugins=[plugin])
    assert trainer.scaler is not None and trainer.scaler.get_scale() == scale  # no overflow: every step taken
    for gradients in spy.gradients:  # seen just before the step: still scaled when the fused step unscales
        total = torch.linalg.vector_norm(torch.stack([g.norm() for g in gradients.values()]))
        assert total / (scale if fused else 1.0) == pytest.approx(0.01, rel=1e-4)
    after = module.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert all(torch.isfinite(v).all() for v in after.values())


@pytest.mark.parametrize("precision", ["bf16-true", "16-true", "64-true", "transformer-engine"])
def test_unsupported_precisions_stop_at_start_with_one_sentence(tmp_path, precision):
    # a half "-true" precision is refused on purpose, naming its mixed precision; any other, with the allowed list
    half = precision.endswith("16-true")
    expected = (
        f"precision='{precision}' is refused on purpose: .* give trainer.precision={precision[:-5]}-mixed"
        if half
        else f"precision='{precision}' is not allowed;.* one of 32-true, bf16-mixed, 16-mixed"
    )
    with pytest.raises(ConfigError, match=expected):
        run(compose_config([*tiny(tmp_path), f"trainer.precision={precision}"], tmp_path))
    assert not (tmp_path / "results.json").exists()
    assert [check_precision(p) for p in ("32", "bf16", "16", "bf16-mixed")] == [
        "32-true",
        "bf16-mixed",
        "16-mixed",
        "bf16-mixed",
    ]


def test_a_bare_trainer_with_an_unsupported_precision_stops_at_setup(tmp_path):
    module, datamodule = module_and_data(tmp_path)
    with pytest.raises(ConfigError, match="bf16-true"):
        fit(module, datamodule, 1, L.Callback(), precision="bf16-true")


@pytest.mark.parametrize("encoding", ROTARY)
def test_positions_and_angles_stay_fp32_inside_a_bf16_forward(tmp_path, encoding):
    module, datamodule = module_and_data(tmp_path, encoding)
    model = module.model
    angles_dtypes: list[torch.dtype] = []
    original = model.encoding.angles

    def recording_angles(positions, *frequencies):  # angles(positions, inv_freq): the frequencies a rule gives
        out = original(positions, *frequencies)
        angles_dtypes.append(out.dtype)
        return out

    model.encoding.angles = recording_angles
    qkv_dtypes: list[torch.dtype] = []
    model.blocks[0].attn.qkv.register_forward_hook(lambda mod, args, out: qkv_dtypes.append(out.dtype))
    tokens = torch.randint(0, model.cfg.vocab_size, (2, 48))
    coordinates = module.coordinates(tokens)
    with torch.autocast("cpu", torch.bfloat16):
        out = model(tokens, coordinates, return_positions=True)
        if encoding == "rope":  # positions in the thousands
            direct = model.encoding.angles(torch.arange(3000.0)[None])
    assert qkv_dtypes == [torch.bfloat16]  # autocast is on: the matrix products run in bf16
    assert angles_dtypes and set(angles_dtypes) == {torch.float32}
    assert {p.dtype for p in out.positions if p is not None} == {torch.float32}
    if encoding.startswith("increments"):  # the cumulative sums of δ: 1, 2, 3, ... at initialisation, exactly
        steps = torch.diff(out.positions[-1], dim=-1)
        assert torch.allclose(steps, torch.ones_like(steps), atol=1e-5)
    if encoding == "rope":
        assert torch.equal(direct, rotation_angles(torch.arange(3000.0)[None], model.encoding.inv_freq))


def test_rotation_keeps_positions_in_the_thousands_exact_and_refuses_bf16_angles():
    torch.manual_seed(0)
    x = torch.randn(1, 2, 4096, 16).bfloat16()  # q or k as autocast makes them
    inv_freq = 10_000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    positions = torch.arange(4096, dtype=torch.float64)[None]
    exact = apply_rotary(x.double(), (positions[..., None] * inv_freq), "interleaved")
    with torch.autocast("cpu", torch.bfloat16):
        angles = rotation_angles(positions.float(), inv_freq.float())
        rotated = apply_rotary(x, angles, "interleaved")
    assert angles.dtype == torch.float32 and rotated.dtype == torch.bfloat16
    # the result's one rounding to bf16 (8 significant bits: 2^-8 relative) plus the fp32 angle's (about 1e-4
    # rad near 4000), at every position up to 4095
    pair_norm = x.double().unflatten(-1, (8, 2)).norm(dim=-1).repeat_interleave(2, dim=-1)
    assert ((rotated.double() - exact).abs() <= 2.0**-8 * exact.abs() + 1e-3 * pair_norm).all()
    # what bf16 positions would do: near 4000 they are multiples of 16
    coarse = apply_rotary(x.double(), positions.bfloat16().double()[..., None] * inv_freq, "interleaved")
    assert (coarse - exact).abs().max() > 1.0
    with pytest.raises(TypeError, match="fp32"):
        Rotation(angles.bfloat16(), "interleaved")
    with pytest.raises(TypeError, match="fp32"):
        rotation_angles(positions.bfloat16(), inv_freq.float())


@pytest.mark.parametrize("encoding", ["rope", "hrope_axial"])
def test_the_frequencies_stay_fp32_when_the_model_is_cast_to_bf16(encoding):
    model = Transformer(ModelConfig(vocab_size=10, n_outputs=10, d_model=48, n_heads=2, encoding={"name": encoding}), 8)
    exact = model.encoding.inv_freq.clone()
    model = model.to(torch.bfloat16)
    assert model.embed.weight.dtype == torch.bfloat16
    assert model.encoding.inv_freq.dtype == torch.float32 and torch.equal(model.encoding.inv_freq, exact)


def test_the_alibi_bias_reaches_sdpa_in_fp32_under_cpu_autocast(monkeypatch):
    # the case that shows it: two keys whose bias differs by 0.4 at -200 (bf16 spacing there: 1)
    q = torch.zeros(1, 1, 1, 8, dtype=torch.bfloat16)
    k = torch.zeros(1, 1, 2, 8, dtype=torch.bfloat16)
    v = torch.zeros(1, 1, 2, 8, dtype=torch.bfloat16)
    v[..., 0, :] = 1
    mask = torch.tensor([-200.0, -200.4]).view(1, 1, 1, 2)
    true = torch.softmax(mask.double(), -1)[..., 0].item()  # 0.5987
    with torch.autocast("cpu", torch.bfloat16):
        kept = sdpa(q, k, v, mask, 1.0)
        autocast_cast = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # what plain SDPA does
    assert abs(kept[0, 0, 0, 0].item() - true) < 0.005 and kept.dtype == torch.bfloat16
    assert autocast_cast[0, 0, 0, 0].item() == 0.5  # the bias rounded to bf16: the two keys tie

    seen: list[tuple[torch.dtype, torch.dtype, bool]] = []
    original = F.scaled_dot_product_attention

    def recording(q, k, v, attn_mask=None, **kwargs):
        seen.append((q.dtype, attn_mask.dtype, torch.is_autocast_enabled("cpu")))
        return original(q, k, v, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    model = Transformer(ModelConfig(vocab_size=10, n_outputs=10, d_model=32, n_heads=2, encoding={"name": "alibi"}), 64)
    with torch.autocast("cpu", torch.bfloat16):
        model(torch.randint(0, 10, (2, 64)))
    assert seen == [(torch.bfloat16, torch.float32, False)] * 2  # both layers: bf16 q, fp32 bias + causal mask


@pytest.mark.slow
@pytest.mark.parametrize("task", ["lag", "seen"])
@pytest.mark.parametrize("encoding", sorted(ENCODINGS))
def test_every_encoding_trains_under_bf16_mixed_and_loads_back_in_fp32(tmp_path, encoding, task):
    overrides = [*tiny(tmp_path, encoding), f"task={task}", "trainer.precision=bf16-mixed", "optimizer.grad_clip=1.0"]
    results = run(compose_config([*overrides, "trainer.max_steps=3", "~logger", "~callbacks", "threads=1"], tmp_path))
    assert results["steps"] == 3 and results["config"]["trainer"]["precision"] == "bf16-mixed"
    saved = torch.load(tmp_path / MODEL_FILE, map_location="cpu", weights_only=True)["state_dict"]
    assert {v.dtype for v in saved.values() if v.is_floating_point()} == {torch.float32}
    _, module = load_run(tmp_path)
    assert all(p.dtype == torch.float32 for p in module.parameters())


@pytest.mark.slow
def test_an_interrupted_bf16_run_resumes_exactly(tmp_path):
    """tests/runs/test_resume.py's check under bf16-mixed with clipping and the learned increments."""
    full, part = tmp_path / "full", tmp_path / "resumed"
    base = [
        *resume_overrides("increments_layer"),
        "trainer.precision=bf16-mixed",
        "optimizer.grad_clip=0.5",
        "task.batch_size=8",
    ]
    check(run_train([*base, f"trainer.max_steps={N}", f"hydra.run.dir={full}"], tmp_path))
    check(run_train([*base, f"trainer.max_steps={2 * N // 3}", f"hydra.run.dir={part}"], tmp_path))
    check(run_train([*base, f"trainer.max_steps={N}", "ckpt_path=last", f"hydra.run.dir={part}"], tmp_path))
    a, b = weights(full), weights(part)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert {v.dtype for v in a.values() if v.is_floating_point()} == {torch.float32}
    figures = [json.loads((d / "results.json").read_text())["figures"] for d in (full, part)]
    assert figures[0] == figures[1]
