"""The Hugging Face Hub, asked the way vLLM and SGLang ask it: through ``huggingface_hub``.

A model id (``org/name``) resolves to a snapshot of its repository in the library's own
cache (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``: refs,
snapshots and blobs as ``huggingface_hub`` lays them out, so the engine later finds what
fakplan fetched). Online, the Hub names the revision's commit and lists the repository's
files; only ``config.json``, ``generation_config.json`` and the safetensors index are
downloaded, and the safetensors **headers** are read by ranged requests: never a weight.
Offline (``HF_HUB_OFFLINE=1``, or ``fakplan --offline``) the cache alone answers.

The settings are read from the environment at each call (the library reads its own once,
at import). The token (``HF_TOKEN``, else the one ``huggingface_hub`` saved) is handed to
the library and never written, printed or recorded by fakplan.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fakplan.errors import GeometryError
from fakplan.safetensors_format import SIZE_LIMIT, extents, read_header

if TYPE_CHECKING:
    pass

DEFAULT_ENDPOINT = "https://huggingface.co"
DEFAULT_REVISION = "main"
# seconds to wait for the Hub to answer one request (HF_HUB_ETAG_TIMEOUT overrides it)
DEFAULT_TIMEOUT = 10.0
# the files a plan reads of a repository; weights are never fetched
WANTED = ("config.json", "generation_config.json", "model.safetensors.index.json")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
# shards whose headers are read at most: a checkpoint of more is counted from its index
MAX_SHARDS = 256
HEADER_FIRST_READ = 100_000  # most headers fit (huggingface_hub reads as much first)
_TRUE = {"1", "on", "yes", "true"}
# huggingface_hub's own rule for a repo id: one optional namespace, then the name
_REPO_ID = re.compile(r"^(?:\w[\w.-]{0,95}/)?\w[\w.-]{0,95}$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class HubError(GeometryError):
    """A model id the Hub and the cache could not resolve (one line: what was asked, why);
    ``brief`` says why in words that hold on any machine (no path, no address), for a
    record."""

    def __init__(self, message: str, brief: str = "") -> None:
        super().__init__(message)
        self.brief = brief or "the Hub did not resolve it"


@dataclass(frozen=True)
class HubSettings:
    """Where the Hub and its cache are, read from the environment when asked."""

    endpoint: str
    cache: Path
    offline: bool
    timeout: float
    # from HF_TOKEN; None lets the library use the token it saved; never in a repr
    token: str | None = field(default=None, repr=False)
    # fakplan's own record of headers read from the Hub (FAKPLAN_CACHE, else
    # XDG_CACHE_HOME/fakplan, else ~/.cache/fakplan): an offline run counts the same bytes
    headers: Path = Path()

    @classmethod
    def from_environment(cls) -> HubSettings:
        """The settings huggingface_hub itself takes (constants.py: HF_HOME, else
        $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface; HF_HUB_CACHE, else
        HF_HOME/hub; variables and ~ expanded), so fakplan reads the cache the engine
        fills."""
        env = os.environ
        xdg = _expanded(env.get("XDG_CACHE_HOME")) or _home() / ".cache"
        home = _expanded(env.get("HF_HOME")) or xdg / "huggingface"
        cache = (
            _expanded(env.get("HF_HUB_CACHE"))
            or _expanded(env.get("HUGGINGFACE_HUB_CACHE"))
            or home / "hub"
        )
        try:
            timeout = float(env.get("HF_HUB_ETAG_TIMEOUT", DEFAULT_TIMEOUT))
        except ValueError:
            timeout = DEFAULT_TIMEOUT
        return cls(
            endpoint=(env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/"),
            cache=cache,
            offline=any(
                env.get(name, "").strip().lower() in _TRUE
                for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
            ),
            timeout=timeout if timeout > 0 else DEFAULT_TIMEOUT,
            token=env.get("HF_TOKEN") or None,
            headers=(_expanded(env.get("FAKPLAN_CACHE")) or xdg / "fakplan") / "hub-headers",
        )


def _expanded(value: str | None) -> Path | None:
    return Path(os.path.expandvars(value)).expanduser() if value else None


def _home() -> Path:
    """The home folder; a process with none (an arbitrary uid in a container) gets the
    working directory's .cache rather than a traceback."""
    try:
        return Path.home()
    except RuntimeError:
        return Path.cwd()


