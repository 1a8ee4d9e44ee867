"""``fakplan kv``: a model's KV cost on one engine, component by component."""

from __future__ import annotations

import json
import re
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.table import Table
from rich.text import Text

from fakplan.cards import CAPABILITY_PATTERN, card_sku, unknown_sku
from fakplan.cli import FiniteRange, speculative_config
from fakplan.contract import exact_number
from fakplan.cuda_totals import CUDA_TOTALS, PLATFORMS, cuda_total
from fakplan.engines import (
    DEFAULT_ENGINE,
    ENGINES,
    kv_breakdown,
    modelled,
    printed_pool_tokens,
)
from fakplan.errors import FakplanError, ReleaseError, UnitsError
from fakplan.geometry.catalog import catalog_ids
from fakplan.geometry.resolve import resolve_model
from fakplan.kv import KvBreakdown, KvQuery, PoolResult
from fakplan.kv_report import kv_contract, kv_json
from fakplan.plan import ComponentRecord, unstated_release
from fakplan.sizing import SizedPool
from fakplan.units import printed_interval


def _pool_bytes(text: str | None) -> tuple[int, int, int] | None:
    """The printed pool as (low, nominal, high) bytes: its digits allow an interval."""
    if text is None:
        return None
    try:
        return printed_interval(text)
    except UnitsError as exc:
        raise FakplanError(f"--pool: {exc}") from None


# options only some engines take: the query field and the Engine attribute that says so
_ENGINE_OPTIONS = (
    ("language_model_only", "takes_language_model_only"),
    ("model_runner", "runner_variable"),
    ("enforce_eager", "takes_enforce_eager"),
)
FRACTION = FiniteRange(min=0, max=1, min_open=True)


@click.command()
@click.argument("model", required=False)
@click.option(
    "--engine", type=click.Choice(sorted(modelled())), default=DEFAULT_ENGINE, show_default=True
)
@click.option(
    "--engine-version",
    default=None,
    help="Release whose arithmetic applies (default: newest modelled; a newer one takes "
    "the newest rules and says so).",
)
@click.option(
    "--kv-dtype",
    default="auto",
    show_default=True,
    help="KV dtype in the engine's spelling (auto = as the engine resolves it).",
)
@click.option(
    "--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel size."
)
@click.option(
    "--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline-parallel size."
)
@click.option(
    "--block-size",
    type=click.IntRange(min=1),
    default=None,
    help="Page size in tokens (vLLM block / SGLang page).",
)
@click.option(
    "--max-model-len",
    type=click.IntRange(min=1),
    default=None,
    help="Context window (default: the model's trained context).",
)
@click.option(
    "--max-num-seqs",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Sequence slots (llama.cpp -np); with --gpu-memory-utilization, vLLM's "
    "--max-num-seqs (unset: vllm serve's default for the card).",
)
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(min=1),
    default=None,
    help="vLLM scheduler tokens per step (sliding windows).",
)
@click.option(
    "--prefix-caching/--no-prefix-caching",
    default=None,
    help="vLLM prefix caching (hybrid state pages); default: the release's own (on, but "
    "off for hybrid models before 0.28).",
)
@click.option(
    "--spec-tokens",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Speculative tokens per step: an MTP draft's layers join the pool (the method "
    "comes from --speculative-config; unset: the checkpoint's own MTP layers).",
)
@click.option(
    "--speculative-config",
    "speculative",
    default=None,
    metavar="JSON",
    help='vLLM\'s --speculative-config, e.g. \'{"method": "mtp", "num_speculative_tokens": 2}\' '
    'or \'{"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3}\': sets '
    "--spec-tokens; an MTP draft's or an EAGLE head's attention layers join the pool.",
)
@click.option(
    "--dtype",
    "model_dtype",
    default="auto",
    show_default=True,
    help="vLLM and SGLang --dtype: the weights' served dtype, which KV auto follows.",
)
@click.option(
    "--quantization",
    type=click.Choice(["fp8"]),
    default=None,
    help="vLLM --quantization: fp8 quantizes a 16-bit checkpoint's linear layers at load "
    "(counted in the weights of --gpu-memory-utilization's floor).",
)
@click.option(
    "--device",
    type=click.Choice(["gpu", "cpu"]),
    default="gpu",
    show_default=True,
    help="cpu: the engine's CPU build (vLLM: 128-token blocks).",
)
@click.option(
    "--kv-unified/--no-kv-unified", default=None, help="llama.cpp: one cache for all slots."
)
@click.option(
    "--language-model-only",
    is_flag=True,
    help="vLLM --language-model-only: a multimodal model served as text only (its towers "
    "not loaded, no image profiled).",
)
@click.option(
    "--enforce-eager",
    is_flag=True,
    help="vLLM --enforce-eager: no CUDA graphs, so from 0.20 the pool is sized without a "
    "graph estimate.",
)
@click.option(
    "--model-runner",
    type=click.Choice(["v1", "v2"]),
    default=None,
    help="vLLM's model runner as VLLM_USE_V2_MODEL_RUNNER sets it (0: v1, 1: v2); unset: "
    "the release's own rule for the model.",
)
@click.option(
    "--pool",
    default=None,
    help='KV pool as the engine printed it, e.g. "8.11 GiB": gives the token count the engine '
    'prints (llama.cpp: the first "llama_kv_cache: size =" line, the full-attention cache; '
    "SWA layers and recurrent state print lines of their own).",
)
@click.option(
    "--gpu-memory-utilization",
    "utilization",
    type=FRACTION,
    default=None,
    help="vLLM: the fraction of the card the engine may take; with --card-total, gives the "
    "pool vLLM sizes for itself, before any boot (0.17-0.33 read).",
)
@click.option(
    "--mem-fraction-static",
    "static_fraction",
    type=FRACTION,
    default=None,
    help="SGLang: the fraction of the memory free before the weights that SGLang keeps "
    "for weights and pool; with --card-total, gives the pool SGLang sizes for itself "
    "(TP 1 measured).",
)
@click.option(
    "--card-total",
    default=None,
    help='The CUDA total of one card, e.g. "79.19 GiB" (an H100 80GB), as torch reports it.',
)
@click.option(
    "--card-sms",
    type=click.IntRange(min=1),
    default=132,
    show_default=True,
    help="The card's streaming multiprocessors (H100/H200 132): sizes vLLM's sampler buffer "
    "and Marlin's workspaces (--card-sku fills it from the card table).",
)
@click.option(
    "--card-sku",
    default=None,
    metavar="SKU",
    help="The card by name (fakplan cards lists them): fills --card-sms and "
    "--card-capability from the card table where they are not given, and --card-total "
    "with the CUDA total public logs print for it, where they print one (the span of "
    "them all where they differ).",
)
@click.option(
    "--card-platform",
    type=click.Choice(PLATFORMS, case_sensitive=False),
    default=None,
    help="Where the card runs, for --card-sku's total: linux takes the prints made without "
    "a setting of their own (WSL2 and Windows report a total of their own for the same "
    "card); unset, the span of every print.",
)
@click.option(
    "--card-capability",
    "capability",
    default=None,
    callback=lambda _ctx, _param, value: _capability(value),
    metavar="MAJOR.MINOR",
    help='The card\'s CUDA compute capability ("9.0": H100/H200, "8.0": A100, "8.9": L40S): '
    "the kernel vLLM loads a GPTQ, AWQ or compressed-tensors W4A16 checkpoint into keeps "
    "tensors of its own.",
)
@click.option(
    "--revision",
    default=None,
    help="Hub revision of MODEL (a branch, tag or commit; default main).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (schema fakplan.kv/1).")
