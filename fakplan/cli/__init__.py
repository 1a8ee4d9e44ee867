"""The ``fakplan`` command: argument handling and output only.

One module per sub-command; each is registered in ``COMMANDS`` below.
Exit status is decided in one place (``_Group.invoke`` and ``exit_with``):
0 ok, 1 a gate or prediction failed, 2 bad input (one line on stderr naming
file, line and field; no traceback).
"""

from __future__ import annotations

import errno
import importlib
import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fakplan.errors import FakplanError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])


def speculative_config(text: str) -> tuple[str, int, str | None]:
    """``--speculative-config`` as vLLM takes it: (method, tokens a step, draft model)."""
    import json

    hint = "'--speculative-config'"
    try:
        found = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON ({exc.msg} at {exc.pos})", param_hint=hint) from None
    if not isinstance(found, dict):
        raise click.BadParameter('a JSON object, e.g. {"method": "mtp", ...}', param_hint=hint)
    method, tokens, draft = (
        found.get("method"),
        found.get("num_speculative_tokens"),
        found.get("model"),
    )
    if not isinstance(method, str) or not method:
        raise click.BadParameter('"method": a string (mtp, eagle3, ngram, ...)', param_hint=hint)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise click.BadParameter('"num_speculative_tokens": an integer >= 1', param_hint=hint)
    if draft is not None and not isinstance(draft, str):
        raise click.BadParameter('"model": a path or a Hugging Face id', param_hint=hint)
    return method, tokens, draft


SPECULATIVE_HELP = (
    'vLLM\'s --speculative-config, e.g. \'{"method": "mtp", "num_speculative_tokens": 2}\' '
    'or \'{"method": "eagle3", "model": "org/draft", "num_speculative_tokens": 3}\''
)


def out_option(help_text: str) -> Callable[[F], F]:
    """``-o/--out DIR``: the folder of compiled records, the same for every command that writes one."""
    return click.option(
        "-o",
        "--out",
        "out_dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("out"),
        show_default=True,
        help=help_text,
    )


class FiniteRange(click.FloatRange):
    """A float option in a range, NaN and the infinities refused: NaN compares false with
    both bounds, so a plain FloatRange lets it through to the arithmetic."""

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        number: float = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def json_option(help_text: str) -> Callable[[F], F]:
    """``--json``: the command's result as one JSON document on stdout (documented schema)."""
    return click.option("--json", "as_json", is_flag=True, help=help_text)


gates_option = click.option(
    "--gates",
    "gates_dir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Folder of operator gates (*.py) to run with the built-ins "
    "[default: gates/ next to each shape's folder].",
)
"""``--gates DIR``: the operator gates, found as ``fakplan gate`` finds them."""


records_option = click.option(
    "--records",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Folder of compiled records (fakplan compile -o DIR): the verdicts come from "
    "DIR/<name>/plan.json.",
)
"""``--records DIR``: where metrics and report read the verdicts recorded so far."""

templates_option = click.option(
    "--templates",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Your own templates folder (same layout as the built-in templates/).",
)


def usage_line(exc: click.UsageError) -> str:
    """``fakplan kv: --mem-fraction-static: 'nan' is not a finite number (fakplan kv
    --help)``: what was wrong, and where the command's options are told."""
    where = exc.ctx.command_path if exc.ctx is not None else "fakplan"
    message = exc.format_message().replace("\n", " ")
    return f"{where}: {message} ({where} --help)"


