"""What every figure of the report shares: a figure on matplotlib's Agg canvas (no display, no global pyplot
state), its PNG bytes, a dollars axis, and short labels for run ids that differ in a few words. The figure modules
(figures, team_figures, whatif_figure, sweep) import this one and never each other."""

from __future__ import annotations

import io

from pipeline.analysis.table import elided
from pipeline.text.printable import clean


def new_figure(width: float, height: float):
    """A figure of ``width`` x ``height`` inches at 110 dpi, laid out by matplotlib's constrained layout."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def png_bytes(figure) -> bytes:
    """The figure as PNG, every text in it (run ids, model names, tick labels) drawn as it is: cleaned as text is
    anywhere (printable.clean: a surrogate cannot be drawn), and never read as mathtext (a pair of "$" in a name
    would be, and a malformed formula stops the figure)."""
    from matplotlib import rc_context
    from matplotlib.text import Text

    for text in figure.findobj(Text):
        text.set_text(clean(text.get_text()))
        text.set_parse_math(False)
    buffer = io.BytesIO()
    with rc_context({"text.parse_math": False}):  # the texts drawing makes (tick labels)
        figure.savefig(buffer, format="png")
    return buffer.getvalue()


def dollars_axis(axes, costs: list[float], before: float, after: float) -> None:
    """The x axis as dollars over ``costs``: ``before`` and ``after`` their span as margins (never below $0), or
    from $0 to twice the one cost when they are all the same."""
    span = max(costs) - min(costs)
    if span > 0:
        axes.set_xlim(max(0.0, min(costs) - before * span), max(costs) + after * span)
    else:
        axes.set_xlim(0.0, max(2 * max(costs), 1e-4))
    axes.xaxis.set_major_formatter("${x:,.4g}")


def distinct_labels(names: list[str], width: int = 22) -> list[str]:
    """Short labels for run ids that share most of their words (a sweep's cells): the ``-``-separated parts that
    not every id has, e.g. team-s2-implementation-async-... -> "s2 async"; a lone id is only shortened."""
    if len(names) < 2:
        return [elided(name, width) for name in names]
    parts = [name.split("-") for name in names]
    common = set.intersection(*(set(p) for p in parts))
    labels = [" ".join(part for part in p if part not in common) or name for p, name in zip(parts, names, strict=True)]
    if len(set(labels)) < len(labels):  # two ids differ only in word order: keep them apart
        labels = names
    return [elided(label, width) for label in labels]
