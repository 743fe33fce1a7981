"""The font the figures draw Chinese with: Noto Sans CJK SC, from the PyPI package ``noto-cjk-sans-otc``.

*The decision.* A dependency in ``pyproject.toml`` (so ``pip install -e .`` and ``make install`` bring it, with no
system package and no download at run time): ``noto-cjk-sans-otc``, Google's Noto Sans CJK Regular collection as
published, under the SIL Open Font License, a 15.5 MB wheel (19.5 MB installed) with no dependencies of its own.
The collection holds ten faces (JP, KR, SC, TC, HK and their monospaced versions); matplotlib 3.11 registers each,
and the figures name SC, the face with the Simplified Chinese forms of the corpora's text. The other candidates:
``mplfonts`` ships Noto Sans CJK SC too, but as an 85 MB wheel (107 MB installed) of six fonts, one of them SimHei,
which is not freely licensed, and pulls in ``fire`` and ``fontmeta``; WenQuanYi Micro Hei (5 MB, in
``paperang-p2-fonts-cjk``) is smaller but lives in a printer library's package and draws fewer characters.

*How it is used.* ``poslab.analysis.plotting`` calls ``use_cjk_fallback()`` once: the font file is registered with
matplotlib's font manager (about 20 ms) and its family appended to ``font.family``, so Latin text keeps DejaVu Sans
and matplotlib takes each glyph DejaVu lacks from the CJK font. With the package absent, a CJK font matplotlib already
knows from the system is taken (``CJK_FONT_FAMILIES``); with none, one warning, and the increments picture writes
Chinese as code points (U+4EBA).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

log = logging.getLogger("poslab")

#: the face of the bundled collection the figures draw Chinese with
CJK_FAMILY = "Noto Sans CJK SC"
#: installed fonts that can stand in when the bundled one is absent, in order of preference
CJK_FONT_FAMILIES = (
    "Noto Sans CJK",
    "Noto Serif CJK",
    "Source Han Sans",
    "Source Han Serif",
    "WenQuanYi",
    "AR PL",
    "Droid Sans Fallback",
    "SimHei",
    "Microsoft YaHei",
    "PingFang",
    "Hiragino Sans GB",
)
_PROBE = ord("人")  # a font without this common ideograph is no CJK font


@dataclass(frozen=True)
class CjkFont:
    family: str  # the name matplotlib knows it by
    path: str  # its file: a matplotlib FontPath (file and face) for a face of a collection


def face_index(path: str) -> int:
    return int(getattr(path, "face_index", 0))


@cache
def charmap(path: str) -> frozenset[int]:
    """The code points a font file (its face, for a collection) has glyphs for; empty if it cannot be read."""
    from matplotlib.ft2font import FT2Font

    face = face_index(path)
    try:
        # face_index only where needed: matplotlib before 3.11 has no such argument
        font = FT2Font(str(path), face_index=face) if face else FT2Font(str(path))
        return frozenset(font.get_charmap())
    except Exception:  # a broken or unsupported font file is the same as no font
        return frozenset()


def has_glyph(path: str, char: str) -> bool:
    return ord(char) in charmap(path)


def bundled_font_file() -> Path | None:
    """The collection file of ``noto-cjk-sans-otc``, or None when the package is not installed."""
    try:
        from noto_cjk_sans_otc import FONT_PATH
    except ImportError:
        return None
    path = Path(str(FONT_PATH))
    return path if path.is_file() else None


def find_cjk_font(manager: Any, bundled: Path | None) -> CjkFont | None:
    """Register ``bundled`` (if given) with the matplotlib font ``manager`` and return the CJK font to draw with:
    ``CJK_FAMILY``, else the first of ``CJK_FONT_FAMILIES`` it knows that draws Chinese, else None."""
    from matplotlib.font_manager import FontProperties

    if bundled is not None and not any(entry.fname == str(bundled) for entry in manager.ttflist):
        manager.addfont(str(bundled))
    names = sorted({entry.name for entry in manager.ttflist})
    for wanted in (CJK_FAMILY, *CJK_FONT_FAMILIES):
        for name in (n for n in names if n.startswith(wanted)):
            # the file (and face) matplotlib draws this family with
            path = manager.findfont(FontProperties(family=name), fallback_to_default=False)
            if _PROBE in charmap(path):
                return CjkFont(name, path)
    return None


@cache
def cjk_font() -> CjkFont | None:
    """The CJK font of every figure (found once), or None, with one warning saying what that means."""
    from matplotlib import font_manager

    font = find_cjk_font(font_manager.fontManager, bundled_font_file())
    if font is None:
        log.warning(
            "no CJK font: Chinese characters in figures are drawn as code points (U+4EBA); "
            "`pip install noto-cjk-sans-otc` (a poslab dependency) brings Noto Sans CJK SC"
        )
    return font


def use_cjk_fallback(rc: Any) -> CjkFont | None:
    """Append the CJK font's family to ``rc["font.family"]`` (matplotlib rcParams): glyphs the Latin fonts before
    it lack are taken from it. Nothing changes when there is no CJK font."""
    font = cjk_font()
    if font is not None and font.family not in rc["font.family"]:
        rc["font.family"] = [*rc["font.family"], font.family]
    return font


__all__ = [
    "CJK_FAMILY",
    "CJK_FONT_FAMILIES",
    "CjkFont",
    "bundled_font_file",
    "charmap",
    "cjk_font",
    "face_index",
    "find_cjk_font",
    "has_glyph",
    "use_cjk_fallback",
]
