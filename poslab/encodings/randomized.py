"""Randomized RoPE (Ruoss et al., 2023, "Randomized Positional Encodings Boost Length Generalization of
Transformers", ACL): rotate by a sorted random subset of a range longer than any test sequence.

In training, each sequence of ``T`` tokens rotates by positions ``p_0 < p_1 < ... < p_{T-1}``, a sample without
replacement of ``T`` integers from ``[0, max_position)``, sorted (the paper: ``max_position = L_max``, e.g. 2048,
at least the longest test length). Every position and every distance up to ``max_position`` is then seen in
training, so a longer test sequence is not out of distribution; only the order of the tokens is kept.

The reference: DeepMind's ``randomized_positional_encodings`` (``models/positional_encodings.py``:
``noisy_fixed_positional_encodings``, ``jrandom.choice(arange(noise_max_length), (T,), replace=False)`` then
``sort``; ``NOISY_ROTARY`` in ``models/transformer.py``). Two differences:

- draws: the reference draws one subset per batch (shared by its rows, from the batch's rng key); here each
  training row draws its own from a generator seeded by ``coordinates["row_seed"]`` (``uses_row_seeds``: a
  function of run seed, step and global row), so the draws do not depend on the number of DDP processes or on
  a resume, and a batch sees many subsets per step (without a row seed, e.g. called directly: torch's RNG).
- draws by layer (``layer_draws``): the reference's attention module calls ``hk.next_rng_key()`` in every layer,
  so each layer rotates by a subset of its own (queries and keys of a layer share it). ``per_layer`` (the
  default) does the same: layer ``l`` of a row draws from ``layer_seed(row seed, l)``, layer 0 from the row seed
  itself. ``shared``, a named deviation, draws once for every layer: what poslab did before the setting existed
  (the rerun of issues 37/38 ran so; ``poslab.config.targets.ADDED_ENCODING_SETTINGS`` reads older runs so).
- evaluation (``eval_positions``): the reference has no training flag, so it samples in evaluation too, with the
  evaluation loop's rng. poslab follows it by default (``sampled``): RoPE sees only distances, and those of a
  sorted sample (neighbours about ``max_position / T`` apart) are what training showed, whereas ``0..T-1`` puts
  every neighbour at distance 1, rare in training when ``max_position >> T``. The sample is drawn from a fixed
  seed (``EVAL_SEED``), one subset shared by the rows, so an evaluation is reproducible and a sequence gets the
  same positions whatever batch it is in. ``arange``: the token indices ``0..T-1``, the usual RoPE positions,
  for comparison.
- draws in evaluation (``eval_draws``, default 8): one fixed draw makes every accuracy conditional on that draw,
  so the evaluation runs ``eval_draws`` of them (seeds ``EVAL_SEED + k``, ``evaluation_draw``) and reports their
  mean, with the spread over draws (``accuracy_draw_sd``). ``eval_draws: 1`` is the single draw of before.

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``): the rule maps
RoPE's frequencies as for ``rope``, with ``original_length`` the training sequence length ``T`` (not
``max_position``), so a test-time variant at ``n`` tokens has factor ``n / T`` and rotates whatever positions the
evaluation uses (each draw's sample, or ``arange``). Unlike ``rope``'s, these models have been trained at every
position and distance below ``max_position``: no angle at a longer length is unseen, which is the premise of the
rules. A sorted sample of more tokens already has closer neighbours than training's (about ``max_position / n``
apart, against ``max_position / T``), and interpolation brings them closer still. The variants are reported so
that every rotary encoding is measured alike, not because they are expected to help here.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor

from poslab.config.settings import check_choice, check_whole
from poslab.encodings.base import ModelShape, PositionInputs, register
from poslab.encodings.rotary import RotaryEncoding
from poslab.errors import ConfigError

EVAL_POSITIONS = ("sampled", "arange")
LAYER_DRAWS = ("per_layer", "shared")
#: seed of the subset drawn in evaluation with eval_positions=sampled
EVAL_SEED = 0


def layer_seed(seed: int, layer: int) -> int:
    """The seed of layer ``layer``'s draw from a row's (or an evaluation draw's) ``seed``: the seed itself at layer 0,
    a hash of both elsewhere (no two (seed, layer) pairs of a run share a draw by arithmetic coincidence)."""
    if layer == 0:
        return int(seed)
    digest = hashlib.blake2b(f"{int(seed)}:{layer}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # below 2**63: a torch.Generator seed


def sorted_sample(length: int, max_position: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """``length`` distinct integers from ``[0, max_position)``, drawn uniformly and sorted: ``[length]`` fp32."""
    return torch.randperm(max_position, generator=generator, device=device)[:length].sort().values.float()


@register("randomized_rope")
class RandomizedRopeEncoding(RotaryEncoding):
    """RoPE at a sorted random sample of positions from ``[0, max_position)``, drawn per training sequence."""

    summary = (
        "Randomized RoPE: in training each sequence rotates by a sorted random sample of positions from "
        "[0, max_position), longer than any test sequence; in evaluation a fixed-seed sample (or 0..T-1)."
    )

    length_settings = ("max_position",)  # null: the paper's 2048, or the run's longest length (a 16x LM evaluation)
    length_floors = {"max_position": 2048}
    extension_settings = {"max_position": "kept"}  # the positions its parent was trained on (a distribution)
    uses_row_seeds = True  # training draws are a function of (seed, step, global row): DDP-invariant

    def __init__(
        self,
        shape: ModelShape,
        max_position: int,  # null in the YAML: filled in (length_settings, length_floors)
        eval_positions: str,
        eval_draws: int,
        layer_draws: str,
        **rotary: Any,
    ) -> None:
        super().__init__(shape, **rotary)  # base, pairing, rotary_dim
        self.max_position, self.eval_positions = int(max_position), eval_positions
        self.eval_draws, self.eval_draw = int(eval_draws), 0
        self.layer_draws = layer_draws

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        check_choice("encoding.eval_positions", settings["eval_positions"], EVAL_POSITIONS)
        check_choice("encoding.layer_draws", settings["layer_draws"], LAYER_DRAWS)
        check_whole("encoding.eval_draws", settings["eval_draws"], 1, "position draws evaluation averages over")
        max_position = settings["max_position"]
        whole = isinstance(max_position, int) or (isinstance(max_position, float) and max_position.is_integer())
        if isinstance(max_position, bool) or not whole or max_position < max_length:
            raise ConfigError(
                f"encoding.max_position={max_position!r} must be an integer at least the longest sequence the run "
                f"uses, max_length={max_length}: positions are a sample of T distinct integers from "
                f"[0, max_position) (the paper: 2048, beyond every test length)."
            )

    def positions(self, token_embeddings: Tensor, inputs: PositionInputs, layer: int = 0) -> Tensor:
        """Layer ``layer``'s positions: ``[B, T]`` sampled in training, ``[1, T]`` in evaluation (fp32)."""
        rows, length = inputs.tokens.shape
        device = inputs.tokens.device
        if length > self.max_position:
            raise ConfigError(
                f"a sequence of {length} tokens is longer than encoding.max_position={self.max_position}: "
                f"randomized_rope draws {length} distinct positions below it; raise encoding.max_position."
            )
        if not self.training:
            if self.eval_positions == "arange":
                return inputs.positions
            generator = torch.Generator(device=device).manual_seed(layer_seed(EVAL_SEED + self.eval_draw, layer))
            return sorted_sample(length, self.max_position, generator, device)[None]
        seeds = inputs.coordinates.get("row_seed")
        if seeds is None:  # called outside the training module: torch's RNG
            return torch.stack([sorted_sample(length, self.max_position, None, device) for _ in range(rows)])
        generator = torch.Generator(device=device)
        return torch.stack(
            [
                sorted_sample(length, self.max_position, generator.manual_seed(layer_seed(seed, layer)), device)
                for seed in seeds[:, 0].tolist()
            ]
        )

    def begin(self, token_embeddings: Tensor, inputs: PositionInputs) -> tuple[Tensor, Any]:
        """The positions of every layer: one tensor (``shared``, or ``arange`` in evaluation), or one per layer."""
        if self.layer_draws == "shared" or (not self.training and self.eval_positions == "arange"):
            return token_embeddings, self.positions(token_embeddings, inputs)
        return token_embeddings, [
            self.positions(token_embeddings, inputs, layer) for layer in range(self.shape.n_layers)
        ]

    def layer_positions(self, layer: int, hidden: Tensor, state: Any, inputs: PositionInputs) -> Tensor | None:
        return state[layer] if isinstance(state, list) else state

    def evaluation_draws(self) -> int:
        return self.eval_draws if self.eval_positions == "sampled" else 1  # arange draws nothing

    @contextmanager
    def evaluation_draw(self, draw: int) -> Iterator[None]:
        self.eval_draw = draw
        try:
            yield
        finally:
            self.eval_draw = 0

    def label(self) -> str:
        # layer_draws stays out of the label: runs recorded before it (read as shared) keep the label they
        # recorded; reports tell the two apart by the setting's column
        label = f"{super().label()}:{self.max_position}"
        return (
            label
            if self.eval_positions == self.yaml_settings()["eval_positions"]
            else f"{label}:eval_{self.eval_positions}"
        )
