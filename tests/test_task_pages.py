"""The per-task HTML pages of `swepipe report --html`: hand-built runs with imperfect records (fast), and a real
scripted run opened in headless Chromium (docker, slow)."""

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote

import pytest
import yaml
from conftest import promised_but_missing

from pipeline.report.build import build_report, write_report
from pipeline.report.task_page import MAX_PAGE_BYTES

GOLD = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,4 +1,5 @@
 def add(a, b):
-    return a - b
+    return a + b
+    # checked by test_add
""" + " \n" + """ def sub(a, b):
"""
# A candidate that finds one of the two gold added lines (and, with its hunk, the removed one).
CANDIDATE = """diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""
HOSTILE = "Let me look. <script>document.title='pwned'</script> and a stray </details></pre> tag.\n```bash\nls\n```"
BIG = 20 * 1024 * 1024


def step(index, reply, command=None, output=None, **extra):
    return {"index": index, "reply": reply, "command": command, "action": "bash" if command else "",
            "exit_code": 0 if command else None, "output": output, "cost": 0.001, "input_tokens": 100,
            "output_tokens": 20, "model_seconds": 0.5, "command_seconds": 0.1, **extra}


def trajectory(name, steps, exit_reason="submitted"):
    return {"name": name, "exit_reason": exit_reason, "error": None, "submission": None,
            "messages": [{"role": "system", "content": "You are an engineer."},
                         {"role": "user", "content": "<issue>add() subtracts</issue>"}],
            "steps": steps, "cost": 0.002, "input_tokens": 200, "output_tokens": 40, "seconds": 3.0}


def write(path: Path, data) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")


def prediction(instance_id, strategy="pipeline", patch=CANDIDATE, **extra):
    return {"instance_id": instance_id, "model_patch": patch, "strategy": strategy, "source": "principal",
            "cost": {"total": 0.01}, "seconds": {"junior": 3.0}, **extra}


