"""``fakplan fit``: what fits on these cards, as a table, JSON or shape files."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import click
import yaml
from rich.console import Console
from rich.table import Table

from fakplan.cli import EXIT_FAILED, EXIT_OK, SPECULATIVE_HELP, gates_option, speculative_config
from fakplan.engines import ENGINES
from fakplan.errors import FakplanError, ShapeError
from fakplan.files import write_atomic
from fakplan.fit import (
    SMALLEST_WINDOW,
    FitRefused,
    FitReport,
    FitRequest,
    Fitter,
    Layout,
    LayoutFit,
    point_name,
    point_text,
    relocated,
    run_fit,
    tensor_widths,
)
from fakplan.gates.operator import gates_folder, load_gates
from fakplan.plan import Plan
from fakplan.shape import load_shape_text
from fakplan.shape.source import read_shape_file, read_yaml
from fakplan.units import human

# the shape field each option of the model form stands for, to name it in a refusal
_OPTION_OF = {
    "model": "MODEL",
    "engine": "--engine",
    "engine_version": "--engine-version",
    "card.total": "--card",
    "card": "--card",
    "card.sms": "--sms",
    "card.capability": "--card-capability",
    "card.sku": "--card-sku",
    "card.count": "--cards",
    "ceiling": "--ceiling",
    "budget.weights": "--weights",
}


@click.command()
@click.argument("target")
@click.option(
    "--engine",
    type=click.Choice(sorted(n for n, e in ENGINES.items() if e.fit_kv_dtypes)),
    help="The engine (needed with a MODEL; a shape names its own).",
)
@click.option("--engine-version", help="The release whose arithmetic applies.")
@click.option(
    "--card",
    help='Memory of one card, e.g. "24 GiB", or auto (NVML); with --card-sku, the CUDA total '
    "public logs print for that card (fakplan cards) where it is left out.",
)
@click.option("--sms", type=int, help="The card's SM count (vLLM's predicted ceiling needs it).")
@click.option(
    "--card-capability",
    "capability",
    help="The card's CUDA compute capability, e.g. \"9.0\" (a GPTQ, AWQ or W4A16 checkpoint's "
    "weights depend on the kernel it picks).",
)
@click.option(
    "--card-sku",
    "sku",
    help="The card by name (fakplan cards lists them): fills --sms and --card-capability "
    "from the card table, and gives each point its decode rate.",
)
@click.option("--cards", type=int, help="Cards per node [default: what the TP needs].")
@click.option("--ceiling", help="The ceiling, where a boot ledger printed one (a byte size).")
@click.option("--weights", help="The weights budget per card [default: what they need].")
@click.option(
    "--utilization",
    type=click.FloatRange(0, 1, min_open=True, max_open=True),
    help="Let the engine size its pool from this fraction of the card (vLLM's "
    "--gpu-memory-utilization, SGLang's --mem-fraction-static) instead of a budget pair; "
    "each point then names the least fraction that realises it.",
)
@click.option(
    "--window",
    type=click.IntRange(1, 1 << 27),
    multiple=True,
    help="A window to answer for beside the ladder (repeat).",
)
@click.option(
    "--sessions",
    type=click.IntRange(1, 1 << 20),
    help="Also the longest window this many sessions get.",
)
@click.option(
    "--kv-dtype", multiple=True, help="KV dtypes to try [default: the model's and 8-bit]."
)
@click.option(
    "--quantization",
    type=click.Choice(["none", "fp8"]),
    multiple=True,
    help="Weight quantizations to try (vLLM) [default: none].",
)
@click.option(
    "--tp",
    type=int,
    multiple=True,
    help="Tensor-parallel widths to try [default: the powers of two the cards allow that "
    "divide the attention heads; one card: 1].",
)
@click.option(
    "--speculative-config",
    "speculative",
    metavar="JSON",
    help=SPECULATIVE_HELP + ": every point plans the draft (its KV in the pool, its weights "
    "in the budget), as a shape's launch.speculative and serving.spec_tokens would.",
)
@click.option(
    "--language-model-only",
    is_flag=True,
    help="vLLM --language-model-only: a multimodal model served as text only (its towers "
    "not loaded), as a shape's serving.language_model_only.",
)
@gates_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema fakplan.fit/1).")
@click.option(
    "--emit",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write each point as a shape file into this folder.",
)
def fit(
    target: str,
    engine: str | None,
    engine_version: str | None,
    card: str | None,
    sms: int | None,
    capability: str | None,
    sku: str | None,
    cards: int | None,
    ceiling: str | None,
    weights: str | None,
    utilization: float | None,
    window: tuple[int, ...],
    sessions: int | None,
    kv_dtype: tuple[str, ...],
    quantization: tuple[str, ...],
    tp: tuple[int, ...],
    speculative: str | None,
    language_model_only: bool,
    gates_dir: Path | None,
    as_json: bool,
    emit: Path | None,
) -> None:
    """What fits on these cards: per window, the most sessions every gate passes.

    TARGET is a model (a Hugging Face id, a catalog id, an HF folder or
    config.json, a GGUF) with --engine and --card, or a shape file whose model,
    card, ceiling and gates are used. For each layout (KV dtype x weight quantization x TP) and each
    window on a ladder (powers of two up to the trained context, and --window),
    it compiles and gates shapes in memory and prints the most sessions that
    pass, with the budget split that realises them and the gate one more
    session fails. --sessions N adds the longest window N sessions get.

    \b
      fakplan fit meta-llama/Llama-3.1-8B-Instruct --engine vllm \\
          --engine-version 0.19.0 --card "24 GiB" --sms 128 --sessions 4
      fakplan fit shapes/example.yaml --kv-dtype fp8 --emit fitted/

    The pool gets what the pair's limit leaves beside the weights: the ceiling
    (stated, read from a ledger, or predicted) where one is known, else the
    card's bound. Where nothing fits, the narrowest wider TP that does is
    named. Exit 0 when a point fits, 1 when none does, 2 on bad input.
    """
    windows = tuple(window)
    modelled = not (Path(target).suffix in (".yaml", ".yml") and Path(target).exists())
    fitter, base_name, dtypes, widths = _fitter(
        target,
        engine,
        engine_version,
        card,
        {"sms": sms, "capability": capability, "sku": sku},
        cards,
        ceiling,
        weights,
        utilization,
        gates_dir,
        speculative,
        language_model_only,
    )
    quants = tuple(None if q == "none" else q for q in quantization) or (None,)
    layouts = tuple(
        Layout(d, q, t) for t in (tp or widths) for q in quants for d in (kv_dtype or dtypes)
    )
    request = FitRequest(layouts, windows, sessions)
    try:
        report = run_fit(fitter, request)
    except FitRefused as exc:
        field, detail = exc.failing.field, exc.failing.detail
        if modelled and field in _OPTION_OF and detail is not None:
            raise FakplanError(f"fakplan fit: {_OPTION_OF[field]}: {detail}") from None
        raise
    written = _emit(report, fitter, base_name, emit) if emit is not None else []
    if as_json:
        document = report.to_json() | {"emitted": [p.as_posix() for p in written]}
        click.echo(json.dumps(document, indent=2))
    else:
        _print(report, written)
    sys.exit(EXIT_OK if report.found else EXIT_FAILED)


def _fitter(
    target: str,
    engine: str | None,
    engine_version: str | None,
    card: str | None,
    card_facts: dict[str, Any],
    cards: int | None,
    ceiling: str | None,
    weights: str | None,
    utilization: float | None,
    gates_dir: Path | None,
    speculative: str | None = None,
    language_model_only: bool = False,
) -> tuple[Fitter, str, tuple[str, ...], tuple[int, ...]]:
    """The fitter over a shape file, or over a shape made of the options; its name, the KV
    dtypes and the tensor-parallel widths to try."""
    path = Path(target)
    if path.suffix in (".yaml", ".yml") and path.exists():
        text = read_shape_file(path)
        loaded = load_shape_text(text, path)  # refused here, with its line, if it is bad
        data, _ = read_yaml(path, text)
        if loaded.budget is not None:  # card.total: auto, read once
            data["card"]["total"] = f"{loaded.shape.card.total} B"
        for option, value in (("engine", engine), ("card", card), ("utilization", utilization)):
            if value is not None:
                raise click.BadParameter(f"{value}: the shape states it", param_hint=f"--{option}")
        if speculative is not None:
            raise click.BadParameter(
                "a shape states its draft: launch.speculative and serving.spec_tokens",
                param_hint="--speculative-config",
            )
        if language_model_only:
            raise click.BadParameter(
                "a shape states it: serving.language_model_only", param_hint="--language-model-only"
            )
        _override(data, engine_version, card_facts, cards, ceiling, weights)
        folder = gates_dir or gates_folder(path)
        gates = load_gates(folder) if folder is not None else ()
        own = loaded.shape.serving.kv_cache_dtype
        dtypes = tuple(dict.fromkeys((own, *ENGINES[loaded.shape.engine].fit_kv_dtypes)))
        fitter = Fitter(data, path, loaded.lines, loaded.budget, gates)
        return fitter, loaded.shape.name, dtypes, tensor_widths(loaded, cards)
    # --card-sku alone: the CUDA total public logs print for it, where they agree on one
    named = card is not None or card_facts.get("sku") is not None
    if engine is None or not named:
        missing = [
            *(["--engine"] if engine is None else []),
            *(
                []
                if named
                else ["--card (or --card-sku of a card with a CUDA total in fakplan cards)"]
            ),
        ]
        given = " and ".join(missing)
        raise click.UsageError(f"{target!r} is a model (no shape file): give {given}")
    name = re.sub(r"[^a-z0-9.-]+", "-", target.rstrip("/").rsplit("/", 1)[-1].lower()).strip("-.")
    made: dict[str, Any] = {
        "name": (name or "model")[:40],
        "engine": engine,
        "model": target,
        "card": {} if card is None else {"total": card},
        "serving": {"max_num_seqs": 1, "max_model_len": SMALLEST_WINDOW},
    }
    if language_model_only:
        made["serving"]["language_model_only"] = True
    if speculative is not None:
        method, tokens, draft = speculative_config(speculative)
        made["serving"]["spec_tokens"] = tokens
        made["launch"] = {"speculative": {"method": method, **({"model": draft} if draft else {})}}
    if utilization is not None:
        sizing = ENGINES[engine].sizing_field
        if sizing is None:
            raise click.BadParameter(
                f"{engine} does not size its own pool: fit a budget pair (--weights)",
                param_hint="--utilization",
            )
        if weights is not None:
            raise click.BadParameter(
                "the engine sizes the pool around the weights it loads: give --utilization "
                "or --weights, not both",
                param_hint="--utilization",
            )
        made["serving"][sizing] = utilization
    _override(made, engine_version, card_facts, cards, ceiling, weights)
    path = Path.cwd() / "fit.yaml"  # where relative model paths are read from
    probe = (
        made
        if utilization is not None
        else dict(made, budget={"weights": weights or "1 MiB", "kv": "1 MiB"})
    )
    try:
        loaded = load_shape_text(yaml.safe_dump(probe, sort_keys=False), path)
    except ShapeError as exc:
        option = _OPTION_OF.get(exc.field or "", exc.field or "")
        raise FakplanError(f"fakplan fit: {option}: {exc.detail}") from None
    if loaded.budget is not None:
        made["card"]["total"] = f"{loaded.shape.card.total} B"
    gates = load_gates(gates_dir) if gates_dir is not None else ()
    return (
        Fitter(made, path, loaded.lines, loaded.budget, gates),
        made["name"],
        ENGINES[engine].fit_kv_dtypes,
        tensor_widths(loaded, cards),
    )


def _override(
    data: dict[str, Any],
    engine_version: str | None,
    card_facts: dict[str, Any],
    cards: int | None,
    ceiling: str | None,
    weights: str | None,
) -> None:
    """The options over the shape's data; ``card_facts``: card.sms and card.capability."""
    if engine_version is not None:
        data["engine_version"] = engine_version
    for key, value in card_facts.items():
        if value is not None:
            data.setdefault("card", {})[key] = value
    if cards is not None:
        data.setdefault("card", {})["count"] = cards
    if ceiling is not None:
        data["ceiling"] = ceiling
    if weights is not None:
        data["budget"] = {"weights": weights, "kv": "1 MiB"}


