"""One offline HTML page per task of a run: what every agent saw, did and cost, and how the result was scored.

Built only from what the run directory holds (README, "A run on disk"), and from the dataset's problem statement
and gold patch when the report could read them. Each page is self-contained: inline CSS, tabs in CSS alone, no
script (a Content-Security-Policy forbids any), nothing fetched. Everything that came from a model, a repository
or a test run is HTML-escaped, so a reply holding ``<script>`` or ``</details>`` shows as text. Pages stay quick
to open in a run of hundreds of tasks: a page holds its own task only, long texts are folded (``<details>``) and
cut with a note, and a page that would pass MAX_PAGE_BYTES is made again with smaller cuts.
"""

from __future__ import annotations

import html
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from pipeline.report import tables as tab
from pipeline.report.coverage import GoldLineCoverage, gold_line_coverage, shown_candidates, squash
from pipeline.report.load import RunData, TaskRecord
from pipeline.report.team.records import ABSOLUTE
from pipeline.storage import write_text_atomic

MAX_PAGE_BYTES = 5_000_000
CUTS = (20_000, 4_000, 1_000, 300)  # characters kept of one long text, tried in turn until the page fits
FOLD_LINES = 15  # a text longer than this (or than FOLD_CHARS) is folded
FOLD_CHARS = 1_500
STEPS_KEPT = 60  # at the smallest cut, steps shown per agent: the first ones and the last 10
_ROLLOUT = re.compile(r"^rollout-(\d+)(\.trajectory)?\.json$")
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SPAN_HEADER = re.compile(r"^### (.+):(\d+)-(\d+)$")
_NO_MARK = '<span class="cov"></span>'
_BACK = "swepipe-link-back-to-the-report"  # stands for the report's link in a page made once for several reports

_CSS = """
body { font-family: system-ui, -apple-system, Segoe UI, sans-serif; margin: 1.5em auto; max-width: 1400px;
       color: #222; padding: 0 1em; font-size: 15px; }
h1 { font-size: 1.35em; word-break: break-all; } h2 { font-size: 1.15em; margin-top: 1.8em;
     border-bottom: 1px solid #ddd; } h3 { font-size: 1em; margin: 1em 0 0.3em; }
nav a { margin-right: 0.8em; } .meta { color: #444; } .meta b { color: #222; }
table { border-collapse: collapse; margin: 0.5em 0; font-size: 0.86em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
pre { background: #f7f7f7; border: 1px solid #e3e3e3; padding: 0.5em; margin: 0.3em 0; font-size: 12.5px;
      white-space: pre-wrap; word-break: break-word; max-height: 40em; overflow: auto; }
details > summary { cursor: pointer; color: #245; margin: 0.2em 0; }
.note { color: #666; font-size: 0.85em; } .bad { color: #a00; } .good { color: #060; }
.step { border: 1px solid #ddd; border-left: 4px solid #8ab; margin: 0.6em 0; padding: 0.3em 0.6em; }
.step.fmt { border-left-color: #d90; } .step.fail { border-left-color: #c55; }
.stephead { font-size: 0.85em; color: #555; } .label { font-size: 0.8em; color: #777; margin-top: 0.3em; }
pre.cmd { background: #1e2430; color: #e6e6e6; border-color: #1e2430; }
pre.reply { background: #fbfbf2; }
.diff { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12.5px; border: 1px solid #ddd;
        max-height: 50em; overflow: auto; margin: 0.3em 0; }
.diff div { white-space: pre-wrap; word-break: break-word; padding: 0 0.4em; min-height: 1.2em; }
.diff .add { background: #e6ffec; } .diff .del { background: #ffebe9; } .diff .hunk { background: #ddf4ff;
  color: #0550ae; } .diff .file { background: #eee; font-weight: bold; }
.diff.covered div { display: flex; } .diff .code { flex: 1 1 auto; min-width: 0; }
.diff .cov { flex: 0 0 auto; width: 13em; white-space: pre; color: #999; user-select: none; }
.diff .cov b { color: #0a6; font-weight: bold; }
.pair { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 1em; }
.gold { border: 2px dashed #b8860b; padding: 0.4em; background: #fffdf3; }
.gold .banner { background: #b8860b; color: white; padding: 0.2em 0.5em; font-weight: bold; }
.pred { border: 2px solid #57a; padding: 0.4em; } .pred .banner { background: #57a; color: white;
  padding: 0.2em 0.5em; font-weight: bold; }
.tabs { margin: 0.5em 0; } .tabs > input { display: none; }
.tabs > label { display: inline-block; padding: 0.25em 0.7em; border: 1px solid #ccc; border-bottom: none;
  background: #f3f3f3; cursor: pointer; margin-right: 2px; font-size: 0.88em; }
.tabs > input:checked + label { background: white; font-weight: bold; border-color: #889; }
.tabs > div.panel { display: none; border: 1px solid #889; padding: 0.5em; }
.event { font-size: 0.9em; } .event td:first-child { white-space: nowrap; }
"""


@dataclass
class PageSet:
    """Where the task pages of one HTML report go: ``<stem>_tasks/<run-id>/<instance id>.html`` beside it."""

    html_path: Path

    @property
    def directory(self) -> Path:
        return self.html_path.parent / f"{self.html_path.stem}_tasks"

    def href(self, run_folder: str, instance_id: str) -> str:
        """The link from the report to a task page, relative to the report."""
        return "/".join(quote(part) for part in (self.directory.name, run_folder, f"{instance_id}.html"))

    def path(self, run_folder: str, instance_id: str) -> Path:
        return self.directory / run_folder / f"{instance_id}.html"


