"""Rules that span fields of a loaded shape; each names the field to change."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakplan.engines import ENGINES, setup_of
from fakplan.errors import ReleaseError
from fakplan.shape.model import SIZING_FIELDS
from fakplan.units import human_pair

if TYPE_CHECKING:
    from fakplan.shape.load import LoadedShape


def check_semantics(loaded: LoadedShape) -> None:
    """Rules that span fields; each names the field to change. The engine states what it
    takes (``Engine`` attributes) and adds rules of its own (``Engine.check``).

    The rules run in a fixed order, so a shape that breaks several is told the first.
    """
    _check_contract(loaded)
    _check_release(loaded)
    _check_ceiling(loaded)
    _check_paths(loaded)
    _check_words(loaded)
    _check_engine_takes(loaded)
    _check_pool_source(loaded)
    _check_cards_and_pool(loaded)
    _check_speculative(loaded)
    _check_controls(loaded)
    ENGINES[loaded.shape.engine].check(setup_of(loaded))


def _check_contract(loaded: LoadedShape) -> None:
    """A contract block exactly where the engine is not modelled: fakplan derives the rest."""
    shape = loaded.shape
    engine = ENGINES[shape.engine]
    if engine.needs_contract and shape.contract is None:
        raise loaded.error(
            f"engine {shape.engine} needs a contract block (per_token components, per_seq, "
            "fixed, page_tokens): fakplan cannot derive what an engine it does not model costs",
            "engine",
        )
    if not engine.needs_contract and shape.contract is not None:
        raise loaded.error(
            f"engine {shape.engine} derives its contract from the model; "
            "remove contract (it is for engine: custom)",
            "contract",
        )


# serving switches only some engines take: the field, the Engine attribute that says an
# engine takes it, and what the refusal calls it
_SWITCHES = (
    ("language_model_only", "takes_language_model_only", "text-only switch"),
    ("enforce_eager", "takes_enforce_eager", "eager switch"),
)


def _check_engine_takes(loaded: LoadedShape) -> None:
    """What the launch asks of the engine and the card it takes: --dtype, GPU layers, binary."""
    shape = loaded.shape
    engine = ENGINES[shape.engine]
    if shape.serving.dtype != "auto" and not engine.takes_model_dtype:
        takers = ", ".join(n for n, e in ENGINES.items() if e.takes_model_dtype)
        raise loaded.error(
            f"engine {shape.engine} takes no --dtype (serving.dtype is for {takers}); remove it",
            "serving",
            "dtype",
        )
    for field, takes, what in _SWITCHES:
        if getattr(shape.serving, field) and not getattr(engine, takes):
            takers = ", ".join(n for n, e in ENGINES.items() if getattr(e, takes))
            raise loaded.error(
                f"engine {shape.engine} has no {what} fakplan models "
                f"(serving.{field} is for {takers}); remove it",
                "serving",
                field,
            )
    quantization = shape.serving.quantization
    if quantization is not None and quantization not in engine.quantizations:
        takers = ", ".join(n for n, e in ENGINES.items() if quantization in e.quantizations)
        raise loaded.error(
            f"serving.quantization {quantization} is modelled for {takers} (its "
            f"--quantization); engine {shape.engine} is not modelled with it: remove it",
            "serving",
            "quantization",
        )
    if shape.card.device == "cpu" and shape.launch.gpu_layers not in (None, 0):
        raise loaded.error(
            f"offloads {shape.launch.gpu_layers} layers to a GPU, but card.device is cpu; "
            "remove it (a CPU card runs every layer in RAM)",
            "launch",
            "gpu_layers",
        )
    binary = shape.launch.binary
    if binary is not None and binary not in engine.binaries:
        known = ", ".join(engine.binaries) or "none (leave launch.binary out)"
        raise loaded.error(
            f"{binary!r} does not start engine {shape.engine}; expected {known}",
            "launch",
            "binary",
        )


def _check_pool_source(loaded: LoadedShape) -> None:
    """One source for the pool: the pair the shape states, or the engine's own sizing."""
    shape = loaded.shape
    engine = ENGINES[shape.engine]

    def takers() -> dict[str, str]:
        """Which engine takes each sizing field (every engine loads: for a refusal only)."""
        return {e.sizing_field: n for n, e in ENGINES.items() if e.sizing_field}

    stated = [n for n in SIZING_FIELDS if getattr(shape.serving, n) is not None]
    if not stated:
        if shape.budget is None:
            ways = ", ".join(f"serving.{f} ({n})" for f, n in takers().items())
            raise loaded.error(
                "give budget: {weights: ..., kv: ...} (the pair), or let the engine size its "
                f"pool: {ways}",
                "serving",
            )
        return
    if len(stated) > 1:
        raise loaded.error(
            f"serving.{stated[0]} and serving.{stated[1]} both size the pool: keep the one "
            f"engine {shape.engine} takes",
            "serving",
            stated[1],
        )
    field = stated[0]
    if engine.sizing_field != field:
        if engine.sizing_field is None:
            fix = "state budget.kv instead"
        else:
            fix = f"engine {shape.engine} sizes its pool from serving.{engine.sizing_field}"
        raise loaded.error(
            f"{takers()[field]}'s {_flag(field)}, not engine {shape.engine}'s; {fix}",
            "serving",
            field,
        )
    if shape.budget is not None:
        raise loaded.error(
            f"the engine sizes its pool from serving.{field}, so the shape states no budget: "
            f"remove budget (the plan predicts the weights and the pool) or remove "
            f"serving.{field}",
            "budget",
        )


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _check_cards_and_pool(loaded: LoadedShape) -> None:
    """The cards the parallel layout needs and a pool that holds something (the head
    address of a multi-node shape is the launch's to check: ``--target kubernetes`` gives
    one, plan.check_head_address)."""
    shape = loaded.shape
    par = shape.parallel
    cards = shape.card.count * par.nodes
    if par.tensor * par.pipeline > cards:
        raise loaded.error(
            f"tensor {par.tensor} x pipeline {par.pipeline} needs {par.tensor * par.pipeline} "
            f"cards, the shape has {shape.card.count} per node x {par.nodes} node(s) = {cards}",
            "parallel",
        )
    if shape.budget is not None and shape.budget.kv <= 0:
        raise loaded.error("the KV pool must be larger than 0 B", "budget", "kv")


