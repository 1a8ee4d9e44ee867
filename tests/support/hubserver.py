"""A small Hugging Face Hub over real HTTP, for the real ``huggingface_hub`` to talk to.

It answers the routes the library uses to resolve a model (``/api/models/<repo>[/revision/
<rev>]``, ``HEAD``/``GET`` ``/<repo>/resolve/<rev>/<file>`` with byte ranges) with the
headers the Hub sends (``X-Repo-Commit``, ``ETag``, ``X-Error-Code``), so
``HF_ENDPOINT=<url>`` points the library here. Faults the real Hub produces on demand
(a gated repository, a missing one, a slow answer) are per-repository switches.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit


@dataclass
class Repo:
    """One model repository at one commit: its files by name (the weights' bytes are only
    ever their headers here: what is past a header is never asked for)."""

    files: dict[str, bytes]
    commit: str = "0123456789abcdef0123456789abcdef01234567"
    gated: bool = False  # 401 GatedRepo unless the request carries a token
    delay_s: float = 0.0  # every answer waits this long (a slow Hub)
    ignore_range: bool = False  # a server that sends the whole file whatever was asked
    requests: list[str] = field(default_factory=list)


def safetensors_header(
    tensors: dict[str, tuple[str, list[int]]], itemsize: dict[str, int]
) -> bytes:
    """A safetensors file's 8-byte length and JSON header for ``tensors`` (name: dtype,
    shape), offsets laid end to end as ``safetensors`` writes them; no tensor bytes follow
    (a ranged read of the header never reaches them)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = itemsize[dtype]
        for dim in shape:
            size *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


class _Handler(BaseHTTPRequestHandler):
    server: _HubServer

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return None

    def do_HEAD(self) -> None:
        self._answer(body=False)

    def do_GET(self) -> None:
        self._answer(body=True)

    def _answer(self, body: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        hub = self.server.hub
        repo_id, route, rest = _split(path)
        repo = hub.repos.get(repo_id) if repo_id else None
        if repo is not None:
            span = self.headers.get("range")
            repo.requests.append(f"{self.command} {path}" + (f" [{span}]" if span else ""))
            time.sleep(repo.delay_s)
        if repo is None:
            return self._error(404, "RepoNotFound", body)
        if repo.gated and not self.headers.get("authorization"):
            return self._error(401, "GatedRepo", body)
        if route == "api":
            revision = rest or "main"
            if revision not in ("main", repo.commit):
                return self._error(404, "RevisionNotFound", body)
            document = {
                "id": repo_id,
                "modelId": repo_id,
                "sha": repo.commit,
                "private": False,
                "gated": "auto" if repo.gated else False,
                "siblings": [{"rfilename": name} for name in sorted(repo.files)],
            }
            return self._send(200, json.dumps(document).encode(), body, repo, "application/json")
        revision, _, filename = rest.partition("/")
        if revision not in ("main", repo.commit):
            return self._error(404, "RevisionNotFound", body)
        content = repo.files.get(filename)
        if content is None:
            return self._error(404, "EntryNotFound", body)
        return self._send(200, content, body, repo, "application/octet-stream")

    def _send(self, status: int, content: bytes, body: bool, repo: Repo, kind: str) -> None:
        span = None if repo.ignore_range else self.headers.get("range")
        if span and span.startswith("bytes=") and body:
            first, _, last = span[6:].partition("-")
            start = int(first)
            end = min(int(last) if last else len(content) - 1, len(content) - 1)
            content = content[start : end + 1]
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(content)))
        self.send_header("X-Repo-Commit", repo.commit)
        self.send_header("ETag", f'"{hashlib.sha256(content).hexdigest()}"')
        self.end_headers()
        if body:
            try:
                self.wfile.write(content)
            except (BrokenPipeError, ConnectionResetError):
                return  # the client read what it asked for and closed

    def _error(self, status: int, code: str, body: bool) -> None:
        content = json.dumps({"error": code}).encode()
        self.send_response(status)
        self.send_header("X-Error-Code", code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if body:
            self.wfile.write(content)


def _split(path: str) -> tuple[str | None, str, str]:
    """``(repo, "api"|"resolve", rest)`` of a Hub route, or ``(None, "", "")``."""
    parts = path.strip("/").split("/")
    if len(parts) >= 4 and parts[:2] == ["api", "models"]:
        repo = "/".join(parts[2:4])
        rest = parts[5] if len(parts) >= 6 and parts[4] == "revision" else ""
        return repo, "api", rest
    if len(parts) >= 5 and parts[2] == "resolve":
        return "/".join(parts[:2]), "resolve", "/".join(parts[3:])
    return None, "", ""


class _HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hub: Hub) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hub = hub


@dataclass
class Hub:
    """The repositories served, and the endpoint once started."""

    repos: dict[str, Repo] = field(default_factory=dict)
    url: str = ""


@contextmanager
def serve_hub(repos: dict[str, Repo]) -> Iterator[Hub]:
    """A running Hub serving ``repos`` at ``hub.url`` (``HF_ENDPOINT``)."""
    hub = Hub(repos=repos)
    server = _HubServer(hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    hub.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
