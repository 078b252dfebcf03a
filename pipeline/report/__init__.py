"""The run report and its task pages: the analyses' numbers and tables (``pipeline.analysis``) as figures and as
Markdown, HTML and terminal output.

tables / figures / team_figures / whatif_figure -> render (Markdown, HTML, terminal; ``templates/``, Jinja2) ->
build (the report put together); task pages (``task_build`` makes ``task_view``'s view, ``task_page`` renders it);
``sweep`` the table and figures of a sweep. Nothing here calls a model or Docker, and, like the analyses, nothing
here imports a stage package when it is imported (tests/test_imports.py).
"""

from pipeline.report.build import Report, build_report, write_report

__all__ = ["Report", "build_report", "write_report"]