@dataclass(frozen=True)
class TensorHeaders:
    """What a checkpoint's safetensors headers say, read without its tensors."""

    files: int
    tensors: int
    total_bytes: int
    dtypes: frozenset[str]


@dataclass(frozen=True)
class Snapshot:
    """One commit of a model repository, as far as fakplan has it in the cache."""

    repo: str
    revision: str  # as asked (a branch, a tag or a commit)
    commit: str
    folder: Path  # snapshots/<commit>/ in the cache: config.json and what else was fetched
    origin: str  # "hub": the Hub named the commit; "cache": the cache alone answered
    weight_files: tuple[str, ...] | None  # the repository's weight files (None: unknown)
    headers: TensorHeaders | None  # from the Hub's safetensors headers (None: not read)


def is_repo_id(text: str) -> bool:
    """Whether ``text`` is spelled as a Hub model id (``org/name`` or ``name``)."""
    return bool(_REPO_ID.match(text)) and ".." not in text and not text.endswith(".")


def snapshot(repo: str, revision: str | None, settings: HubSettings) -> Snapshot:
    """The repository ``repo`` at ``revision``: from the Hub unless offline (the cache is
    filled as the engines fill it), else from the cache; ``HubError`` where neither has it."""
    wanted = revision or DEFAULT_REVISION
    if settings.offline:
        return _from_cache(
            repo,
            wanted,
            settings,
            "offline (HF_HUB_OFFLINE=1 or --offline) keeps fakplan off the Hub",
        )
    return _from_hub(repo, wanted, settings)


def _from_cache(repo: str, revision: str, settings: HubSettings, why: str) -> Snapshot:
    found: object = None
    # the library lays a repository out in models--<org>--<name> (repo_folder_name): where
    # the cache has no such folder it holds nothing of it, and the library (170 ms to
    # import) is not asked
    if (settings.cache / f"models--{repo.replace('/', '--')}").is_dir():
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(
            repo, "config.json", cache_dir=str(settings.cache), revision=revision
        )
    if not isinstance(found, str):
        raise HubError(
            f"{repo!r} at revision {revision!r} is not in the Hugging Face cache "
            f"({settings.cache}), and {why}",
            f"{why.partition(' (')[0]}, and the Hugging Face cache holds no snapshot of it",
        )
    folder = Path(found).parent
    if not _COMMIT.match(folder.name):
        raise HubError(
            f"{repo!r}: the Hugging Face cache's snapshot {folder.name[:60]!r} is not named "
            "by a commit",
            "the Hugging Face cache's snapshot is not named by a commit",
        )
    weights = tuple(sorted(p.name for p in folder.iterdir() if p.name.endswith(WEIGHT_SUFFIXES)))
    kept = _kept_headers(repo, folder.name, settings)
    return Snapshot(
        repo=repo,
        revision=revision,
        commit=folder.name,
        folder=folder,
        origin="cache",
        weight_files=weights or (kept[0] if kept and kept[0] else None),
        headers=kept[1] if kept else None,
    )


def _headers_path(repo: str, commit: str, settings: HubSettings) -> Path:
    return settings.headers / repo.replace("/", "--") / f"{commit}.json"


def _keep_headers(snap: Snapshot, settings: HubSettings) -> None:
    """What the Hub listed and its headers said, kept for an offline run (best effort: a
    cache that cannot be written costs only that run's answer)."""
    from fakplan.files import write_atomic

    h = snap.headers
    document: dict[str, Any] = {"weight_files": list(snap.weight_files or ())}
    if h is not None:
        document |= {
            "files": h.files,
            "tensors": h.tensors,
            "total_bytes": h.total_bytes,
            "dtypes": sorted(h.dtypes),
        }
    try:
        write_atomic(_headers_path(snap.repo, snap.commit, settings), json.dumps(document))
    except OSError:
        return


