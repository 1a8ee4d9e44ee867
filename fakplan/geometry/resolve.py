"""A model reference resolved the way the engines resolve ``vllm serve <model>``.

1. a path that exists (against the shape's folder, or the working directory for
   ``fakplan kv``): a GGUF file, an HF folder or a config.json;
2. else a Hub id (``org/name``, at ``revision``): through ``huggingface_hub``, the Hub
   unless offline, the cache as the library laid it out otherwise (``fakplan.hub``);
3. else, or where the Hub and the cache did not answer, the built-in catalog (published
   configs, offline), saying why the Hub was not used;
4. else one line that says what was tried, with the catalog ids it nearly names.

The answer carries where the model came from (``ModelSource``): the repository, revision
and commit a plan records, and whether the engine could load weights from it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from fakplan.errors import GeometryError
from fakplan.geometry import catalog, hf, load_geometry
from fakplan.geometry.model import Geometry
from fakplan.hub import (
    WEIGHT_SUFFIXES,
    HubError,
    HubFiles,
    HubSettings,
    Snapshot,
    gguf_ref,
    is_repo_id,
    pick_gguf,
    read_head,
    repo_files,
    snapshot,
)

Kind = Literal["path", "hub", "catalog"]


@dataclass(frozen=True)
class ModelSource:
    """Where a model reference resolved, and what an engine could load from it."""

    reference: str
    kind: Kind
    snapshot: Snapshot | None = None
    # the engine finds weights where the reference points (None: fakplan cannot tell)
    loadable: bool | None = None
    # what the record keeps: sentences that hold on any machine resolving the same way
    notes: tuple[str, ...] = ()
    # what this run saw (the Hub or the cache answered, why the Hub was not used): said
    # where fakplan prints, never recorded, so the record does not move with the machine
    seen: tuple[str, ...] = ()

    def sentence(self) -> str:
        """Where the model came from, in words (plan.json's derivations["model"])."""
        snap = self.snapshot
        if snap is not None:
            where = f"{snap.repo} at {snap.revision!r}: commit {snap.commit}"
        elif self.kind == "catalog" and self.notes:
            return self.notes[0]  # it names the catalog
        else:
            where = f"the path {self.reference}"
        return "; ".join([where, *self.notes])

    def json(self) -> dict[str, Any]:
        """plan.json's ``model_source`` (documented in docs/json.md)."""
        snap = self.snapshot
        return {
            "reference": self.reference,
            "kind": self.kind,
            "repo": snap.repo if snap else None,
            "revision": snap.revision if snap else None,
            "commit": snap.commit if snap else None,
            "loadable": self.loadable,
            "notes": list(self.notes),
        }


def resolve_model(
    reference: str, *, base: Path | None = None, revision: str | None = None
) -> tuple[Geometry, ModelSource]:
    """The geometry ``reference`` names and where it came from; ``GeometryError`` with
    one line where nothing holds it. A path is read against ``base`` (the shape's folder;
    None: the working directory)."""
    return _resolve(reference, base, revision, HubSettings.from_environment())


@lru_cache(maxsize=64)
def _resolve(
    reference: str, base: Path | None, revision: str | None, settings: HubSettings
) -> tuple[Geometry, ModelSource]:
    local = Path(reference)  # "~" is a folder name here: no home is expanded
    if base is not None and not local.is_absolute():
        local = (base / local).resolve()
    if local.exists() or local.is_symlink():
        if revision is not None:
            raise GeometryError(
                f"{reference!r} is a path: a revision names a commit of a Hugging Face id"
            )
        return _from_path(reference, local)
    ref = gguf_ref(reference)
    if ref is not None:
        return _from_hub_gguf(reference, ref, revision, settings)
    if not _spelled_as_id(reference) and catalog.lookup(reference) is None:
        # a path that is not there: the reader says why (no such file, a symlink loop)
        try:
            return _from_path(reference, local)
        except GeometryError as exc:
            where = " (a path in a shape is relative to the shape's folder)" if base else ""
            raise GeometryError(f"{exc}{where}") from None
    hub_refusal = hub_brief = "not spelled as a Hub id (org/name)"
    if _spelled_as_id(reference):
        try:
            snap = snapshot(reference, revision, settings)
        except HubError as exc:
            hub_refusal, hub_brief = str(exc), exc.brief
        else:
            return _from_snapshot(reference, snap)
    entry = catalog.lookup(reference)
    if entry is not None:
        if revision is not None:
            raise GeometryError(
                f"{reference!r} at revision {revision!r}: {hub_refusal}; the built-in catalog "
                "holds one published config per id, not revisions"
            )
        note = (
            "the built-in catalog's published config (neither the Hub nor the Hugging Face "
            "cache resolved the id)"
        )
        seen = (f"the catalog, as {hub_brief}",)
        return entry, ModelSource(reference, "catalog", loadable=None, notes=(note,), seen=seen)
    near = near_catalog_ids(reference)
    names = [repr(n) for n in near]
    spelled = " or ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    hint = f"; did you mean {spelled}?" if near else ""
    where = (
        f" at {local} (a path in a shape is relative to the shape's folder)"
        if base is not None
        else ""
    )
    raise GeometryError(
        f"{reference!r}: no file or folder{where}; {hub_refusal}; not a catalog id "
        f"(fakplan kv --list){hint}"
    )


def _from_hub_gguf(
    reference: str, ref: tuple[str, str], revision: str | None, settings: HubSettings
) -> tuple[Geometry, ModelSource]:
    """A GGUF named by Hub id as llama.cpp's -hf names it, read from its header."""
    if revision is not None:
        raise GeometryError(
            f"{reference!r}: llama.cpp's -hf fetches the repository's main; a GGUF by Hub id "
            "takes no revision"
        )
    geometry, found = _hub_gguf(*ref, settings)
    listing = found.listing
    snap = Snapshot(
        repo=listing.repo,
        revision=listing.revision,
        commit=listing.commit,
        folder=listing.folder or Path(),
        origin=listing.origin,
        weight_files=found.files,
        headers=None,
    )
    named = "the Hub" if listing.origin == "hub" else "the cache"
    seen = (f"{', '.join(found.files)} at commit {listing.commit} named by {named}",)
    return geometry, ModelSource(reference, "hub", snapshot=snap, loadable=True, seen=seen)


def _spelled_as_id(reference: str) -> bool:
    """A Hub id, not a path: no leading ./, ../, / or ~, no file's suffix."""
    return (
        is_repo_id(reference)
        and not reference.startswith(("./", "../", "/", "~"))
        and not reference.endswith((".gguf", ".json", ".safetensors", ".bin"))
    )


def near_catalog_ids(reference: str) -> list[str]:
    """Catalog ids a misspelt or near reference probably means (at most three)."""
    ids = catalog.catalog_ids()
    folded = {i.casefold(): i for i in ids}
    tails = {i.casefold().rpartition("/")[2]: i for i in ids}
    wanted = reference.casefold()
    found = difflib.get_close_matches(wanted, list(folded), n=3, cutoff=0.75)
    found += difflib.get_close_matches(wanted.rpartition("/")[2], list(tails), n=3, cutoff=0.75)
    names = [folded.get(f) or tails[f] for f in found]
    return list(dict.fromkeys(names))[:3]


def _from_path(reference: str, local: Path) -> tuple[Geometry, ModelSource]:
    geometry = load_geometry(local)
    folder = local if local.is_dir() else local.parent
    notes: tuple[str, ...] = ()
    loadable: bool | None = True
    if local.is_file() and local.name.endswith(".json"):
        loadable, notes = (
            False,
            (
                f"{reference} is a config.json: an engine loads a model from a folder or an id, "
                "with its weights",
            ),
        )
    elif local.is_dir():
        weights = [p for p in folder.iterdir() if p.name.endswith(WEIGHT_SUFFIXES)]
        loadable = bool(weights)
        notes = (
            ()
            if weights
            else (
                f"{reference} holds a config.json and no weights (*.safetensors, *.bin): "
                "an engine cannot load it; the plan is the arithmetic of its config",
            )
        )
    return geometry, ModelSource(reference, "path", loadable=loadable, notes=notes)


def _from_snapshot(reference: str, snap: Snapshot) -> tuple[Geometry, ModelSource]:
    remote = None
    if snap.headers is not None:
        h = snap.headers
        remote = (
            h.total_bytes,
            f"safetensors headers of {h.files} file(s), {h.tensors:,} tensors, read from "
            f"the Hub at {snap.commit[:12]}",
            h.dtypes,
        )
    try:
        geometry = hf.read_hf(snap.folder, source=f"{snap.repo}@{snap.commit}", remote=remote)
    except GeometryError as exc:
        raise GeometryError(f"{reference!r} ({snap.repo}@{snap.commit[:12]}): {exc}") from None
    notes: list[str] = []
    seen = [f"commit {snap.commit} named by {'the Hub' if snap.origin == 'hub' else 'the cache'}"]
    if snap.weight_files is None:
        if snap.origin == "hub":
            notes.append(
                f"{snap.repo} holds no weight files (*.safetensors, *.bin) at "
                f"{snap.commit[:12]}: an engine cannot load it"
            )
            loadable: bool | None = False
        else:
            seen.append(
                "the cache holds this commit's config and no weights: the engine downloads "
                "them at boot (HF_HUB_OFFLINE=1 there would refuse)"
            )
            loadable = None
    else:
        loadable = True
    return geometry, ModelSource(
        reference, "hub", snapshot=snap, loadable=loadable, notes=tuple(notes), seen=tuple(seen)
    )


# a GGUF named by Hub id is read by its first bytes, more where its header runs on
GGUF_FIRST_READ = 1 << 20
MAX_GGUF_HEADER = 256 << 20  # a vocabulary of a million tokens fits in far less


@dataclass(frozen=True)
class HubGguf:
    """A GGUF named by Hub id (llama.cpp's -hf): the repository's files and the file(s)
    picked, at the commit read."""

    listing: HubFiles
    selector: str
    files: tuple[str, ...]

    def json(self) -> dict[str, Any]:
        return {
            "repo": self.listing.repo,
            "selector": self.selector,
            "commit": self.listing.commit,
            "files": list(self.files),
        }


def resolve_hub_gguf(repo: str, selector: str) -> tuple[Geometry, HubGguf]:
    """The geometry of the GGUF llama.cpp's ``-hf repo:selector`` loads, from its header
    alone (ranged reads of the Hub's copy, or the cache's); ``GeometryError`` in one line."""
    return _hub_gguf(repo, selector, HubSettings.from_environment())


@lru_cache(maxsize=16)
def _hub_gguf(repo: str, selector: str, settings: HubSettings) -> tuple[Geometry, HubGguf]:
    from fakplan.geometry import gguf_header

    listing = repo_files(repo, None, settings)
    chosen = pick_gguf(listing.files, selector)
    if chosen is None:
        ggufs = [f for f in listing.files if f.endswith(".gguf")]
        shown = ", ".join(ggufs[:6]) + (" ..." if len(ggufs) > 6 else "") if ggufs else "none"
        raise GeometryError(
            f"{repo}:{selector}: no GGUF of {repo} at {listing.commit[:12]} is the one "
            f"llama.cpp's -hf picks for {selector!r} (GGUF files: {shown})"
        )
    missing = [f for f in chosen if f not in listing.files]
    if missing:
        raise GeometryError(f"{repo}:{selector}: shard {missing[0]} of a split GGUF is missing")
    sizes = dict.fromkeys(chosen, GGUF_FIRST_READ)
    heads = {name: read_head(listing, name, GGUF_FIRST_READ, settings) for name in chosen}
    while True:
        try:
            geometry = gguf_header.geometry_from_bytes(
                [(f"{repo}/{name}", heads[name]) for name in chosen]
            )
        except gguf_header.ShortHeader as short:
            name = short.shard.removeprefix(f"{repo}/")
            if len(heads[name]) < sizes[name]:
                raise GeometryError(
                    f"{repo}/{name}: truncated GGUF: the file ends inside its header"
                ) from None
            if sizes[name] >= MAX_GGUF_HEADER:
                raise GeometryError(
                    f"{repo}/{name}: a GGUF header over {MAX_GGUF_HEADER:,} B is not plausible"
                ) from None
            # only the shard whose header runs on is read further
            sizes[name] *= 4
            heads[name] = read_head(listing, name, sizes[name], settings)
            continue
        return geometry, HubGguf(listing, selector, chosen)
