"""``fakplan probe``: live probes of a deployed shape; verdicts recorded beside its predictions."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import click
import httpx
from rich.console import Console
from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table
from rich.text import Text

from fakplan.cli import EXIT_FAILED, EXIT_OK, FiniteRange, out_option
from fakplan.errors import ProbeError, inert
from fakplan.files import write_atomic
from fakplan.fit import proven_plan
from fakplan.plan import Plan, compile_plan
from fakplan.predict import Verdict
from fakplan.probes import (
    DEFAULT_PROBES,
    MIN_DECODE_TOKENS,
    PROBES,
    BoundaryResult,
    Calibration,
    CapacityResult,
    Endpoint,
    ProbeOptions,
    ProbeRun,
    RateResult,
    run_document,
    run_probes,
    verdicts_for,
)
from fakplan.probes.http import check_url
from fakplan.record import (
    PROBES_DIR,
    read_record,
    record_path,
    record_verdicts,
    reserve,
    write_unrecorded,
)
from fakplan.shape import LoadedShape, load_shape


def _only(value: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in PROBES]
    if unknown or not names:
        raise click.BadParameter(
            f"{', '.join(unknown) or 'nothing'}: expected a comma-separated list of "
            f"{', '.join(PROBES)}",
            param_hint="--only",
        )
    return names


def _api_key(variable: str | None) -> str | None:
    """The key the variable holds, trimmed; refused (never shown) when a header cannot carry it."""
    if variable is None:
        return None
    value = (os.environ.get(variable) or "").strip()
    if not value:
        raise ProbeError(
            f"--api-key-env {variable}: that environment variable is not set or is empty "
            "(--api-key-env names the variable that holds the key, never the key itself)"
        )
    if not all("!" <= c <= "~" for c in value):
        raise ProbeError(
            f"--api-key-env {variable}: the key holds a character an HTTP header cannot carry "
            "(a bearer token is printable ASCII without spaces)"
        )
    return value


class _Bars:
    """Rich progress on a terminal (stderr): one line per probe."""

    def __init__(self, progress: RichProgress) -> None:
        self.progress = progress
        self.tasks: dict[str, Any] = {}

    def begin(self, probe: str, steps: int) -> None:
        self.tasks[probe] = self.progress.add_task(probe, total=steps)

    def step(self, probe: str, text: str) -> None:
        self.progress.update(self.tasks[probe], advance=1, description=text)

    def end(self, probe: str, status: str) -> None:
        task = self.tasks[probe]
        total = self.progress.tasks[task].total or 1
        self.progress.update(task, completed=total, description=f"{probe}: {status}")


class _Lines:
    """Progress where stderr is no terminal (CI logs, pipes): a line as each probe starts
    and one as it ends, so a long run is never silent."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    def begin(self, probe: str, steps: int) -> None:
        self.started[probe] = time.monotonic()
        click.echo(f"fakplan probe: {probe} ...", err=True)

    def step(self, probe: str, text: str) -> None:
        pass  # a line per repetition would drown the log; the end line says how long

    def end(self, probe: str, status: str) -> None:
        took = time.monotonic() - self.started.get(probe, time.monotonic())
        click.echo(f"fakplan probe: {probe} {status} ({took:.1f} s)", err=True)