def _check_speculative(loaded: LoadedShape) -> None:
    """Speculative tokens on an engine with speculative flags need the method that sets them."""
    shape = loaded.shape
    engine = ENGINES[shape.engine]
    if shape.serving.spec_tokens and engine.speculative_flags and shape.launch.speculative is None:
        raise loaded.error(
            f"spec_tokens {shape.serving.spec_tokens} needs launch.speculative.method "
            "(mtp, eagle, ngram, ...) for the engine's flags",
            "serving",
            "spec_tokens",
        )


def _check_controls(loaded: LoadedShape) -> None:
    """Each expectation names a declared control: its range is measured from that figure."""
    shape = loaded.shape
    for index, expectation in enumerate(shape.expect):
        if expectation.control not in shape.control:
            known = ", ".join(sorted(shape.control)) or "none declared"
            raise loaded.error(
                f"names control {expectation.control!r}; controls: {known}",
                "expect",
                index,
                "control",
            )


# Linux's limits (PATH_MAX, NAME_MAX): a longer reference names no file, and asking the
# filesystem about it fails with "File name too long" instead of "not there"
_PATH_BYTES = 4096
_NAME_BYTES = 255


def _check_paths(loaded: LoadedShape) -> None:
    """Every value read as a path fits the filesystem's limits, so looking it up is safe."""
    shape = loaded.shape
    speculative = shape.launch.speculative
    fields: list[tuple[str | None, tuple[str, ...]]] = [
        (shape.model, ("model",)),
        (shape.launch.weights, ("launch", "weights")),
        (speculative.model if speculative else None, ("launch", "speculative", "model")),
        (shape.ceiling.ledger if shape.ceiling else None, ("ceiling", "ledger")),
    ]
    for value, loc in fields:
        if value is None:
            continue
        longest = max((len(part.encode()) for part in value.split("/")), default=0)
        if len(value.encode()) > _PATH_BYTES or longest > _NAME_BYTES:
            raise loaded.error(
                f"a path of {len(value.encode()):,} bytes with a name of {longest:,}: "
                f"files are named in at most {_NAME_BYTES} bytes, paths {_PATH_BYTES:,}",
                *loc,
            )


