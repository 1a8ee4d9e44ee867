"""``fakplan compile``: shapes in, DIR/<name>/{plan.json, rendered files} out."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fakplan.cli import EXIT_FAILED, EXIT_OK, json_option, out_option, templates_option
from fakplan.errors import FakplanError
from fakplan.fit import proven_plan
from fakplan.plan import Plan, compile_plan
from fakplan.record import carry_verdicts, read_record, record_path, rewrite_record
from fakplan.render import RenderedFile, render_plan
from fakplan.shape import LoadedShape, load_shape, shape_paths


@click.command(name="compile")
@click.argument("shapes", nargs=-1, required=True)
@out_option("Folder that receives <name>/plan.json and the rendered files.")
@templates_option
@click.option(
    "--target",
    "target_kind",
    type=click.Choice(["scripts", "kubernetes"]),
    default="scripts",
    show_default=True,
    help="kubernetes: also <name>/kubernetes/ (Deployment or LeaderWorkerSet, Service, the "
    "shape's ConfigMap, the probe Job, kustomization.yaml), from launch.kubernetes or its "
    "defaults; a shape with launch.kubernetes gets them either way.",
)
@json_option(
    "Print what was written as JSON (schema fakplan.compile/1): per shape its name, shape "
    "file, folder, files and status, with each failing gate's id, summary and fix, and "
    "notes on the model (an engine could not load it; its Hub commit moved)."
)
def compile_(
    shapes: tuple[str, ...],
    out_dir: Path,
    templates: Path | None,
    target_kind: str,
    as_json: bool,
) -> None:
    """Compile shapes (files or folders of *.yaml) into DIR/<name>/.

    Every shape is loaded and rendered before anything is written, so a bad
    shape leaves no half-written output. Re-running is byte-identical; verdicts
    already recorded are kept, read again under the record's lock (a verify or
    probe writing at the same time loses nothing). Exit 1 when a gate fails
    (files are still written, with the failure in their header).

    Paths in a shape are its folder's: a script whose engine argv names one
    (a GGUF, a local model folder) first changes to the shape's folder, found
    from the script's own place (FAKPLAN_SHAPE_DIR names it otherwise). For
    llama.cpp, -c asks for slots x max_model_len, never more: budget.kv past
    that cache is idle, reported as unclaimed KV.
    """
    loaded = [load_shape(p) for arg in shapes for p in shape_paths(arg)]
    if target_kind == "kubernetes":
        loaded = [item.targeting_kubernetes() for item in loaded]
    names: dict[str, Path] = {}
    for item in loaded:
        if item.shape.name in names:
            raise FakplanError(
                f"{item.path}: name {item.shape.name!r} is also the name of "
                f"{names[item.shape.name]}"
            )
        names[item.shape.name] = item.path
    staged: list[tuple[LoadedShape, Plan, tuple[Plan, list[RenderedFile]]]] = []
    notes: dict[str, list[str]] = {}
    for item in loaded:
        compiled = proven_plan(item, compile_plan(item))
        target = record_path(out_dir, compiled.name)
        previous = read_record(target) if target.exists() else None
        notes[compiled.name] = compiled.model_notes(previous)
        carried = carry_verdicts(compiled, previous)
        staged.append(
            (item, compiled, (carried, render_plan(item, carried, templates, target.parent)))
        )
    written: list[dict[str, object]] = []
    for item, plan, rendered in staged:
        # read again under the record's lock: a verdict verify or probe added since is kept
        # (the staged files are kept where nothing changed)
        compiled, files = rewrite_record(item, plan, out_dir, templates, rendered=rendered)
        folder = out_dir / compiled.name
        written_files = ["plan.json", *(f.name for f in files)]
        failing = [g for g in compiled.gates if g.status == "fail"]
        if not as_json:
            status = "FAILS " + ", ".join(g.title for g in failing) if failing else "ok"
            click.echo(f"{folder}/: {', '.join(written_files)} ({status})")
            for note in notes[compiled.name]:
                click.echo(f"  note: {note}")
        written.append(
            {
                "name": compiled.name,
                "shape": item.path.as_posix(),
                "folder": folder.as_posix(),
                "files": written_files,
                "status": "fail" if failing else "ok",
                "failing": [{"id": g.id, "summary": g.summary, "fix": g.fix} for g in failing],
                "notes": notes[compiled.name],
            }
        )
    code = EXIT_FAILED if any(w["failing"] for w in written) else EXIT_OK
    if as_json:
        document = {"schema": "fakplan.compile/1", "shapes": written, "exit": code}
        click.echo(json.dumps(document, indent=2, ensure_ascii=False))
    sys.exit(code)
