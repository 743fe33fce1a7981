"""A value written into a Hydra command-line override. A leaf: the corpus preparation suggests overrides for the
files it finds, and the local launcher passes each job its run directory."""

from __future__ import annotations


def quoted(value: str) -> str:
    """``value`` quoted for Hydra's override parser, any character kept (``,`` ``=`` spaces and quotes)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