class _Group(click.Group):
    """Loads sub-commands on demand (``COMMANDS``) and maps fakplan's errors to exit 2
    with one line, in one place."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        command = getattr(importlib.import_module(entry[0]), entry[1])
        assert isinstance(command, click.Command)
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from the registry's help lines, without importing a command."""
        limit = formatter.width - 6 - max(len(name) for name in COMMANDS)
        rows = [
            (name, click.Command(name, help=text).get_short_help_str(limit))
            for name, (_, _, text) in COMMANDS.items()
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def main(
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's main, with a usage error told in one line like every other bad input
        (click prints the usage, a hint and the error on four)."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except click.UsageError as exc:
            click.echo(usage_line(exc), err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # a reader that went away (| head): quietly, as click
                # the flush at exit would fail again: stdout goes to devnull (Python's docs)
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                sys.exit(1)
            raise
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FakplanError as exc:
            click.echo(str(exc), err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except OSError as exc:  # a file the input names that the system will not give us
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"{where}{exc.strerror or exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="fakplan")
@click.option(
    "--offline",
    is_flag=True,
    help="Resolve Hugging Face ids from the local cache only, never the Hub (as "
    "HF_HUB_OFFLINE=1 does).",
)
def main(offline: bool) -> None:
    """fakplan: a capacity compiler for LLM inference endpoints.

    Write an endpoint's shape in YAML (model, card, the weights/KV pair, slots,
    window, KV dtype, engine); fakplan derives the KV arithmetic, refuses
    shapes that cannot work, renders the launch files and records predictions
    that the boot ledger and live probes later hold or kill.

    \b
    Start with:
      fakplan plan shapes/example.yaml         the derivation, gates, predictions
      fakplan compile shapes/ -o out           plan.json + env file per shape
      fakplan schema > shape.schema.json       for editor completion

    Paths inside a shape (model, launch.weights, ceiling.ledger) are read
    against the shape file's folder, in every command; paths on the command
    line against the working directory. A model that is no path is a Hugging
    Face id (org/name), read as the engines read it: the Hub unless offline,
    else its cache (HF_HOME, HF_HUB_CACHE), else the built-in catalog.

    Exit status: 0 ok, 1 a gate or prediction failed, 2 bad input.
    """
    if offline:  # fakplan.hub reads the environment at each call, as the engines would
        os.environ["HF_HUB_OFFLINE"] = "1"


# The one registry of sub-commands: name -> (module, attribute, the first line of its
# help). Each module is imported only when its command runs, so `fakplan --help` and
# `fakplan plan` never load httpx, numpy or the probes; a test keeps the help lines equal
# to the commands' own.
COMMANDS: dict[str, tuple[str, str, str]] = {
    "plan": (
        "fakplan.cli.plan",
        "plan",
        "Print a shape's derivation: rate, contract, tokens backed, pair, ceiling, gates.",
    ),
    "compile": (
        "fakplan.cli.compile",
        "compile_",
        "Compile shapes (files or folders of *.yaml) into DIR/<name>/.",
    ),
    "schema": (
        "fakplan.cli.schema",
        "schema",
        "Print the JSON Schema of a shape file (point your editor's YAML plugin at it).",
    ),
    "fit": (
        "fakplan.cli.fit",
        "fit",
        "What fits on these cards: per window, the most sessions every gate passes.",
    ),
    "kv": (
        "fakplan.cli.kv",
        "kv",
        "A model's KV cost per rank on one engine: per token, per sequence, and a pool's tokens.",
    ),
    "gate": (
        "fakplan.cli.gate",
        "gate",
        "Run every gate over shapes (files or folders of *.yaml): one line per gate per shape.",
    ),
    "init": (
        "fakplan.cli.init",
        "init",
        "Scaffold DIRECTORY: shapes/ with an example shape, gates/ with an example operator "
        "gate and the pytest wiring, a CI workflow and a README.",
    ),
    "ledger": (
        "fakplan.cli.ledger",
        "ledger",
        "Read an engine's boot log (plain or gzip): KV tokens and bytes, weights, free memory.",
    ),
    "verify": (
        "fakplan.cli.verify",
        "verify",
        "Close SHAPE's ledger predictions against the boot log LOG.",
    ),
    "budget": (
        "fakplan.cli.budget",
        "budget",
        "What this machine's cards hold (NVML), or host RAM without a GPU.",
    ),
    "cards": (
        "fakplan.cli.cards",
        "cards",
        "The cards fakplan knows by card.sku: CUDA total, bandwidth, peaks, SMs, capability, link.",
    ),
    "probe": (
        "fakplan.cli.probe",
        "probe",
        "Probe a deployed endpoint and record verdicts on the shape's live predictions.",
    ),
    "metrics": (
        "fakplan.cli.metrics",
        "metrics",
        "Print each shape's plan as Prometheus metrics (text exposition format 0.0.4).",
    ),
    "report": (
        "fakplan.cli.report",
        "report",
        "Write one static HTML page: per shape, its card as a bar, its gates and verdicts.",
    ),
    "rules": (
        "fakplan.cli.rules",
        "rules",
        "Print Prometheus alert rules comparing each endpoint's engine metrics with its plan.",
    ),
    "diff": (
        "fakplan.cli.diff",
        "diff",
        "What a shape change moves and what it costs, in words a reviewer reads.",
    ),
}
