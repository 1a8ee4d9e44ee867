"""Which engine serves an endpoint: at most three GETs, classified by ``flavours.DETECTION``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fakplan.probes.api import Server, excerpt
from fakplan.probes.flavours import Observed, classify, flavours, served_context
from fakplan.probes.http import Answer, Deadline, Endpoint, ProbeFault
from fakplan.probes.refusals import error_message

# The longest model id taken: every request sends it back and the record keeps it. Hub ids
# are under 100 characters, a local path at most PATH_MAX (4,096 on Linux).
MAX_MODEL_ID_CHARS = 4096


def _mapping(answer: Answer) -> Mapping[str, object] | None:
    return answer.data if answer.ok and isinstance(answer.data, Mapping) else None


def _optional(endpoint: Endpoint, path: str, deadline: Deadline) -> Answer | None:
    """A GET whose failure only means "not this flavour" (connection faults still count)."""
    try:
        return endpoint.get(path, deadline)
    except ProbeFault as exc:
        if str(exc).startswith("cannot connect"):
            raise
        return None


def detect(
    endpoint: Endpoint,
    deadline: Deadline,
    *,
    hint: str | None = None,
    eos_ids: tuple[int, ...] = (),
    extra_body: Mapping[str, Any] | None = None,
) -> Server:
    """The server's flavour and model id; ``hint`` (a flavour name) when its routes do not tell.

    ``GET /v1/models`` must answer: an endpoint that does not is not
    OpenAI-compatible (or refuses the key), and every probe needs the model id.
    """
    models = endpoint.get("/v1/models", deadline)
    if not models.ok:
        raise ProbeFault(
            f"GET /v1/models: HTTP {models.status}: {excerpt(error_message(models.text))}"
            + (" (check --api-key-env)" if models.status in (401, 403) else "")
        )
    listing = _mapping(models)
    if listing is None:
        raise ProbeFault(f"GET /v1/models: not a JSON object: {excerpt(models.text)!r}")
    observed = Observed(models=listing)
    name, evidence = classify(observed)
    if name == "openai":
        spec = _optional(endpoint, "/openapi.json", deadline)
        paths = (_mapping(spec) or {}).get("paths") if spec else None
        if isinstance(paths, Mapping):
            observed = Observed(models=listing, openapi_paths=frozenset(map(str, paths)))
            name, evidence = classify(observed)
    if name == "openai":
        props = _optional(endpoint, "/props", deadline)
        if props is not None and _mapping(props) is not None:
            observed = Observed(
                models=listing, openapi_paths=observed.openapi_paths, props=_mapping(props)
            )
            name, evidence = classify(observed)
    notes: list[str] = []
    known = flavours()
    if name == "openai" and hint in known:
        name = hint
        evidence = f"not told by its routes; the shape's engine names {hint}"
    elif hint is not None and hint != name and name != "openai":
        notes.append(f"the endpoint looks like {name}, the shape's engine names {hint}")
    model = observed.first_model.get("id")
    if isinstance(model, str) and len(model) > MAX_MODEL_ID_CHARS:
        raise ProbeFault(
            f"GET /v1/models: the model id is {len(model):,} characters long, over the "
            f"{MAX_MODEL_ID_CHARS:,} of any path or hub id ({excerpt(model, 60)!r})"
        )
    return Server(
        flavour=known[name],
        model=model if isinstance(model, str) else None,
        models=tuple(m for m in observed.model_ids if len(m) <= MAX_MODEL_ID_CHARS)[:64],
        evidence=evidence,
        context=served_context(observed),
        eos_ids=eos_ids,
        notes=tuple(notes),
        extra_body=dict(extra_body or {}),
    )
