"""Prompt templates (Jinja2, StrictUndefined) and the SWE-Bench Pro task text."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from pipeline.errors import SwepipeError

if TYPE_CHECKING:
    from pipeline.tasks import Task

PROMPTS_DIR_ENV = "SWEPIPE_PROMPTS_DIR"
TASK_TEMPLATE = "task.md.j2"


def prompts_dir() -> Path:
    """$SWEPIPE_PROMPTS_DIR, else the copy inside an installed wheel, else <repo root>/prompts."""
    override = os.environ.get(PROMPTS_DIR_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_dir():
            raise SwepipeError(
                f"{PROMPTS_DIR_ENV}={override} is not a directory. Point it at a prompts folder or unset it."
            )
        return path
    package_dir = Path(__file__).resolve().parents[1]  # pipeline/, where a wheel keeps _prompts
    for candidate in (package_dir / "_prompts", package_dir.parent / "prompts"):
        if candidate.is_dir():
            return candidate
    raise SwepipeError(f"No prompts directory found next to {package_dir}; set {PROMPTS_DIR_ENV} to one.")


@lru_cache(maxsize=None)
def _environment(directory: Path) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # prompts are Markdown for a model, not HTML
    )


def environment() -> jinja2.Environment:
    return _environment(prompts_dir())


def render(template_name: str, **variables: Any) -> str:
    directory = prompts_dir()
    try:
        return _environment(directory).get_template(template_name).render(**variables)
    except jinja2.TemplateNotFound:
        raise SwepipeError(f"Prompt template {template_name} not found in {directory}.") from None
    except jinja2.TemplateSyntaxError as error:
        where = f"{directory / template_name}, line {error.lineno}"
        raise SwepipeError(f"Prompt template {where}: {error.message}") from None
    except jinja2.UndefinedError as error:
        raise SwepipeError(f"Prompt template {directory / template_name}: {error.message}") from None


def render_task_prompt(task: Task) -> str:
    """The task text agents see, as the official SWE-Bench Pro runs build it; never patches or test names."""
    return render(
        TASK_TEMPLATE,
        problem_statement=task.problem_statement,
        requirements=task.requirements,
        interface=task.interface,
    )