def _check_words(loaded: LoadedShape) -> None:
    """A value the launch places as a word of its own (a model, a path, a name, an address)
    must not start with '-': the engine's parser would read it as an option (a model named
    --trust-remote-code would turn that option on). launch.extra_args are options on purpose."""
    launch = loaded.shape.launch
    speculative = launch.speculative
    fields: list[tuple[str | None, tuple[str, ...]]] = [
        (loaded.shape.model, ("model",)),
        (launch.weights, ("launch", "weights")),
        (launch.host, ("launch", "host")),
        (launch.served_model_name, ("launch", "served_model_name")),
        (launch.head_address, ("launch", "head_address")),
        (speculative.method if speculative else None, ("launch", "speculative", "method")),
        (speculative.model if speculative else None, ("launch", "speculative", "model")),
    ]
    for value, loc in fields:
        if value is not None and value.lstrip().startswith("-"):
            raise loaded.error(
                f"{value[:40]!r} starts with '-', so the engine would read it as an option; "
                "a value cannot (a path can be written ./-name); options go in "
                "launch.extra_args",
                *loc,
            )
    _check_word_lengths(loaded, fields)


# Linux's limits on what exec takes (include/uapi/linux/binfmts.h MAX_ARG_STRLEN = 32
# pages, the NUL included; ARG_MAX a quarter of the stack, 2 MiB at the default 8 MiB):
# a longer word compiles, then the script dies at exec with "Argument list too long"
MAX_WORD = 131_072 - 1
MAX_ARGV = (2 << 20) // 2  # half of ARG_MAX for the argv: the environment takes the rest


def _check_word_lengths(
    loaded: LoadedShape, fields: list[tuple[str | None, tuple[str, ...]]]
) -> None:
    launch = loaded.shape.launch
    words = [
        *fields,
        *((arg, ("launch", "extra_args", i)) for i, arg in enumerate(launch.extra_args)),
    ]
    total = 0
    for value, loc in words:
        if value is None:
            continue
        size = len(value.encode())
        total += size + 1
        if size > MAX_WORD:
            raise loaded.error(
                f"a value of {size:,} bytes: exec takes an argument of at most {MAX_WORD:,} "
                "(Linux MAX_ARG_STRLEN), so the engine would never start",
                *loc,
            )
    if total > MAX_ARGV:
        raise loaded.error(
            f"the launch's words come to {total:,} bytes, more than the {MAX_ARGV:,} exec "
            "leaves an argv (Linux ARG_MAX): shorten launch.extra_args",
            "launch",
        )


def _check_release(loaded: LoadedShape) -> None:
    """An engine_version older than every modelled rule set is refused at its line."""
    try:
        ENGINES[loaded.shape.engine].version_used(setup_of(loaded))
    except ReleaseError as exc:
        raise loaded.error(str(exc), "engine_version") from None


def _check_ceiling(loaded: LoadedShape) -> None:
    """A stated ceiling is what one card holds for the pair: never more than the card."""
    shape = loaded.shape
    stated = shape.ceiling.bytes if shape.ceiling is not None else None
    if stated is None or stated <= shape.card.total:
        return
    ceiling, card = human_pair(stated, shape.card.total)
    # ceiling: {bytes: ...} on lines of its own points at bytes; ceiling: 30 GiB at ceiling
    loc = (
        ("ceiling", "bytes")
        if loaded.line(("ceiling", "bytes")) != loaded.line(("ceiling",))
        else ("ceiling",)
    )
    raise loaded.error(
        f"{ceiling} is above the card's {card} (card.total"
        f"{', auto' if loaded.budget is not None else ''}): a ceiling is what one card holds for "
        "weights + KV under the engine, at most the card; state the ceiling a boot ledger "
        "of this card measured, or correct card.total",
        *loc,
    )
