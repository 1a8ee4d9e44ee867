"""The launch: the exact argv each node role executes, derived from the plan.

Engines build it (their flag names are engine knowledge); ``render`` only
quotes it into files. Keeping the argv as data in ``plan.json`` is what lets a
test compare what ``serve.sh`` executes with what the plan derived.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from fakplan.errors import RuleError

if TYPE_CHECKING:
    from fakplan.shape import LoadedShape, Shape


class RoleRecord(BaseModel):
    """One script: the commands run first (e.g. ``ray start``), then the argv exec'd."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    file: str
    before: tuple[tuple[str, ...], ...] = ()
    environment: dict[str, str | None] = Field(
        default_factory=dict,
        description="variables exported before the argv runs (None: unset, so an "
        "inherited value cannot override the plan)",
    )
    argv: tuple[str, ...]
    note: str = ""


class SecretRef(BaseModel):
    """A variable whose value is a Secret's key: referenced, never written to a file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    secret: str
    key: str


class LaunchRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    binary: str | None = Field(description="the engine executable, None for engine: custom")
    env: dict[str, str] = Field(description="variables written to <name>.env, in order")
    roles: tuple[RoleRecord, ...] = ()
    derivations: dict[str, str] = Field(
        default_factory=dict, description="flag -> how it was derived"
    )
    shape_paths: tuple[str, ...] = Field(
        (),
        description="argv words that are paths relative to the shape's folder; the scripts "
        "run the engine from that folder, so it opens the files fakplan read",
    )
    secrets: dict[str, SecretRef] = Field(
        default_factory=dict,
        description="variables the engine needs from a Secret (launch.env): the manifests "
        "reference them, serve.sh refuses to start without them",
    )
    served_name: str | None = Field(
        None,
        description="the model id the engine lists at /v1/models (served_name): what the "
        "probes expect and the alert rules select",
    )


# the flags that name the id an engine lists: vLLM's and SGLang's, llama-server's
SERVED_FLAGS = ("--served-model-name", "--alias")


def served_name(shape: Shape) -> str:
    """The model id the engine lists at /v1/models: the last served-name flag of
    launch.extra_args (they come after fakplan's own, and the parsers keep the last), else
    launch.served_model_name, else what it loads (launch.weights, else model)."""
    name = shape.launch.served_model_name or shape.launch.weights or shape.model
    args = shape.launch.extra_args
    for i, word in enumerate(args):
        flag, eq, value = word.partition("=")
        if flag in SERVED_FLAGS:
            name = value if eq else args[i + 1] if i + 1 < len(args) else name
    return name


def with_shape_env(shape: Shape, launch: LaunchRecord) -> LaunchRecord:
    """The launch with the shape's own variables (launch.env): plain values exported by every
    role and listed in the env file, Secret keys referenced by name only; and the name the
    engine serves. A variable the launch sets (or unsets) itself is refused: exported after
    it, the shape's value would silently replace the plan's."""
    own = set(launch.env).union(*(role.environment for role in launch.roles))
    taken = sorted(set(shape.launch.env) & own)
    if taken:
        raise RuleError(
            f"{taken[0]} is set by fakplan's launch for this shape (from the plan's figures); "
            "a second value would replace it: remove it from launch.env",
            "launch",
            "env",
            taken[0],
        )
    launch = launch.model_copy(update={"served_name": served_name(shape)})
    plain = {k: v for k, v in shape.launch.env.items() if isinstance(v, str)}
    secrets = {
        k: SecretRef(secret=v.name, key=v.key)
        for k, v in shape.launch.env.items()
        if not isinstance(v, str)
    }
    if not plain and not secrets:
        return launch
    roles = tuple(
        role.model_copy(update={"environment": {**role.environment, **plain}})
        for role in launch.roles
    )
    return launch.model_copy(
        update={"env": {**launch.env, **plain}, "roles": roles, "secrets": secrets}
    )


def fraction_up(numerator: int, denominator: int, places: int = 4) -> float:
    """numerator/denominator rounded UP at ``places`` decimals: a fraction that never undershoots."""
    scale: int = 10**places
    rounded = -(-numerator * scale // denominator)
    return float(rounded) / scale


def words(*parts: object) -> tuple[str, ...]:
    return tuple(str(p) for p in parts)


C = TypeVar("C")
# One row of an engine's flag table: the words it adds to the argv for a launch's inputs
# (none where the flag does not apply). Engines list their flags as such rows, in order.
FlagRow = Callable[[C], Sequence[str]]


def flag(name: str, value: Callable[[C], object | None]) -> FlagRow[C]:
    """``name value``, left out where ``value`` is None (False: left out; True: the bare switch)."""

    def row(inputs: C) -> Sequence[str]:
        got = value(inputs)
        if got is None or got is False:
            return ()
        return (name,) if got is True else (name, str(got))

    return row


def argv_of(rows: Sequence[FlagRow[C]], inputs: C) -> list[str]:
    """The words a flag table gives for ``inputs``, in the table's order."""
    return [word for row in rows for word in row(inputs)]


def shape_relative_paths(loaded: LoadedShape, launch: LaunchRecord) -> LaunchRecord:
    """The launch, naming the shape's relative paths its argv carries (the scripts then run
    the engine from the shape's folder).

    A relative value counts when it names something beside the shape, or a GGUF (always a
    local file); anything else relative is an id the engine resolves itself (a hub repo)."""
    shape = loaded.shape
    speculative = shape.launch.speculative
    candidates = (shape.model, shape.launch.weights, speculative.model if speculative else None)
    words = [word for role in launch.roles for word in role.argv]
    relative = tuple(
        value
        for value in dict.fromkeys(c for c in candidates if c and not _hub_gguf_name(loaded, c))
        # a word of its own, or inside one (vLLM's --speculative-config JSON)
        if any(value in word for word in words)
        and not Path(value).is_absolute()
        and (value.endswith(".gguf") or loaded.resolve(value).exists())
    )
    return launch.model_copy(update={"shape_paths": relative}) if relative else launch


def _hub_gguf_name(loaded: LoadedShape, value: str) -> bool:
    """``org/name:Q8_0``: a GGUF the engine fetches by Hub id, no file beside the shape."""
    return ":" in value and "/" in value.split(":", 1)[0] and not loaded.resolve(value).exists()


# the head of a multi-node shape deployed as a LeaderWorkerSet: Kubernetes expands it in a
# container's command and args from the variable LWS sets in every pod of a group
LWS_LEADER_ADDRESS = "$(LWS_LEADER_ADDRESS)"


def head_address(stated: str | None) -> str:
    """The address the other nodes join: the one stated, else the LeaderWorkerSet leader's."""
    return stated or LWS_LEADER_ADDRESS