@click.option("--list", "list_catalog", is_flag=True, help="List the built-in catalog's model ids.")
def kv(
    model: str | None,
    pool: str | None,
    as_json: bool,
    list_catalog: bool,
    utilization: float | None,
    static_fraction: float | None,
    card_total: str | None,
    card_sms: int,
    card_sku: str | None,
    card_platform: str | None,
    revision: str | None,
    **query: Any,
) -> None:
    """A model's KV cost per rank on one engine: per token, per sequence, and a pool's tokens.

    MODEL is a GGUF path, an HF folder or config.json, a Hugging Face id (the Hub
    unless offline, else its cache), or a catalog id (fakplan kv --list). Examples:

    \b
      fakplan kv meta-llama/Llama-3.1-8B-Instruct --tp 8
      fakplan kv deepseek-ai/DeepSeek-V3 --engine sglang --kv-dtype fp8_e4m3
      fakplan kv model.gguf --engine llamacpp --kv-dtype q8_0 --pool "4352 MiB"
      fakplan kv ./hf-tiny --device cpu --dtype float32 --pool "1 GiB"
      fakplan kv meta-llama/Llama-3.1-8B-Instruct --engine-version 0.19.0 \\
        --gpu-memory-utilization 0.95 --card-total "79.19 GiB" --max-model-len 8192
      fakplan kv meta-llama/Llama-3.1-8B-Instruct --engine sglang \\
        --mem-fraction-static 0.88 --card-total "79.19 GiB"
    """
    # the other options are named as KvQuery's fields: they pass through as they are
    if list_catalog:
        for model_id in catalog_ids():
            click.echo(model_id)
        return
    if model is None:
        raise click.UsageError(
            "give MODEL (a GGUF path, an HF folder or config.json, a Hugging Face id, or a "
            "catalog id)"
        )
    if card_platform is not None and (card_sku is None or card_total is not None):
        raise click.UsageError(
            "--card-platform picks among the totals public logs print for --card-sku; "
            "give --card-sku without --card-total"
        )
    if card_sku is not None:
        card_sms = _from_card_table(card_sku, card_sms, query)
    geometry, source = resolve_model(model, revision=revision)
    spec = _speculative(query.pop("speculative"), query["spec_tokens"], query["engine"])
    if spec is not None:
        query.update(spec)
    engine = ENGINES[query["engine"]]
    for option, takes in _ENGINE_OPTIONS:
        if query[option] and not getattr(engine, takes):
            raise click.UsageError(
                f"--{option.replace('_', '-')} is vLLM's flag; engine {query['engine']} has "
                "none fakplan models"
            )
    kv_query = KvQuery(geometry=geometry, **query)
    breakdown = _breakdown(kv_query)
    notices = (
        [unstated_release(breakdown.engine, breakdown.engine_version)]
        if query["engine_version"] is None and breakdown.engine_version
        else []
    )
    over_ranks = ENGINES[kv_query.engine].pool_over_ranks
    if pool is not None and kv_query.tp * kv_query.pp > 1 and over_ranks:
        notices.append(f"--pool with {kv_query.tp * kv_query.pp} ranks: {over_ranks}")
    interval = _pool_bytes(pool)
    sizing: SizedPool | None = None
    fractions = {
        field: value
        for field, value in (
            ("gpu_memory_utilization", utilization),
            ("mem_fraction_static", static_fraction),
        )
        if value is not None
    }
    if fractions or card_total is not None:  # --card-sku alone fills only SMs and capability
        if len(fractions) > 1:
            raise click.UsageError(
                "give one of --pool, --gpu-memory-utilization and --mem-fraction-static"
            )
        if interval is not None:
            given = " or ".join(_option(f) for f in fractions) or "--card-total"
            raise click.UsageError(f"give --pool or {given}, not both")
        stated_seqs = click.get_current_context().get_parameter_source("max_num_seqs")
        seqs = query["max_num_seqs"] if stated_seqs == ParameterSource.COMMANDLINE else None
        total = _card_total(card_total, card_sku, card_platform)
        sizing = _pool_report(kv_query, fractions, total, card_sms, seqs)
        interval = sizing.pool_interval
    result = None
    pool_bytes = None
    if interval is not None:
        low, pool_bytes, high = interval
        result = printed_pool_tokens(kv_query, low, high)
    stated = click.get_current_context().get_parameter_source("max_num_seqs")
    contract = kv_contract(kv_query, breakdown) if stated == ParameterSource.COMMANDLINE else None
    if as_json:
        report = kv_json(kv_query, breakdown, pool_bytes, result)
        if contract is not None:
            report.update({k: v for k, v in contract.items() if k != "contract_lines"})
        if interval is not None:
            report["pool_interval"] = [interval[0], interval[2]]
        if sizing is not None:
            report.update(sizing.json())
        report["model_source"] = {**source.json(), "seen": list(source.seen)}
        report["notices"] = notices
        click.echo(json.dumps(report, indent=2, allow_nan=False))
    else:
        _print(kv_query, breakdown, pool_bytes, result)
        if contract is not None:
            for line in contract["contract_lines"]:
                click.echo(line)
        if sizing is not None:
            for line in sizing.lines():
                click.echo(f"  {line}")
        for note in [*notices, *source.notes, *source.seen]:
            click.echo(f"  note: {note}")


