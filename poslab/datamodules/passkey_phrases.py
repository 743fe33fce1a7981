"""The passkey phrase ``" The pass key is 12345. "`` as byte tokens, and its pairs planted in training windows.

``phrase_tokens`` is what passkey retrieval (``poslab.lightning_modules.passkey``) writes into held-out text.
``plant_pairs`` is ``task.passkey.train_fraction``: a share of the training windows holds a pair of phrases with
one random key, at a random distance inside the window, so the second key is predicted by copying the first. A
small byte model trained for minutes does not learn to copy an unseen phrase from text alone (an induction head
forms after far more tokens: docs/lm_extrapolation.md, "Passkey"); taught the phrase *within* its training
context, it is then asked, zero-shot, how far past that context each encoding lets it copy. A named deviation from
the zero-shot passkey of YaRN and landmark attention, off by default (0).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from poslab.config.passkey_settings import PREFIX, SUFFIX
from poslab.datamodules.codec import encode_bytes

DIGIT_ZERO = ord("0")  # byte of digit 0; digit v is byte 48 + v


def phrase_tokens(keys: np.ndarray) -> np.ndarray:
    """``[n, m]`` byte tokens of the phrase holding each row of ``keys`` ``[n, k]`` (digits 0-9)."""
    prefix = np.broadcast_to(encode_bytes(PREFIX).astype(np.int64), (len(keys), len(PREFIX)))
    suffix = np.broadcast_to(encode_bytes(SUFFIX).astype(np.int64), (len(keys), len(SUFFIX)))
    return np.concatenate([prefix, DIGIT_ZERO + keys.astype(np.int64), suffix], axis=1)


def plant_pairs(batch: dict[str, Tensor], fraction: float, key_length: int, generator: torch.Generator) -> None:
    """In place: each row of ``batch["tokens"]`` ``[B, T]`` with probability ``fraction`` gets one random key twice,
    the two phrases ``d`` tokens apart (uniform over ``m .. T - m``) from a first start ``p`` uniform over what fits;
    each phrase's tokens take the paragraph and sentence indices of the token it starts on (as passkey retrieval's
    phrases do). Draws from ``generator`` only when ``fraction > 0``, so windows without it are unchanged."""
    if fraction <= 0:
        return
    tokens = batch["tokens"]
    rows, length = tokens.shape
    chosen = (torch.rand(rows, generator=generator) < fraction).nonzero().flatten().tolist()
    keys = torch.randint(0, 10, (rows, key_length), generator=generator).numpy()
    phrases = torch.from_numpy(phrase_tokens(keys))
    m = phrases.shape[1]
    for row in chosen:
        d = int(torch.randint(m, length - m + 1, (1,), generator=generator))
        p = int(torch.randint(0, length - m - d + 1, (1,), generator=generator))
        for start in (p, p + d):
            tokens[row, start : start + m] = phrases[row]
            for name in ("paragraph", "sentence"):
                if name in batch:
                    batch[name][row, start : start + m] = batch[name][row, start]