def _kept_headers(
    repo: str, commit: str, settings: HubSettings
) -> tuple[tuple[str, ...], TensorHeaders | None] | None:
    """The weight files and headers an online run kept for this commit; None where none
    (or damaged)."""
    from fakplan.files import load_json, read_bounded

    path = _headers_path(repo, commit, settings)
    if not path.is_file():
        return None
    try:
        doc = load_json(read_bounded(path, 1 << 20, HubError, "kept headers"), str(path), HubError)
        files = tuple(str(f) for f in doc["weight_files"])
        if "total_bytes" not in doc:
            return files, None
        h = TensorHeaders(
            int(doc["files"]),
            int(doc["tensors"]),
            int(doc["total_bytes"]),
            frozenset(str(d) for d in doc["dtypes"]),
        )
    except (HubError, KeyError, TypeError, ValueError):
        return None  # a damaged record is no record: the count falls back
    if not 0 <= h.total_bytes <= SIZE_LIMIT:
        return None
    return files, h


def _from_hub(repo: str, revision: str, settings: HubSettings) -> Snapshot:
    from huggingface_hub import HfApi, constants, hf_hub_download

    # the library read HF_HUB_OFFLINE once, at its import; fakplan reads it at each call
    # (a --offline given after the import, a test's environment) and says so to it
    constants.HF_HUB_OFFLINE = False
    api = HfApi(endpoint=settings.endpoint, token=settings.token)
    try:
        info = api.model_info(repo, revision=revision, timeout=settings.timeout)
        commit = str(info.sha or "")
        if not _COMMIT.match(commit):
            raise HubError(
                f"{repo!r}: the Hub ({settings.endpoint}) named no commit for {revision!r}"
            )
        files = tuple(s.rfilename for s in (info.siblings or ()))
        if "config.json" not in files:
            raise HubError(
                f"{repo!r} at {revision!r} has no config.json on the Hub ({settings.endpoint}): "
                "not a model an engine loads by its id"
            )
        path = ""
        for name in WANTED:
            if name in files:
                # config.json by the revision asked, so the library keeps the branch's ref
                # (an offline run then finds this commit); the rest by that commit
                got = hf_hub_download(
                    repo,
                    name,
                    revision=revision if name == "config.json" else commit,
                    cache_dir=str(settings.cache),
                    endpoint=settings.endpoint,
                    token=settings.token,
                    etag_timeout=settings.timeout,
                )
                if name == "config.json":
                    path = str(got)
                    commit = Path(path).parent.name
        headers = _headers(repo, revision, commit, files, settings)
    except HubError:
        raise
    except Exception as exc:  # the library's errors, worded once below
        unreachable = _unreachable(exc)
        if unreachable is None:
            raise HubError(*_hub_refusal(repo, revision, settings, exc)) from None
        try:  # the engine, too, falls back to the cache when the Hub is out of reach
            return _from_cache(
                repo,
                revision,
                settings,
                f"the Hub at {settings.endpoint} was unreachable ({unreachable})",
            )
        except HubError as missing:
            raise HubError(
                str(missing),
                f"the Hub was unreachable ({unreachable}), and the Hugging Face cache holds "
                "no snapshot of it",
            ) from None
    weights = tuple(sorted(f for f in files if "/" not in f and f.endswith(WEIGHT_SUFFIXES)))
    found = Snapshot(
        repo=repo,
        revision=revision,
        commit=commit,
        folder=Path(path).parent,
        origin="hub",
        weight_files=weights or None,
        headers=headers,
    )
    _keep_headers(found, settings)
    return found


def _headers(
    repo: str, revision: str, commit: str, files: tuple[str, ...], settings: HubSettings
) -> TensorHeaders | None:
    """The safetensors headers of the repository's top-level shards, by bounded ranged
    reads; None where the index (its metadata.total_size) counts the bytes already."""
    shards = sorted(f for f in files if "/" not in f and f.endswith(".safetensors"))
    if not shards or len(shards) > MAX_SHARDS or "model.safetensors.index.json" in files:
        return None
    total = tensors = 0
    dtypes: set[str] = set()
    for shard in shards:
        # the first read holds most headers whole (huggingface_hub reads as much first)
        first = _ranged(repo, revision, commit, shard, HEADER_FIRST_READ, settings)

        def head(size: int, shard: str = shard, first: bytes = first) -> bytes:
            if size <= len(first) or len(first) < HEADER_FIRST_READ:
                return first[:size]
            return _ranged(repo, revision, commit, shard, size, settings)

        where = f"{repo!r}: {shard}"
        found = extents(read_header(head, where, HubError), where, HubError)
        total, tensors = total + found.total_bytes, tensors + found.tensors
        dtypes |= found.dtypes
        if total > SIZE_LIMIT:
            raise HubError(f"{repo!r}: the safetensors headers claim {total:,} B: not plausible")
    return TensorHeaders(len(shards), tensors, total, frozenset(dtypes))


