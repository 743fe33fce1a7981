"""NoPE: no position information beyond what the causal mask leaks."""

from poslab.encodings.base import PositionEncoding, register


@register("none")
class NoPositionEncoding(PositionEncoding):
    """Causal mask only; the base class's hooks already do nothing."""

    summary = "No position encoding: the causal mask is the only source of order."
    attention_paths = ("sdpa", "explicit", "flex")  # nothing to add to any kernel
