"""The report's tables as plain strings, so Markdown, HTML and the terminal show the same thing."""

from __future__ import annotations

from collections import Counter

from pipeline.analysis.coverage import NEAR_LINES, RunCoverage
from pipeline.analysis.load import RunData
from pipeline.analysis.sealing import sealed_words
from pipeline.analysis.stats import METRICS, STAGES, TOKEN_KINDS, RunStats, compare, cost_ratio, efficiency
from pipeline.analysis.table import NA, Table, by_repository_and_language, count, money, percent, seconds
from pipeline.records.evaluation import infrastructure_named
from pipeline.records.sources import BriefSource
from pipeline.rundir.layout import TASK
from pipeline.text.printable import short_ids

EVAL_RESULT = TASK.relative(TASK.eval_files.result)  # how the notes name a task's verdict


def resolved_cell(s: RunStats) -> str:
    if s.rate is None or s.interval is None:  # both known or neither: they come from the same verdicts
        return f"{NA} (none of {s.tasks} scored)" if s.tasks else NA
    low, high = s.interval
    unscored = f", {s.tasks - s.scored} unscored" if s.tasks > s.scored else ""
    return f"{s.resolved}/{s.scored} = {s.rate:.1%} [{low:.1%}, {high:.1%}]{unscored}"


def flagged_cell(s: RunStats) -> str:
    """How many verdicts an integrity finding kept from counting as resolved, and of which kinds."""
    if not s.scored:
        return NA
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(s.integrity.items()))
    return f"{s.flagged} ({kinds})" if s.flagged else "0"


def infrastructure_cell(s: RunStats) -> str:
    """How many resolved verdicts came from a patch that changes test infrastructure, and which files."""
    if not s.scored:
        return NA
    count, files = infrastructure_named(s.infrastructure)
    return f"{count} ({files})" if count else "0"


def reached_cell(s: RunStats) -> str:
    """The candidates from trajectories that reached for the answer (the retrieval audit), of the audited ones, and
    the kinds of reaching among them."""
    if not s.audited_candidates:
        return f"{NA} (no audited trajectory)" if s.tasks else NA
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(s.reached_kinds.items()))
    return f"{s.reached_candidates} of {s.audited_candidates}" + (f" ({kinds})" if kinds else "")


def unaudited_cell(s: RunStats) -> str:
    """The imported candidates that came without a trajectory to audit, of those imported."""
    return f"{s.unaudited_imports} of {s.imported_rollouts}" if s.imported_rollouts else "0"


def cache_hits_cell(stats: RunStats) -> str:
    """The share of each stage's input tokens the provider read from its prompt cache (priced as cached)."""
    parts = [f"{stage} {percent(used['cached'] / used['input'])}" for stage in stats.stages
             if (used := stats.tokens_sum.get(stage)) and used.get("input")]
    return ", ".join(parts) or NA


def efficiency_cell(s: RunStats, baseline: RunStats, metric: str = "rate") -> str:
    """Where the run stands against the baseline: dominates (cheaper or as cheap, and better or as good), dominated,
    the resolve rate (``metric="reward"``: reward) each added dollar buys (dearer and better), or what a saving
    costs (cheaper and worse)."""
    if s.run_id == baseline.run_id:
        return "baseline"
    found = compare(s, baseline, metric)
    if found.kind == "unknown" or found.gain is None or found.added is None:  # both known unless unknown
        return f"{NA} ({found.why})"
    name = METRICS[metric]
    rate = f"the same {name}" if found.kind == "same" or abs(found.gain) <= 1e-9 else f"{found.gain * 100:+.1f} pp"
    cost = ("at the same cost" if abs(found.added) <= 1e-8 else
            f"for {money(abs(found.added))}/task {'more' if found.added > 0 else 'less'}")
    if found.kind == "dearer and better":
        return f"{efficiency(s, baseline, metric):+.3f} per $ ({rate} {cost})"
    if found.kind == "cheaper and worse":
        return f"cheaper and worse: {rate} {cost}"
    if found.kind == "same":
        return f"same cost and {name}"
    return f"{found.kind}: {rate} {cost}"