def make_run(root: Path) -> Path:
    """Three tasks: a pipeline task with every record (some broken), a solo task with no eval and a torn
    trajectory, a team task with a torn command journal."""
    run = root / "runs" / "hand"
    write(run / "config.yaml", yaml.safe_dump({"principal": {"show_candidates": None}}))
    predictions = [prediction("pipe-1"), prediction("solo-1", "solo"), prediction("team-1", "team")]
    write(run / "predictions.jsonl", "".join(json.dumps(p) + "\n" for p in predictions))

    task = run / "tasks" / "pipe-1"
    non_utf8 = "caf\udce9 \x1b[31mred\x1b[0m done"  # a Latin-1 byte kept as a surrogate escape, a colour code
    steps = [step(0, HOSTILE, "ls", "calc.py\n"), step(1, "Run it.\n```bash\ncat big.log\n```", "cat big.log",
                                                        "x" * BIG),
             step(2, "Odd bytes.\n```bash\ncat latin1.txt\n```", "cat latin1.txt", non_utf8),
             step(3, "no block here", format_error="your reply had no ```bash blocks")]
    write(task / "junior" / "rollout-00.json", {
        "index": 0, "exit_reason": "submitted", "patch": CANDIDATE, "cost": 0.004, "temperature": 0.0, "seed": 0,
        "steps": 4, "trajectory": trajectory("rollout-00", steps)})
    torn = json.dumps({"index": 1, "exit_reason": "step_limit", "patch": "", "trajectory": trajectory("r1", [])})
    write(task / "junior" / "rollout-01.json", torn[: len(torn) // 2])  # cut short by a kill
    write(task / "junior" / "rollout-02.trajectory.json", trajectory("rollout-02", [step(0, "Still going.")], ""))
    # Today's live trajectory: the journal of its saves, the last line cut short by the kill.
    live = trajectory("rollout-03", [step(0, "Journalled.\n```bash\nls\n```", "ls", "calc.py\n")], "")
    write(task / "junior" / "rollout-03.trajectory.jsonl",
          json.dumps({"journal": 1, "whole": live}) + "\n" + '{"steps": [[1, {"reply": "lo')
    write(task / "junior" / "pool.json", {
        "instance_id": "pipe-1", "rollouts": 3, "empty": [1], "unparsable": [], "failed": [], "dropped": [],
        "candidates": [{"key": "k1", "patch": CANDIDATE, "test_patch": "", "votes": 1, "rollouts": [0],
                        "exit_reasons": ["submitted"], "files": ["calc.py"],
                        "hunks": [{"file": "calc.py", "old_start": 1, "old_lines": 2, "function": "add"}]}]})
    write(task / "senior" / "brief.json", {
        "analysis": "add() uses - instead of +; <b>not bold</b>", "source": "senior", "candidate": "k1",
        "spans": [{"file": "calc.py", "start": 1, "end": 2, "why": "the bug"}],
        "context_spans": [{"file": "calc.py", "start": 1, "end": 2}], "context_tokens": 20})
    write(task / "senior" / "context.md", "### calc.py:1-2\n```\n1 | def add(a, b):\n2 |     return a - b\n```\n")
    write(task / "senior" / "trajectory.json", trajectory("senior", [step(0, "Look.", "grep -n def calc.py",
                                                                          "1:def add")]))
    write(task / "principal" / "request.json", {"calls": [{"attempt": 1, "messages": [
        {"role": "system", "content": "You are a principal engineer."},
        {"role": "user", "content": "Fix it. </details><details open>"}]}]})
    write(task / "principal" / "replies.json", [{"content": "calc.py\n```\n<<<<<<< SEARCH\n    return a - b\n"
                                                            "=======\n    return a + b\n>>>>>>> REPLACE\n```",
                                                 "cost": 0.003, "input_tokens": 900, "output_tokens": 50}])
    write(task / "principal" / "result.json", {"source": "principal", "calls": 1, "cost": 0.003,
                                               "failed_attempts": [], "patch": CANDIDATE})
    write(task / "principal" / "patch.diff", CANDIDATE)
    write(task / "eval" / "result.json", {
        "instance_id": "pipe-1", "resolved": False, "category": "tests_failed", "patch_applied": True,
        "FAIL_TO_PASS": {"passed": ["test_add"], "failed": ["test_add_negative"], "missing": []},
        "PASS_TO_PASS": {"passed": [], "failed": [], "missing": ["test_sub"]}})
    write(task / "eval" / "output.json", {"tests": [{"name": "test_add", "status": "PASSED"},
                                                    {"name": "test_add_negative", "status": "FAILED"}]})
    write(task / "eval" / "stdout.log", b"collected 2 items\n\xff\xfe broken bytes <script>x</script>\n")
    write(task / "ledger.jsonl", json.dumps({"stage": "junior", "agent": "rollout-00", "model": "m", "cost": 0.001,
                                             "input_tokens": 100, "output_tokens": 20}) + "\n{\"stage\": \"jun")

    solo = run / "tasks" / "solo-1" / "solo"
    solo_steps = [step(0, "Fix.", "sed -i s/-/+/ calc.py", "")]
    write(solo / "trajectory.json", json.dumps(trajectory("solo", solo_steps))[:-40])  # torn
    write(solo / "patch.diff", CANDIDATE)

    team = run / "tasks" / "team-1" / "team"
    started = 1_800_000_000.0
    write(team / "lead.trajectory.json", trajectory("lead", [step(0, "Delegate.\n```delegate\n...\n```")]))
    write(team / "worker-1.trajectory.json", trajectory("worker-1", [step(0, "Edit.", "sed -i s/-/+/ calc.py", "")]))
    write(team / "delegations.json", {
        "mode": "async", "size": 1, "started": started, "delegations": [
            {"worker": "worker-1", "stage": "implementation", "task": "fix add()", "writable": ["."],
             "delegated_at": started + 1, "ended_at": started + 9, "state": "collected",
             "exit_reason": "submitted", "report": "fixed add()"}]})
    write(team / "messages.json", [{"id": 0, "from": "worker-1", "to": "lead", "text": "<i>done</i> soon",
                                    "sent": 5.0, "time": started + 5, "malformed": False}])
    write(team / "commands.jsonl", json.dumps({"seq": 0, "agent": "worker-1", "command": "sed -i s/-/+/ calc.py",
                                               "started": started + 3, "ended": started + 3.2, "exit_code": 0,
                                               "changed": ["calc.py"]}) + "\n{\"seq\": 1, \"agent\": \"lea")
    return run


def pages_of(run: Path, html: Path, gold=True, problems=True) -> dict[str, str]:
    """The task pages of ``run``'s report written beside ``html`` (a report.html in the report's folder)."""
    report = build_report([run], {"pipe-1": GOLD, "solo-1": GOLD, "team-1": GOLD} if gold else None,
                          problems={"pipe-1": "add() subtracts <b>instead</b> of adding"} if problems else None)
    assert html.name == "report.html"
    write_report(report, html.parent)
    folder = html.parent / "report_tasks" / run.name
    return {p.stem: p.read_bytes().decode("utf-8") for p in folder.glob("*.html")}  # every page is valid UTF-8


class Structure(HTMLParser):
    """Element nesting as a browser's tokenizer sees it: elements opened, and details/pre balance."""

    def __init__(self):
        super().__init__()
        self.opened: list[str] = []
        self.depth = {"details": 0, "pre": 0}
        self.broken = False

    def handle_starttag(self, tag, attrs):
        self.opened.append(tag)
        if tag in self.depth:
            self.depth[tag] += 1

    def handle_endtag(self, tag):
        if tag in self.depth:
            self.depth[tag] -= 1
            self.broken |= self.depth[tag] < 0


def structure(page: str) -> Structure:
    parsed = Structure()
    parsed.feed(page)
    return parsed


def test_every_task_gets_a_page_even_from_broken_records(tmp_path):
    run = make_run(tmp_path)
    pages = pages_of(run, tmp_path / "out" / "report.html")
    assert set(pages) == {"pipe-1", "solo-1", "team-1"}
    for page in pages.values():
        assert "could not be shown" not in page  # no section gave up
        assert len(page.encode()) <= MAX_PAGE_BYTES
        assert "<script" not in page.lower()  # no script of its own, and none let through
        assert "default-src 'none'" in page  # and a policy that would stop one
        assert not re.search(r"""(src|href)=["']?(https?:)?//""", page)  # nothing fetched
        parsed = structure(page)
        assert not parsed.broken and parsed.depth == {"details": 0, "pre": 0}
        assert "script" not in parsed.opened and "i" not in parsed.opened  # (the page's own bold text uses <b>)

    pipe = pages["pipe-1"]
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in pipe  # the reply, as text
    assert "&lt;/details&gt;&lt;/pre&gt;" in pipe and "&lt;/details&gt;&lt;details open&gt;" in pipe
    assert "caf\\xe9 red done" in pipe  # the byte that was not UTF-8 shown as such, the colour codes gone
    assert "\\xff\\xfe broken bytes &lt;script&gt;x&lt;/script&gt;" in pipe  # a raw non-UTF-8 log
    assert re.search(r"characters cut here; the whole text is in hand/tasks/pipe-1/junior/rollout-00\.json",
                     pipe)  # the 20 MB output, cut with a note
    assert "rollout-01.json is not valid JSON, perhaps cut short by a kill" in pipe
    assert "Shown from rollout-02.trajectory.json (the rollout had not finished)" in pipe
    assert "Shown from rollout-03.trajectory.jsonl (the rollout had not finished)" in pipe and "Journalled." in pipe
    assert "format error: your reply had no ```bash blocks" in pipe
    assert "add() subtracts &lt;b&gt;instead&lt;/b&gt; of adding" in pipe  # the dataset's problem statement
    assert "Gold patch (from the dataset): never shown to a model" in pipe
    assert "FAIL_TO_PASS: 1/2 passed" in pipe and "test_add_negative" in pipe
    assert "PASS_TO_PASS: 0/1 passed" in pipe and "test_sub" in pipe
    assert "1 line(s) could not be read (cut short)" in pipe  # the ledger's torn last line
    assert "fixed add()" not in pipe and "Team" not in re.findall(r"<h2>([^<]*)</h2>", pipe)

    # Gold lines marked with the contexts that held them, by coverage.py's rules: the candidate's hunk holds the
    # removed line and proposes one added line; the other added line is held by no context.
    gold_rows = re.findall(r'<div class="(add|del)"><span class="cov"[^>]*>(.*?)</span><span class="code">(.*?)</span>',
                           pipe)
    marks = {code: mark for _, mark, code in gold_rows}
    assert marks["-    return a - b"] == "<b>cand.</b> <b>+exp.</b> <b>sent</b>"
    assert marks["+    return a + b"] == "<b>cand.</b> <b>+exp.</b> <b>sent</b>"
    assert marks["+    # checked by test_add"] == "····· ····· ····"

    solo = pages["solo-1"]
    assert "No evaluation on record for this task" in solo
    assert "solo/trajectory.json is not valid JSON" in solo and "Solo agent" in solo

    team = pages["team-1"]
    events = re.findall(r"<tr><td>([\d.?]+ s)</td><td>([^<]*)</td><td>([^<]*)</td>", team)
    assert [(when, who, what.split(",")[0].split(" (")[0]) for when, who, what in events] == [
        ("1.0 s", "lead", "delegates to worker-1"), ("3.0 s", "worker-1", "command"),
        ("5.0 s", "worker-1", "message to lead"), ("9.0 s", "worker-1", "ends: submitted")]
    assert "1 line(s) of commands.jsonl could not be read" in team
    assert "&lt;i&gt;done&lt;/i&gt; soon" in team
    assert "lead · submitted" in team and "worker-1 · submitted" in team


def test_report_tables_link_each_task_page(tmp_path):
    run = make_run(tmp_path)
    run = run.rename(run.parent / "hånd")  # a run folder whose name a link must quote
    report = tmp_path / "out" / "report.html"
    pages_of(run, report)
    links = re.findall(r'<a href="([^"]+)">(pipe-1|solo-1|team-1)</a>', report.read_text())
    assert {name for _, name in links} == {"pipe-1", "solo-1", "team-1"}
    for href, name in links:
        target = report.parent / unquote(href)
        assert "%C3%A5" in href and target == report.parent / "report_tasks" / "hånd" / f"{name}.html"
        assert target.is_file()
        back = re.search(r'<a href="([^"]+)">← report</a>', target.read_text()).group(1)
        assert (target.parent / unquote(back)).resolve() == report.resolve()
    assert "[pipe-1](report_tasks/h%C3%A5nd/pipe-1.html)" in (report.parent / "report.md").read_text()


def test_without_the_dataset_the_issue_comes_from_a_trajectory(tmp_path):
    run = make_run(tmp_path)
    pages = pages_of(run, tmp_path / "report.html", gold=False, problems=False)
    assert "this is the task as the agents were given it" in pages["pipe-1"]
    assert "&lt;issue&gt;add() subtracts&lt;/issue&gt;" in pages["pipe-1"]
    assert "Not available: the report could not read the dataset." in pages["pipe-1"]


def test_a_record_the_report_could_not_read_is_named_on_the_page_as_in_the_report(tmp_path):
    """The page shows the pool and the brief as load_run read them (once, for the report and the pages): a byte
    that is not UTF-8 makes the file unreadable for both, and the page says why instead of leaving it out."""
    run = make_run(tmp_path)
    pool = run / "tasks" / "pipe-1" / "junior" / "pool.json"
    pool.write_bytes(pool.read_bytes().replace(b'"calc.py"', b'"calc\xff.py"', 1))
    page = pages_of(run, tmp_path / "report.html")["pipe-1"]
    assert re.search(r'<h2>Candidate pool</h2>\s*<p class="bad">junior/pool.json is not valid JSON, perhaps cut '
                     r"short by a kill \([\d,]+ bytes; &#x27;utf-8&#x27; codec can&#x27;t decode byte 0xff", page)


def test_a_page_over_the_bound_is_made_again_with_smaller_cuts(tmp_path):
    run = make_run(tmp_path)
    rollout = run / "tasks" / "pipe-1" / "junior" / "rollout-00.json"
    record = json.loads(rollout.read_text())
    # 400 steps of 100 kB each: 40 MB of output, over the bound even at the first cut (20,000 characters each).
    record["trajectory"]["steps"] = [step(i, f"step {i}", "cat f", "y" * 100_000) for i in range(400)]
    rollout.write_text(json.dumps(record))
    page = pages_of(run, tmp_path / "report.html")["pipe-1"]
    assert len(page.encode()) <= MAX_PAGE_BYTES
    assert "long text(s) on this page are cut to 4,000 characters" in page
    assert "step 399" in page  # the last steps are still there


# -- hostile run directories ----------------------------------------------------------------------------------

EVIL = "<script>alert(1)</script>\"'><img src=x onerror=alert(2)><!-- &amp;"


def poisoned(value, keep=("instance_id",)):
    """``value`` with every leaf (text, number, boolean, null) the hostile text, lists never empty; the keys and
    ``keep``'s values stay, so that the records still have their shape."""
    if isinstance(value, dict):
        return {key: item if key in keep else poisoned(item, keep) for key, item in value.items()}
    if isinstance(value, list):
        return [poisoned(item, keep) for item in value] or [EVIL]
    return EVIL


def hostile_run(root: Path) -> Path:
    """make_run's run with every field any record of it can hold, each of them (and every text file) hostile."""
    run = make_run(root)
    task = run / "tasks" / "pipe-1"
    extra = {
        "junior/rollout-00.json": {"error": "e", "patch_error": "e", "model": "m", "temperature": 0, "seed": 0},
        "junior/pool.json": {"dropped": ["d"], "empty": [1], "unparsable": [2], "failed": [3]},
        "senior/brief.json": {"senior_exit": "x", "senior_steps": 1, "senior_cost": 1, "problems": ["p"],
                              "senior_error": "e"},
        "principal/result.json": {"error": "e", "patch_lines": 1, "failed_attempts": ["a"],
                                  "candidates": {"shown": "k1"}},
        "eval/result.json": {"error": "e", "near_misses": {"a": "b"}, "timed_out": False, "network": False,
                             "entry_exit_code": 0, "patch_empty": False},
    }
    for name, fields in extra.items():
        path = task / name
        write(path, {**json.loads(path.read_text()), **fields})
    rollout = json.loads((task / "junior" / "rollout-00.json").read_text())
    rollout["trajectory"].update(resumed=True, submission="s", error="e")
    rollout["trajectory"]["steps"][0].update(tool_calls=[{"name": "bash"}], changed_files=["f"], timed_out=True)
    write(task / "junior" / "rollout-00.json", rollout)
    pool = json.loads((task / "junior" / "pool.json").read_text())
    pool["candidates"][0]["test_patch"] = CANDIDATE
    write(task / "junior" / "pool.json", pool)
    team = run / "tasks" / "team-1" / "team"
    delegations = json.loads((team / "delegations.json").read_text())
    delegations.update(sizing="fixed", stages=["implementation"], submit_guard="on", directory="on",
                       lead_prompt="minimal")
    delegations["delegations"][0]["error"] = "e"
    write(team / "delegations.json", delegations)
    write(team / "lead_waits.json", [{"start": 1_800_000_002.0, "end": 1_800_000_004.0}])
    write(team / "messages.json", [{**json.loads((team / "messages.json").read_text())[0], "malformed": True,
                                    "problem": "p"}])
    lines = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    for line in lines:
        line.update(models={"junior": "m", EVIL: "m"}, error="e")
    for path in sorted(run.rglob("*")):
        if not path.is_file():
            continue
        if path.suffix == ".json":
            try:
                write(path, poisoned(json.loads(path.read_text())))
            except ValueError:  # a record cut short on purpose stays so
                pass
        elif path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{") and
                    line.endswith("}")]
            write(path, "".join(json.dumps(poisoned(row)) + "\n" for row in rows))
        elif path.suffix in (".md", ".diff", ".log", ".sh"):
            write(path, EVIL + "\n")
    write(run / "predictions.jsonl", "".join(json.dumps(poisoned(line)) + "\n" for line in lines))
    return run


class Tags(HTMLParser):
    """Every element and attribute a browser would make of a page."""

    def __init__(self):
        super().__init__()
        self.tags: set[str] = set()
        self.attributes: set[str] = set()
        self.sources: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.attributes |= {name for name, _ in attrs}
        self.sources += [value or "" for name, value in attrs if name == "src"]


def test_hostile_values_in_every_field_of_a_run_show_as_text(tmp_path):
    run = hostile_run(tmp_path)
    html = tmp_path / "out" / "report.html"
    pages = pages_of(run, html, gold=False, problems=False)
    assert set(pages) == {"pipe-1", "solo-1", "team-1"}
    for name, page in [*pages.items(), ("report.html", html.read_text())]:
        assert EVIL not in page and "<script" not in page.lower() and "<!-- &amp" not in page, name
        parsed = Tags()
        parsed.feed(page)
        assert not parsed.tags & {"script", "iframe", "object"}, name
        assert all(source.startswith("data:image/png;base64,") for source in parsed.sources), name  # its figures
        assert not {a for a in parsed.attributes if a.startswith("on") or a == "x"}, name
        assert html_escape(EVIL) in page, name  # the values are shown, as text
    votes = re.search(r"<h3>candidate 1: (.*?) vote\(s\)", pages["pipe-1"]).group(1)
    assert votes == html_escape(EVIL)


def html_escape(text: str) -> str:
    import html

    return html.escape(text, quote=True)


def test_hostile_names_and_dataset_texts_show_as_text(tmp_path):
    """What the poisoned records cannot hold: the run's folder name (its run id, in every page's title, facts and
    footer and in the report's tables), a worker's file name (its tab), and the dataset's problem statement and gold
    patch: each is shown as text by the templates."""
    name = "<img src=x onerror=alert(2)>'\""  # a folder name can hold anything but a slash
    run = make_run(tmp_path).rename(tmp_path / "runs" / name)
    worker = "worker-2<b onmouseover=alert(3)>"
    write(run / "tasks" / "team-1" / "team" / f"{worker}.trajectory.json", trajectory("w", []))
    evil = EVIL.replace("/", "")  # a line of the gold patch: no newline, and the hunk's counts unchanged
    report = build_report([run], {"pipe-1": GOLD.replace("# checked by test_add", "# " + evil)},
                          problems={"pipe-1": EVIL})
    html = tmp_path / "out" / "report.html"
    write_report(report, html.parent)
    pages = {p.stem: p.read_text() for p in (html.parent / "report_tasks").glob("*/*.html")}
    assert set(pages) == {"pipe-1", "solo-1", "team-1"}
    for page_name, page in [*pages.items(), ("report.html", html.read_text())]:
        parsed = Tags()
        parsed.feed(page)
        assert "script" not in parsed.tags, page_name
        assert all(source.startswith("data:image/png;base64,") for source in parsed.sources), page_name
        assert not {a for a in parsed.attributes if a.startswith("on") or a == "x"}, page_name
        assert html_escape(name) in page, page_name  # the run id, as text
    assert "<title>" + html_escape(f"pipe-1 · {name}") + "</title>" in pages["pipe-1"]
    assert html_escape(EVIL) in pages["pipe-1"] and "<script" not in pages["pipe-1"].lower()  # the problem statement
    assert f'<span class="code">+    # {html_escape(evil)}</span>' in pages["pipe-1"]  # the gold line, marked
    assert f"{html_escape(worker)} · submitted" in pages["team-1"]  # its tab


def test_an_instance_id_that_leaves_the_report_folder_is_left_out_with_a_message(tmp_path):
    run = make_run(tmp_path)
    escaping = "../../../../escaped"
    with open(run / "predictions.jsonl", "a", encoding="utf-8") as predictions:
        predictions.write(json.dumps(prediction(escaping)) + "\n")
    html = tmp_path / "a" / "b" / "c" / "report.html"
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "report", str(run), "--output", str(html.parent)],
                          capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "COLUMNS": "250"})
    assert done.returncode == 0, done.stdout + done.stderr
    message = "instance id '../../../../escaped' is not a safe file name (it contains '/')"
    assert message in done.stderr and "left out of the report" in done.stderr
    assert message in (html.parent / "report.md").read_text()
    assert [p for p in tmp_path.rglob("escaped*")] == []  # nothing written outside the report's folder
    pages = {p.name for p in (html.parent / "report_tasks" / "hand").iterdir()}
    assert pages == {"pipe-1.html", "solo-1.html", "team-1.html"}