def _emit(report: FitReport, fitter: Fitter, base: str, folder: Path) -> list[Path]:
    written: list[Path] = []
    for point in report.points():
        name = point_name(base, point)
        data = relocated(point.outcome.data, fitter.path.parent, folder)
        target = folder / f"{name}.yaml"
        write_atomic(target, point_text(name, point, data))
        written.append(target)
    return written


def _mib(n: int | None) -> str:
    return "unknown" if n is None else human(n)


def _limits(plans: list[Plan]) -> str:
    """What the pairs were fitted under: a ceiling (its range where the engine's floor moves
    with the sessions, as vLLM's CUDA graphs do), or the card."""
    if plans[0].engine_sizing is not None:
        return "none: the engine sizes the pool itself, from the shape's fraction (predicted)"
    known = sorted(p.ceiling_bytes >> 20 for p in plans if p.ceiling_bytes is not None)
    if not known:
        return f"the card's bound ({plans[0].card_total_bytes >> 20:,} MiB card; no ceiling known)"
    basis = plans[0].ceiling_basis or "stated"
    span = f"{known[0]:,}" if known[0] == known[-1] else f"{known[0]:,}-{known[-1]:,}"
    return f"the {basis} ceiling, {span} MiB"


def _decode(plan: Plan) -> str:
    """Every slot at the window: the predicted decode rate one session sees (rates)."""
    worst = plan.decode_worst_case
    if worst is None:
        return ""
    low, high = worst["per_session_tps"]
    return f"{low:,.1f}..{high:,.1f}"


