"""The byte codec: how a document's text becomes the byte symbols of the prepared cache and back.

One place for the rule every part of poslab that counts or decodes bytes follows (the corpora, the
tokenizers, the segmentation, the analyses): text is UTF-8 with ``surrogateescape``, so a file that is not
valid UTF-8 still round-trips byte for byte (an undecodable byte becomes a lone surrogate and back), and
the byte tokenizer's document separator is the one symbol past the 256 byte values.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

BYTE_VALUES = 256
SEPARATOR = 256  # the byte tokenizer's document separator (after each document in the token array)
BYTE_VOCAB = 257  # the 256 byte values and the separator
ENCODING, ERRORS = "utf-8", "surrogateescape"


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
