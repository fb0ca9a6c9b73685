"""The roles' prompts, rendered from the template files in ``prompts/`` (``string.Template``, ``$name`` fields)."""
from __future__ import annotations

import string
from functools import cache
from importlib import resources


@cache
def template(name: str) -> string.Template:
    """The template ``prompts/<name>.md`` of this package."""
    return string.Template(resources.files(__package__).joinpath("prompts", f"{name}.md").read_text())


def render(name: str, **fields) -> str:
    """``prompts/<name>.md`` with every ``$field`` filled in (a missing field raises KeyError: a bug here, not a model's)."""
    return template(name).substitute({k: str(v) for k, v in fields.items()}).strip() + "\n"


def system() -> str:
    """The system prompt every role shares."""
    return render("system")
