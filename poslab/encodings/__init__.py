"""Position encodings: one interface (``base.PositionEncoding``), one registry, one file each.

Every module of this package other than the shared ``base`` and ``rotary`` is imported here, and registers
its encoding(s) with ``@register``: a new encoding is a new file in this folder (and a YAML in
``conf/encoding/``), with no list to edit.
"""

import importlib
import pkgutil

from poslab.encodings.base import (
    ENCODINGS,
    ModelShape,
    PositionEncoding,
    PositionInputs,
    build_encoding,
    encoding_class,
    fill_length_settings,
    length_setting_kinds,
    register,
)

SHARED_MODULES = ("base", "rotary")  # the interface and the rotary machinery: no encoding of their own

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if _module not in SHARED_MODULES:
        importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "ENCODINGS",
    "ModelShape",
    "PositionEncoding",
    "PositionInputs",
    "build_encoding",
    "encoding_class",
    "fill_length_settings",
    "length_setting_kinds",
    "register",
]