def _frontier_table(fit: LayoutFit) -> Table:
    """Per window the most sessions, the split or least fraction that realises them."""
    sized = any(p.least is not None for p in fit.frontier)
    rated = any(p.plan.decode_worst_case is not None for p in fit.frontier)
    table = Table(title=fit.layout.label(), title_justify="left")
    columns = ["window", "sessions", "weights MiB", "KV pool MiB", "tokens"]
    columns += ["least fraction"] if sized else []
    columns += ["decode t/s per session"] if rated else []
    for column in [*columns, "one more fails"]:
        last = column == "one more fails"
        table.add_column(column, justify="left" if last else "right", overflow="fold")
    for point in fit.frontier:
        p = point.plan
        row = [
            f"{p.max_model_len:,}",
            str(p.max_num_seqs),
            f"{p.weights_budget_bytes >> 20:,}",
            f"{p.kv_budget_bytes >> 20:,}",
            f"{p.tokens_backed:,}",
        ]
        if sized:
            row.append("" if point.least is None else f"{point.least.value:.2f}")
        if rated:
            row.append(_decode(p))
        table.add_row(*row, point.beyond.gate)
    for window, failing in fit.none_at:
        blank = [""] * (len(columns) - 2)
        table.add_row(f"{window:,}", "0", *blank, f"{failing.gate}: {failing.summary}")
    return table