def _speculative(text: str | None, spec_tokens: int, engine: str) -> dict[str, Any] | None:
    """--speculative-config: the method, the tokens per step and, for a draft with attention
    layers of its own, its model (resolved as MODEL is)."""
    if text is None:
        return None
    method, tokens, draft = speculative_config(text)
    if spec_tokens and spec_tokens != tokens:
        raise click.UsageError(
            f"--spec-tokens {spec_tokens} and num_speculative_tokens {tokens} differ: give one"
        )
    geometry = None
    methods = ENGINES[engine].draft_model_methods if engine in ENGINES else ()
    if draft is not None and method.lower() in methods:
        geometry = resolve_model(draft)[0]  # only an engine that counts its layers reads it
    return {"spec_method": method, "spec_tokens": tokens, "draft": geometry}


def _from_card_table(sku: str, sms: int, query: dict[str, Any]) -> int:
    """--card-sku: the table's SMs and compute capability where the options leave them."""
    row = card_sku(sku)
    if row is None:
        raise click.BadParameter(unknown_sku(sku), param_hint="'--card-sku'")
    if query["capability"] is None:
        query["capability"] = row.capability
    query["device_name"] = row.device_name
    source = click.get_current_context().get_parameter_source("card_sms")
    return row.sms if row.sms is not None and source != ParameterSource.COMMANDLINE else sms