def ratio_cell(s: RunStats, baseline: RunStats) -> str:
    """Dollars per task as a multiple of the baseline's."""
    if s.run_id == baseline.run_id:
        return "1.00× (baseline)"
    ratio = cost_ratio(s, baseline)
    if ratio is None:
        return f"{NA} (no cost)" if None in (s.dollars_per_task, baseline.dollars_per_task) else \
            f"{NA} (the baseline cost nothing)"
    return f"{ratio:.2f}×" + (f" (1/{1 / ratio:.1f})" if 0 < ratio < 1 else "")


def credit_cell(s: RunStats) -> str:
    """The FAIL_TO_PASS share passed, mean over the tasks whose eval kept per-test results."""
    if s.f2p_credit is None:
        return f"{NA} (no per-test results)" if s.tasks else NA
    of = f" of {s.scored} scored" if s.f2p_tasks != s.scored else ""
    return f"{s.f2p_credit:.1%} (mean over {s.f2p_tasks} task{'s' if s.f2p_tasks != 1 else ''}{of})"


def reward_cell(s: RunStats) -> str:
    """The study's reward: the share of a task's tests (FAIL_TO_PASS and PASS_TO_PASS) passed, mean over tasks."""
    if s.reward is None:
        return f"{NA} (no per-test results)" if s.tasks else NA
    of = f" of {s.scored} scored" if s.reward_tasks != s.scored else ""
    return f"{s.reward:.1%} (mean over {s.reward_tasks} task{'s' if s.reward_tasks != 1 else ''}{of})"


def shares_cell(s: RunStats) -> str:
    if not s.cost_share:
        return NA
    return " · ".join(f"{stage} {share:.0%}" for stage, share in s.cost_share.items())