def _print_offload(console: Console, fit: LayoutFit, sessions: int) -> None:
    """llama.cpp: the most layers -ngl puts on the card, where not every layer fits."""
    table = Table(
        title=f"{fit.layout.label()}: partial offload (-ngl), {sessions} session(s)",
        title_justify="left",
    )
    for column in ("window", "-ngl", "weights MiB", "KV pool MiB", "one more layer fails"):
        table.add_column(column, justify="left" if column.startswith("one") else "right")
    for point in fit.offload:
        p = point.plan
        table.add_row(
            f"{p.max_model_len:,}",
            str(point.layout.gpu_layers),
            f"{p.weights_budget_bytes >> 20:,}",
            f"{p.kv_budget_bytes >> 20:,}",
            point.beyond.gate,
        )
    for window, failing in fit.offload_none:
        table.add_row(f"{window:,}", "none", "", "", f"{failing.gate}: {failing.summary}")
    console.print(table)
    console.print("  the layers -ngl leaves off the card run from RAM on the CPU, slower per token")


def _print(report: FitReport, written: list[Path]) -> None:
    console = Console(highlight=False, soft_wrap=True)
    version = f" {report.engine_version}" if report.engine_version else ""
    console.print(
        f"{report.model} on {report.engine}{version}, a {_mib(report.card_total_bytes)} card; "
        f"trained context {report.trained_context:,} tokens"
    )
    for fit in report.fits:
        if not fit.frontier and len({(f.gate, f.summary) for _, f in fit.none_at}) == 1:
            failing = fit.none_at[0][1]  # the same refusal at every window: said once
            console.print(
                f"{fit.layout.label()}: no window fits ({failing.gate}: {failing.summary})"
            )
        else:
            console.print(_frontier_table(fit))
        if fit.frontier:
            console.print(f"  the pair's limit: {_limits([p.plan for p in fit.frontier])}")
        if fit.offload or fit.offload_none:
            _print_offload(console, fit, report.sessions or 1)
        if fit.at_sessions is not None:
            p, b = fit.at_sessions.plan, fit.at_sessions.beyond
            console.print(
                f"  {p.max_num_seqs} sessions: the longest window is {p.max_model_len:,} "
                f"tokens ({b.value:,} fails {b.gate}: {b.summary})"
            )
        elif fit.at_sessions_none is not None:
            f = fit.at_sessions_none
            console.print(f"  {report.sessions} sessions fit at no window ({f.gate}: {f.summary})")
    for wider in report.wider:
        if wider.point is None:
            console.print(f"{wider.layout.label()}: fits on no TP up to 64")
        else:
            tensor = wider.point.data["parallel"]["tensor"]
            console.print(
                f"{wider.layout.label()}: nothing fits; TP {tensor} ({tensor} cards) serves "
                f"{wider.point.sessions} x {wider.point.window:,} tokens"
            )
    for path in written:
        console.print(f"wrote {path}")
