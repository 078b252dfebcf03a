"""Building a task page's view (task_view.TaskPage) from what the loader read.

The task's records come from ``load_run`` (the prediction, the eval result, the pool, the brief, the context) and
the rest of its files from ``load.TaskFiles``, read when the page is built. What is logic is done here: texts are
cleaned (printable.clean) and cut to the page's bound (``limit``, counted), long ones marked to be folded, numbers,
money and times formatted, the team's records merged into one timeline, the gold patch's lines marked with the
contexts that held them (coverage.py's rules).
"""

from __future__ import annotations

import json
import re
import time
from typing import TYPE_CHECKING, Any, Callable

from pipeline.analysis import table as tab
from pipeline.analysis.coverage import GoldLineCoverage, gold_line_coverage, shown_candidates, squash
from pipeline.analysis.load import MISSING, RunData, TaskData, TaskFiles, config_section, read_json, read_text
from pipeline.analysis.retrieval import rollout_name, task_findings, unaudited
from pipeline.analysis.sealing import seal_count, sealed_words
from pipeline.analysis.stats import changed_infrastructure
from pipeline.analysis.team.records import ABSOLUTE
from pipeline.audit import reached_line
from pipeline.errors import InfrastructureFault
from pipeline.records import Rollout, Unreadable
from pipeline.records.base import Part
from pipeline.records.evaluation import TestOutcome, canary_words
from pipeline.report.task_view import (
    AgentPanel,
    Block,
    BriefView,
    Call,
    CandidateView,
    Diff,
    DiffLine,
    EvalSection,
    Event,
    Fact,
    JuniorsSection,
    LedgerSection,
    Mark,
    Outcome,
    PoolSection,
    PrincipalSection,
    ProblemSection,
    ReplaySection,
    ResultSection,
    RetrievalSection,
    RolloutPanel,
    Section,
    SeniorSection,
    SoloSection,
    StepView,
    Tab,
    Tabs,
    TaskPage,
    TeamSection,
    TestRow,
    TrajectoryView,
)
from pipeline.text.printable import clean

if TYPE_CHECKING:
    from pipeline.edits.editor import EditorCall

FOLD_LINES = 15  # a text longer than this (or than FOLD_CHARS) is folded
FOLD_CHARS = 1_500
STEPS_KEPT = 60  # at the smallest cut, steps shown per agent: the first ones and the last 10
_SPAN_HEADER = re.compile(r"^### (.+):(\d+)-(\d+)$")


def build_task_view(run: RunData, task: TaskData, gold_patch: str | None = None, problem: str | None = None,
                    limit: int = 20_000, last: bool = False, back: list[str] | None = None) -> TaskPage:
    """The page of ``task`` with long texts cut to ``limit`` characters (``last``: the smallest cut, which also
    leaves steps out); ``back``: the links to the report."""
    return _Builder(run, task, gold_patch, problem, limit, last).page(back or [])


def _facts(pairs, keep_none: bool = False) -> list[Fact]:
    return [Fact(clean(name), clean(value)) for name, value in pairs if keep_none or value is not None]


def _num(value, default=0.0) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


def _count(value) -> str:
    return f"{int(_num(value)):,}"


def _reached_text(reached) -> str:
    """A pool candidate's ``reached`` (its rollouts whose trajectories reached for the answer) in words."""
    return reached_line([_plain(entry) for entry in reached]) if isinstance(reached, list) else ""


def _plain(value):
    """A record's part as the dict it was read from (to be shown as text); any other value as it is."""
    return value.to_dict() if isinstance(value, Part) else value


