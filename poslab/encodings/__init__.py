"""Position encodings: one interface (``base.PositionEncoding``), one registry, one file each."""

from poslab.encodings import alibi, hrope, increments, learned, none, rope, sinusoid  # noqa: F401  (registers them)
from poslab.encodings.base import (
    ENCODINGS,
    ConfigError,
    ModelShape,
    PositionEncoding,
    PositionInputs,
    build_encoding,
    encoding_class,
    register,
)

__all__ = [
    "ENCODINGS",
    "ConfigError",
    "ModelShape",
    "PositionEncoding",
    "PositionInputs",
    "build_encoding",
    "encoding_class",
    "register",
]
