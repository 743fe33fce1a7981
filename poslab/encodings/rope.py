"""RoPE (Su et al., 2021): rotate queries and keys by the token index."""

from poslab.encodings.base import register
from poslab.encodings.rotary import RotaryEncoding


@register("rope")
class RopeEncoding(RotaryEncoding):
    """Integer token positions; ``base`` and ``pairing`` as in ``RotaryEncoding``."""

    summary = "Rotary embeddings: queries and keys rotated by angles proportional to the token index."
