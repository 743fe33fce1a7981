"""Pinned and generated text compared as numbers with a tolerance, never as printed bytes.

A float's last digits depend on the CPU's float path: the same computation prints ``...49086995781`` on an Intel
host with AMX and ``...4908699578`` on an AMD host with AVX512-BF16 (bf16 kernels, SIMD sums and ``repr``'s
shortest form), and a figure rounded for a table can land on either side of a rounding boundary. So a pinned file
is compared as text with its numbers taken out: the words, punctuation and layout must be the same, and each
number must be the same number within a stated tolerance (``docs/tests_profile.md``, "What may differ between
CPUs"):

- a relative tolerance ``rel`` (default 1e-6) on every number;
- plus one unit in the last printed place of a number printed with decimals (``0.12`` may read ``0.13``: a value
  on a rounding boundary), which admits nothing a table could round differently on another CPU;
- integers (counts, lengths, seeds, steps) exactly, beyond ``rel``.

JSON is compared parsed: the same keys in the same order, the same types, numbers within ``rel`` (or ``ABS`` of
each other, for a figure that is 0 up to rounding).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

#: a number as the reports print it: sign (ASCII or Unicode minus), digits, decimals, exponent. Thousands
#: separators are not part of a number (``1,604`` is 1, ``,`` and 604: both integers, compared exactly), so a CSV
#: row's commas stay separators.
NUMBER = re.compile(r"(?:(?<![\w.])[-\u2212])?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")

REL = 1e-6
#: an absolute floor for a JSON number: a sum that cancels to 0.0 on one CPU may leave 1e-17 on another
ABS = 1e-12


def _value(token: str) -> float:
    return float(token.replace("\u2212", "-"))


def _last_place(token: str) -> float:
    """One unit in the last printed place of ``token``, 0 for an integer (``0.125`` -> 0.001, ``1.5e-05`` ->
    1e-06, ``42`` -> 0)."""
    mantissa, _, exponent = token.lower().partition("e")
    if "." not in mantissa:
        return 0.0
    decimals = len(mantissa.split(".")[1])
    return 10.0 ** (int(exponent or 0) - decimals)


def numbers_close(found: str, expected: str, rel: float = REL) -> bool:
    """The printed numbers ``found`` and ``expected`` are the same within ``rel`` and one unit of the expected's last
    printed place."""
    a, b = _value(found), _value(expected)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=max(_last_place(expected), _last_place(found)) * (1 + 1e-9))


def split_numbers(text: str) -> tuple[list[str], list[str]]:
    """(the text between the numbers, the numbers): ``"a 1.5 b"`` -> (["a ", " b"], ["1.5"])."""
    return NUMBER.split(text), NUMBER.findall(text)


def text_difference(found: str, expected: str, rel: float = REL) -> str | None:
    """Where ``found`` differs from ``expected`` beyond the tolerance (one line naming the line and the values), or
    None when they are the same text with the same numbers."""
    found_lines, expected_lines = found.split("\n"), expected.split("\n")
    if len(found_lines) != len(expected_lines):
        return f"{len(found_lines)} lines, expected {len(expected_lines)}"
    for number, (got, want) in enumerate(zip(found_lines, expected_lines, strict=True), start=1):
        (got_words, got_numbers), (want_words, want_numbers) = split_numbers(got), split_numbers(want)
        if got_words != want_words or len(got_numbers) != len(want_numbers):
            return f"line {number} differs in its text:\n  found:    {got}\n  expected: {want}"
        for a, b in zip(got_numbers, want_numbers, strict=True):
            if not numbers_close(a, b, rel):
                return f"line {number}: {a} where {b} is expected (rel {rel:g}):\n  found:    {got}\n  expected: {want}"
    return None


def assert_text_close(found: str, expected: str, what: str = "", rel: float = REL) -> None:
    """``found`` is ``expected`` with every number within the tolerance (module docstring)."""
    difference = text_difference(found, expected, rel)
    assert difference is None, f"{what}: {difference}" if what else difference


def json_difference(found: Any, expected: Any, rel: float = REL, where: str = "$") -> str | None:
    """Where two parsed JSON values differ beyond ``rel`` (a JSON path and the values), or None."""
    if isinstance(expected, bool) or expected is None or isinstance(expected, str):
        return None if found == expected and type(found) is type(expected) else f"{where}: {found!r} != {expected!r}"
    if isinstance(expected, (int, float)):
        if isinstance(found, bool) or not isinstance(found, (int, float)):
            return f"{where}: {found!r} is not a number like {expected!r}"
        if isinstance(expected, int) and isinstance(found, int):
            return None if found == expected else f"{where}: {found} != {expected}"
        both_nan = math.isnan(found) and math.isnan(expected)
        same = math.isclose(found, expected, rel_tol=rel, abs_tol=ABS) or both_nan
        return None if same else f"{where}: {found!r} != {expected!r} (rel {rel:g})"
    if isinstance(expected, dict):
        if not isinstance(found, dict) or list(found) != list(expected):
            keys = list(found) if isinstance(found, dict) else type(found).__name__
            return f"{where}: keys {keys} != {list(expected)}"
        parts = (json_difference(found[key], value, rel, f"{where}.{key}") for key, value in expected.items())
        return next((part for part in parts if part is not None), None)
    if isinstance(expected, list):
        if not isinstance(found, list) or len(found) != len(expected):
            return f"{where}: {found!r} is not a list of {len(expected)}"
        parts = (json_difference(a, b, rel, f"{where}[{i}]") for i, (a, b) in enumerate(zip(found, expected)))
        return next((part for part in parts if part is not None), None)
    raise TypeError(f"{where}: {type(expected).__name__} is not a JSON value")


def assert_json_close(found: Any, expected: Any, what: str = "", rel: float = REL) -> None:
    """Two JSON values (parsed, or their text) are the same, numbers within ``rel``."""
    found = json.loads(found) if isinstance(found, str) else found
    expected = json.loads(expected) if isinstance(expected, str) else expected
    difference = json_difference(found, expected, rel)
    assert difference is None, f"{what}: {difference}" if what else difference


def assert_file_close(found: str, expected: str, name: str, rel: float = REL) -> None:
    """A written file against its pinned copy: parsed when it is JSON (``name`` names a ``.json`` file: its path, or
    a sentence that starts with it), as text with numbers otherwise."""
    if name.split()[0].endswith(".json"):
        assert_json_close(found, expected, name, rel)
    else:
        assert_text_close(found, expected, name, rel)
