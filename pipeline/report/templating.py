"""The report's HTML and its task pages, rendered by the Jinja2 templates in pipeline/report/templates/.

Autoescape is on for every ``.html`` template, and StrictUndefined makes a name a view does not have an error
instead of an empty string. Every value a template shows passes through ``shown``: cleaned (printable.clean: a byte
that was not UTF-8 as ``\\xXX``, no terminal codes or control characters) and escaped as ``html.escape`` does,
quotes included, so that a value from a run file (a patch, a model's reply, an instance id) is only ever text.
What a macro or a template made (Markup) passes through, as autoescape lets it.

The one stylesheet, templates/report.css, is inlined into each page by templates/base.html: a page stays one
file that opens from disk (file://), can be copied or mailed alone, and keeps its Content-Security-Policy to
inline style only (a linked sheet would need ``style-src 'self'``, which browsers treat differently on file://).
"""

from __future__ import annotations

import html
from functools import lru_cache

import jinja2
from markupsafe import Markup

from pipeline.text.printable import clean


def shown(value) -> Markup:
    """A value as a page shows it: Markup as it is, anything else cleaned and escaped."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(clean(value), quote=True))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    loader = jinja2.PackageLoader("pipeline.report", "templates")  # inside an installed wheel too
    env = jinja2.Environment(
        loader=loader,
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
        finalize=shown,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.globals["stylesheet"] = Markup(loader.get_source(env, "report.css")[0])
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)
