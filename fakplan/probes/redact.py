"""The API key kept out of everything a probe prints or records, in any form a server echoes.

A careless server echoes the Authorization header back: raw, JSON-escaped
(``\\"``, ``\\/``, ``\\u0073``), URL-encoded, base64-encoded inside a larger
value, or cut short (a prefix it printed, or the part an excerpt kept).
``Redactor`` masks the key's whole forms in a body as it arrives (a few
``str.replace`` calls: cheap on megabytes), walks parsed JSON so no escape can
hide the key, and in the short texts that leave a probe (errors, notes,
results) also masks every run of ``SECRET_RUN`` characters of any form.

    redactor = Redactor("sk-0123456789abcdef")
    redactor.text("token sk-012345678 was refused")  # 'token *** was refused'
"""

from __future__ import annotations

import base64
import json
import re
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

MASK = "***"
# A run this long of any form of the key is masked wherever it shows: a prefix a server
# printed ("Incorrect API key provided: sk-proj-abc1..."), the part an excerpt kept. Shorter
# runs give away too little to matter (OpenAI shows a key's last 4 characters) and would
# mask ordinary words; 8 characters of a random key are 48 of its bits at most.
SECRET_RUN = 8

_PERCENT = re.compile("%[0-9A-F]{2}")
_URLSAFE = str.maketrans("+/", "-_")


def key_forms(key: str) -> tuple[str, ...]:
    """The key as a server may echo it whole: raw, JSON-escaped, URL-encoded, base64, hex.

    A base64 encoding of a larger value that holds the key contains the
    encoding of the key's bytes from the first 3-byte group boundary inside
    it: one of the three cores below, whatever the key's offset.
    """
    raw = key.encode("utf-8")
    forms = {key, key.replace("/", "\\/")}
    for ensure_ascii in (True, False):
        escaped = json.dumps(key, ensure_ascii=ensure_ascii)[1:-1]
        forms |= {escaped, escaped.replace("/", "\\/")}
    for quoted in (
        urllib.parse.quote(key, safe=""),
        urllib.parse.quote(key, safe="/"),
        urllib.parse.quote_plus(key, safe=""),
    ):
        forms |= {quoted, _PERCENT.sub(lambda m: m.group(0).lower(), quoted)}
    for skip in range(3):
        part = raw[skip:]
        part = part[: len(part) // 3 * 3]
        if part:
            core = base64.b64encode(part).decode("ascii")
            forms |= {core, core.translate(_URLSAFE)}
    forms |= {raw.hex(), raw.hex().upper()}
    return tuple(sorted((f for f in forms if f), key=len, reverse=True))


class Redactor:
    """Masks one API key (``None``: there is nothing to mask, and every call is a no-op)."""

    def __init__(self, key: str | None) -> None:
        self.forms = key_forms(key) if key else ()
        self.run = min(SECRET_RUN, min((len(f) for f in self.forms), default=SECRET_RUN))
        self.grams = frozenset(
            form[i : i + self.run] for form in self.forms for i in range(len(form) - self.run + 1)
        )

    def __bool__(self) -> bool:
        return bool(self.forms)

    def whole(self, text: str) -> str:
        """``text`` with every whole form of the key masked: for bodies, on arrival."""
        for form in self.forms:
            if form in text:
                text = text.replace(form, MASK)
        return text

    def text(self, text: str) -> str:
        """``text`` with the whole forms and every run of ``SECRET_RUN`` of them masked.

        The run search looks at every position: meant for the short texts that
        leave a probe, not for whole bodies.
        """
        if not self.forms:
            return text
        text = self.whole(text)
        n = self.run
        hits = [i for i in range(len(text) - n + 1) if text[i : i + n] in self.grams]
        if not hits:
            return text
        pieces: list[str] = []
        kept = 0  # text[:kept] is dealt with
        start, end = hits[0], hits[0] + n
        for i in hits[1:]:
            if i > end:  # a new run: the last one ends at end
                pieces += [text[kept:start], MASK]
                kept, start = end, i
            end = i + n
        pieces += [text[kept:start], MASK, text[end:]]
        return "".join(pieces)

    def value(self, value: Any, *, runs: bool = True) -> Any:
        """``value`` (parsed JSON, a model's dump) with every string in it masked.

        What holds no form of the key comes back as the very same object, so a
        large answer is not copied. ``runs=False`` masks whole forms only: for a
        large answer as it arrives.
        """
        if not self.forms:
            return value
        return self._walk(value, self.text if runs else self.whole)

    def _walk(self, value: Any, mask: Callable[[str], str]) -> Any:
        if isinstance(value, str):
            return mask(value)  # the same object when nothing was masked
        if isinstance(value, Mapping):
            items = [
                (mask(k) if isinstance(k, str) else k, self._walk(v, mask))
                for k, v in value.items()
            ]
            same = all(
                k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items(), strict=True)
            )
            return value if same else dict(items)
        if isinstance(value, list | tuple):
            walked = [self._walk(v, mask) for v in value]
            same = all(w is v for w, v in zip(walked, value, strict=True))
            return value if same else type(value)(walked)
        return value