# -- in a browser ------------------------------------------------------------------------------------------------

def chromium() -> str:
    """The chromium binary, installed from Debian's package when missing (promised_but_missing when that fails)."""
    found = shutil.which("chromium")
    if found:
        return found
    if shutil.which("apt-get") and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"],
                                 capture_output=True, text=True, env=env, timeout=900)
        if install.returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env, timeout=900)
            install = subprocess.run(["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"],
                                     capture_output=True, text=True, env=env, timeout=900)
        found = shutil.which("chromium")
        if found:
            return found
        promised_but_missing("chromium", f"apt-get install chromium failed: {install.stderr[-500:]}")
    promised_but_missing("chromium", "apt-get install chromium as root (scripts/setup.sh does)")


def browse(binary: str, page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless Chromium on a local file: no network (every host name resolves to nothing), console messages
    logged to stderr."""
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--host-resolver-rules=MAP * ~NOTFOUND", "--enable-logging=stderr", "--v=0",
               f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(command, capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)


def console_errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines()
            if ":CONSOLE" in line or "Uncaught" in line or "Content Security Policy" in line
            or "ERR_NAME_NOT_RESOLVED" in line]


@pytest.mark.docker
@pytest.mark.slow
def test_report_and_task_page_of_a_scripted_run_in_chromium(tmp_path):
    from PIL import Image
    from scripted_pipeline import (
        SUBMIT,
        apply_patch_command,
        bash,
        brief_from_patch,
        edits_from_patch,
        patch_per_file,
        reply,
        write_config,
    )

    from pipeline.tasks import load_tasks

    binary = chromium()
    task = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
    halves = list(patch_per_file(task.patch).values())
    script = {"junior": [[reply(HOSTILE), bash(apply_patch_command(halves[0])), SUBMIT],
                         [bash(apply_patch_command(halves[1])), bash("seq 1 3000"), SUBMIT]],
              "senior": [bash("git grep -n 'def ' -- '*.py' | head -40"), reply(brief_from_patch(task.patch))],
              "principal": [reply(edits_from_patch(task.patch))]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    write_config(tmp_path / "config.yaml", tmp_path / "script.yaml")

    def swepipe(*args):
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, env={**os.environ, "COLUMNS": "250"}, stdin=subprocess.DEVNULL)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    swepipe("run", "--instance-ids", task.instance_id, "--config", "config.yaml", "--run-id", "web", "--evaluate")
    swepipe("report", "runs/web", "--output", "site")
    report = tmp_path / "site" / "report.html"

    done = browse(binary, report, tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_errors(done.stderr) == []
    hrefs = re.findall(r'<a href="([^"]+)">' + re.escape(task.instance_id) + "</a>", done.stdout)
    assert hrefs, "the report's task table links no task page"
    page = report.parent / unquote(hrefs[0])
    assert page.is_file() and page.parent.parent == report.parent / "report_tasks"

    done = browse(binary, page, tmp_path / "profile", "--dump-dom")
    assert done.returncode == 0, done.stderr[-2000:]
    assert console_errors(done.stderr) == []  # no error, no blocked script, nothing fetched
    dom = done.stdout
    assert "<title>pwned</title>" not in dom and "<script" not in dom.lower()
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom  # the hostile reply shown as text
    for section in ("Problem statement", "Prediction and gold patch", "Evaluation", "Junior rollouts",
                    "Candidate pool", "Senior", "Principal"):
        assert f"<h2>{section}</h2>" in dom
    assert "rollout 00 · submitted" in dom and "rollout 01 · submitted" in dom  # a tab per rollout
    assert dom.count('class="step') >= 6  # 3 steps each, every one shown
    assert "git apply /tmp/part.diff" in dom and "seq 1 3000" in dom  # the commands
    assert re.search(r"<summary>output \(2,\d\d\d lines, [\d,]+ characters\)</summary><pre[^>]*>1\n2\n3\n", dom)
    assert "Prediction (submitted, source: principal)" in dom
    assert "Gold patch (from the dataset): never shown to a model" in dom
    gold_line = next(line for line in task.patch.splitlines() if line.startswith("+") and not line.startswith("+++"))
    assert re.search(r'<div class="add"><span class="cov"[^>]*>.*?</span><span class="code">'
                     + re.escape(gold_line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")), dom)
    assert "category <b>resolved</b>" in dom and re.search(r"FAIL_TO_PASS: (\d+)/\1 passed", dom)

    shot = tmp_path / "task.png"
    done = browse(binary, page, tmp_path / "profile", "--hide-scrollbars", "--window-size=1400,2400",
                  f"--screenshot={shot}")
    assert done.returncode == 0 and shot.is_file(), done.stderr[-2000:]
    assert console_errors(done.stderr) == []
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 2400)
    colours = {colour for _, colour in image.getcolors(maxcolors=1 << 24)}
    assert (0xE6, 0xFF, 0xEC) in colours and (0xFF, 0xEB, 0xE9) in colours  # added and removed lines, coloured
    assert (0xB8, 0x86, 0x0B) in colours  # the gold patch's banner


def test_a_rollout_s_edits_are_shown_as_diffs_and_a_garbled_one_as_its_record(tmp_path):
    run = make_run(tmp_path)
    block = ('Fix.\n```edit\ncalc.py\n<<<<<<< SEARCH\n    return a - b\n=======\n    return a + b  # "sum" \\\\ ok\n'
             '>>>>>>> REPLACE\nnotes.txt\n<<<<<<< SEARCH\nmissing line\n=======\nx\n>>>>>>> REPLACE\n```')
    body = block.split("```edit\n")[1].removesuffix("```")
    arguments = json.dumps({"command": "insert", "path": "calc.py", "insert_line": 2, "new_str": "# <end>"})
    steps = [step(0, block, body, "Edited calc.py ...", action="edit",
                  edits=[{"command": "str_replace", "path": "calc.py", "ok": True},
                         {"command": "str_replace", "path": "notes.txt", "ok": False, "error": "does not occur"}]),
             step(1, "", arguments, "Inserted ...", action="str_replace_editor",
                  edits=[{"command": "insert", "path": "calc.py", "ok": True}]),
             step(2, "", "{not json", "error", action="str_replace_editor",
                  edits=[{"command": "view", "path": "calc.py", "ok": False, "error": "x"}])]
    write(run / "tasks" / "pipe-1" / "junior" / "rollout-00.json", {
        "index": 0, "exit_reason": "submitted", "patch": CANDIDATE, "steps": 3,
        "trajectory": trajectory("rollout-00", steps)})
    page = pages_of(run, tmp_path / "out" / "report.html")["pipe-1"]
    assert '<div class="del">-    return a - b</div>' in page
    assert '<div class="add">+    return a + b  # &quot;sum&quot; \\\\ ok</div>' in page
    assert "edit: str_replace notes.txt failed" in page and '<div class="del">-missing line</div>' in page
    assert '<div class="hunk">@@ insert after line 2 @@</div>' in page and "+# &lt;end&gt;" in page
    assert "edit: view calc.py failed" in page  # its action cannot be read again: the record alone
    assert not structure(page).broken
