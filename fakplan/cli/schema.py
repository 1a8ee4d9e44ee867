"""``fakplan schema``."""

from __future__ import annotations

import json

import click

from fakplan.shape import Shape


@click.command()
def schema() -> None:
    """Print the JSON Schema of a shape file (point your editor's YAML plugin at it)."""
    document = Shape.model_json_schema()
    document["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    document["title"] = "fakplan shape"
    click.echo(json.dumps(document, indent=2, allow_nan=False))