def overview(stats: list[RunStats], baseline: RunStats | None, full: list[RunStats] | None = None,
             subset: str | None = None) -> Table:
    """``full``: with a ``subset`` (its name), the same runs on every task, their resolve rate shown beside."""
    headers = ["", *(s.run_id for s in stats)]
    rows = [["strategy", *(", ".join(s.strategies) or NA for s in stats)],
            ["pipeline variant", *(s.variant for s in stats)],
            ["history compaction", *(s.compaction for s in stats)],
            ["file editor", *(s.editor for s in stats)],
            ["tasks", *(f"{s.tasks}" + (f" (+{s.unfinished} unfinished)" if s.unfinished else "") for s in stats)],
            ["resolved (95% CI)" + (f", on the subset {subset}" if subset else ""),
             *(resolved_cell(s) for s in stats)],
            *([["resolved (95% CI), on every task", *(resolved_cell(s) for s in full)]] if full else []),
            ["verdicts flagged by integrity checks (not resolved)", *(flagged_cell(s) for s in stats)],
            ["resolved verdicts whose patch changes test infrastructure", *(infrastructure_cell(s) for s in stats)],
            ["agents' containers", *(sealed_words(s.seal) for s in stats)],
            ["candidates from trajectories that reached for the answer", *(reached_cell(s) for s in stats)],
            *([["imported candidates not audited (no trajectory)", *(unaudited_cell(s) for s in stats)]]
              if any(s.imported_rollouts for s in stats) else []),
            ["FAIL_TO_PASS tests passed (partial credit)", *(credit_cell(s) for s in stats)],
            ["reward (tests passed)", *(reward_cell(s) for s in stats)]]
    if baseline is not None:
        rows.append([f"efficiency vs {baseline.run_id}", *(efficiency_cell(s, baseline) for s in stats)])
        rows.append([f"reward efficiency vs {baseline.run_id}",
                     *(efficiency_cell(s, baseline, "reward") for s in stats)])
        rows.append([f"$/task vs {baseline.run_id}", *(ratio_cell(s, baseline) for s in stats)])
    rows.append(["$/task mean (median)", *(_mean_median(s.cost_mean["total"], s.cost_median["total"], money)
                                           for s in stats)])
    for stage in _stages(stats):
        rows.append([f"  {stage} $/task mean (median)",
                     *(_mean_median(s.cost_mean.get(stage), s.cost_median.get(stage), money) for s in stats)])
    rows.append(["principal share of spend", *(percent(s.principal_share) for s in stats)])
    rows.append(["spend by stage", *(shares_cell(s) for s in stats)])
    rows.append(["$ in all", *(money(s.cost_sum["total"]) for s in stats)])
    for stage in _stages(stats):
        rows.append([f"{stage} tokens/task in / cached / out",
                     *(" / ".join(count(s.tokens_mean[stage][k]) for k in TOKEN_KINDS) if stage in s.stages else NA
                       for s in stats)])
    rows.append(["prompt cache hits (cached / input tokens)", *(cache_hits_cell(s) for s in stats)])
    rows.append(["time/task mean (median)", *(_mean_median(s.seconds_mean, s.seconds_median, seconds)
                                              for s in stats)])
    rows.append(["time in all (sum over tasks)", *(seconds(s.seconds_total) if s.tasks else NA for s in stats)])
    if any(s.reused_juniors for s in stats):
        rows.append(["juniors reused from", *(_counts(s.reused_juniors, "tasks") for s in stats)])
    if any(s.imported for s in stats):
        rows.append(["candidates imported from", *(_counts(s.imported, "tasks") for s in stats)])
        rows.append(["imported spend (theirs, not in $ in all)",
                     *(money(s.imported_cost) if s.imported_cost is not None else NA for s in stats)])
    notes = [f"Resolve rate over scored tasks (a verdict in the prediction or {EVAL_RESULT}; infrastructure errors "
             "are not scored); interval: percentile bootstrap, 2000 resamples, seed 0.",
             "Partial credit: the share of a task's FAIL_TO_PASS tests that passed, averaged over the tasks whose "
             f"{EVAL_RESULT} lists per-test outcomes (runs scored before it did show n/a).",
             "Reward (the study's): the share of a task's FAIL_TO_PASS and PASS_TO_PASS tests together that passed, "
             "averaged over the same tasks (a resolved task scores 100%).",
             f"Verdicts flagged: results whose test run showed signs of tampering ({EVAL_RESULT}'s integrity: "
             "grader_written, conflicting_statuses, summary_contradicts), never counted as resolved; the official "
             "protocol's verdict stays beside them (official_resolved).",
             "Resolved verdicts whose patch changes test infrastructure (conftest.py, a test runner's configuration, "
             f"a start-up hook, the hidden test files: {EVAL_RESULT}'s test_infrastructure), counted and named: "
             "they count as resolved, but the patch touched what runs the tests, so read them with care.",
             "Agents' containers: how many of the finished tasks' containers were sealed (their repository holds the "
             "base's history alone: no other ref, no remote, no reflog, no object the base does not reach, as found "
             "right after the sanitise step) and whether they had the network (predictions.jsonl's containers); "
             "not recorded: a run before swepipe recorded it.",
             "Candidates from trajectories that reached for the answer: the retrieval audit (pipeline.audit) reads "
             "every trajectory's own commands for history beyond the base commit (history), fetching the project "
             "over the network (network) or reading from outside the task (outside); a candidate counts when any "
             "rollout that proposed it did (a solo, team or replayed prediction: its agent's trajectory). Such "
             "candidates are kept and scored as any other; the task pages list each finding.",
             "Pipeline variant, from the run's config.yaml: full, or the ablation (no juniors (k=0), no senior, "
             "no principal); other strategies by name.",
             "Time is the sum of a task's stage seconds; 'in all' adds tasks, so a parallel run took less wall time."]
    if baseline is not None:
        notes.append("Efficiency against the baseline, on point estimates (see the intervals): 'dominates' when the "
                     "run costs no more per task and resolves more, or resolves as many for less; 'dominated' the "
                     "reverse; when it is dearer and better, the resolve rate each added dollar buys, (resolve rate - "
                     "baseline's) / (dollars per task - baseline's). Reward efficiency, the study's: the same on "
                     "reward, (reward - baseline's) / (dollars per task - baseline's). $/task vs baseline: the run's "
                     "mean dollars per task over the baseline's.")
    if any(s.imported for s in stats):
        notes.append("Imported candidates (run --juniors-from) are rollouts of the pool that this run did not run: "
                     "what their sources recorded they cost is shown apart and is in no other dollar figure. Those "
                     "of a predictions file come without a trajectory: they could not be audited.")
    if any(s.reused_juniors for s in stats):
        notes.append("Reused junior rollouts keep their cost in the junior column, though the run they came from "
                     "paid it.")
    return Table("Runs", headers, rows, notes)