def run_folders(runs: list[RunData]) -> list[str]:
    """A folder name per run (its run id; a second run of the same name gets -2, ...)."""
    names: list[str] = []
    for run in runs:
        name = _safe(run.run_id) or "run"
        base, n = name, 1
        while name in names:
            n += 1
            name = f"{base}-{n}"
        names.append(name)
    return names


def write_task_pages(runs: list[RunData], html_paths: list[Path], gold: dict[str, str] | None = None,
                     problems: dict[str, str] | None = None) -> dict[tuple[int, str], list[str]]:
    """Write a page for every finished task of every run beside each of ``html_paths``; returns
    (run index, instance id) -> the link from each HTML report (in ``html_paths`` order)."""
    sets = [PageSet(Path(p)) for p in html_paths]
    links: dict[tuple[int, str], list[str]] = {}
    for number, (run, folder) in enumerate(zip(runs, run_folders(runs))):
        for task in run.tasks:
            text = task_page(run, task, (gold or {}).get(task.instance_id), (problems or {}).get(task.instance_id),
                             back=[_BACK])
            for page_set in sets:  # made once, written beside each report with its own link back
                path = page_set.path(folder, task.instance_id)
                path.parent.mkdir(parents=True, exist_ok=True)
                write_text_atomic(path, text.replace(_BACK, esc(f"../../{quote(page_set.html_path.name)}"), 1))
            links[(number, task.instance_id)] = [s.href(folder, task.instance_id) for s in sets]
    return links


def task_page(run: RunData, task: TaskRecord, gold_patch: str | None = None, problem: str | None = None,
              back: list[str] | None = None) -> str:
    """The page of one task; made again with smaller cuts while it is over MAX_PAGE_BYTES."""
    page = ""
    for level, cut in enumerate(CUTS):
        page = _Page(run, task, gold_patch, problem, cut, last=level == len(CUTS) - 1, back=back).render()
        if len(page.encode("utf-8")) <= MAX_PAGE_BYTES:
            break
    return page


# -- text ---------------------------------------------------------------------------------------------------

def clean(value) -> str:
    """Text that can be shown and written as UTF-8: a byte that was not UTF-8 (held as a ``\\udcXX`` escape)
    shows as ``\\xXX``, terminal colour codes go, other control characters show as U+FFFD."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, indent=2, ensure_ascii=False, default=str)
    text = _SURROGATE.sub(lambda m: f"\\x{ord(m.group()) - 0xDC00:02x}" if 0xDC80 <= ord(m.group()) <= 0xDCFF
                          else "\ufffd", text)
    return _CONTROL.sub("\ufffd", _ANSI.sub("", text))


def esc(value) -> str:
    return html.escape(clean(value), quote=True)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")


def _read_json(path: Path):
    """(data, problem): problem is None when read, else why not (missing, torn, not JSON)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, "missing"
    except OSError as error:
        return None, f"cannot be read ({error})"
    try:
        return json.loads(raw.decode("utf-8", errors="surrogateescape")), None
    except ValueError as error:
        return None, f"not valid JSON, perhaps cut short by a kill ({len(raw):,} bytes; {error})"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_bytes().decode("utf-8", errors="surrogateescape")
    except OSError:
        return None


def _tokens(record: dict) -> str:
    return f"{int(_num(record.get('input_tokens'))):,} / {int(_num(record.get('output_tokens'))):,}"


