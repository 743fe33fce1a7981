"""A value written into a Hydra command-line override. A leaf: the corpus preparation suggests overrides for the
files it finds, and the local launcher passes each job its run directory. Path settings' overrides are expanded
here (``~``, ``$VAR``) before Hydra reads them."""

from __future__ import annotations

from poslab.config.settings import PATH_SETTINGS, expand_path


def quoted(value: str) -> str:
    """``value`` quoted for Hydra's override parser, any character kept (``,`` ``=`` spaces and quotes)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def expanded_overrides(overrides: list[str]) -> list[str]:
    """``overrides`` with ``~`` and ``$VAR`` expanded (``expand_path``) in the value of each path setting
    (``PATH_SETTINGS``, a comma sweep's values each), before Hydra composes anything: so the run or sweep directory
    Hydra makes from ``paths.log_dir``, every job a launcher composes again from the overrides, and the overrides a
    run records all see the expanded path. ``${...}`` is left to OmegaConf; a line that does not parse is left as
    it is (the pre-check says why)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    expanded = []
    for line in overrides:
        try:
            override = parser.parse_override(line)
        except HydraException:
            expanded.append(line)
            continue
        value, key = override.value(), override.key_or_group
        values = [value] if isinstance(value, str) else value.list if isinstance(value, ChoiceSweep) else []
        values = [getattr(v, "text", v) for v in values]  # a sweep's quoted values: their text
        if (
            key not in PATH_SETTINGS
            or override.is_delete()
            or not values
            or not all(isinstance(v, str) for v in values)
        ):
            expanded.append(line)
            continue
        paths = [expand_path(key, v, braces=False) for v in values]
        prefix = line[: len(line) - len(line.lstrip("+"))]
        expanded.append(line if paths == values else f"{prefix}{key}=" + ",".join(quoted(p) for p in paths))
    return expanded
