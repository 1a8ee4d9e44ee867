"""The probe corpus: deterministic generated prose, plus random nonces and markers.

The corpus is plain English-like text built from a fixed word list by a
64-bit linear congruential generator (Knuth's MMIX constants), so the same
``corpus(n)`` comes out on every machine and Python version, with no network
and no data file. ``corpus(n)`` is a prefix of ``corpus(m)`` for ``n < m``:
sizing a prompt is a search over one monotone text.

Nonces and markers are random on purpose: a "cold" prompt must start with
text no prefix cache has seen (prefix caches survive restarts).
"""

from __future__ import annotations

import secrets
from functools import lru_cache

# Common short words: real tokenizers see mostly one token per word, so the
# chars/token of this corpus sits near that of everyday prose.
_WORD_LIST = (
    "the of and to in is was for on that with as by at from his her it an be are this "
    "which or had not but they were have one all their there been has more when who will "
    "would no out so up said what its about than into them can only other new some time "
    "could these two may first then do any like my now over such our man me even most made "
    "after also did many before must through back years where much your way well down "
    "should because each just those people how too little state good very make world still "
    "own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take "
    "three small place house river stone light water field road market table window garden "
    "winter summer morning evening letter number paper engine signal harbour valley bridge "
    "lantern orchard kettle ledger compass meadow thunder copper velvet canvas granite"
)
WORDS = tuple(_WORD_LIST.split())

_A = 6364136223846793005
_C = 1442695040888963407
_MASK = (1 << 64) - 1


_BLOCK_CHARS = 1 << 16


def _block(seed: int) -> str:
    """About 64 KiB of sentences from ``seed``, paragraphs every six sentences."""
    state = (seed * 2654435761 + 1) & _MASK
    out: list[str] = []
    size = 0
    sentence = 0
    while size < _BLOCK_CHARS:
        state = (state * _A + _C) & _MASK
        length = 6 + (state >> 33) % 11  # 6..16 words
        words = []
        for _ in range(length):
            state = (state * _A + _C) & _MASK
            words.append(WORDS[(state >> 33) % len(WORDS)])
        words[0] = words[0].capitalize()
        sentence += 1
        text = " ".join(words) + ("." + "\n\n" if sentence % 6 == 0 else ". ")
        out.append(text)
        size += len(text)
    return "".join(out)


def corpus(n_chars: int, seed: int = 0) -> str:
    """Exactly ``n_chars`` characters of the probe corpus (the same on every run)."""
    if n_chars < 0:
        raise ValueError(f"n_chars must be >= 0, got {n_chars}")
    parts: list[str] = []
    have = 0
    index = 0
    while have < n_chars:
        text = _cached_block(seed * 1_000_003 + index)
        parts.append(text)
        have += len(text)
        index += 1
    return "".join(parts)[:n_chars]


@lru_cache(maxsize=64)
def _cached_block(seed: int) -> str:
    return _block(seed)


# No 0/O or 1/I/L: a model that copies the marker back should not have to guess.
_MARKER_ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"


def nonce() -> str:
    """A fresh random token for the head of a cold prompt."""
    return secrets.token_hex(8)


def marker() -> str:
    """A fresh random code such as ``QX7K-4P9M-T3WA`` (unique per slot, per run)."""
    chars = [secrets.choice(_MARKER_ALPHABET) for _ in range(12)]
    return "-".join("".join(chars[i : i + 4]) for i in range(0, 12, 4))


def normalise(text: str) -> str:
    """Letters and digits only, upper-cased: how a marker is looked for in an answer."""
    return "".join(ch for ch in text.upper() if ch.isalnum())