@click.command()
@click.argument("shape", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--url",
    required=True,
    help="The endpoint's root or its /v1, e.g. http://10.0.0.5:8000/v1.",
)
@click.option(
    "--only",
    default=",".join(DEFAULT_PROBES),
    show_default=True,
    help="Probes to run, comma-separated; decode-load runs only when named.",
)
@click.option(
    "--api-key-env",
    metavar="VAR",
    default=None,
    help="Environment variable holding the API key (sent as a bearer token, never written).",
)
@out_option(
    "Folder of compiled records: verdicts go to <name>/plan.json, figures to <name>/probes/."
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print the run as JSON (schema fakplan.probe/1)."
)
@click.option(
    "--repeat",
    type=click.IntRange(1, 50),
    default=3,
    show_default=True,
    help="Repetitions of each rate probe (median and spread).",
)
@click.option(
    "--max-tokens",
    type=int,
    default=512,
    show_default=True,
    help=f"Tokens generated per decode run (at least {MIN_DECODE_TOKENS}).",
)
@click.option(
    "--timeout",
    type=FiniteRange(min=1.0, max=86_400.0),
    default=600.0,
    show_default=True,
    help="Seconds each probe may take in all (connect at most 10 s).",
)
@click.option(
    "--any-endpoint",
    is_flag=True,
    help="Probe even when the endpoint's engine or served model (GET /v1/models) is not "
    "the shape's (a proxy that renames it); the mismatch is then a note in the record.",
)
def probe(
    shape: Path,
    url: str,
    only: str,
    api_key_env: str | None,
    out_dir: Path,
    as_json: bool,
    repeat: int,
    max_tokens: int,
    timeout: float,
    any_endpoint: bool,
) -> None:
    """Probe a deployed endpoint and record verdicts on the shape's live predictions.

    \b
    kv         the KV tokens the engine states live (vLLM's /metrics); closes
               "kv-tokens" and "sessions-at-window" as the boot log would
    calibrate  chars/token of the probe corpus, counted for free (tokenize
               route, or the count an above-window refusal names)
    boundary   max_num_seqs concurrent prompts of max_model_len - 32 tokens at
               once: how many are served in full closes "boundary" (capacity);
               how many repeat the marker at their head is reported (model quality)
    decode     tokens/s over --max-tokens, streamed and not (closes "decode-tps-one",
               the rate predicted from the card, and decode expectations)
    decode-load
               every slot decoding --max-tokens at once, each from a prompt that
               fills its window: tokens/s per session (closes "decode-tps", the
               worst case the plan predicts); a full load, so run only when named
    prefill    tokens/s of a cold window-sized prompt (closes "prefill-tps" and
               prefill expectations)

    The endpoint must be the shape's: GET /v1/models must list the model the
    shape serves (launch.served_model_name, else launch.weights or model) and the
    server must be the shape's engine, or the run stops with exit 2 before any
    probe (--any-endpoint overrides). Progress goes to stderr: bars on a
    terminal, a line as each probe starts and ends otherwise.

    Verdicts go into DIR/<name>/plan.json and the rendered headers; the run's
    figures into DIR/<name>/probes/<UTC time>.json. Exit 0 when every
    prediction closed held, 1 when one was killed or a probe failed, 2 on bad
    input (shape, URL, options).
    """
    selected, loaded, key = _checked(shape, url, only, api_key_env, max_tokens)
    plan = compile_plan(loaded)
    record = record_path(out_dir, plan.name)
    previous = read_record(record) if record.exists() else None  # a damaged record: exit 2 now
    options = ProbeOptions(
        only=selected,
        repeat=repeat,
        max_tokens=max_tokens,
        timeout_s=timeout,
        any_endpoint=any_endpoint,
    )
    run, endpoint = _measure(loaded, plan, url, key, options)
    # the run is masked already (run_probes); verdicts quote it, and nothing else leaves unmasked
    verdicts = {
        pid: Verdict.model_validate(endpoint.redact(v.model_dump()))
        for pid, v in verdicts_for(run, plan, previous).items()
    }
    failed = bool(run.failures) or any(v.status == "killed" for v in verdicts.values())
    code = EXIT_FAILED if failed else EXIT_OK
    written: list[tuple[Path, str]] = []

    def write_raw(folder: Path) -> None:
        """The run's figures, under the record's lock and before its verdicts: a record
        that fails after them loses nothing, and a kill leaves nothing the next writer
        does not clear (``remove_unwritten``)."""
        raw = reserve(folder / PROBES_DIR / f"{run.id}.json")  # a name no other run can take
        document = run_document(run, options, verdicts, record if verdicts else None, raw, code)
        text = json.dumps(endpoint.redact(document), indent=2, ensure_ascii=False) + "\n"
        try:
            write_atomic(raw, text)
        except BaseException:
            raw.unlink(missing_ok=True)
            raise
        written.append((raw, text))

    if verdicts:
        record_verdicts(loaded, out_dir, verdicts, first=write_raw, prove=proven_plan)
    else:
        write_unrecorded(record.parent, write_raw)
    raw, text = written[0]
    if as_json:
        click.echo(text, nl=False)
    else:
        _print(run, plan, verdicts, raw, record if verdicts else None)
    sys.exit(code)


def _checked(
    shape: Path, url: str, only: str, api_key_env: str | None, max_tokens: int
) -> tuple[tuple[str, ...], LoadedShape, str | None]:
    """Every input refused before a request is sent: the probes, the shape, the URL, the key."""
    selected = _only(only)
    loaded = load_shape(shape)
    if {"decode", "decode-load"} & set(selected) and max_tokens < MIN_DECODE_TOKENS:
        raise ProbeError(
            f"--max-tokens {max_tokens}: a decode figure needs at least {MIN_DECODE_TOKENS} "
            "generated tokens; at 8-9 tokens the inter-token time is first-token noise. "
            "Use the default 512"
        )
    check_url(url)
    return selected, loaded, _api_key(api_key_env)


