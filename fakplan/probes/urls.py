"""The endpoint's URL: checked once for probing, and shown without what must not be shown."""

from __future__ import annotations

import httpx

from fakplan.errors import ProbeError


def check_url(url: str) -> httpx.URL:
    """The endpoint's base URL, or ProbeError naming what is wrong with it."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        # httpx's reason quotes the part it choked on, which may be a password ("Invalid
        # port: 'pw'" where a '#' cut it): the reason is told without quoting the URL
        raise ProbeError(
            f"--url {display_url(url)!r}: not a URL; expected http://HOST:PORT (a password "
            "holding '#', '/', '?' or '@' must be percent-encoded)"
        ) from None
    if parsed.scheme not in {"http", "https"} or not parsed.host:
        raise ProbeError(
            f"--url {display_url(url)!r}: expected http://HOST:PORT or https://HOST:PORT "
            "(the server's root or its /v1)"
        )
    path = parsed.path.rstrip("/")
    path = path.removesuffix("/v1")
    return parsed.copy_with(path=path or "/", query=None, fragment=None)


def display_url(url: str) -> str:
    """The URL without user, password or query: what reports and records show."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError):
        return "<unparseable URL>"
    if not parsed.host:
        # no host parsed: an '@' may still end a user and password httpx did not read as such
        hidden = parsed.userinfo or "@" in url
        return "<URL>" if hidden else str(parsed.copy_with(query=None, fragment=None))
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))
