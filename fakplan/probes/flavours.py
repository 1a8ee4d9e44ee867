"""Which server answers, from what a few GETs returned, and what it takes.

A flavour (each engine's ``server`` module states its own, the registry joins them) says
which tokenize route counts a prompt for free, whether the server takes ``ignore_eos``
and ``chat_template_kwargs``, and where that was read. ``classify`` names the flavour by
the engines' detection rules; the GETs themselves are the HTTP edge's
(``fakplan.probes.http``).
"""

from __future__ import annotations

from collections.abc import Mapping

from fakplan.engines import (
    OPENAI,
    Evidence,
    Flavour,
    Observed,
    TokenizeRoute,
    detection,
    flavours,
)

__all__ = [
    "OPENAI",
    "Evidence",
    "Flavour",
    "Observed",
    "TokenizeRoute",
    "classify",
    "flavour",
    "flavours",
    "served_context",
]


def flavour(name: str) -> Flavour:
    """The flavour called ``name`` (an engine's server, or ``openai``)."""
    return flavours()[name]


def classify(observed: Observed) -> tuple[str, str]:
    """(flavour, evidence); ``openai`` with the reason when nothing identifies the server."""
    for rule in detection():
        if rule.test(observed):
            return rule.flavour, rule.shows
    return "openai", "no engine-specific route or field answered"


def served_context(observed: Observed) -> int | None:
    """The window the server states about itself, where it states one."""
    model = observed.first_model
    for value in (
        model.get("max_model_len"),  # vLLM, SGLang
        (model.get("meta") or {}).get("n_ctx") if isinstance(model.get("meta"), Mapping) else None,
        ((observed.props or {}).get("default_generation_settings") or {}).get("n_ctx")
        if isinstance((observed.props or {}).get("default_generation_settings"), Mapping)
        else None,
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None