def _capability(value: str | None) -> str | None:
    if value is not None and re.fullmatch(CAPABILITY_PATTERN, value) is None:
        raise click.BadParameter(
            f"{value!r}: major.minor, e.g. 9.0 (H100, H200) or 8.0 (A100)",
            param_hint="'--card-capability'",
        )
    return value


def _option(field: str) -> str:
    return "--" + field.replace("_", "-")


def _card_total(
    card_total: str | None, sku: str | None, platform: str | None = None
) -> tuple[int, int, str] | None:
    """The card's total as an interval, with what it came from: --card-total as the
    interval its digits allow, else the CUDA total public logs print for --card-sku (on
    --card-platform, where given)."""
    if card_total is not None:
        try:
            low, _, high = printed_interval(card_total)
        except UnitsError as exc:
            raise click.BadParameter(str(exc), param_hint="'--card-total'") from None
        return low, high, f"--card-total {card_total}"
    found = None if sku is None else cuda_total(sku)
    if found is None:
        return None
    if platform is not None:
        there = found.on(platform)
        if there is None:
            raise click.BadParameter(
                f"no public print of an {found.sku}'s CUDA total was made on {platform} "
                f"({found.sentence()}); give --card-total",
                param_hint="'--card-platform'",
            )
        found = there
    low, high = found.interval
    return low, high, f"--card-sku {found.sku}: {found.sentence()}"


def _pool_report(
    query: KvQuery,
    fractions: dict[str, float],
    card: tuple[int, int, str] | None,
    sms: int,
    max_num_seqs: int | None,
) -> SizedPool:
    """The pool the engine sizes itself: the fraction given must be its own (its
    ``sizing_field``), with the card's total as an interval (``_card_total``)."""
    engine = ENGINES[query.engine]
    own = engine.sizing_field
    if not fractions:
        flag = _option(own) if own else "a fraction"
        raise click.UsageError(f"give both {flag} and --card-total")
    ((field, fraction),) = fractions.items()
    if field != own:
        takers = " or ".join(
            f"{e.title or n}'s pool (--engine {n})"
            for n, e in modelled().items()
            if e.sizing_field == field
        )
        raise click.UsageError(f"{_option(field)} sizes {takers}")
    if card is None:
        known = ", ".join(t.sku for t in CUDA_TOTALS)
        raise click.UsageError(
            f'give both {_option(field)} and --card-total (CUDA\'s total, e.g. "79.19 GiB" '
            f"on an H100 80GB), or --card-sku of a card whose CUDA total public logs print "
            f"({known})"
        )
    low, high, text = card
    return SizedPool.over_card(
        lambda total: engine.size_pool(
            query, fraction, total, text, sms=sms, max_num_seqs=max_num_seqs
        ),
        (low, high),
    )


def _breakdown(query: KvQuery) -> KvBreakdown:
    """The engine's arithmetic; a release it does not model is a bad --engine-version."""
    try:
        return kv_breakdown(query)
    except ReleaseError as exc:
        raise click.BadParameter(str(exc), param_hint="'--engine-version'") from None


def _print(
    query: KvQuery, b: KvBreakdown, pool_bytes: int | None, result: PoolResult | None
) -> None:
    console = Console(highlight=False)
    g = query.geometry
    console.print(
        Text(
            f"{g.architecture} ({g.source}) on {b.engine} {b.engine_version}, KV {b.dtype}, "
            f"TP {query.tp} x PP {query.pp}",
            style="bold",
        )
    )
    table = Table(show_header=True, header_style="bold")
    table.add_column("component")
    table.add_column("B/token/rank", justify="right")
    table.add_column("B/seq", justify="right")
    table.add_column("derivation", overflow="fold")
    for r in (ComponentRecord.of(c, b.page_tokens) for c in b.components):
        table.add_row(
            Text(r.name), f"{r.bytes_per_token:,}", f"{r.bytes_per_seq:,}", Text(r.derivation)
        )
    table.add_row(
        Text("total", style="bold"),
        f"{exact_number(b.rate):,}",
        f"{b.per_seq_bytes:,}",
        "",
    )
    console.print(table)
    for rule in (*b.rules, *b.notes, *g.notes):
        console.print(Text(f"  {rule}"))
    if result is not None and pool_bytes is not None:
        console.print(
            Text(
                f"pool {pool_bytes:,} B -> {result.tokens:,} tokens"
                + (f", {result.num_blocks:,} blocks" if result.num_blocks is not None else "")
            )
        )
        console.print(Text(f"  {result.derivation}"))
