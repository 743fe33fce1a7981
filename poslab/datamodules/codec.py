"""The byte codec: how a document's text becomes the byte symbols of the prepared cache and back.

One place for the rule every part of poslab that counts or decodes bytes follows (the corpora, the
tokenizers, the segmentation, the analyses): text is UTF-8 with ``surrogateescape``, so a file that is not
valid UTF-8 still round-trips byte for byte (an undecodable byte becomes a lone surrogate and back), and
the byte tokenizer's document separator is the one symbol past the 256 byte values.

Reading a data file is stricter (``read_lines``, ``corpus.decode_errors``): ``strict`` stops at the first byte
sequence that is not UTF-8 with the file and its byte offset (``first_invalid_utf8``); ``replace`` reads each such
sequence as U+FFFD and counts it, so what was replaced is logged and recorded in the cache's ``meta.json``. A JSON
string can escape half a UTF-16 pair (``\\ud83d``, an emoji cut in two): a lone surrogate, which no UTF-8 text holds
(and which ``text_bytes`` would take for an escaped byte, or refuse); the JSONL reader refuses it under ``strict`` and
replaces it under ``replace`` (``first_lone_surrogate``, ``replace_lone_surrogates``).
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np

from poslab.config.settings import DECODE_ERRORS

BYTE_VALUES = 256
SEPARATOR = 256  # the byte tokenizer's document separator (after each document in the token array)
BYTE_VOCAB = 257  # the 256 byte values and the separator
ENCODING, ERRORS = "utf-8", "surrogateescape"
COUNTING_REPLACE = "poslab.counting_replace"  # the codec error handler behind decode_errors=replace
_replaced = [0]  # sequences COUNTING_REPLACE has replaced in this process (a reader takes the difference)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # in text decoded from UTF-8 or JSON, every surrogate is lone


def _counting_replace(error: UnicodeError) -> tuple[str, int]:
    # Python's "replace" (one U+FFFD per invalid sequence), counted: a file's count is exact, not estimated from
    # the U+FFFD in its text (the file may hold real U+FFFD characters)
    if not isinstance(error, UnicodeDecodeError):
        raise error
    _replaced[0] += 1
    return "\ufffd", error.end


codecs.register_error(COUNTING_REPLACE, _counting_replace)


def text_bytes(text: str) -> bytes:
    """The UTF-8 bytes of ``text`` (a lone escaped surrogate is its original byte)."""
    return text.encode(ENCODING, errors=ERRORS)


def bytes_text(data: bytes) -> str:
    """``text_bytes``'s inverse: any bytes, valid UTF-8 or not."""
    return data.decode(ENCODING, errors=ERRORS)


def byte_length(text: str) -> int:
    """Bytes of ``text`` as the byte tokenizer counts them (what byte caps and bits per byte count)."""
    return len(text_bytes(text))


def encode_bytes(text: str) -> np.ndarray:
    """The byte tokenizer: the UTF-8 bytes of ``text`` as ``uint16`` symbols 0..255 (the separator is 256)."""
    return np.frombuffer(text_bytes(text), dtype=np.uint8).astype(np.uint16)


def decode_bytes(tokens: np.ndarray | Iterable[int]) -> bytes:
    """Byte symbols back to bytes; the separator (and any symbol above 255) is dropped."""
    values = np.asarray(tokens if isinstance(tokens, np.ndarray) else list(tokens))
    return values[values < BYTE_VALUES].astype(np.uint8).tobytes()


def decode_text(tokens: np.ndarray | Iterable[int], errors: str = "replace") -> str:
    """Byte symbols as text; by default an invalid sequence (a window cut inside a character) shows as U+FFFD."""
    return decode_bytes(tokens).decode(ENCODING, errors=errors)


def utf8_lengths(text: str) -> np.ndarray:
    """Bytes per character of ``text_bytes(text)`` (a lone escaped surrogate is one byte)."""
    code = np.frombuffer(text.encode("utf-32-le", errors="surrogatepass"), dtype=np.uint32)
    lengths = 1 + (code >= 0x80).astype(np.int64) + (code >= 0x800) + (code >= 0x10000)
    lengths[(code >= 0xDC80) & (code <= 0xDCFF)] = 1  # surrogateescape: the original single byte
    return lengths


def first_lone_surrogate(text: str) -> int:
    """The index of the first lone surrogate (U+D800..U+DFFF) in ``text``, or -1 when there is none."""
    found = _LONE_SURROGATE.search(text)
    return found.start() if found else -1


def replace_lone_surrogates(text: str) -> tuple[str, int]:
    """``text`` with each lone surrogate read as U+FFFD, and how many there were."""
    return _LONE_SURROGATE.subn("\ufffd", text)


def first_invalid_utf8(path: Path) -> tuple[int, int, str]:
    """``(byte offset, line number, reason)`` of the first sequence of ``path`` that is not UTF-8; ``(-1, 0, "")``
    when there is none. Read in chunks (memory does not grow with the file): the error path of ``read_lines``."""
    decoder = codecs.getincrementaldecoder(ENCODING)("strict")
    offset, line = 0, 1
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            pending = len(decoder.getstate()[0])  # bytes of a character the previous chunk cut in two
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as error:
                return offset - pending + error.start, line + error.object[: error.start].count(b"\n"), error.reason
            if not chunk:
                return -1, 0, ""
            offset, line = offset + len(chunk), line + chunk.count(b"\n")


class InvalidUtf8Error(ValueError):
    """``read_lines`` under ``strict``: the file, byte offset and line of the first invalid sequence."""

    def __init__(self, path: Path, offset: int, line: int, reason: str) -> None:
        self.path, self.offset, self.line, self.reason = path, offset, line, reason
        super().__init__(
            f"{path} is not valid UTF-8 at byte offset {offset} (line {line}: {reason}); convert the file to UTF-8, "
            f"or set corpus.decode_errors=replace to read each invalid sequence as U+FFFD (counted and logged)."
        )


def read_lines(path: Path, decode_errors: str, replaced: dict[str, int] | None = None) -> Iterator[str]:
    """The lines of a UTF-8 text file (universal newlines, as ``open`` reads text). ``decode_errors``: ``strict``
    raises ``InvalidUtf8Error`` at the first invalid sequence; ``replace`` reads it as U+FFFD and adds the count to
    ``replaced[str(path)]``."""
    if decode_errors not in DECODE_ERRORS:
        raise ValueError(f"decode_errors={decode_errors!r}; allowed: {', '.join(DECODE_ERRORS)}.")
    before = _replaced[0]
    try:
        with open(path, encoding=ENCODING, errors="strict" if decode_errors == "strict" else COUNTING_REPLACE) as f:
            yield from f
    except UnicodeDecodeError:
        # the text reader's offsets are relative to its own buffer: find the file offset by scanning the bytes
        raise InvalidUtf8Error(path, *first_invalid_utf8(path)) from None
    finally:
        if replaced is not None and _replaced[0] > before:
            replaced[str(path)] = replaced.get(str(path), 0) + _replaced[0] - before
