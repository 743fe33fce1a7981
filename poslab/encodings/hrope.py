"""Hierarchical RoPE (hRoPE) and its two controls: rotate by paragraph, sentence and token indices.

The rotated part of each head (``rotary_dim`` features, ``rotary_dim / 2`` pairs) is split into three blocks
of ``blocks = [p, s, t]`` features. The pairs of the first block rotate by the paragraph index, those of the
second by the sentence index, those of the third by the token index. A pair belongs to exactly one block, so
the blocks do not interact: the score of a query and a key is a sum of three terms, each depending only on one
coordinate difference, and the paragraph coordinate can be changed with everything else held fixed (the
write-up's fake-merge and fake-split interventions). Blocks are counted in pairs, so they hold with either
``pairing`` (with ``half``, block 1 is features ``[0, p/2)`` and ``[P, P + p/2)``).

Frequencies (``frequencies``):

- ``split`` (default): the ordinary RoPE ladder ``inverse_frequencies(rotary_dim, base)`` cut into consecutive
  bands, paragraph first, then sentence, then token, as Qwen2-VL's M-RoPE hands out bands to its axes. It is
  the default because it changes nothing but the coordinates: with all three coordinates equal to the token
  index, hRoPE *is* RoPE (same frequencies, same angles), so the rope baseline and the three variants differ
  only in what they rotate by. The cost: the token block gets the lowest-frequency (longest-wavelength) band,
  so fine token order is coarser than in RoPE; use ``full`` when that matters.
- ``full``: each block its own complete ladder ``inverse_frequencies(block_size, base)``: every level has high
  and low frequencies, but it no longer reduces to RoPE.
- ``token_first``: RoPE's ladder in bands as ``split``, but the token block takes the highest band, then the
  sentence block, and the paragraph block the lowest: fine token order keeps RoPE's fastest pairs.
- ``interleaved``: RoPE's ladder dealt to the axes in turn along the spectrum (token, sentence, paragraph,
  token, ...; an axis whose block is full is skipped), so each axis spans high and low frequencies, as the
  successors of M-RoPE interleave their axes. The token axis takes the fastest pair.

``split``, ``token_first`` and ``interleaved`` use each frequency of RoPE's ladder exactly once; they differ only
in which axis a frequency follows. A block keeps its place in the features (paragraph pairs first) whatever
frequencies it takes.

Scaling rules (``scaling``, ``test_scaling``, the test-time variants; ``rotary.RotaryEncoding``): a rule maps each
pair's frequency, whatever axis it follows, as it maps that frequency of RoPE's ladder of ``rotary_dim`` and
``base`` (``rope_scaling``: a frequency's pair index read from the frequency itself). With ``split``,
``token_first`` and ``interleaved`` every pair is a rung of that ladder, so each axis's band is scaled exactly as
in ``rope``, and with all three coordinates equal to the token index a rule on hRoPE is the rule on RoPE; with
``full`` a block's rungs fall between the ladder's, and NTK and YaRN read their fractional index there. The factor
is ``L_test / L_train`` in tokens for every axis, and YaRN and Llama 3 count a pair's rotations over
``original_length`` as if its coordinate were the token index: the paragraph and sentence coordinates grow more
slowly than it, so their pairs turned less in training than that count says. (In the synthetic tasks both
coordinates are 0: only the token axis rotates.)

Coordinates: ``layer_positions`` returns one ``[B, T, 3]`` fp32 tensor (paragraph, sentence, token), the same
object for every layer (one rotation is built per forward). Paragraph and sentence indices come from
``inputs.coordinates`` and are counted within the window (each row's first value is subtracted): RoPE only
sees differences, and small numbers keep the fp32 angles exact. The token coordinate is ``inputs.positions``.

- ``hrope_axial``: the real paragraph coordinate.
- ``rand_axial``: in training the paragraph coordinate is random: a boundary before each token (but the
  first) with probability ``paragraph_density``, drawn afresh for every training sequence from a generator
  seeded by (run seed, step, global row) (``PositionEncoding.uses_row_seeds``), so it never repeats and
  cannot be memorised, and a DDP run or a resumed one draws exactly what a 1-process run does. In
  evaluation it uses the real coordinate (``eval_paragraphs: real``, the default), or random boundaries from
  a fixed seed (``random``) so evaluations are reproducible.
- ``period_axial``: the paragraph coordinate on a fixed grid, a boundary every ``round(1 / paragraph_density)``
  tokens, in training and evaluation alike.

``paragraph_density`` (boundaries per token) is the real segmentation's density
(``poslab.datamodules.segmentation.boundary_density``); the corpus may fill it in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from poslab.config.settings import check_choice
from poslab.encodings.base import ModelShape, PositionInputs, register
from poslab.encodings.rope_scaling import plain
from poslab.encodings.rotary import RotaryEncoding, exact_positions
from poslab.errors import ConfigError

FREQUENCIES = ("split", "full", "token_first", "interleaved")
EVAL_PARAGRAPHS = ("real", "random")
AXES = ("paragraph", "sentence", "token")
#: seed of the random paragraph boundaries rand_axial uses in evaluation with eval_paragraphs=random
EVAL_SEED = 0


def default_blocks(rotary_dim: int) -> list[int]:
    """Equal thirds rounded down to even sizes; the remainder goes to the token block."""
    third = 2 * (rotary_dim // 6)
    return [third, third, rotary_dim - 2 * third]


def pair_frequencies(blocks: Sequence[int], base: float, frequencies: str) -> tuple[Tensor, Tensor]:
    """Per pair: its frequency ``[P]`` (fp64) and the axis it rotates by ``[P]`` (0 paragraph, 1 sentence, 2 token)."""
    pairs = [size // 2 for size in blocks]
    axis = torch.cat([torch.full((n,), a, dtype=torch.long) for a, n in enumerate(pairs)])
    if frequencies == "full":
        return torch.cat([plain(size, base) for size in blocks]), axis
    ladder = plain(sum(blocks), base)  # RoPE's: highest frequency first
    taken = ladder_indices(pairs, frequencies)
    return torch.cat([ladder[torch.tensor(indices, dtype=torch.long)] for indices in taken]), axis


def ladder_indices(pairs: Sequence[int], frequencies: str) -> list[list[int]]:
    """Which rungs of RoPE's ladder (0 = fastest) each axis's pairs take, in feature order, for ``split``,
    ``token_first`` and ``interleaved``; every rung exactly once."""
    total = sum(pairs)
    if frequencies in ("split", "token_first"):
        order = (0, 1, 2) if frequencies == "split" else (2, 1, 0)
        starts, start = {}, 0
        for a in order:
            starts[a] = start
            start += pairs[a]
        return [list(range(starts[a], starts[a] + pairs[a])) for a in range(3)]
    taken: list[list[int]] = [[], [], []]
    turn = [2, 1, 0]  # token, sentence, paragraph, token, ...
    rung, k = 0, 0
    while rung < total:
        a = turn[k % 3]
        k += 1
        if len(taken[a]) < pairs[a]:
            taken[a].append(rung)
            rung += 1
    return taken


def window_coordinate(inputs: PositionInputs, key: str, encoding: str) -> Tensor:
    """``inputs.coordinates[key]`` ``[B, T]``, shifted so that every row starts at 0."""
    if key not in inputs.coordinates:
        raise ConfigError(
            f"encoding {encoding!r} rotates by the {key} index, but the batch has no {key!r} coordinate: the corpus "
            f"must provide paragraph and sentence coordinates (a corpus with a segmentation style); this batch "
            f"has {sorted(inputs.coordinates) or 'none'}."
        )
    values = inputs.coordinates[key]
    if values.shape != inputs.tokens.shape:
        raise ValueError(
            f"the {key} coordinate has shape {tuple(values.shape)}, the tokens {tuple(inputs.tokens.shape)}."
        )
    return values - values[:, :1]  # subtract in integers (exact), convert later


def check_density(settings: dict[str, Any]) -> None:
    """A given ``paragraph_density`` (null: the corpus fills it in, ``corpus_settings``; base.validate_encoding
    checks that something does)."""
    density = settings.get("paragraph_density")
    if density is None:
        return
    if isinstance(density, bool) or not isinstance(density, (int, float)) or not 0 < density < 1:
        raise ConfigError(
            f"encoding.paragraph_density={density!r} must be a number strictly between 0 and 1 "
            f"(paragraph boundaries per token); 0 means the corpus has no paragraph boundaries at all, so there "
            f"is no density to match: pick a corpus with paragraphs or set encoding.paragraph_density."
        )


@register("hrope_axial")
class HRopeEncoding(RotaryEncoding):
    """Hierarchical RoPE: three blocks of pairs rotated by the paragraph, sentence and token indices."""

    summary = "Hierarchical RoPE: three blocks of rotated pairs follow the paragraph, sentence and token index."

    required_coordinates = ("paragraph", "sentence")

    def __init__(
        self,
        shape: ModelShape,
        blocks: Sequence[int] | None,  # null: thirds (default_blocks)
        frequencies: str,
        **rotary: Any,
    ) -> None:
        super().__init__(shape, **rotary)  # base, pairing, rotary_dim
        self.blocks = [int(b) for b in blocks] if blocks is not None else default_blocks(self.rotary_dim)
        self.frequencies = frequencies
        own, axis = pair_frequencies(self.blocks, self.base, frequencies)
        self.register_buffer("pair_axis", axis, persistent=False)
        self.set_frequencies(own)  # replaces RoPE's ladder: the frequency of each pair, whatever its block

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        rotary_dim = settings.get("rotary_dim") or shape.head_dim
        frequencies = settings["frequencies"]
        check_choice("encoding.frequencies", frequencies, FREQUENCIES)
        blocks = settings.get("blocks")
        if blocks is None:
            if rotary_dim < 6:
                raise ConfigError(
                    f"the rotated dimension {rotary_dim} is too small for three even blocks "
                    f"(paragraph, sentence, token): it needs at least 6 features."
                )
            return
        sizes = list(blocks) if isinstance(blocks, Sequence) and not isinstance(blocks, str) else [blocks]
        if (
            len(sizes) != 3
            or any(isinstance(b, bool) or not isinstance(b, int) or b <= 0 or b % 2 for b in sizes)
            or sum(sizes) != rotary_dim
        ):
            raise ConfigError(
                f"encoding.blocks={sizes!r} must be three even positive sizes (paragraph, sentence, token) summing "
                f"to the rotated dimension {rotary_dim} (encoding.rotary_dim, default the head dimension "
                f"{shape.head_dim}), e.g. {default_blocks(rotary_dim) if rotary_dim >= 6 else [2, 2, 2]}."
            )

    def paragraph(self, inputs: PositionInputs) -> Tensor:
        """The paragraph coordinate ``[B, T]``, 0 at each window's start."""
        return window_coordinate(inputs, "paragraph", self.name)

    def positions(self, token_embeddings: Tensor, inputs: PositionInputs) -> Tensor:
        """``[B, T, 3]`` fp32 coordinates (paragraph, sentence, token), computed once per forward pass."""
        paragraph = self.paragraph(inputs)
        sentence = window_coordinate(inputs, "sentence", self.name)
        token = inputs.positions.float().expand(paragraph.shape)
        return torch.stack((paragraph.float(), sentence.float(), token), dim=-1)

    def angles(self, positions: Tensor, inv_freq: Tensor | None = None) -> Tensor:
        # each pair takes its own block's coordinate, times its frequency: [B, T, 3] -> [B, T, P]
        inv_freq = self.inv_freq if inv_freq is None else inv_freq
        return exact_positions(positions)[..., self.pair_axis] * inv_freq.float()

    def label(self) -> str:
        label = super().label()
        return label if self.frequencies == self.yaml_settings()["frequencies"] else f"{label}:{self.frequencies}"


