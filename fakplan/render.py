"""Render a plan into the files an operator deploys.

Every value that reaches a rendered file goes through a filter made for its
context: ``shq`` for a shell word, ``comment`` for a header comment. The
environment is ``StrictUndefined`` so a template typo fails loudly.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2

from fakplan.errors import FakplanError
from fakplan.plan import Plan
from fakplan.shape import LoadedShape
from fakplan.units import MIB

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\x85]")


def comment_safe(value: Any) -> str:
    """Text for one comment line: no character that could end the line."""
    return _CONTROL.sub(" ", str(value))


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


def environment(templates: Path | None = None) -> jinja2.Environment:
    folder = templates or default_templates()
    if not folder.is_dir():
        raise FakplanError(f"{folder}: templates folder not found")
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(folder)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        trim_blocks=False,
    )
    env.filters["shq"] = shell_word
    env.filters["shjoin"] = shell_join
    env.filters["comment"] = comment_safe
    return env


@dataclass(frozen=True)
class RenderedFile:
    name: str
    text: str
    executable: bool = False


@dataclass(frozen=True)
class CustomLaunch:
    weights_mib: int
    kv_mib: int
    spec_tokens: int
    args: list[str] = field(default_factory=list)


def _whole_mib(loaded: LoadedShape, value: int, *loc: str) -> int:
    if value % MIB:
        raise loaded.error(
            f"the custom engine's flags take whole MiB; {value:,} B is {value / MIB:.2f} MiB",
            *loc,
        )
    return value // MIB


def custom_launch(loaded: LoadedShape, plan: Plan) -> CustomLaunch:
    """The seed-002 env pair: --vram-kv-mib / --vram-weights-mib and the serving flags."""
    shape = loaded.shape
    weights = _whole_mib(loaded, shape.budget.weights, "budget", "weights")
    kv = _whole_mib(loaded, shape.budget.kv, "budget", "kv")
    args = [
        "--vram-kv-mib",
        str(kv),
        "--vram-weights-mib",
        str(weights),
        "--max-num-seqs",
        str(plan.max_num_seqs),
        "--max-model-len",
        str(plan.max_model_len),
        "--kv-cache-dtype",
        plan.kv_cache_dtype,
    ]
    return CustomLaunch(weights, kv, shape.serving.spec_tokens, args)


def render_plan(
    loaded: LoadedShape, plan: Plan, templates: Path | None = None
) -> list[RenderedFile]:
    """The files of one compiled shape, in memory (nothing written here)."""
    env = environment(templates)
    launch = custom_launch(loaded, plan) if plan.engine == "custom" else None
    context = {"plan": plan, "launch": launch}
    try:
        env_text = env.get_template(f"{plan.engine}/env.j2").render(context)
    except jinja2.TemplateNotFound as exc:
        raise FakplanError(
            f"template {exc.name} not found in {templates or 'the built-in templates'}"
        ) from None
    except jinja2.TemplateError as exc:
        raise FakplanError(f"template error: {exc}") from None
    return [RenderedFile(f"{plan.name}.env", env_text)]