def _num(value, default=0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


class _Page:
    def __init__(self, run: RunData, task: TaskRecord, gold_patch: str | None, problem: str | None, cut: int,
                 last: bool, back: list[str] | None):
        self.run, self.task, self.gold_patch, self.problem = run, task, gold_patch, problem
        self.limit, self.last, self.back = cut, last, back or []
        self.root = run.root / "tasks" / task.instance_id
        self.cuts = 0  # texts cut on this page
        self.tab_groups = 0
        self.max_tabs = 0

    # -- pieces -------------------------------------------------------------------------------------------

    def cut(self, text: str, where: str = "") -> str:
        if len(text) <= self.limit:
            return text
        self.cuts += 1
        head, tail = text[: self.limit * 2 // 3], text[-(self.limit // 3):]
        return (f"{head}\n\n[… {len(text) - len(head) - len(tail):,} of {len(text):,} characters cut here"
                + (f"; the whole text is in {where}" if where else "") + f" …]\n\n{tail}")

    def block(self, text, title: str, where: str = "", css: str = "", open_: bool | None = None) -> str:
        """A text in a <pre>, folded under ``title`` when long (or when ``open_`` is False)."""
        text = text if isinstance(text, str) else clean(text)
        if not text.strip():
            return f'<div class="label">{esc(title)}: (empty)</div>'
        lines = text.count("\n") + 1
        shown = f'<pre class="{css}">{esc(self.cut(text, where))}</pre>'  # cut first: a 20 MB output is not cleaned
        fold = open_ is False or (open_ is None and (lines > FOLD_LINES or len(text) > FOLD_CHARS))
        if not fold:
            return f'<div class="label">{esc(title)}</div>{shown}'
        return (f"<details><summary>{esc(title)} ({lines:,} line{'s' if lines != 1 else ''}, "
                f"{len(text):,} characters)</summary>{shown}</details>")

    def diff(self, patch, where: str = "", coverage: GoldLineCoverage | None = None) -> str:
        """A unified diff, coloured; with ``coverage``, each gold line marked with the contexts that held it."""
        text = patch if isinstance(patch, str) else clean(patch)
        if not text.strip():
            return '<p class="note">(empty patch)</p>'
        text = clean(self.cut(text, where))
        names = list(coverage.contexts) if coverage else []
        rows, path, old_no = [], None, 0
        for line in text.split("\n"):
            kind = ""
            mark = ""
            if line.startswith(("diff --git", "--- ", "+++ ", "index ", "new file", "deleted file")):
                kind = "file"
                if line.startswith("+++ "):
                    name = line[4:].split("\t")[0]
                    path = name[2:] if name.startswith("b/") else None if name == "/dev/null" else name
                elif line.startswith("--- ") and path is None:
                    name = line[4:].split("\t")[0]
                    path = name[2:] if name.startswith("a/") else None
                if line.startswith("diff --git"):
                    path = None
            elif line.startswith("@@"):
                kind = "hunk"
                match = re.match(r"^@@ -(\d+)", line)
                old_no = int(match.group(1)) if match else 0
            elif line.startswith("+"):
                kind = "add"
                if coverage:
                    mark = self._cov_mark(coverage, names, added=(path, squash(line[1:])))
            elif line.startswith("-"):
                kind = "del"
                if coverage:
                    mark = self._cov_mark(coverage, names, removed=(path, old_no))
                old_no += 1
            elif line.startswith(" "):
                old_no += 1
            if coverage:
                rows.append(f'<div class="{kind}">{mark or _NO_MARK}<span class="code">{esc(line)}</span></div>')
            else:
                rows.append(f'<div class="{kind}">{esc(line)}</div>')
        return f'<div class="diff{" covered" if coverage else ""}">' + "".join(rows) + "</div>"

    @staticmethod
    def _cov_mark(coverage: GoldLineCoverage, names: list[str], added=None, removed=None) -> str:
        if added is not None and not added[1]:
            return _NO_MARK
        cells = []
        for name in names:
            removed_in, added_in = coverage.contexts[name]
            held = (added in added_in) if added is not None else (removed in removed_in)
            cells.append(f"<b>{esc(name)}</b>" if held else "·" * len(name))
        title = "held by: " + (", ".join(n for n, c in zip(names, cells) if c.startswith("<b>")) or "none")
        return f'<span class="cov" title="{esc(title)}">{" ".join(cells)}</span>'

    def tabs(self, items: list[tuple[str, str]]) -> str:
        """CSS-only tabs: (label, panel html) each; the first shown."""
        if not items:
            return ""
        self.tab_groups += 1
        self.max_tabs = max(self.max_tabs, len(items))
        group = f"g{self.tab_groups}"
        out = ['<div class="tabs">']
        for number, (label, _) in enumerate(items):
            checked = " checked" if number == 0 else ""
            out.append(f'<input type="radio" name="{group}" id="{group}-{number}"{checked}>'
                       f'<label for="{group}-{number}">{esc(label)}</label>')
        out += [f'<div class="panel">{panel}</div>' for _, panel in items]
        out.append("</div>")
        return "".join(out)

    def table(self, headers: list[str], rows: list[list], raw: bool = False) -> str:
        body = "".join("<tr>" + "".join(f"<td>{c if raw else esc(c)}</td>" for c in row) + "</tr>" for row in rows)
        return ("<table><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead><tbody>"
                + body + "</tbody></table>")

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.run.root.parent))
        except ValueError:
            return str(path)

    # -- agents -------------------------------------------------------------------------------------------

    def trajectory(self, traj, where: str) -> str:
        """An agent's conversation: opening messages folded, then each step (reply, command, output)."""
        if not isinstance(traj, dict):
            return '<p class="note">No trajectory on record.</p>'
        out = []
        facts = [("exit", traj.get("exit_reason") or "(not finished)"), ("steps", len(traj.get("steps") or [])),
                 ("cost", tab.money(_num(traj.get("cost")))),
                 ("tokens in/out", _tokens(traj)),
                 ("time", tab.seconds(_num(traj.get("seconds"))))]
        if traj.get("resumed"):
            facts.append(("resumed", "yes"))
        out.append('<p class="meta">' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts) + "</p>")
        if traj.get("error"):
            out.append(f'<p class="bad">{esc(traj["error"])}</p>')
        messages = [m for m in traj.get("messages") or [] if isinstance(m, dict)]
        opening = []
        for message in messages:
            if message.get("role") == "assistant":
                break
            opening.append(message)
        for message in opening:
            out.append(self.block(message.get("content"), f"{message.get('role', '?')} message", where,
                                  open_=False))
        steps = [s for s in traj.get("steps") or [] if isinstance(s, dict)]
        if not steps and len(messages) > len(opening):
            for message in messages[len(opening):]:
                out.append(self.block(message.get("content"), f"{message.get('role', '?')}", where,
                                      css="reply" if message.get("role") == "assistant" else ""))
        shown = list(enumerate(steps))
        if self.last and len(steps) > STEPS_KEPT:
            shown = shown[: STEPS_KEPT - 10] + [(None, None)] + shown[-10:]
        for number, step in shown:
            if step is None:
                out.append(f'<p class="note">[… {len(steps) - STEPS_KEPT} steps left out to keep this page small; '
                           f"they are in {esc(where)} …]</p>")
                continue
            out.append(self.step(number, step, where))
        if traj.get("submission"):
            out.append(self.block(traj["submission"], "submission", where))
        return "".join(out)

    def step(self, number: int, step: dict, where: str) -> str:
        fmt = bool(step.get("format_error"))
        code = step.get("exit_code")
        css = "step fmt" if fmt else "step fail" if isinstance(code, int) and code != 0 else "step"
        head = [f"step {step.get('index', number) if isinstance(step.get('index'), int) else number}",
                tab.money(_num(step.get("cost"))),
                f"tokens {int(_num(step.get('input_tokens'))):,} in / {int(_num(step.get('output_tokens'))):,} out",
                f"model {_num(step.get('model_seconds')):.1f} s"]
        if step.get("command") is not None:
            head.append(f"command {_num(step.get('command_seconds')):.1f} s")
        if code is not None:
            head.append(f"exit code {code}")
        if step.get("timed_out"):
            head.append("timed out")
        out = [f'<div class="{css}"><div class="stephead">{esc(" · ".join(map(str, head)))}</div>',
               self.block(step.get("reply"), "reply", where, css="reply", open_=True)]
        if step.get("tool_calls"):
            out.append(self.block(step["tool_calls"], "tool calls", where, open_=False))
        if fmt:
            out.append(f'<p class="bad">format error: {esc(step["format_error"])}</p>')
        if step.get("command") is not None:
            action = step.get("action") or "bash"
            command = esc(self.cut(clean(step["command"]), where))
            out.append(f'<div class="label">{esc(action)}</div><pre class="cmd">{command}</pre>')
        if step.get("output") is not None:
            out.append(self.block(step.get("output"), "output", where))
        if step.get("changed_files"):
            out.append(f'<div class="label">changed: {esc(", ".join(map(str, step["changed_files"])))}</div>')
        out.append("</div>")
        return "".join(out)

    # -- sections -----------------------------------------------------------------------------------------

    def render(self) -> str:
        sections = [("problem", "Problem statement", self.problem_section),
                    ("result", "Prediction and gold patch", self.result_section),
                    ("eval", "Evaluation", self.eval_section),
                    ("juniors", "Junior rollouts", self.juniors_section),
                    ("pool", "Candidate pool", self.pool_section),
                    ("senior", "Senior", self.senior_section),
                    ("principal", "Principal", self.principal_section),
                    ("solo", "Solo agent", self.solo_section),
                    ("team", "Team", self.team_section),
                    ("ledger", "Model calls (ledger)", self.ledger_section)]
        body, nav = [], []
        for anchor, title, make in sections:
            try:
                content = make()
            except Exception as error:  # noqa: BLE001 - one odd record must not cost the whole page
                content = f'<p class="bad">This part could not be shown: {esc(type(error).__name__)}: {esc(error)}</p>'
            if content is None:
                continue
            nav.append(f'<a href="#{anchor}">{esc(title)}</a>')
            body.append(f'<section id="{anchor}"><h2>{esc(title)}</h2>{content}</section>')
        task, prediction = self.task, self.task.prediction
        title = f"{task.instance_id} · {self.run.run_id}"
        facts = [("run", self.run.run_id), ("strategy", prediction.get("strategy") or tab.NA),
                 ("outcome", task.category), ("source", prediction.get("source") or tab.NA),
                 ("cost", tab.money(task.total_cost)), ("time", tab.seconds(task.seconds))]
        if task.fail_to_pass:
            facts.append(("FAIL_TO_PASS passed", f"{task.fail_to_pass[0]}/{task.fail_to_pass[1]}"))
        models = prediction.get("models") if isinstance(prediction.get("models"), dict) else {}
        head = [f"<h1>{esc(task.instance_id)}</h1>",
                *(f'<p><a href="{esc(href)}">← report</a></p>' for href in self.back),
                '<p class="meta">' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts) + "</p>"]
        if models:
            head.append('<p class="meta">models: ' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>"
                                                                  for k, v in models.items()) + "</p>")
        if prediction.get("error"):
            head.append(f'<p class="bad">error: {esc(prediction["error"])}</p>')
        head.append("<nav>" + "".join(nav) + "</nav>")
        if self.cuts:
            head.append(f'<p class="note">{self.cuts} long text(s) on this page are cut to {self.limit:,} characters '
                        "(marked where); the run directory has them whole.</p>")
        tabs_css = "".join(f".tabs > input:nth-of-type({n}):checked ~ div.panel:nth-of-type({n}) {{ display: block; }}"
                           for n in range(1, self.max_tabs + 1))
        return ('<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
                "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
                "style-src 'unsafe-inline'; img-src data:\">"
                f'<meta name="viewport" content="width=device-width"><title>{esc(title)}</title>'
                f"<style>{_CSS}{tabs_css}</style></head><body>\n" + "\n".join(head + body)
                + f'\n<p class="note">generated {time.strftime("%Y-%m-%d %H:%M:%S")} by swepipe report from '
                f"{esc(self.rel(self.root))}</p></body></html>\n")

    def problem_section(self) -> str:
        if self.problem:
            return self.block(self.problem, "the dataset's problem statement", open_=True)
        for path in [*sorted((self.root / "junior").glob("rollout-*.json")), self.root / "solo" / "trajectory.json",
                     self.root / "team" / "lead.trajectory.json", self.root / "senior" / "trajectory.json"]:
            data, _ = _read_json(path)
            traj = data.get("trajectory") if isinstance(data, dict) and "trajectory" in data else data
            messages = traj.get("messages") if isinstance(traj, dict) else None
            users = [m for m in messages or [] if isinstance(m, dict) and m.get("role") == "user"]
            if users:
                return ('<p class="note">The dataset was not read: this is the task as the agents were given it '
                        f"(the first message of {esc(self.rel(path))}).</p>"
                        + self.block(users[0].get("content"), "task message", open_=True))
        return '<p class="note">Not on record (the dataset was not read and no trajectory holds it).</p>'

    def result_section(self) -> str:
        prediction = self.task.prediction
        patch = prediction.get("model_patch")
        pred = ('<div class="pred"><div class="banner">Prediction (submitted, source: '
                f'{esc(prediction.get("source") or tab.NA)})</div>'
                + self.diff(patch, "predictions.jsonl") + "</div>")
        if self.gold_patch is None:
            gold = ('<div class="gold"><div class="banner">Gold patch: never shown to a model</div>'
                    '<p class="note">Not available: the report could not read the dataset.</p></div>')
        else:
            coverage = gold_line_coverage(self.task, self.gold_patch, shown_candidates(self.run.config), self.root)
            legend = ""
            if coverage and coverage.contexts:
                names = ", ".join(coverage.contexts)
                legend = ('<p class="note">Coverage of each gold line at k=K (' + esc(names) + "), as in the report's "
                          "coverage tables: cand. = the junior candidates' hunks and added lines; +exp. = plus the "
                          "code expansion; sent = what the principal was sent. A bold name: that context held the "
                          "line; dots: it did not.</p>")
            elif coverage is not None:
                legend = '<p class="note">No coverage: the run has no candidate pool or brief for this task.</p>'
            gold = ('<div class="gold"><div class="banner">Gold patch (from the dataset): never shown to a model'
                    "</div>" + legend + self.diff(self.gold_patch, "the dataset", coverage) + "</div>")
        return f'<div class="pair">{pred}{gold}</div>'

    def eval_section(self) -> str:
        result = self.task.eval_result
        folder = next((d for d in (self.root / "eval", self.run.root / "eval" / self.task.instance_id)
                       if (d / "result.json").is_file()), None)
        if not isinstance(result, dict):
            return ('<p class="note">No evaluation on record for this task (run without --evaluate, or not scored '
                    "yet: swepipe eval).</p>")
        out = []
        facts = [("category", result.get("category")), ("resolved", result.get("resolved")),
                 ("patch applied", result.get("patch_applied")), ("patch empty", result.get("patch_empty")),
                 ("timed out", result.get("timed_out")), ("network", result.get("network")),
                 ("exit code", result.get("entry_exit_code"))]
        out.append('<p class="meta">' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts if v is not None)
                   + "</p>")
        if result.get("error"):
            out.append(self.block(result["error"], "error", open_=True, css=""))
        required: dict[str, str] = {}
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            outcome = result.get(kind)
            if not isinstance(outcome, dict):
                out.append(f'<p class="note">{kind}: no per-test results on record.</p>')
                continue
            groups = {g: [str(n) for n in outcome.get(g) or []] for g in ("passed", "failed", "missing")}
            total = sum(map(len, groups.values()))
            for group, names in groups.items():
                for name in names:
                    required[name] = kind
            bad = groups["failed"] + groups["missing"]
            css = "good" if not bad else "bad"
            out.append(f'<h3 class="{css}">{kind}: {len(groups["passed"])}/{total} passed</h3>')
            for group in ("failed", "missing"):
                if groups[group]:
                    items = "".join(f"<li>{esc(self.cut(n))}</li>" for n in groups[group][:500])
                    more = (f'<li class="note">… and {len(groups[group]) - 500} more</li>'
                            if len(groups[group]) > 500 else "")
                    out.append(f'<div class="label">{group}</div><ul class="bad">{items}{more}</ul>')
        if result.get("near_misses"):
            out.append(self.block(result["near_misses"], "near misses (names equal up to whitespace, not counted)"))
        output, _ = _read_json(folder / "output.json") if folder else (None, None)
        tests = output.get("tests") if isinstance(output, dict) else None
        if isinstance(tests, list) and tests:
            rows = [[esc(self.cut(clean(t.get("name")), "")), self._status(t.get("status")),
                     esc(required.get(str(t.get("name")), ""))] for t in tests[:5000] if isinstance(t, dict)]
            table = self.table(["test", "status", "required as"], rows, raw=True)
            more = f'<p class="note">{len(tests) - 5000} more in output.json</p>' if len(tests) > 5000 else ""
            out.append(f"<details><summary>every test the parser reported ({len(tests):,})</summary>{table}{more}"
                       "</details>")
        if folder:
            for name in ("stdout.log", "stderr.log", "entry.log", "entryscript.sh"):
                text = _read_text(folder / name)
                if text is not None:
                    out.append(self.block(text, name, self.rel(folder / name), open_=False))
        return "".join(out)

    @staticmethod
    def _status(status) -> str:
        css = "good" if status == "PASSED" else "bad" if status in ("FAILED", "ERROR") else ""
        return f'<span class="{css}">{esc(status)}</span>'

    def juniors_section(self) -> str | None:
        folder = self.root / "junior"
        if not folder.is_dir():
            return None
        found: dict[int, dict[str, Path]] = {}
        for path in folder.iterdir():
            match = _ROLLOUT.match(path.name)
            if match:
                found.setdefault(int(match.group(1)), {})["live" if match.group(2) else "record"] = path
        if not found:
            return '<p class="note">No rollout on record.</p>'
        items, rows = [], []
        for index in sorted(found):
            paths = found[index]
            record, problem = _read_json(paths["record"]) if "record" in paths else (None, None)
            notes = []
            traj, where = None, ""
            if isinstance(record, dict):
                traj, where = record.get("trajectory"), self.rel(paths["record"])
            elif "record" in paths:
                notes.append(f"{paths['record'].name} is {problem}.")
            if traj is None and "live" in paths:
                traj, live_problem = _read_json(paths["live"])
                where = self.rel(paths["live"])
                notes.append(f"Shown from {paths['live'].name} (the rollout had not finished)." if live_problem is None
                             else f"{paths['live'].name} is {live_problem}.")
            record = record if isinstance(record, dict) else {}
            exit_reason = record.get("exit_reason") or (traj or {}).get("exit_reason") or "unreadable"
            label = f"rollout {index:02d} · {exit_reason}"
            facts = [("temperature", record.get("temperature")), ("seed", record.get("seed")),
                     ("model", record.get("model"))]
            if traj is None:
                facts = [("exit", exit_reason), *facts]
            rows.append([f"{index:02d}", exit_reason, record.get("steps", tab.NA), tab.money(_num(record.get("cost"))),
                         f"{int(_num(record.get('input_tokens'))):,} / {int(_num(record.get('output_tokens'))):,}",
                         f"{len((record.get('patch') or '').splitlines())} lines"])
            panel = ['<p class="meta">' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts if v is not None)
                     + "</p>", *(f'<p class="bad">{esc(n)}</p>' for n in notes)]
            for key in ("error", "patch_error"):
                if record.get(key) and (key != "error" or record[key] != (traj or {}).get("error")):
                    panel.append(f'<p class="bad">{esc(key)}: {esc(record[key])}</p>')
            panel.append(self.trajectory(traj, where) if traj is not None else "")
            panel.append("<h3>Candidate patch</h3>" + self.diff(record.get("patch"), where))
            items.append((label, "".join(panel)))
        summary = self.table(["rollout", "exit", "steps", "cost", "tokens in / out", "patch"], rows)
        return summary + self.tabs(items)

    def pool_section(self) -> str | None:
        pool = self.task.pool
        if pool is None:
            data, problem = _read_json(self.root / "junior" / "pool.json")
            if problem is None or problem == "missing":
                return None
            return f'<p class="bad">junior/pool.json is {esc(problem)}.</p>'
        out = [f'<p class="meta">{esc(pool.get("rollouts", tab.NA))} rollouts · '
               f'{len(pool.get("candidates") or [])} distinct candidate(s)</p>']
        for key, what in (("empty", "left no source edit"), ("unparsable", "left a diff that does not parse"),
                          ("failed", "whose diff could not be taken")):
            if pool.get(key):
                out.append(f'<p class="note">rollouts that {what}: {esc(", ".join(map(str, pool[key])))}</p>')
        if pool.get("dropped"):
            out.append(self.block(pool["dropped"], "files cleaning left out, and why", open_=False))
        brief_key = (self.task.brief or {}).get("candidate")
        for number, candidate in enumerate(pool.get("candidates") or [], start=1):
            if not isinstance(candidate, dict):
                continue
            chosen = " · the senior's choice" if brief_key and brief_key in (candidate.get("key"), number) else ""
            reasons = ", ".join(map(str, candidate.get("exit_reasons") or []))
            out.append(f"<h3>candidate {number}: {esc(candidate.get('votes', 0))} vote(s){esc(chosen)}</h3>"
                       f'<p class="meta">rollouts {esc(", ".join(map(str, candidate.get("rollouts") or [])))}'
                       f" ({esc(reasons)}) · files {esc(', '.join(map(str, candidate.get('files') or [])))}</p>"
                       + self.diff(candidate.get("patch"), "junior/pool.json"))
            if candidate.get("test_patch"):
                out.append("<details><summary>its test edits (kept apart)</summary>"
                           + self.diff(candidate["test_patch"], "junior/pool.json") + "</details>")
        return "".join(out)

    def senior_section(self) -> str | None:
        folder = self.root / "senior"
        if not folder.is_dir():
            return None
        brief, problem = _read_json(folder / "brief.json")
        out = []
        if isinstance(brief, dict):
            facts = [("source", brief.get("source")), ("exit", brief.get("senior_exit")),
                     ("steps", brief.get("senior_steps")), ("cost", tab.money(_num(brief.get("senior_cost")))),
                     ("context tokens", brief.get("context_tokens")), ("candidate chosen", brief.get("candidate"))]
            out.append('<p class="meta">' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts if v is not None)
                       + "</p>")
            if brief.get("senior_error"):
                out.append(f'<p class="bad">{esc(brief["senior_error"])}</p>')
            out.append(self.block(brief.get("analysis"), "analysis", "senior/brief.json", open_=True))
            if brief.get("problems"):
                out.append(self.block(brief["problems"], "problems with the brief", open_=False))
            spans = [s for s in brief.get("spans") or [] if isinstance(s, dict)]
            if spans:
                out.append("<h3>Spans the senior chose</h3>" + self.table(
                    ["file", "lines", "why"], [[s.get("file"), f"{s.get('start')}-{s.get('end')}",
                                                 self.cut(clean(s.get("why") or s.get("reason") or ""))]
                                                for s in spans]))
        else:
            out.append(f'<p class="bad">senior/brief.json is {esc(problem)}.</p>')
        context = _read_text(folder / "context.md")
        if context is not None:
            out.append("<h3>The code sent (context.md)</h3>" + self.context_spans(context))
        traj, problem = _read_json(folder / "trajectory.json")
        if traj is not None:
            out.append("<h3>The senior's exploration</h3>" + self.trajectory(traj, "senior/trajectory.json"))
        elif problem != "missing":
            out.append(f'<p class="bad">senior/trajectory.json is {esc(problem)}.</p>')
        return "".join(out)

    def context_spans(self, context: str) -> str:
        """context.md, one fold per span (### file:start-end and its code)."""
        parts: list[tuple[str, list[str]]] = [("", [])]
        for row in clean(context).split("\n"):
            if _SPAN_HEADER.match(row):
                parts.append((row[4:], []))
            else:
                parts[-1][1].append(row)
        out = []
        for title, rows in parts:
            text = "\n".join(rows).strip("\n")
            if not title:
                if text.strip():
                    out.append(self.block(text, "context.md", "senior/context.md", open_=False))
                continue
            out.append(self.block(text, title, "senior/context.md", open_=False))
        return "".join(out) or '<p class="note">(empty)</p>'

    def principal_section(self) -> str | None:
        folder = self.root / "principal"
        if not folder.is_dir():
            return None
        out = []
        result, problem = _read_json(folder / "result.json")
        if isinstance(result, dict):
            facts = [("source", result.get("source")), ("calls", result.get("calls")),
                     ("cost", tab.money(_num(result.get("cost")))), ("patch lines", result.get("patch_lines"))]
            out.append('<p class="meta">' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in facts if v is not None)
                       + "</p>")
            if result.get("error"):
                out.append(f'<p class="bad">{esc(result["error"])}</p>')
            for number, failed in enumerate(result.get("failed_attempts") or [], start=1):
                out.append(f'<p class="note">attempt {number} unusable: {esc(self.cut(clean(failed)))}</p>')
            candidates = result.get("candidates")
            shown = candidates.get("shown") if isinstance(candidates, dict) else None
            if shown is not None:
                out.append(f'<p class="note">candidates shown: {esc(shown or "none")}</p>')
        elif problem != "missing":
            out.append(f'<p class="bad">principal/result.json is {esc(problem)}.</p>')
        request, problem = _read_json(folder / "request.json")
        replies, reply_problem = _read_json(folder / "replies.json")
        calls = request.get("calls") if isinstance(request, dict) else None
        replies = replies if isinstance(replies, list) else []
        if calls is None and problem != "missing":
            out.append(f'<p class="bad">principal/request.json is {esc(problem)}.</p>')
        if reply_problem not in (None, "missing"):
            out.append(f'<p class="bad">principal/replies.json is {esc(reply_problem)}.</p>')
        for number in range(max(len(calls or []), len(replies))):
            call = (calls or [])[number] if number < len(calls or []) else {}
            out.append(f"<h3>Call {number + 1}</h3>")
            for message in (call.get("messages") if isinstance(call, dict) else None) or []:
                if isinstance(message, dict):
                    out.append(self.block(message.get("content"), f"request: {message.get('role', '?')} message",
                                          "principal/request.json", open_=False))
            reply = replies[number] if number < len(replies) else None
            if isinstance(reply, dict):
                meta = (f"reply · {tab.money(_num(reply.get('cost')))} · tokens "
                        f"{int(_num(reply.get('input_tokens'))):,} in / {int(_num(reply.get('output_tokens'))):,} out")
                out.append(self.block(reply.get("content"), meta, "principal/replies.json", css="reply", open_=True))
            elif reply is not None:
                out.append(self.block(reply, "reply", "principal/replies.json", css="reply", open_=True))
            else:
                out.append('<p class="note">no reply on record for this call</p>')
        patch = _read_text(folder / "patch.diff")
        if patch is not None:
            out.append("<h3>Its patch (from the edits, against the base commit)</h3>"
                       + self.diff(patch, "principal/patch.diff"))
        return "".join(out)

    def solo_section(self) -> str | None:
        folder = self.root / "solo"
        if not folder.is_dir():
            return None
        traj, problem = _read_json(folder / "trajectory.json")
        out = [] if problem in (None, "missing") else [f'<p class="bad">solo/trajectory.json is {esc(problem)}.</p>']
        out.append(self.trajectory(traj, "solo/trajectory.json"))
        patch = _read_text(folder / "patch.diff")
        if patch is not None:
            out.append("<h3>Its patch</h3>" + self.diff(patch, "solo/patch.diff"))
        return "".join(out)

    def team_section(self) -> str | None:
        folder = self.root / "team"
        if not folder.is_dir():
            return None
        out = []
        delegations, problem = _read_json(folder / "delegations.json")
        if problem not in (None, "missing"):
            out.append(f'<p class="bad">team/delegations.json is {esc(problem)}.</p>')
        delegations = delegations if isinstance(delegations, dict) else {}
        messages, problem = _read_json(folder / "messages.json")
        if problem not in (None, "missing"):
            out.append(f'<p class="bad">team/messages.json is {esc(problem)}.</p>')
        messages = [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []
        waits, _ = _read_json(folder / "lead_waits.json")
        settings = [(k, delegations.get(k)) for k in ("mode", "size", "sizing", "stages", "submit_guard", "directory",
                                                      "lead_prompt") if delegations.get(k) is not None]
        if settings:
            out.append('<p class="meta">' + " · ".join(f"{esc(k)} <b>{esc(v)}</b>" for k, v in settings) + "</p>")
        out.append("<h3>In time order</h3>" + self.timeline(folder, delegations, messages, waits))
        agents = [("lead", folder / "lead.trajectory.json")]
        workers = ((p.name.removesuffix(".trajectory.json"), p) for p in folder.glob("worker-*.trajectory.json"))
        agents += sorted(workers, key=lambda item: int(re.sub(r"\D", "", item[0]) or 0))
        items = []
        by_worker = {d.get("worker"): d for d in delegations.get("delegations") or [] if isinstance(d, dict)}
        for name, path in agents:
            traj, problem = _read_json(path)
            panel = []
            record = by_worker.get(name)
            if record:
                panel.append(f'<p class="meta">stage <b>{esc(record.get("stage"))}</b> · state '
                             f'<b>{esc(record.get("state"))}</b> · writable <b>{esc(record.get("writable"))}</b></p>')
                panel.append(self.block(record.get("task"), "its task", "team/delegations.json", open_=True))
                if record.get("report"):
                    panel.append(self.block(record["report"], "its report", "team/delegations.json"))
            if problem not in (None, "missing"):
                panel.append(f'<p class="bad">{esc(path.name)} is {esc(problem)}.</p>')
            panel.append(self.trajectory(traj, self.rel(path)))
            label = f"{name} · {(traj or {}).get('exit_reason') or record and record.get('exit_reason') or '?'}" \
                if isinstance(traj, dict) or record else f"{name} · unreadable"
            items.append((label, "".join(panel)))
        out.append("<h3>Each agent</h3>" + self.tabs(items))
        return "".join(out)

    def timeline(self, folder: Path, delegations: dict, messages: list[dict], waits) -> str:
        """Commands, delegations, messages and the lead's waits, merged by time (seconds from the team's start)."""
        start = _num(delegations.get("started"), None) if delegations.get("started") is not None else None
        events: list[tuple[float, str, str, str]] = []  # (time, who, what, text)

        def at(value) -> float | None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return None
            return value if value < ABSOLUTE or start is None else value - start

        journal = _read_text(folder / "commands.jsonl") or ""
        torn = 0
        for line in journal.splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                torn += 1
                continue
            if not isinstance(entry, dict):
                continue
            when = at(entry.get("started"))
            took = (f" ({_num(entry.get('ended')) - _num(entry.get('started')):.1f} s)"
                    if entry.get("ended") is not None and entry.get("started") is not None else "")
            changed = f"; changed {', '.join(map(str, entry.get('changed') or []))}" if entry.get("changed") else ""
            events.append((when if when is not None else float("inf"), str(entry.get("agent")),
                           f"command, exit {entry.get('exit_code')}{took}{changed}", clean(entry.get("command"))))
        for record in delegations.get("delegations") or []:
            if not isinstance(record, dict):
                continue
            when = at(record.get("delegated_at"))
            if when is None:
                when = at(record.get("offset"))
            events.append((when if when is not None else float("inf"), "lead",
                           f"delegates to {record.get('worker')} ({record.get('stage')})", clean(record.get("task"))))
            ended = at(record.get("ended_at"))
            if ended is not None:
                events.append((ended, str(record.get("worker")),
                               f"ends: {record.get('exit_reason') or record.get('state')}",
                               clean(record.get("report") or record.get("error") or "")))
        for message in messages:
            when = at(message.get("time"))
            if when is None:
                when = at(message.get("sent"))
            what = f"message to {message.get('to')}" + (" (malformed: " + str(message.get("problem")) + ")"
                                                         if message.get("malformed") else "")
            events.append((when if when is not None else float("inf"), str(message.get("from")), what,
                           clean(message.get("text"))))
        for wait in waits if isinstance(waits, list) else []:
            if isinstance(wait, dict) and at(wait.get("start")) is not None:
                events.append((at(wait.get("start")), "lead",
                               f"waits on workers for {_num(wait.get('end')) - _num(wait.get('start')):.1f} s", ""))
        if not events:
            return '<p class="note">No command, delegation or message on record.</p>'
        events.sort(key=lambda e: e[0])
        rows = [[("?" if when == float("inf") else f"{when:.1f} s"), esc(who), esc(what),
                 self.block(text, "text") if text.strip() else ""] for when, who, what, text in events]
        note = f'<p class="note">{torn} line(s) of commands.jsonl could not be read (cut short).</p>' if torn else ""
        return note + '<div class="event">' + self.table(["time", "who", "what", ""], rows, raw=True) + "</div>"

    def ledger_section(self) -> str | None:
        text = _read_text(self.root / "ledger.jsonl")
        if text is None:
            return None
        rows, torn = [], 0
        for line in text.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                torn += 1
                continue
            if isinstance(row, dict):
                rows.append([row.get("stage"), row.get("agent") or row.get("role"), row.get("model"),
                             f"{int(_num(row.get('input_tokens'))):,}", f"{int(_num(row.get('cached_tokens'))):,}",
                             f"{int(_num(row.get('output_tokens'))):,}", tab.money(_num(row.get("cost"))),
                             f"{_num(row.get('latency')):.1f} s", row.get("retries"),
                             self.cut(clean(row.get("error") or ""))])
        note = f'<p class="note">{torn} line(s) could not be read (cut short).</p>' if torn else ""
        table = self.table(["stage", "agent", "model", "in", "cached", "out", "cost", "latency", "retries", "error"],
                           rows[:5000])
        return note + f"<details><summary>{len(rows)} call(s)</summary>{table}</details>"