def exits(stats: list[RunStats]) -> Table:
    headers = ["", *(s.run_id for s in stats)]
    rows = [["junior rollout exits", *(_counts(s.junior_exits) for s in stats)],
            *([["agent exits (solo, team lead)", *(_counts(s.agent_exits) for s in stats)]]
              if any(s.agent_exits for s in stats) else []),
            *[[f"editor calls: {role} (failed)", *(_edit_cell(s, role) for s in stats)]
              for role in EDITOR_ROLES if any(s.edits[role, "calls"] for s in stats)],
            *([["junior schedule: rollouts/task of K", *(_scheduled_cell(s) for s in stats)],
               ["junior schedule: how it stopped", *(_counts(s.schedule_stops, "tasks") for s in stats)]]
              if any(s.schedule_stops for s in stats) else []),
            ["senior brief from", *(_counts(s.senior_sources) for s in stats)],
            ["prediction source", *(_counts(s.sources) for s in stats)],
            ["errors", *(_counts(s.errors, empty="none") for s in stats)]]
    notes = ["Editor calls: the file editor's calls in each role's trajectories (a senior only views); failed: "
             "those refused and changing nothing (no match, several matches, a path out of the repository, ...)."] \
        if any(s.edits for s in stats) else []
    return Table("Exit reasons", headers, rows, notes)


EDITOR_ROLES = ("junior", "solo", "team", "senior")


def _edit_cell(s: RunStats, role: str) -> str:
    calls, failed = s.edits[role, "calls"], s.edits[role, "failed"]
    return f"{calls} ({failed / calls:.0%} failed)" if calls else "0"


def failures(stats: list[RunStats]) -> Table:
    names = list(dict.fromkeys(c for s in stats for c in s.categories))
    rows = [[name, *(f"{s.categories[name]} ({s.categories[name] / s.tasks:.0%})" if s.categories[name] else "0"
                     for s in stats)] for name in names]
    table = Table("Outcomes by evaluation category", ["category", *(s.run_id for s in stats)], rows)
    if not rows:
        table.notes.append("No finished task.")
    return table


def cause(task) -> str:
    """Why a task ended as it did: its evaluation category, or "no patch" when an unresolved task submitted none."""
    if not task.resolved and not (task.prediction.model_patch or "").strip():
        return "no patch"
    return task.category


def causes_by_group(run: RunData, meta: dict[str, tuple[str, str]]) -> Table:
    """One run's outcomes by repository, then by language (``meta``: instance id -> (repository, language))."""
    causes = list(dict.fromkeys(cause(t) for t in run.tasks))
    rows = []
    for kind, name, tasks in by_repository_and_language(run.tasks, [t.instance_id for t in run.tasks], meta):
        counts = Counter(cause(t) for t in tasks)
        rows.append([kind, name, str(len(tasks)), *(str(counts[c]) for c in causes)])
    return Table(f"Outcomes by repository and language: {run.run_id}", ["by", "name", "tasks", *causes], rows,
                 ["no patch: unresolved with an empty patch; the other causes are the evaluation's categories "
                  "(tests_failed, patch_failed, timeout, infra_error, ...); ? where the dataset was not read."])


def per_task(run: RunData, stages: list[str]) -> Table:
    rows = []
    nodes = any(t.prediction.node for t in run.tasks)  # which machine ran each task (recorded since Ray)
    for t in run.tasks:
        f2p = f"{t.fail_to_pass[0]}/{t.fail_to_pass[1]}" if t.fail_to_pass else NA
        reward = f"{t.reward[0]}/{t.reward[1]} = {t.reward[0] / t.reward[1]:.0%}" if t.reward else NA
        where = [t.prediction.node or NA] if nodes else []
        rows.append([t.instance_id, t.category, f2p, reward, money(t.total_cost), *(money(t.cost(s)) for s in stages),
                     seconds(t.seconds), *where, t.prediction.source or NA,
                     str(t.prediction.error or "")[:100]])
    table = Table(f"Tasks of {run.run_id}", ["instance", "outcome", "F2P passed", "reward (tests passed)", "$",
                                             *(f"{s} $" for s in stages), "time", *(["node"] if nodes else []),
                                             "source", "error"], rows)
    if not rows:
        table.notes.append("No finished task (predictions.jsonl is missing or empty).")
    return table