@register("rand_axial")
class RandAxialEncoding(HRopeEncoding):
    """hRoPE whose paragraph coordinate is random boundaries at ``paragraph_density``, new every training step."""

    summary = "Control for hrope_axial: paragraph boundaries drawn at random at the corpus's density."

    corpus_settings = ("paragraph_density",)  # null: the training corpus's boundary density
    uses_row_seeds = True  # training draws are a function of (seed, step, global row): DDP-invariant

    def __init__(
        self,
        shape: ModelShape,
        paragraph_density: float | None,  # null: the corpus fills it in (corpus_settings)
        eval_paragraphs: str,
        **hrope: Any,
    ) -> None:
        super().__init__(shape, **hrope)  # base, pairing, rotary_dim, blocks, frequencies
        self.paragraph_density = float(paragraph_density) if paragraph_density is not None else None
        self.eval_paragraphs = eval_paragraphs

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        check_density(settings)
        mode = settings["eval_paragraphs"]
        check_choice("encoding.eval_paragraphs", mode, EVAL_PARAGRAPHS)

    def random_paragraphs(self, inputs: PositionInputs, generator: torch.Generator | None = None) -> Tensor:
        """Bernoulli(density) boundaries before every token but the first, cumulated: ``[B, T]`` int64 from 0.

        With ``coordinates["row_seed"]`` (training, from the module) row b draws from its own generator seeded
        by ``row_seed[b]``; else from ``generator`` (evaluation) or torch's global RNG."""
        if self.paragraph_density is None:
            raise ConfigError(f"encoding {self.name!r} needs encoding.paragraph_density; it is not set.")
        tokens = inputs.tokens
        seeds = inputs.coordinates.get("row_seed") if generator is None else None
        if seeds is not None:
            row_generator = torch.Generator(device=tokens.device)
            draws = torch.stack(
                [
                    torch.rand(tokens.shape[1], generator=row_generator.manual_seed(int(seed)), device=tokens.device)
                    for seed in seeds[:, 0].tolist()
                ]
            )
        else:
            draws = torch.rand(tokens.shape, generator=generator, device=tokens.device)
        boundaries = draws < self.paragraph_density
        boundaries[:, 0] = False  # the window's first token is paragraph 0
        return boundaries.long().cumsum(dim=-1)

    def paragraph(self, inputs: PositionInputs) -> Tensor:
        if self.training:
            return self.random_paragraphs(inputs)  # per-row seeds from the module (or torch's global RNG)
        if self.eval_paragraphs == "random":
            generator = torch.Generator(device=inputs.tokens.device).manual_seed(EVAL_SEED)
            return self.random_paragraphs(inputs, generator)
        return super().paragraph(inputs)