def _unreachable(exc: BaseException) -> str | None:
    """A short name of a network failure (the Hub out of reach), or None for any other."""
    from huggingface_hub.errors import HfHubHTTPError

    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else 0
        return f"HTTP {status}" if status >= 500 or status == 429 else None
    chain: BaseException | None = exc
    while chain is not None:
        # the transport's own errors (httpx's TransportError and its kin), by their family
        family = {kind.__name__ for kind in type(chain).__mro__}
        if isinstance(chain, (ConnectionError, TimeoutError)) or "TransportError" in family:
            return type(chain).__name__
        chain = chain.__cause__ or chain.__context__
    return None


def _hub_refusal(
    repo: str, revision: str, settings: HubSettings, exc: BaseException
) -> tuple[str, str]:
    """What to say of the Hub's refusal: the line, and its brief."""
    from huggingface_hub.errors import (
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = f"the Hub ({settings.endpoint})"
    if isinstance(exc, GatedRepoError):
        return (
            f"{repo!r} is a gated repository and {where} refused access: set HF_TOKEN to a "
            "token granted access to it (fakplan never writes the token anywhere)",
            "a gated repository on the Hub, and no token granted access (HF_TOKEN)",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return (
            f"{repo!r}: {where} has no such model repository (or it is private: set HF_TOKEN)",
            "not a model repository on the Hub",
        )
    if isinstance(exc, RevisionNotFoundError):
        return (
            f"{repo!r}: {where} has no revision {revision!r} (a branch, tag or commit)",
            f"no revision {revision!r} on the Hub",
        )
    return (
        f"{repo!r}: {where} answered {type(exc).__name__}: {_first_line(exc)}",
        f"the Hub answered {type(exc).__name__}",
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


# a GGUF by Hub id, as llama.cpp's -hf takes it: "<user>/<model>:<quant or file.gguf>"
_GGUF_REF = re.compile(
    r"^(?P<repo>\w[\w.-]{0,95}/\w[\w.-]{0,95}):(?P<selector>\w[\w./+-]{0,199})?$"
)
# llama.cpp's own defaults where -hf names no quant (common/download.cpp find_best_model)
GGUF_DEFAULT_TAGS = ("Q4_K_M", "Q8_0")
# files a repository's GGUF listing holds beside the model (find_best_model skips them)
GGUF_NOT_MODEL = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_SPLIT = re.compile(r"-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class HubFiles:
    """A repository's files at one commit, as the Hub or the cache lists them."""

    repo: str
    revision: str
    commit: str
    files: tuple[str, ...]
    origin: str  # "hub" or "cache"
    folder: Path | None  # the cache's snapshot folder (the files it holds), if any


def gguf_ref(text: str) -> tuple[str, str] | None:
    """``(repo, quant or file)`` of a GGUF named by Hub id (``org/name:Q8_0``), or None."""
    found = _GGUF_REF.match(text)
    return None if found is None else (found["repo"], found["selector"] or "")


def pick_gguf(files: tuple[str, ...], selector: str) -> tuple[str, ...] | None:
    """The model file(s) llama.cpp's -hf picks: the file named, else the first model GGUF
    whose name holds ``<quant>.`` or ``<quant>-`` (any case; the first shard of a split
    model), else with no quant Q4_K_M, then Q8_0, then the first model GGUF
    (common/download.cpp find_best_model, llama.cpp 3f545becc). A split model is every
    shard of it."""
    models = [
        f
        for f in files
        if f.endswith(".gguf") and not any(n in f.rsplit("/", 1)[-1] for n in GGUF_NOT_MODEL)
    ]
    if selector.endswith(".gguf"):
        first = next((f for f in files if f == selector), None)
    else:
        first = None
        for tag in [selector] if selector else list(GGUF_DEFAULT_TAGS):
            pattern = re.compile(re.escape(tag) + "[.-]", re.IGNORECASE)
            first = next((f for f in models if pattern.search(f) and _first_shard(f)), None)
            if first is not None:
                break
        if first is None and not selector:  # no tag: the first model file
            first = next((f for f in models if _first_shard(f)), None)
    if first is None:
        return None
    split = _SPLIT.search(first)
    if split is None:
        return (first,)
    count = int(split["count"])
    stem = first[: split.start()]
    return tuple(f"{stem}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1))


def _first_shard(name: str) -> bool:
    split = _SPLIT.search(name)
    return split is None or int(split["index"]) == 1


def repo_files(repo: str, revision: str | None, settings: HubSettings) -> HubFiles:
    """The repository's files at ``revision``: the Hub's listing unless offline, else the
    files the cache holds of it."""
    wanted = revision or DEFAULT_REVISION
    if settings.offline:
        return _cached_files(repo, wanted, settings, "offline (HF_HUB_OFFLINE=1 or --offline)")
    from huggingface_hub import HfApi, constants

    constants.HF_HUB_OFFLINE = False
    try:
        info = HfApi(endpoint=settings.endpoint, token=settings.token).model_info(
            repo, revision=wanted, timeout=settings.timeout
        )
    except Exception as exc:  # the library's errors, worded once
        unreachable = _unreachable(exc)
        if unreachable is None:
            raise HubError(*_hub_refusal(repo, wanted, settings, exc)) from None
        return _cached_files(
            repo,
            wanted,
            settings,
            f"the Hub at {settings.endpoint} was unreachable ({unreachable})",
        )
    commit = str(info.sha or "")
    files = tuple(s.rfilename for s in (info.siblings or ()))
    return HubFiles(repo, wanted, commit, files, "hub", None)


def _cached_files(repo: str, revision: str, settings: HubSettings, why: str) -> HubFiles:
    folder = settings.cache / f"models--{repo.replace('/', '--')}"
    ref = folder / "refs" / revision
    commit = revision if _COMMIT.match(revision) else None
    if commit is None and ref.is_file():
        named = ref.read_text(encoding="utf-8").strip()[:40]
        commit = named if _COMMIT.match(named) else None
    snapshot_folder = folder / "snapshots" / commit if commit else None
    if snapshot_folder is None or not snapshot_folder.is_dir():
        raise HubError(
            f"{repo!r} at revision {revision!r} is not in the Hugging Face cache "
            f"({settings.cache}), and {why}",
            f"{why.partition(' (')[0]}, and the Hugging Face cache holds no snapshot of it",
        )
    assert commit is not None
    files = tuple(
        sorted(
            p.relative_to(snapshot_folder).as_posix()
            for p in snapshot_folder.rglob("*")
            if p.is_file()
        )
    )
    return HubFiles(repo, revision, commit, files, "cache", snapshot_folder)


def read_head(listing: HubFiles, filename: str, size: int, settings: HubSettings) -> bytes:
    """The first ``size`` bytes of one of the repository's files: a ranged GET from the Hub
    read as a stream and cut at ``size`` (a server that ignores the range sends no more
    than that before the connection closes), or a bounded read of the cache's copy."""
    if listing.folder is not None:
        from fakplan.files import read_bounded

        return read_bounded(listing.folder / filename, size, HubError, "a cached file", head=True)
    return _ranged(listing.repo, listing.revision, listing.commit, filename, size, settings)


def _ranged(
    repo: str, revision: str, commit: str, filename: str, size: int, settings: HubSettings
) -> bytes:
    from huggingface_hub import constants, get_session, hf_hub_url, hf_raise_for_status
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    constants.HF_HUB_OFFLINE = False
    url = hf_hub_url(repo, filename, revision=commit, endpoint=settings.endpoint)
    headers = {**build_hf_headers(token=settings.token), "range": f"bytes=0-{size - 1}"}
    chunks: list[bytes] = []
    held = 0
    try:
        with get_session().stream("GET", url, headers=headers, timeout=settings.timeout) as reply:
            hf_raise_for_status(reply)
            for chunk in reply.iter_bytes():
                chunks.append(chunk[: size - held])
                held += len(chunks[-1])
                if held >= size:
                    break
    except HubError:
        raise
    except Exception as exc:
        raise HubError(*_hub_refusal(repo, revision, settings, exc)) from None
    return b"".join(chunks)
