"""``fakplan init``: scaffold a shapes repository (shapes/, gates/, CI, README)."""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

import click
import jinja2

from fakplan.cli import EXIT_OK, json_option
from fakplan.errors import FakplanError
from fakplan.files import write_atomic
from fakplan.init import Requirement, ci_requirement, yaml_quote
from fakplan.render import default_templates, environment

# destination in DIR -> template under templates/init/; a ``.j2`` template is
# rendered with ``version`` (fakplan's), ``requirement`` (what CI pip-installs)
# and ``origin`` (where that came from); every other file is copied as it is.
# ``github/`` has no dot in the templates so the wheel ships it like any folder.
SCAFFOLD: tuple[tuple[str, str], ...] = (
    ("shapes/example.yaml", "init/shapes/example.yaml"),
    ("gates/headroom.py", "init/gates/headroom.py"),
    ("gates/test_shapes.py", "init/gates/test_shapes.py"),
    ("gates/conftest.py", "init/gates/conftest.py"),
    (".github/workflows/fakplan.yml", "init/github/workflows/fakplan.yml.j2"),
    ("README.md", "init/README.md.j2"),
    (".gitignore", "init/gitignore"),
)


def scaffold_files(
    requirement: Requirement, templates: Path | None = None
) -> list[tuple[str, str]]:
    """``(relative path, text)`` of every scaffolded file; nothing written."""
    folder = templates or default_templates()
    env = environment(folder)
    env.filters["yamlq"] = yaml_quote
    context = {
        "version": metadata.version("fakplan"),
        "requirement": requirement.spec,
        "origin": requirement.origin,
    }
    out: list[tuple[str, str]] = []
    for target, source in SCAFFOLD:
        try:
            if source.endswith(".j2"):
                text = env.get_template(source).render(context)
            else:
                text = (folder / source).read_text(encoding="utf-8")
        except (OSError, jinja2.TemplateError) as exc:
            raise FakplanError(f"{folder / source}: init template unusable ({exc})") from None
        out.append((target, text))
    return out


@click.command()
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite files that already exist.")
@click.option(
    "--install",
    "install",
    metavar="SPEC",
    default=None,
    help="The pip requirement CI installs fakplan with, e.g. "
    "'fakplan @ git+https://github.com/OWNER/fakplan@COMMIT' "
    "[default: how this fakplan was installed, if CI can reach it].",
)
@json_option(
    "Print what was written as JSON (schema fakplan.init/1): the folder, each file, and "
    "the requirement the workflow installs with where it came from."
)
def init(directory: Path, force: bool, install: str | None, as_json: bool) -> None:
    """Scaffold DIRECTORY: shapes/ with an example shape, gates/ with an example
    operator gate and the pytest wiring, a CI workflow and a README.

    The workflow runs fakplan gate and pytest gates/ on every change to shapes/
    or gates/, and fakplan diff against the base branch on pull requests. It
    installs fakplan with --install SPEC; without it, with the requirement that
    reinstalls this fakplan: its git commit (installed from git), its archive
    URL, or fakplan==VERSION (installed from a package index). A fakplan
    installed from a local folder or file is refused (exit 2): no CI runner
    could install it, so give --install.

    Existing files are never overwritten unless --force is given (exit 2).
    """
    requirement = ci_requirement(install)
    files = scaffold_files(requirement)
    # lexists: a dangling symlink is a file there too, never replaced without --force
    existing = [target for target, _ in files if os.path.lexists(directory / target)]
    if existing and not force:
        more = f" (and {len(existing) - 1} more)" if len(existing) > 1 else ""
        raise FakplanError(
            f"{(directory / existing[0]).as_posix()}: already exists{more}; "
            "fakplan init writes nothing over existing files (--force overwrites)"
        )
    for target, text in files:
        path = directory / target
        try:
            write_atomic(path, text)
        except OSError as exc:
            raise FakplanError(f"{path.as_posix()}: cannot write ({exc.strerror})") from None
        if not as_json:
            click.echo(f"wrote {path.as_posix()}")
    if as_json:
        document = {
            "schema": "fakplan.init/1",
            "folder": directory.as_posix(),
            "written": [(directory / target).as_posix() for target, _ in files],
            "requirement": requirement.spec,
            "origin": requirement.origin,
        }
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        click.echo(
            f"fakplan init: the workflow installs {requirement.spec} ({requirement.origin})",
            err=True,
        )
    sys.exit(EXIT_OK)
