"""An engine fakplan does not model still refuses long prompts in its own words: the one
an operator's KV/VRAM resize runbook quotes (radiance)."""

from __future__ import annotations

from fakplan.engines.serving import ServerFacts, refusal

CONTEXT_REFUSALS = (
    refusal(
        "radiance-does-not-fit",
        "radiance",
        "an operator's resize runbook",
        r"(?P<prompt>{N}) prompt tokens does not fit the (?P<context>{N}) token context",
    ),
)

SERVER = ServerFacts(refusals=CONTEXT_REFUSALS)