@register("period_axial")
class PeriodAxialEncoding(HRopeEncoding):
    """hRoPE whose paragraph coordinate is a fixed grid: a boundary every ``round(1 / paragraph_density)`` tokens."""

    summary = "Control for hrope_axial: paragraph boundaries on a fixed grid at the corpus's density."

    corpus_settings = ("paragraph_density",)  # null: the training corpus's boundary density

    def __init__(
        self,
        shape: ModelShape,
        paragraph_density: float | None,  # null: the corpus fills it in (corpus_settings)
        **hrope: Any,
    ) -> None:
        super().__init__(shape, **hrope)  # base, pairing, rotary_dim, blocks, frequencies
        self.paragraph_density = float(paragraph_density) if paragraph_density is not None else None

    @classmethod
    def validate(cls, settings: dict[str, Any], shape: ModelShape, max_length: int) -> None:
        super().validate(settings, shape, max_length)
        check_density(settings)

    @property
    def period(self) -> int:
        if self.paragraph_density is None:
            raise ConfigError(f"encoding {self.name!r} needs encoding.paragraph_density; it is not set.")
        return max(1, round(1 / self.paragraph_density))

    def paragraph(self, inputs: PositionInputs) -> Tensor:
        token = (inputs.positions - inputs.positions[:, :1]).expand(inputs.tokens.shape)  # counted in the window
        return torch.div(token, self.period, rounding_mode="floor")  # the same grid in training and evaluation

    def untrained_at_test(self, train_length: int, max_length: int) -> list[str]:
        # the grid's index is floor(t / period): a longer sequence reaches paragraph indices training never rotated by
        trained, reached = (train_length - 1) // self.period, (max_length - 1) // self.period
        if reached <= trained:
            return []
        return [
            f"period_axial's paragraph index (a boundary every {self.period} tokens) reaches {reached} at length "
            f"{max_length} but at most {trained} in training (length {train_length}): rotations never trained."
        ]
