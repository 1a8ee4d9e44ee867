"""Render a plan into the files an operator deploys.

Every value that reaches a rendered file goes through a filter made for its
context: ``shq`` for a shell word, ``comment`` for a header comment. The
environment is ``StrictUndefined`` so a template typo fails loudly.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
from jinja2.loaders import split_template_path

from fakplan.cluster import cluster_facts
from fakplan.engines import ENGINES
from fakplan.errors import FakplanError
from fakplan.files import read_bounded
from fakplan.kubernetes import manifests
from fakplan.plan import Plan
from fakplan.shape import LoadedShape

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")


def comment_safe(value: Any) -> str:
    """Text for one comment line: no character that could end the line."""
    return _CONTROL.sub(" ", str(value))


DIGEST_LINE = re.compile(r"^# Record: plan\.json sha256 ([0-9a-f]{64})\b", re.MULTILINE)


def record_digest(record_text: str) -> str:
    """The digest a header carries of the plan.json it was rendered with: a writer stopped
    between plan.json and its headers leaves headers whose digest is not plan.json's."""
    return hashlib.sha256(record_text.encode()).hexdigest()


def shell_word(value: Any) -> str:
    return shlex.quote(str(value))


def shell_join(words: Iterable[Any]) -> str:
    return " ".join(shlex.quote(str(w)) for w in words)


def default_templates() -> Path:
    """Templates shipped in the wheel, or the source tree's ``templates/``."""
    shipped = Path(str(resources.files("fakplan"))) / "templates"
    if shipped.is_dir():
        return shipped
    return Path(__file__).resolve().parent.parent / "templates"


MAX_TEMPLATE = 1 << 20  # a template is a few KiB; an operator's own folder is read as any input


class _BoundedLoader(jinja2.FileSystemLoader):
    """Jinja's file loader, reading each template through fakplan's bounded reader: a
    regular file of at most ``MAX_TEMPLATE`` bytes, UTF-8."""

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        pieces = split_template_path(template)
        for folder in self.searchpath:
            path = Path(folder, *pieces)
            if path.is_file():
                break
        else:
            raise jinja2.TemplateNotFound(template)
        raw = read_bounded(path, MAX_TEMPLATE, FakplanError, "a template")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FakplanError(
                f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        mtime = path.stat().st_mtime

        def uptodate() -> bool:
            try:
                return path.stat().st_mtime == mtime
            except OSError:
                return False

        return text, os.path.normpath(path), uptodate


_ENVIRONMENTS: dict[str, jinja2.Environment] = {}


def environment(templates: Path | None = None) -> jinja2.Environment:
    """The template environment of a folder, built once per process: jinja compiles each
    template once and checks it is up to date (its mtime) on every later use."""
    folder = templates or default_templates()
    key = str(folder.resolve())
    if key not in _ENVIRONMENTS:
        _ENVIRONMENTS[key] = _environment(folder)
    return _ENVIRONMENTS[key]


def _environment(folder: Path) -> jinja2.Environment:
    if not folder.is_dir():
        raise FakplanError(f"{folder}: templates folder not found")
    env = jinja2.Environment(
        loader=_BoundedLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=False,
    )
    env.filters["shq"] = shell_word
    env.filters["shjoin"] = shell_join
    env.filters["comment"] = comment_safe
    return env


KUBERNETES_DIR = "kubernetes"  # <name>/kubernetes/: the manifests beside the scripts


@dataclass(frozen=True)
class RenderedFile:
    name: str
    text: str
    executable: bool = False


def render_plan(
    loaded: LoadedShape, plan: Plan, templates: Path | None, folder: Path
) -> list[RenderedFile]:
    """The files of one compiled shape that go into ``folder``, in memory (nothing written).

    ``<engine>/env.j2`` renders ``<name>.env``; ``<engine>/serve.sh.j2`` renders
    one script per node role of the launch (``serve.sh`` on one node). Where the argv
    names paths relative to the shape's folder, the scripts run the engine from there,
    found relative to the script itself so the two trees can move together.
    """
    env = environment(templates)
    shape_dir = os.path.relpath(loaded.path.resolve().parent, folder.resolve())
    digest = record_digest(plan.to_json())
    files = [
        RenderedFile(
            f"{plan.name}.env",
            _render(env, f"{plan.engine}/env.j2", plan=plan, record_digest=digest),
        )
    ]
    for role in plan.launch.roles:
        text = _render(
            env,
            f"{plan.engine}/serve.sh.j2",
            plan=plan,
            role=role,
            shape_dir=shape_dir,
            record_digest=digest,
        )
        files.append(RenderedFile(role.file, text, executable=True))
    facts = cluster_facts(
        loaded.shape, plan.weights_budget_bytes, ENGINES[loaded.shape.engine].shm_bytes
    )
    if facts is not None:
        for name, text in manifests(loaded, plan, facts).items():
            files.append(RenderedFile(f"{KUBERNETES_DIR}/{name}", text))
    return files


def _render(env: jinja2.Environment, name: str, **context: Any) -> str:
    try:
        return env.get_template(name).render(context)
    except jinja2.TemplateNotFound as exc:
        raise FakplanError(
            f"template {exc.name} not found in {env.loader.searchpath if isinstance(env.loader, jinja2.FileSystemLoader) else 'the templates'}"
        ) from None
    except jinja2.TemplateError as exc:
        raise FakplanError(f"template {name}: {exc}") from None
