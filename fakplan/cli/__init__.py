"""The ``fakplan`` command: argument handling and output only.

One module per sub-command; each is registered in ``COMMANDS`` below.
Exit status is decided in one place (``_Group.invoke`` and ``exit_with``):
0 ok, 1 a gate or prediction failed, 2 bad input (one line on stderr naming
file, line and field; no traceback).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from fakplan.errors import FakplanError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

F = TypeVar("F", bound=Callable[..., Any])


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


templates_option = click.option(
    "--templates",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Your own templates folder (same layout as the built-in templates/).",
)


class _Group(click.Group):
    """Maps fakplan's errors to exit 2 with one line, in one place."""

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
def main() -> None:
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
    line against the working directory.

    Exit status: 0 ok, 1 a gate or prediction failed, 2 bad input.
    """


def _register() -> None:
    from fakplan.cli import budget, diff, gate, init, kv, ledger, plan, probe, schema, verify
    from fakplan.cli import compile as compile_command

    commands: list[click.Command] = [  # the one registry of sub-commands
        plan.plan,
        compile_command.compile_,
        schema.schema,
        kv.kv,
        gate.gate,
        init.init,
        ledger.ledger,
        verify.verify,
        budget.budget,
        probe.probe,
        diff.diff,
    ]
    for command in commands:
        main.add_command(command)


_register()