def coverage_table(coverage: RunCoverage) -> Table:
    names = {"hunks": "cand.", "expansion": "+exp.", "senior": "+senior"}
    short = {"removed": "rm", "added": "add", "files": "files", "tokens": "tokens"}
    headers = ["k", *(f"{short[m]}: {names[w]}" for m in ("removed", "added", "files", "tokens") for w in names)]
    curves = {(w, m): coverage.curve(w, m) for w in ("hunks", "expansion") for m in ("removed", "added", "files",
                                                                                     "tokens")}
    senior = {m: {k: (c, lift, n) for k, c, lift, n in coverage.senior_curve(m)}
              for m in ("removed", "added", "files", "tokens")}
    rows = []
    for index in range(coverage.max_k):
        row = [str(index + 1)]
        for metric in ("removed", "added", "files", "tokens"):
            show = count if metric == "tokens" else percent
            for which in ("hunks", "expansion"):
                row.append(show(curves[(which, metric)][index][1]))
            row.append(_senior_cell(senior[metric].get(index + 1), metric))
        rows.append(row)
    if coverage.tasks:
        final = {m: coverage.final(m)[0] for m in ("removed", "added", "files", "tokens")}
        sent = coverage.final("files")[1]
        label = f"sent (k={coverage.max_k}, {sent} task{'s' if sent != 1 else ''})"
        rows.append([label, *(cell for m in ("removed", "added", "files", "tokens")
                              for cell in ("", "", count(final[m]) if m == "tokens" else percent(final[m])))])
    table = Table(f"Coverage of the gold patch: {coverage.run_id}", headers, rows)
    with_removed = sum(t.gold_removed > 0 for t in coverage.tasks)
    estimated = [p.estimated for t in coverage.tasks for p in t.expansion]
    table.notes += [
        f"{len(coverage.tasks)} task(s); removed-line coverage over the {with_removed} whose gold patch removes or "
        "changes lines. Three contexts, each holding the one before: 'cand.' the candidates' own hunks and added "
        "lines; '+exp.' plus the deterministic code expansion of those candidates; '+senior' plus the spans the "
        "senior model chose (its brief's context_spans, as the principal got them). 'sent': exactly what the "
        "principal got (the brief's context_spans and the candidates it was shown).",
        "Added-line rule: a gold added line (whitespace-squashed, per file) is covered when a candidate in the "
        "context adds the same text to the same file, or when that text already stands in the base file inside "
        f"a context span at most {NEAR_LINES} lines from where the gold patch adds it; the same text elsewhere "
        "in the file does not count.",
        "'cand.' and '+exp.': means over orderings of the rollouts (all permutations when K <= 6, else 200 seeded "
        "random ones), then over tasks. '+senior': the senior's brief on the first k rollouts (the run's own at "
        "k=K; others from `swepipe coverage --senior-at`), with its lift in percentage points over '+exp.' on the "
        "same rollouts and the number of tasks; blank where the senior was not run at that k. 'files': the share "
        "of tasks whose context reaches every file the gold patch touches.",
        "Tokens: characters/4 of the lines' base text; lines whose text is unknown count as the task's mean tokens "
        "per known line" + (f" ({sum(estimated) / len(estimated):.0%} of '+exp.' tokens on average)" if estimated
                            else "") + "; 'sent' is the run's own count (brief.json context_tokens)."]
    old = sum(not t.base_text for t in coverage.tasks)
    if old:
        table.notes.append(
            f"{old} task(s) from a run made before the expansion's base text was saved (expansion_text.json): "
            "their expansion lines' text is known only where context.md or a candidate's patch shows it, so "
            "'+exp.' added-line coverage may be understated there.")
    cut = sum(t.base_text and not t.complete_text for t in coverage.tasks)
    if cut:
        table.notes.append(f"{cut} task(s) had more expansion text than is saved: the rest counts as unknown.")
    fallbacks = Counter(k for t in coverage.tasks for k, source in t.senior_sources.items()
                        if source != BriefSource.SENIOR)
    if fallbacks:
        table.notes.append("Briefs where the senior model gave nothing usable, so its spans are the code expansion: "
                           + ", ".join(f"{n} at k={k}" for k, n in sorted(fallbacks.items())) + ".")
    if coverage.senior_off:
        table.notes.append("The senior model was switched off in this run (models.senior: none): '+senior' is "
                           "blank; 'sent' is the code expansion and the candidates the principal was shown.")
    if coverage.skipped:
        reasons = Counter(coverage.skipped.values())
        table.notes.append("No coverage for " + ", ".join(f"{n} task(s): {why}" for why, n in reasons.items()) + ".")
    if not coverage.tasks:
        table.notes.append(f"Coverage {NA}: no task with a junior pool and a gold patch.")
    return table