class _Builder:
    def __init__(self, run: RunData, task: TaskData, gold_patch: str | None, problem: str | None, limit: int,
                 last: bool):
        self.run, self.task, self.gold_patch, self.problem = run, task, gold_patch, problem
        self.limit, self.last = limit, last
        self.files = TaskFiles(run, task)
        self.cuts = 0  # texts cut on this page
        self.tab_groups = 0
        self.max_tabs = 0

    def page(self, back: list[str]) -> TaskPage:
        makers: list[tuple[str, str, Callable[[], Any]]] = [
            ("problem", "Problem statement", self.problem_section),
            ("result", "Prediction and gold patch", self.result_section),
            ("eval", "Evaluation", self.eval_section),
            ("retrieval", "Retrieval audit", self.retrieval_section),
            ("juniors", "Junior rollouts", self.juniors_section),
            ("pool", "Candidate pool", self.pool_section),
            ("senior", "Senior", self.senior_section),
            ("principal", "Principal", self.principal_section),
            ("replay", "Replay of a recorded trajectory", self.replay_section),
            ("solo", "Solo agent", self.solo_section),
            ("team", "Team", self.team_section),
            ("ledger", "Model calls (ledger)", self.ledger_section)]
        sections = []
        for anchor, title, make in makers:
            try:
                view = make()
            except InfrastructureFault:
                raise
            except Exception as error:  # noqa: BLE001 - one odd record must not cost the whole page
                sections.append(Section(anchor, title, failure=f"{type(error).__name__}: {clean(error)}"))
                continue
            if view is not None:
                sections.append(Section(anchor, title, view))
        task, prediction = self.task, self.task.prediction
        seal = seal_count([prediction], config_section(self.run.config, "containers").get("network"))
        facts = [("run", self.run.run_id), ("strategy", prediction.strategy or tab.NA),
                 ("outcome", task.category), ("source", prediction.source or tab.NA),
                 ("cost", tab.money(task.total_cost)), ("time", tab.seconds(task.seconds)),
                 ("agents' containers", sealed_words(seal))]
        if seal.unsealed:
            facts.append(("not sealed", "; ".join(entry.removeprefix(f"{task.instance_id} ")
                                                  for entry in seal.unsealed)))
        changed = changed_infrastructure(task)
        if changed:  # beside the outcome: a resolved verdict whose patch touched what runs the tests
            facts.insert(3, ("resolved, and the patch changes test infrastructure", ", ".join(changed)))
        if task.fail_to_pass:
            facts.append(("FAIL_TO_PASS passed", f"{task.fail_to_pass[0]}/{task.fail_to_pass[1]}"))
        models = prediction.models or {}
        cut_note = (f"{self.cuts} long text(s) on this page are cut to {self.limit:,} characters (marked where); "
                    "the run directory has them whole." if self.cuts else None)
        return TaskPage(
            title=f"{task.instance_id} · {self.run.run_id}", instance_id=task.instance_id, back=back,
            facts=_facts(facts, keep_none=True), models=_facts(models.items(), keep_none=True),
            error=clean(prediction.error) if prediction.error else None, cut_note=cut_note,
            max_tabs=self.max_tabs, sections=sections, generated=time.strftime("%Y-%m-%d %H:%M:%S"),
            source=self.files.relative(self.files.root))

    # -- pieces -------------------------------------------------------------------------------------------------

    def cut(self, text: str, where: str = "") -> str:
        if len(text) <= self.limit:
            return text
        self.cuts += 1
        head, tail = text[: self.limit * 2 // 3], text[-(self.limit // 3):]
        return (f"{head}\n\n[… {len(text) - len(head) - len(tail):,} of {len(text):,} characters cut here"
                + (f"; the whole text is in {where}" if where else "") + f" …]\n\n{tail}")

    def block(self, text, title: str, where: str = "", css: str = "", open_: bool | None = None) -> Block:
        """A text, folded when long (or when ``open_`` is False)."""
        text = text if isinstance(text, str) else clean(text)
        if not text.strip():
            return Block(title, empty=True)
        lines = text.count("\n") + 1
        fold = open_ is False or (open_ is None and (lines > FOLD_LINES or len(text) > FOLD_CHARS))
        size = f"{lines:,} line{'s' if lines != 1 else ''}, {len(text):,} characters"
        return Block(title, clean(self.cut(text, where)), size, fold, css)  # cut first: a 20 MB output is not cleaned

    def diff(self, patch, where: str = "", coverage: GoldLineCoverage | None = None) -> Diff:
        """A unified diff; with ``coverage``, each gold line marked with the contexts that held it."""
        text = patch if isinstance(patch, str) else clean(patch)
        if not text.strip():
            return Diff([])
        text = clean(self.cut(text, where))
        names = list(coverage.contexts) if coverage else []
        lines, path, old_no = [], None, 0
        for line in text.split("\n"):
            kind, marks = "", None
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
                    marks = self._marks(coverage, names, added=(path, squash(line[1:])))
            elif line.startswith("-"):
                kind = "del"
                if coverage:
                    marks = self._marks(coverage, names, removed=(path, old_no))
                old_no += 1
            elif line.startswith(" "):
                old_no += 1
            held = ", ".join(m.name for m in marks if m.held) if marks is not None else ""
            lines.append(DiffLine(kind, line, marks, f"held by: {held or 'none'}" if marks is not None else ""))
        return Diff(lines, covered=coverage is not None)

    @staticmethod
    def _marks(coverage: GoldLineCoverage, names: list[str], added=None, removed=None) -> list[Mark] | None:
        if added is not None and not added[1]:
            return None
        marks = []
        for name in names:
            removed_in, added_in = coverage.contexts[name]
            marks.append(Mark(name, (added in added_in) if added is not None else (removed in removed_in)))
        return marks

    def tabs(self, items: list[Tab]) -> Tabs | None:
        """CSS-only tabs, the first shown."""
        if not items:
            return None
        self.tab_groups += 1
        self.max_tabs = max(self.max_tabs, len(items))
        return Tabs(f"g{self.tab_groups}", items)

    @staticmethod
    def rows(rows: list[list]) -> list[list[str]]:
        return [[clean(cell) for cell in row] for row in rows]

    # -- agents ---------------------------------------------------------------------------------------------

    def trajectory(self, traj, where: str) -> TrajectoryView:
        """An agent's conversation: opening messages folded, then each step (reply, command, output)."""
        if not isinstance(traj, dict):
            return TrajectoryView(recorded=False)
        facts = [("exit", traj.get("exit_reason") or "(not finished)"), ("steps", len(traj.get("steps") or [])),
                 ("cost", tab.money(_num(traj.get("cost")))),
                 ("tokens in/out", f"{_count(traj.get('input_tokens'))} / {_count(traj.get('output_tokens'))}"),
                 ("time", tab.seconds(_num(traj.get("seconds"))))]
        if traj.get("resumed"):
            facts.append(("resumed", "yes"))
        view = TrajectoryView(facts=_facts(facts, keep_none=True),
                              error=clean(traj["error"]) if traj.get("error") else None)
        messages = [m for m in traj.get("messages") or [] if isinstance(m, dict)]
        opening = []
        for message in messages:
            if message.get("role") == "assistant":
                break
            opening.append(message)
        view.opening = [self.block(m.get("content"), f"{m.get('role', '?')} message", where, open_=False)
                        for m in opening]
        steps = [s for s in traj.get("steps") or [] if isinstance(s, dict)]
        if not steps and len(messages) > len(opening):
            view.messages = [self.block(m.get("content"), f"{m.get('role', '?')}", where,
                                        css="reply" if m.get("role") == "assistant" else "")
                             for m in messages[len(opening):]]
        numbered = list(enumerate(steps))
        if self.last and len(steps) > STEPS_KEPT:
            view.steps = [self.step(n, s, where) for n, s in numbered[: STEPS_KEPT - 10]]
            view.left_out = (f"[… {len(steps) - STEPS_KEPT} steps left out to keep this page small; they are in "
                             f"{where} …]")
            view.last_steps = [self.step(n, s, where) for n, s in numbered[-10:]]
        else:
            view.steps = [self.step(n, s, where) for n, s in numbered]
        if traj.get("submission"):
            view.submission = self.block(traj["submission"], "submission", where)
        return view

    def step(self, number: int, step: dict, where: str) -> StepView:
        fmt = bool(step.get("format_error"))
        code = step.get("exit_code")
        head = [f"step {step.get('index', number) if isinstance(step.get('index'), int) else number}",
                tab.money(_num(step.get("cost"))),
                f"tokens {_count(step.get('input_tokens'))} in / {_count(step.get('output_tokens'))} out",
                f"model {_num(step.get('model_seconds')):.1f} s"]
        if step.get("command") is not None:
            head.append(f"command {_num(step.get('command_seconds')):.1f} s")
        if code is not None:
            head.append(f"exit code {code}")
        if step.get("timed_out"):
            head.append("timed out")
        view = StepView(css="step fmt" if fmt else "step fail" if isinstance(code, int) and code != 0 else "step",
                        head=" · ".join(map(str, head)),
                        reply=self.block(step.get("reply"), "reply", where, css="reply", open_=True))
        if step.get("tool_calls"):
            view.tool_calls = self.block(step["tool_calls"], "tool calls", where, open_=False)
        if fmt:
            view.format_error = clean(step["format_error"])
        if step.get("command") is not None:
            view.action = clean(step.get("action") or "bash")
            view.command = self.cut(clean(step["command"]), where)
        if step.get("output") is not None:
            view.output = self.block(step.get("output"), "output", where)
        if step.get("changed_files"):
            view.changed = clean(", ".join(map(str, step["changed_files"])))
        records = [edit for edit in step.get("edits") or [] if isinstance(edit, dict)]
        calls = _editor_calls(step) if records else []
        for number, edit in enumerate(records):
            said = f"{edit.get('command')} {edit.get('path')}" + ("" if edit.get("ok") else " failed")
            call = calls[number] if number < len(calls) else None
            shown = _call_diff(call) if call is not None and call.command == edit.get("command") else None
            view.edits.append((clean(said), bool(edit.get("ok")), self.diff(shown, where) if shown else None))
        return view

    # -- sections -------------------------------------------------------------------------------------------

    def problem_section(self) -> ProblemSection:
        if self.problem:
            return ProblemSection(None, self.block(self.problem, "the dataset's problem statement", open_=True))
        first = self.files.first_task_message()
        if first:
            where, content = first
            return ProblemSection("The dataset was not read: this is the task as the agents were given it (the "
                                  f"first message of {where}).", self.block(content, "task message", open_=True))
        return ProblemSection("Not on record (the dataset was not read and no trajectory holds it).", None)

    def result_section(self) -> ResultSection:
        prediction = self.task.prediction
        view = ResultSection(clean(prediction.source or tab.NA),
                             self.diff(prediction.model_patch, self.files.layout.predictions.name), None)
        if self.gold_patch is not None:
            coverage = gold_line_coverage(self.task, self.gold_patch, shown_candidates(self.run.config),
                                          self.files.root)
            if coverage and coverage.contexts:
                view.gold_note = (f"Coverage of each gold line at k=K ({', '.join(coverage.contexts)}), as in the "
                                  "report's coverage tables: cand. = the junior candidates' hunks and added lines; "
                                  "+exp. = plus the code expansion; sent = what the principal was sent. A bold "
                                  "name: that context held the line; dots: it did not.")
            elif coverage is not None:
                view.gold_note = "No coverage: the run has no candidate pool or brief for this task."
            view.gold = self.diff(self.gold_patch, "the dataset", coverage)
        return view

    def eval_section(self) -> EvalSection:
        result = self.task.eval_result
        if result is None:
            return EvalSection(recorded=False)
        folder = self.files.eval_files()
        view = EvalSection(recorded=True, facts=_facts([
            ("category", result.category), ("resolved", result.resolved),
            ("official protocol's verdict", result.official_resolved
             if result.official_resolved is not None and result.official_resolved != result.resolved else None),
            ("integrity findings", "; ".join(f"{f.kind}: {f.detail}" for f in result.integrity)
             if result.flagged else None),
            ("canaries", canary_words(result.canaries)),
            ("test infrastructure changed" + (" (resolved: read the verdict with care)" if result.resolved is True
                                              else ""), "; ".join(map(str, result.test_infrastructure))
             if isinstance(result.test_infrastructure, list) and result.test_infrastructure else None),
            ("patch applied", result.patch_applied), ("patch empty", result.patch_empty),
            ("timed out", result.timed_out), ("network", result.network),
            ("exit code", result.entry_exit_code)]))
        if result.error:
            view.error = self.block(result.error, "error", open_=True)
        required: dict[str, str] = {}
        for kind in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            outcome = getattr(result, kind)
            if not isinstance(outcome, TestOutcome):
                view.outcomes.append(Outcome(kind, recorded=False))
                continue
            groups = {g: [str(n) for n in getattr(outcome, g) or []] for g in ("passed", "failed", "missing")}
            for names in groups.values():
                for name in names:
                    required[name] = kind
            shown = [(group, [clean(self.cut(n)) for n in groups[group][:500]], max(len(groups[group]) - 500, 0))
                     for group in ("failed", "missing") if groups[group]]
            view.outcomes.append(Outcome(kind, True, len(groups["passed"]), sum(map(len, groups.values())), shown))
        if result.near_misses:
            view.near_misses = self.block(result.near_misses, "near misses (names equal up to whitespace, not "
                                                              "counted)")
        output = read_json(folder.output, "surrogateescape").data if folder else None
        tests = output.get("tests") if isinstance(output, dict) else None
        if isinstance(tests, list) and tests:
            view.test_count, view.tests_left_out = f"{len(tests):,}", max(len(tests) - 5000, 0)
            for test in tests[:5000]:
                if isinstance(test, dict):
                    status = test.get("status")
                    css = "good" if status == "PASSED" else "bad" if status in ("FAILED", "ERROR") else ""
                    view.tests.append(TestRow(self.cut(clean(test.get("name")), ""), clean(status), css,
                                              required.get(str(test.get("name")), "")))
        for log in folder.logs if folder else ():
            text = read_text(log)
            if text is not None:
                view.logs.append(self.block(text, log.name, self.files.relative(log), open_=False))
        return view

    def retrieval_section(self) -> RetrievalSection | None:
        """Every finding of the retrieval audit on the task's trajectories, and the imported candidates it could
        not audit; None when none of the task's records was audited."""
        task = self.task
        audited = [rollout_name(r, n) for n, r in enumerate(task.rollouts) if isinstance(r.retrieval, list)]
        if task.brief is not None and isinstance(task.brief.senior_retrieval, list):
            audited.append("senior")
        audited += [f"{name} trajectory" for name in task.agent_retrieval]
        missing = unaudited(task)
        if not audited and not missing:
            return None
        rows = [[reached.who, reached.finding.step, reached.finding.kind, self.cut(clean(reached.finding.command)),
                 clean(reached.finding.reason)] for reached in task_findings(task)]
        said = f"{len(audited)} trajectory(ies) audited: " + ", ".join(audited) if audited else "nothing audited"
        return RetrievalSection(clean(said), self.rows(rows),
                                [clean(f"{rollout_name(r, n)}: {r.unaudited}") for n, r in enumerate(missing)])

    def juniors_section(self) -> JuniorsSection | None:
        if not self.files.has(self.files.paths.junior):
            return None
        items, rows = [], []
        for rollout in self.files.rollouts():
            record, notes = rollout.record, []
            record_path, live_path = rollout.record_path, rollout.live_path  # each set when its file was read
            traj, where = None, ""
            if isinstance(record, Rollout) and record_path is not None:
                traj, where = record.trajectory, self.files.relative(record_path)
            elif isinstance(record, Unreadable) and record_path is not None:
                notes.append(f"{record_path.name} is {record.why}.")
            if traj is None and rollout.live is not None and live_path is not None:
                traj, where = rollout.live.data, self.files.relative(live_path)
                name, problem = live_path.name, rollout.live.problem
                notes.append(f"Shown from {name} (the rollout had not finished)." if problem is None
                             else f"{name} is {problem}.")
            record = record if isinstance(record, Rollout) else Rollout()
            exit_reason = (record.exit_reason or (traj if isinstance(traj, dict) else {}).get("exit_reason")
                           or "unreadable")
            facts = [("temperature", record.temperature), ("seed", record.seed), ("model", record.model)]
            if traj is None:
                facts = [("exit", exit_reason), *facts]
            rows.append([f"{rollout.index:02d}", exit_reason,
                         record.steps if "steps" in record.model_fields_set else tab.NA,
                         tab.money(_num(record.cost)),
                         f"{_count(record.input_tokens)} / {_count(record.output_tokens)}",
                         f"{len((record.patch or '').splitlines())} lines"])
            traj_error = (traj if isinstance(traj, dict) else {}).get("error")
            errors = [f"{key}: {clean(getattr(record, key))}" for key in ("error", "patch_error")
                      if getattr(record, key) and (key != "error" or record.error != traj_error)]
            panel = RolloutPanel(_facts(facts), notes, errors,
                                 self.trajectory(traj, where) if traj is not None else None,
                                 self.diff(record.patch, where))
            items.append(Tab(f"rollout {rollout.index:02d} · {exit_reason}", panel))
        return JuniorsSection(self.rows(rows), self.tabs(items))

    def pool_section(self) -> PoolSection | None:
        pool = self.task.pool
        where = self.files.shown(self.files.paths.junior_files.pool)
        if pool is None:
            problem = self.task.unreadable.get(where)
            return PoolSection(unreadable=f"{where} is {problem}.") if problem else None
        view = PoolSection(rollouts=clean(pool.rollouts if "rollouts" in pool.model_fields_set else tab.NA),
                           candidate_count=len(pool.candidates or []))
        for key, what in (("empty", "left no source edit"), ("unparsable", "left a diff that does not parse"),
                          ("failed", "whose diff could not be taken or was kept out")):
            if getattr(pool, key):
                view.notes.append(f"rollouts that {what}: {clean(', '.join(map(str, getattr(pool, key))))}")
        if pool.dropped:
            view.dropped = self.block([_plain(d) for d in pool.dropped], "files cleaning left out, and why",
                                      open_=False)
        brief_key = self.task.brief.candidate if self.task.brief is not None else None
        for number, candidate in enumerate(pool.candidates or [], start=1):
            chosen = " · the senior's choice" if brief_key and brief_key in (candidate.key, number) else ""
            view.candidates.append(CandidateView(
                number, clean(candidate.votes if "votes" in candidate.model_fields_set else 0), chosen,
                clean(", ".join(map(str, candidate.rollouts or []))),
                clean(", ".join(map(str, candidate.exit_reasons or []))),
                clean(", ".join(map(str, candidate.files or []))),
                self.diff(candidate.patch, where),
                self.diff(candidate.test_patch, where) if candidate.test_patch else None,
                clean(_reached_text(candidate.reached))))
        return view

    def senior_section(self) -> SeniorSection | None:
        if not self.files.has(self.files.paths.senior):
            return None
        senior = self.files.paths.senior_files
        brief, view = self.task.brief, SeniorSection(None, None, None, None, None)
        if brief is not None:
            spans = [s.to_dict() for s in brief.spans or []]
            view.brief = BriefView(
                _facts([("source", brief.source), ("exit", brief.senior_exit),
                        ("steps", brief.senior_steps), ("cost", tab.money(_num(brief.senior_cost))),
                        ("context tokens", brief.context_tokens), ("candidate chosen", brief.candidate)]),
                clean(brief.senior_error) if brief.senior_error else None,
                self.block(_plain(brief.analysis), "analysis", self.files.shown(senior.brief), open_=True),
                self.block(brief.problems, "problems with the brief", open_=False) if brief.problems else None,
                self.rows([[s.get("file"), f"{s.get('start')}-{s.get('end')}",
                            self.cut(clean(s.get("why") or s.get("reason") or ""))] for s in spans]))
        else:
            view.brief_problem = self.task.unreadable.get(self.files.shown(senior.brief)) or MISSING
        if self.task.context_text is not None:
            view.context = self.context_spans(self.task.context_text)
        read = self.files.trajectory(senior.trajectory)
        if read.data is not None:
            view.trajectory = self.trajectory(read.data, self.files.shown(senior.trajectory))
        elif read.problem != MISSING:
            view.trajectory_problem = read.problem
        return view

    def context_spans(self, context: str) -> list[Block]:
        """context.md, one fold per span (### file:start-end and its code)."""
        parts: list[tuple[str, list[str]]] = [("", [])]
        for row in clean(context).split("\n"):
            if _SPAN_HEADER.match(row):
                parts.append((row[4:], []))
            else:
                parts[-1][1].append(row)
        blocks = []
        where = self.files.paths.senior_files.context
        for title, rows in parts:
            text = "\n".join(rows).strip("\n")
            if title or text.strip():
                blocks.append(self.block(text, title or where.name, self.files.shown(where), open_=False))
        return blocks

    def principal_section(self) -> PrincipalSection | None:
        if not self.files.has(self.files.paths.principal):
            return None
        principal = self.files.paths.principal_files
        request_at, replies_at = self.files.shown(principal.request), self.files.shown(principal.replies)
        view = PrincipalSection()
        result = self.files.principal_result()
        if not isinstance(result, Unreadable):
            view.facts = _facts([("source", result.source), ("calls", result.calls),
                                 ("cost", tab.money(_num(result.cost))), ("patch lines", result.patch_lines)])
            view.error = clean(result.error) if result.error else None
            view.failed = [clean(self.cut(clean(failed))) for failed in result.failed_attempts or []]
            shown = result.candidates.shown if result.candidates is not None else None
            if shown is not None:
                view.shown = clean(shown or "none")
        elif not result.missing:
            view.problems.append(f"{self.files.shown(principal.result)} is {result.why}.")
        request, replies = self.files.json(principal.request), self.files.json(principal.replies)
        calls = request.data.get("calls") if isinstance(request.data, dict) else None
        answers = replies.data if isinstance(replies.data, list) else []
        if calls is None and request.problem != MISSING:
            view.problems.append(f"{request_at} is {request.problem or 'without calls'}.")
        if replies.problem not in (None, MISSING):
            view.problems.append(f"{replies_at} is {replies.problem}.")
        for number in range(max(len(calls or []), len(answers))):
            call = (calls or [])[number] if number < len(calls or []) else {}
            messages = [self.block(m.get("content"), f"request: {m.get('role', '?')} message",
                                   request_at, open_=False)
                        for m in (call.get("messages") if isinstance(call, dict) else None) or []
                        if isinstance(m, dict)]
            reply = answers[number] if number < len(answers) else None
            if isinstance(reply, dict):
                meta = (f"reply · {tab.money(_num(reply.get('cost')))} · tokens {_count(reply.get('input_tokens'))} "
                        f"in / {_count(reply.get('output_tokens'))} out")
                shown_reply = self.block(reply.get("content"), meta, replies_at, css="reply", open_=True)
            elif reply is not None:
                shown_reply = self.block(reply, "reply", replies_at, css="reply", open_=True)
            else:
                shown_reply = None
            view.calls.append(Call(number + 1, messages, shown_reply))
        patch = self.files.text(principal.patch)
        if patch is not None:
            view.patch = self.diff(patch, self.files.shown(principal.patch))
        return view

    def replay_section(self) -> ReplaySection | None:
        """`swepipe replay`: the replay beside the trajectory it replayed (the replay's own steps are the solo
        agent's, below)."""
        if not self.files.has(self.files.paths.replay):
            return None
        result_file = self.files.paths.relative(self.files.paths.replay_files.result)
        result = self.files.replay_result()
        if isinstance(result, Unreadable):
            return ReplaySection(clean(f"{result_file} is {result.why}"), [], [], None)
        identical = {True: "identical", False: "differs", None: "none recorded"}.get(
            result.patch_identical if isinstance(result.patch_identical, bool) else None)
        facts = _facts([("source", result.source), ("format", result.source_format),
                        ("steps replayed", f"{result.replayed_steps} of {result.recorded_steps} recorded"),
                        ("patch against the recorded one", identical),
                        ("exit status, recorded", result.recorded_exit_status),
                        ("verdict, recorded", {True: "resolved", False: "not resolved"}.get(result.recorded_resolved)
                         if isinstance(result.recorded_resolved, bool) else None),
                        ("cost, recorded", tab.money(_num(result.recorded_cost))
                         if isinstance(result.recorded_cost, (int, float)) else None)])
        named = [("only in the replay's patch", result.only_replayed), ("only in the recorded patch",
                                                                          result.only_recorded),
                 ("changed differently", result.differing), ("not listed to submit by the source",
                                                              result.not_submitted),
                 ("exit status differs", result.exit_codes_differ), ("notes", result.notes)]
        lists = [(what, [clean(item) for item in items if isinstance(item, str)]) for what, items in named
                 if isinstance(items, list) and items]
        recorded = result.recorded_patch
        return ReplaySection(None, facts, lists, self.diff(recorded, f"{result_file} (recorded_patch)")
                             if isinstance(recorded, str) and recorded and not result.patch_identical else None)

    def solo_section(self) -> SoloSection | None:
        if not self.files.has(self.files.paths.solo):
            return None
        solo = self.files.paths.solo_files
        read = self.files.trajectory(solo.trajectory)
        patch = self.files.text(solo.patch)
        return SoloSection(read.problem if read.problem not in (None, MISSING) else None,
                           self.trajectory(read.data, self.files.shown(solo.trajectory)),
                           self.diff(patch, self.files.shown(solo.patch)) if patch is not None else None)

    def team_section(self) -> TeamSection | None:
        if not self.files.has(self.files.paths.team):
            return None
        team = self.files.paths.team_files
        delegations_at = self.files.shown(team.delegations)
        problems = []
        read = self.files.json(team.delegations)
        if read.problem not in (None, MISSING):
            problems.append(f"{delegations_at} is {read.problem}.")
        delegations = read.data if isinstance(read.data, dict) else {}
        read = self.files.json(team.messages)
        if read.problem not in (None, MISSING):
            problems.append(f"{self.files.shown(team.messages)} is {read.problem}.")
        messages = [m for m in read.data if isinstance(m, dict)] if isinstance(read.data, list) else []
        waits = self.files.json(team.lead_waits).data
        settings = _facts((k, delegations.get(k)) for k in ("mode", "size", "sizing", "stages", "submit_guard",
                                                              "directory", "lead_prompt"))
        torn, events = self.timeline(delegations, messages, waits)
        items = []
        by_worker = {d.get("worker"): d for d in delegations.get("delegations") or [] if isinstance(d, dict)}
        for name, path in self.files.team_agents():
            read = self.files.trajectory(path)
            traj, record = read.data, by_worker.get(name)
            panel = AgentPanel(None, None, None, None, self.trajectory(traj, self.files.relative(path)))
            if record:
                panel.facts = _facts([("stage", record.get("stage")), ("state", record.get("state")),
                                      ("writable", record.get("writable"))], keep_none=True)
                panel.task = self.block(record.get("task"), "its task", delegations_at, open_=True)
                if record.get("report"):
                    panel.report = self.block(record["report"], "its report", delegations_at)
            if read.problem not in (None, MISSING):
                panel.problem = f"{path.name} is {read.problem}."
            exit_reason = (traj.get("exit_reason") if isinstance(traj, dict) else None) or (
                record and record.get("exit_reason")) or "?"
            label = f"{name} · {exit_reason}" if isinstance(traj, dict) or record else f"{name} · unreadable"
            items.append(Tab(label, panel))
        return TeamSection(problems, settings, torn, events, self.tabs(items))

    def timeline(self, delegations: dict, messages: list[dict], waits) -> tuple[int, list[Event]]:
        """Commands, delegations, messages and the lead's waits, merged by time (seconds from the team's start);
        and how many lines of the command journal could not be read."""
        start = _num(delegations.get("started"), None) if delegations.get("started") is not None else None
        events: list[tuple[float, str, str, str]] = []  # (time, who, what, text)

        def at(value) -> float | None:
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                return None
            return value if value < ABSOLUTE or start is None else value - start

        torn = 0
        for line in (self.files.text(self.files.paths.team_files.commands) or "").splitlines():
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
            if isinstance(wait, dict) and (started := at(wait.get("start"))) is not None:
                events.append((started, "lead",
                               f"waits on workers for {_num(wait.get('end')) - _num(wait.get('start')):.1f} s", ""))
        events.sort(key=lambda e: e[0])
        return torn, [Event("?" if when == float("inf") else f"{when:.1f} s", clean(who), clean(what),
                            self.block(text, "text") if text.strip() else None) for when, who, what, text in events]

    def ledger_section(self) -> LedgerSection | None:
        text = self.files.text(self.files.paths.ledger)
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
                             _count(row.get("input_tokens")), _count(row.get("cached_tokens")),
                             _count(row.get("output_tokens")), tab.money(_num(row.get("cost"))),
                             f"{_num(row.get('latency')):.1f} s", row.get("retries"),
                             self.cut(clean(row.get("error") or ""))])
        return LedgerSection(torn, len(rows), self.rows(rows[:5000]))


def _editor_calls(step: dict) -> list[EditorCall]:
    """The editor calls a recorded step asked for, read by the agent's own parser, imported when a page shows a
    step."""
    from pipeline.agent.edit_actions import recorded_editor_calls

    return recorded_editor_calls(step.get("action"), step.get("command"))


def _call_diff(call: EditorCall) -> str | None:
    """An edit as a diff of what it asked to replace (a str_replace's old and new text, an insert's or a create's
    new lines); None for a view or an undo."""
    if call.command == "str_replace":
        old, new, where = call.old_str or "", call.new_str or "", "replace"
    elif call.command == "insert":
        old, new, where = "", call.new_str or "", f"insert after line {call.insert_line}"
    elif call.command == "create":
        old, new, where = "", call.file_text or "", "create"
    else:
        return None
    lines = [f"--- a/{call.path}", f"+++ b/{call.path}", f"@@ {where} @@"]
    lines += [f"-{line}" for line in old.splitlines()] + [f"+{line}" for line in new.splitlines()]
    return "\n".join(lines)