def _measure(
    loaded: LoadedShape, plan: Plan, url: str, key: str | None, options: ProbeOptions
) -> tuple[ProbeRun, Endpoint]:
    """The run, on a connection pool wide enough for boundary's slots; bars on a terminal.

    The endpoint comes back too: its client is closed, but it still masks the key.
    """
    limits = httpx.Limits(max_connections=max(8, plan.max_num_seqs + 2))
    err = Console(stderr=True, highlight=False)
    with httpx.Client(limits=limits) as client:
        endpoint = Endpoint(
            client, url, api_key=key, connect_timeout_s=min(10.0, options.timeout_s)
        )

        def concurrent() -> httpx.AsyncClient:
            return httpx.AsyncClient(limits=limits)

        if not err.is_terminal:
            return run_probes(loaded, endpoint, concurrent, options, _Lines()), endpoint
        with RichProgress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as bars:
            return run_probes(loaded, endpoint, concurrent, options, _Bars(bars)), endpoint


# ----------------------------------------------------------------------- output

_STATUS = {"ok": "[green]ok[/]", "failed": "[red]FAILED[/]"}
_VERDICT = {
    "held": "[green]held[/]",
    "killed": "[red]KILLED[/]",
    "inside noise": "[yellow]inside noise[/]",
    "unverifiable": "[yellow]unverifiable[/]",
}


def _figure(result: Any) -> str:
    if isinstance(result, CapacityResult):
        if result.kv_tokens is None:
            return "no figure: " + "; ".join(result.notes)
        blocks = (
            f", {result.num_blocks:,} blocks of {result.block_size}"
            if result.num_blocks is not None and result.block_size is not None
            else ""
        )
        return f"{result.kv_tokens:,} KV tokens stated{blocks} (GET {result.route})"
    if isinstance(result, Calibration):
        return (
            f"{result.chars_per_token:g} chars/token ({result.tokens:,} tokens in "
            f"{result.chars:,} chars, by {result.method} {result.route})"
        )
    if isinstance(result, BoundaryResult):
        latency = f"; latency median {result.latency_s['median']:g} s" if result.latency_s else ""
        return (
            f"{result.answered}/{result.slots} served in full at {result.target_tokens:,} "
            f"tokens, {result.refused} refused, {result.preempted} preempted{latency}; "
            f"{result.retrieved}/{result.slots} repeated the marker (model quality)"
        )
    if isinstance(result, RateResult):
        if result.figure is None:
            return "no figure"
        return f"{result.figure:,.1f} t/s ({result.basis}, noise ±{result.noise_pct:.1f} %)"
    return ""


def _shown(text: str, style: str = "") -> Text:
    """Text an endpoint sent (a model id, a note quoting an answer) made inert for the
    terminal: an escape sequence or a newline is shown, never acted on."""
    return Text(inert(text), style=style)


def _print(
    run: ProbeRun, plan: Plan, verdicts: dict[str, Verdict], raw: Path, record: Path | None
) -> None:
    console = Console(highlight=False, soft_wrap=False)
    server = run.server or {}
    console.print(
        _shown(
            f"{run.name}  {run.url}  {server.get('flavour', 'unknown engine')}"
            + (f" ({server['evidence']})" if server.get("evidence") else "")
            + (f"  model {server['model']}" if server.get("model") else ""),
            style="bold",
        )
    )
    table = Table(show_header=True, header_style="bold", expand=False)
    table.add_column("probe")
    table.add_column("status")
    table.add_column("figure", overflow="fold")
    for name, outcome in run.probes.items():
        label = name if outcome.requested else f"{name} (for sizing)"
        detail = outcome.error if outcome.status == "failed" else _figure(outcome.result)
        table.add_row(_shown(label), _STATUS[outcome.status], _shown(detail or ""))
    console.print(table)
    for name, outcome in run.probes.items():
        result = outcome.result
        notes = list(getattr(result, "notes", ()) or ())
        bound = getattr(result, "bound_by", None)
        if bound:
            console.print(_shown(f"  {name}: bound by {bound}"))
        for note in notes:
            console.print(_shown(f"  {name}: {note}"))
    for note in (*run.notes, *server.get("notes", ())):
        console.print(_shown(f"  note: {note}"))
    if verdicts:
        console.print("verdicts:")
        for pid, verdict in verdicts.items():
            console.print(f"  {_VERDICT[verdict.status]} ", end="")
            console.print(_shown(f"{pid}: {verdict.note}"))
    open_ids = [
        p.id for p in plan.predictions if p.closed_by.startswith("probe") and p.id not in verdicts
    ]
    if open_ids:
        console.print(_shown(f"not closed by this run: {', '.join(open_ids)}"))
    console.print(
        _shown(f"figures: {raw}" + (f"; verdicts recorded in {record}" if record else ""))
    )