def _senior_cell(point: tuple[float | None, float | None, int] | None, metric: str) -> str:
    if point is None:
        return ""
    value, lift, tasks = point
    if value is None or lift is None:  # both known or neither (RunCoverage.senior_curve)
        return NA
    if metric == "tokens":
        return f"{count(value)} ({lift:+,.0f}, {tasks})"
    return f"{percent(value)} ({lift * 100:+.1f} pp, {tasks})"


def coverage_by_task(coverage: RunCoverage) -> Table:
    rows = []
    shown = short_ids([t.instance_id for t in coverage.tasks])
    for t in coverage.tasks:
        last_hunks, last_expansion = t.hunks[-1], t.expansion[-1]
        senior = t.senior.get(t.rollouts)
        rows.append([shown[t.instance_id], str(t.rollouts), f"{t.gold_removed}/{t.gold_added}/{t.gold_files}",
                     percent(last_hunks.removed), percent(last_expansion.removed),
                     percent(senior.removed) if senior else NA, percent(t.final.removed) if t.final else NA,
                     percent(last_hunks.added), percent(last_expansion.added),
                     percent(senior.added) if senior else NA, percent(t.final.added) if t.final else NA,
                     "yes" if t.final and t.final.files == 1.0 else "no" if t.final else NA])
    return Table(f"Coverage by task at k=K: {coverage.run_id}",
                 ["instance", "K", "gold rm/add/files", "rm: cand.", "rm: +exp.", "rm: +senior", "rm: sent",
                  "add: cand.", "add: +exp.", "add: +senior", "add: sent", "all files sent"], rows,
                 ["rm: removed-line coverage; add: added-line coverage; cand.: the candidates' hunks; +exp.: plus "
                  "the code expansion; +senior: plus the senior model's spans; sent: what the principal got. "
                  "gold rm/add/files: how many the gold patch has."])


def _mean_median(mean: float | None, median: float | None, show) -> str:
    return NA if mean is None else f"{show(mean)} ({show(median)})"


def _stages(stats: list[RunStats]) -> list[str]:
    found = list(dict.fromkeys(stage for s in stats for stage in s.stages))
    return [s for s in STAGES if s in found] + [s for s in found if s not in STAGES]


def _scheduled_cell(stats: RunStats) -> str:
    """Mean rollouts a task ran under juniors.schedule, of its K ("2.5 of 6"; K as a range when tasks differ)."""
    pairs = [(run, k) for run, k in stats.scheduled_rollouts if isinstance(run, int) and isinstance(k, int)]
    if not pairs:
        return NA
    ks = sorted({k for _, k in pairs})
    of = str(ks[0]) if len(ks) == 1 else f"{ks[0]}-{ks[-1]}"
    return f"{sum(run for run, _ in pairs) / len(pairs):.1f} of {of}"


def _counts(counter: Counter, unit: str = "", empty: str = NA) -> str:
    if not counter:
        return empty
    suffix = f" {unit}" if unit else ""
    return ", ".join(f"{name}: {n}{suffix}" for name, n in counter.most_common())
