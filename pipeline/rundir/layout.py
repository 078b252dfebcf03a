"""Where everything of a run lives on disk: every file a run writes is named here and nowhere else
(tests/test_run_layout_names.py), and docs/run-layout.md is generated from these names and their docstrings
(pipeline.rundir.layout_doc).

``RunLayout`` is a run's directory, ``TaskPaths`` a task's, and a class per folder a stage writes
(``JuniorFiles``, ``SeniorFiles``, ``PrincipalFiles``, ``SoloFiles``, ``ReplayFiles``, ``TeamFiles``,
``ScoringFiles``), made from any folder (the senior's files are also under analysis/senior-at-NN/). ``RUN``,
``TASK`` and ``NN`` name the files as the documents write them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from pipeline.errors import SwepipeError
from pipeline.tasks.task import check_instance_id

_CANDIDATE_KEY = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_SENIOR_AT = re.compile(r"senior-at-(\d+)")


def is_candidate_key(key) -> bool:
    """Whether ``key`` can be a candidate's key, which names its folder: letters, digits, '.', '_' and '-' only,
    never '.' or '..' (the pool writes 16 hex digits; a pool read back may hold any text)."""
    return isinstance(key, str) and bool(_CANDIDATE_KEY.fullmatch(key)) and key not in (".", "..")


# A rollout's record (rollout-NN.json) or its live trajectory: the journal (.trajectory.jsonl), or the whole file
# an older swepipe rewrote after every step (.trajectory.json).
ROLLOUT_FILE = re.compile(r"rollout-(\d+)(\.trajectory\.jsonl?|\.json)")


def reply_journal(trajectory: Path) -> Path:
    """An agent's paid reply not yet in its trajectory (``<trajectory>.reply``, beside it, named so that no *.json
    glob takes it), so that a run killed in between never pays for it twice."""
    return trajectory.with_name(trajectory.name.removesuffix(".json") + ".reply")


def trajectory_journal(trajectory: Path) -> Path:
    """The journal of the trajectory ``trajectory`` (``X.json`` -> ``X.jsonl``, beside it)."""
    return trajectory.with_name(trajectory.name.removesuffix(".json") + ".jsonl")


def whole_trajectory(path: Path) -> Path:
    """The whole file's name of the trajectory whose journal or whole file ``path`` is (``X.jsonl`` -> ``X.json``)."""
    return path.with_suffix(".json") if path.suffix == ".jsonl" else path


def rollout_file(name: str) -> tuple[int, bool] | None:
    """(index, whether it is the live trajectory) of a junior/ file name that is a rollout's, else None."""
    match = ROLLOUT_FILE.fullmatch(name)
    return (int(match.group(1)), match.group(2) != ".json") if match else None


@dataclass(frozen=True)
class JuniorFiles:
    """the junior rollouts and their pool"""

    root: Path

    def rollout(self, index: int) -> Path:
        """trajectory, candidate patch, exit reason, cost, temperature, seed (a Rollout record)"""
        return self.root / f"rollout-{index:02d}.json"

    def live_trajectory(self, index: int) -> Path:
        """the rollout's trajectory while it runs and after a kill, kept as the journal of its steps beside this
        name (rollout-NN.trajectory.jsonl); resumed from"""
        return self.root / f"rollout-{index:02d}.trajectory.json"

    @property
    def pool(self) -> Path:
        """candidates, votes, dropped files and why; with juniors.schedule, its decisions (a Pool record)"""
        return self.root / "pool.json"

    def rollouts(self) -> dict[int, Path]:
        """The rollout records in the folder, by index."""
        found = {}
        for path in self.root.iterdir() if self.root.is_dir() else ():
            named = rollout_file(path.name)
            if named and not named[1]:
                found[named[0]] = path
        return dict(sorted(found.items()))


@dataclass(frozen=True)
class SeniorFiles:
    """the senior's brief and what it was built from"""

    root: Path

    @property
    def brief(self) -> Path:
        """analysis, spans (repository-relative, as checked), candidate, problems (a Brief record)"""
        return self.root / "brief.json"

    @property
    def context(self) -> Path:
        """the code of the brief's spans, as sent to the principal"""
        return self.root / "context.md"

    @property
    def expansion(self) -> Path:
        """the deterministic spans around the candidates' hunks"""
        return self.root / "expansion.json"

    @property
    def expansion_by_candidate(self) -> Path:
        """each candidate's spans, by candidate key"""
        return self.root / "expansion_by_candidate.json"

    @property
    def expansion_text(self) -> Path:
        """the base-commit text of those spans' lines, for coverage"""
        return self.root / "expansion_text.json"

    @property
    def trajectory(self) -> Path:
        """the senior agent's trajectory"""
        return self.root / "trajectory.json"

    @property
    def error(self) -> Path:
        """the traceback of a senior that broke (the brief then falls back to the expansion)"""
        return self.root / "error.txt"


@dataclass(frozen=True)
class PrincipalFiles:
    """the principal's calls and its patch"""

    root: Path

    @property
    def request(self) -> Path:
        """the exact messages of every call (a retry's too), saved before the call"""
        return self.root / "request.json"

    @property
    def replies(self) -> Path:
        """the raw replies"""
        return self.root / "replies.json"

    @property
    def reply_journal(self) -> Path:
        """a paid reply not yet in replies.json, so a run killed in between never pays for it twice"""
        return self.root / "reply.journal"

    @property
    def result(self) -> Path:
        """source, failed attempts, candidates shown, patch (a PrincipalResult record)"""
        return self.root / "result.json"

    @property
    def patch(self) -> Path:
        """the patch"""
        return self.root / "patch.diff"


@dataclass(frozen=True)
class SoloFiles:
    """the single-agent baseline (strategy solo)"""

    root: Path

    @property
    def trajectory(self) -> Path:
        """the agent's trajectory"""
        return self.root / "trajectory.json"

    @property
    def result(self) -> Path:
        """how the agent ended, its cost, its patch"""
        return self.root / "result.json"

    @property
    def patch(self) -> Path:
        """the patch"""
        return self.root / "patch.diff"


@dataclass(frozen=True)
class ReplayFiles:
    """`swepipe replay`: another harness's trajectory, replayed through the solo agent (strategy replay)"""

    root: Path

    @property
    def recorded(self) -> Path:
        """the trajectory as read from its source: format, steps as swepipe actions, the recorded submission"""
        return self.root / "recorded.json"

    @property
    def script(self) -> Path:
        """the recorded replies as the scripted model serves them, paths mapped to the task's repository"""
        return self.root / "script.json"

    @property
    def result(self) -> Path:
        """the replay beside the record: the patch identical or how it differs, steps whose exit status differs"""
        return self.root / "result.json"


TEAM_TRAJECTORIES = "*.trajectory.json"  # the lead's and every worker's, in team/ (a journal beside a live one)


@dataclass(frozen=True)
class TeamFiles:
    """the lead-and-workers baseline (strategy team)"""

    root: Path

    @property
    def lead_trajectory(self) -> Path:
        """the lead's trajectory"""
        return self.root / "lead.trajectory.json"

    def worker_trajectory(self, name: str) -> Path:
        """a worker's trajectory (worker-N)"""
        return self.root / f"{name}.trajectory.json"

    def worker_error(self, name: str) -> Path:
        """the traceback of a worker that broke"""
        return self.root / f"{name}.error.txt"

    def worker_trajectories(self) -> list[tuple[str, Path]]:
        """(name, trajectory file) of every worker in the folder, by number."""
        suffix = TEAM_TRAJECTORIES.removeprefix("*")
        workers = {path.name.removesuffix(suffix): path for path in self.trajectories()
                   if path.name.startswith("worker-")}
        return sorted(workers.items(), key=lambda item: int(re.sub(r"\D", "", item[0]) or 0))

    def trajectories(self) -> list[Path]:
        """The team's trajectories, each by its whole file's name, also while only its journal exists (a live
        or killed agent's)."""
        found = {*self.root.glob(TEAM_TRAJECTORIES), *(path.with_suffix(".json") for path in self.root.glob(
            TEAM_TRAJECTORIES + "l"))}
        return sorted(found)

    @property
    def commands(self) -> Path:
        """every command, in the order they finished, with start and end times; replayed in that order on resume"""
        return self.root / "commands.jsonl"

    @property
    def delegations(self) -> Path:
        """what the lead delegated to whom, and the workers' reports"""
        return self.root / "delegations.json"

    @property
    def messages(self) -> Path:
        """the messages between the agents (malformed ones marked)"""
        return self.root / "messages.json"

    @property
    def lead_waits(self) -> Path:
        """when the lead was blocked on workers"""
        return self.root / "lead_waits.json"

    @property
    def submission(self) -> Path:
        """with the submit guard off: what the lead submitted"""
        return self.root / "submission.json"

    @property
    def result(self) -> Path:
        """how the team ended, its cost, its patch"""
        return self.root / "result.json"

    @property
    def patch(self) -> Path:
        """the patch"""
        return self.root / "patch.diff"


@dataclass(frozen=True)
class ScoringFiles:
    """A scoring's folder: a task's eval/, `swepipe eval`'s eval/<instance_id>/, or candidates/<key>/."""

    root: Path

    @property
    def patch(self) -> Path:
        """the patch scored"""
        return self.root / "patch.diff"

    @property
    def entry_script(self) -> Path:
        """the tests' entry script"""
        return self.root / "entryscript.sh"

    @property
    def stdout(self) -> Path:
        """the tests' standard output"""
        return self.root / "stdout.log"

    @property
    def stderr(self) -> Path:
        """the tests' standard error"""
        return self.root / "stderr.log"

    @property
    def entry_log(self) -> Path:
        """the entry script's own log"""
        return self.root / "entry.log"

    @property
    def output(self) -> Path:
        """the parsed test outcomes"""
        return self.root / "output.json"

    @property
    def result(self) -> Path:
        """the verdict (an EvalResult record)"""
        return self.root / "result.json"

    @property
    def infra_error(self) -> Path:
        """a scoring that could not run (an EvalResult record)"""
        return self.root / "infra_error.json"

    @property
    def error(self) -> Path:
        """the traceback of a scoring that crashed"""
        return self.root / "error.txt"

    @property
    def logs(self) -> tuple[Path, ...]:
        """The files a task page shows of a scoring, in that order."""
        return self.stdout, self.stderr, self.entry_log, self.entry_script

    def attempt(self, number: int) -> ScoringFiles:
        """The scoring run again (``--attempts``, number 2 on) to tell flaky tests from real failures: the same
        files in ``attempt-<number>/``."""
        return ScoringFiles(self.root / f"attempt-{number}")


@dataclass(frozen=True)
class TaskPaths:
    """Everything one task left."""

    root: Path

    @property
    def ledger(self) -> Path:
        """every model call: stage, role, model, tokens, cost, latency, retries, error, call id"""
        return self.root / "ledger.jsonl"

    @property
    def error(self) -> Path:
        """the traceback of a task that failed"""
        return self.root / "error.txt"

    @property
    def limits(self) -> Path:
        """on a Ray node: the container limits sized there"""
        return self.root / "limits.json"

    @property
    def containers(self) -> Path:
        """how each container the task's sessions opened was sealed (its prediction's containers, carried from a
        stopped session to the one that finishes it)"""
        return self.root / "containers.json"

    @property
    def ray_attempt(self) -> Path:
        """on a Ray cluster, until the task is done: the attempt the driver last sent it to a node as (its driver
        session and key); a driver started after one that was killed takes back from that node what it wrote"""
        return self.root / "ray_attempt.json"

    @property
    def junior(self) -> Path:
        return self.root / "junior"

    @property
    def junior_files(self) -> JuniorFiles:
        return JuniorFiles(self.junior)

    @property
    def senior(self) -> Path:
        return self.root / "senior"

    @property
    def senior_files(self) -> SeniorFiles:
        return SeniorFiles(self.senior)

    @property
    def principal(self) -> Path:
        return self.root / "principal"

    @property
    def principal_files(self) -> PrincipalFiles:
        return PrincipalFiles(self.principal)

    @property
    def solo(self) -> Path:
        return self.root / "solo"

    @property
    def solo_files(self) -> SoloFiles:
        return SoloFiles(self.solo)

    @property
    def replay(self) -> Path:
        return self.root / "replay"

    @property
    def replay_files(self) -> ReplayFiles:
        return ReplayFiles(self.replay)

    @property
    def team(self) -> Path:
        return self.root / "team"

    @property
    def team_files(self) -> TeamFiles:
        return TeamFiles(self.team)

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def eval_files(self) -> ScoringFiles:
        """the run's scoring of the task's prediction (with --evaluate)"""
        return ScoringFiles(self.eval)

    @property
    def analysis(self) -> Path:
        """``swepipe coverage --senior-at``: senior-at-NN/ holds the senior's brief on the first NN rollouts."""
        return self.root / "analysis"

    def senior_at(self, k: int) -> Path:
        return self.analysis / f"senior-at-{k:02d}"

    def senior_at_runs(self) -> dict[int, SeniorFiles]:
        """The senior's files of every `coverage --senior-at` pool size the task has, by that size."""
        found = {}
        for folder in self.analysis.iterdir() if self.analysis.is_dir() else ():
            match = _SENIOR_AT.fullmatch(folder.name)
            if match:
                found[int(match.group(1))] = SeniorFiles(folder)
        return dict(sorted(found.items()))

    def senior_at_files(self, k: int) -> SeniorFiles:
        """`coverage --senior-at`: the senior's brief on the first NN rollouts"""
        return SeniorFiles(self.senior_at(k))

    @property
    def candidates(self) -> Path:
        """``swepipe eval --candidates``: candidates/<key>/ holds the hidden tests' verdict on each distinct junior
        candidate of junior/pool.json (result.json, as eval/ holds the prediction's), read by ``swepipe whatif``."""
        return self.root / "candidates"

    def candidate_files(self, key: str) -> ScoringFiles:
        """`eval --candidates`: the hidden tests' verdict on each junior candidate"""
        if not is_candidate_key(key):
            raise SwepipeError(f"{self.root}: candidate key {key!r} is not a plain folder name (letters, digits, "
                               "'.', '_', '-')")
        return ScoringFiles(self.candidates / key)

    @property
    def candidates_summary(self) -> Path:
        """`eval --candidates`: the task's candidates and their verdicts"""
        return self.candidates / "summary.json"

    def candidate_result(self, key: str) -> Path:
        """the hidden tests' verdict on the candidate of that key (an EvalResult record)"""
        return self.candidate_files(key).result

    def relative(self, path: Path) -> str:
        """``path`` as the task's folder names it (junior/pool.json), to show to a reader."""
        return path.relative_to(self.root).as_posix() if path.is_relative_to(self.root) else str(path)


@dataclass(frozen=True)
class RunLayout:
    root: Path

    @property
    def run_id(self) -> str:
        return self.root.name

    @property
    def config(self) -> Path:
        """resolved config, no secrets"""
        return self.root / "config.yaml"

    @property
    def predictions(self) -> Path:
        """one line per finished task: patch, source, models, cost and tokens by stage (a Prediction record)"""
        return self.root / "predictions.jsonl"

    @property
    def dataset(self) -> Path:
        """the dataset (a local file as its absolute path) and split the tasks come from

        Written by pipeline.run.run_dataset, so that later commands on the run (eval, coverage, report, a resumed
        run) load the same tasks without --dataset again."""
        return self.root / "dataset.json"

    @property
    def repeat(self) -> Path:
        """with `run --repeats N` (runs/<group>-r<r>): group, repeat r, repeats N, the seed offset, juniors.seed,
        the group's budgets.per_run (pipeline.run.repeats)"""
        return self.root / "repeat.json"

    @property
    def infra_errors(self) -> Path:
        """tasks left unfinished by an infrastructure fault, one a line"""
        return self.root / "infra_errors.jsonl"

    @property
    def eval_results(self) -> Path:
        """with --evaluate: {instance_id: resolved}"""
        return self.root / "eval_results.json"

    @property
    def image_cache(self) -> Path:
        """each image prefetch (its outcome and why); with containers.image_cache_gb, after each task the images
        removed and the disk left"""
        return self.root / "image_cache.jsonl"

    @property
    def lock_file(self) -> Path:
        """held (flock) by the one process working in the run; a second one exits 2"""
        return self.root / ".lock"

    @property
    def report(self) -> ReportFiles:
        """`swepipe report`'s default output: report.md, report.html, figures/"""
        return ReportFiles(self.root)

    @property
    def exports(self) -> Path:
        """`swepipe export`'s default output folder"""
        return self.root / "export"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    @property
    def eval_output(self) -> EvalOutput:
        """`swepipe eval`'s default output: a folder per task, as the official harness writes them"""
        return EvalOutput(self.eval)

    def scoring(self, instance_id: str) -> ScoringFiles:
        """A task's scoring by `swepipe eval` into its default place."""
        return self.eval_output.task(instance_id)

    def task(self, instance_id: str) -> TaskPaths:
        """everything one task left

        The folder of a task; an id that is no plain file name (read back from a run directory someone else
        wrote) is refused, so that no path outside the run is ever made from one."""
        try:
            check_instance_id(instance_id)
        except ValueError as error:
            raise SwepipeError(f"{self.root}: instance id {error}") from None
        return TaskPaths(self.tasks / instance_id)

    @property
    def tasks(self) -> Path:
        return self.root / "tasks"

    def ledgers(self) -> list[Path]:
        """The ledger of every task that has one."""
        ledgers = (TaskPaths(folder).ledger for folder in sorted(self.tasks.glob("*")))
        return [ledger for ledger in ledgers if ledger.is_file()]


@dataclass(frozen=True)
class ReportFiles:
    """What `swepipe report` writes into its folder (by default the first run's directory); `coverage` and
    `whatif` put their figures beside the report's."""

    root: Path

    @property
    def markdown(self) -> Path:
        """the report's tables and figures, for a terminal or a Markdown reader"""
        return self.root / "report.md"

    @property
    def html(self) -> Path:
        """the same, one offline page (the figures embedded), with a page per task beside it"""
        return self.root / "report.html"

    @property
    def task_pages(self) -> Path:
        """a page per finished task, `<run>/<instance id>.html`, linked from report.html's tables"""
        return self.root / f"{self.html.stem}_tasks"

    def task_page(self, run_folder: str, instance_id: str) -> Path:
        """A task's page in ``task_pages``: the run's folder, then the task's id."""
        return self.task_pages / run_folder / f"{instance_id}.html"

    @property
    def figures(self) -> Path:
        """the report's figures (PNG)"""
        return self.root / "figures"

    def cost_figure(self, run_id: str) -> Path:
        """a run's dollars per task, by stage"""
        return self.figures / f"cost-{file_name_part(run_id)}.png"

    def coverage_figure(self, run_id: str) -> Path:
        """a run's gold-patch coverage against the pool's size (`swepipe coverage` draws it too)"""
        return self.figures / f"coverage-{file_name_part(run_id)}.png"

    def team_timeline_figure(self, run_id: str) -> Path:
        """a team run's lead and workers over time"""
        return self.figures / f"team-timeline-{file_name_part(run_id)}.png"

    @property
    def team_figure(self) -> Path:
        """the team runs' delegations by stage, messages by direction, the lead blocked, delegation by lead model"""
        return self.figures / "team.png"

    @property
    def pareto_figure(self) -> Path:
        """resolve rate against dollars per task, a point per run"""
        return self.figures / "pareto.png"

    @property
    def compare_markdown(self) -> Path:
        """`swepipe compare --output`'s tables, for a terminal or a Markdown reader"""
        return self.root / "compare.md"

    @property
    def compare_html(self) -> Path:
        """the same, one offline page"""
        return self.root / "compare.html"

    @property
    def whatif_figure(self) -> Path:
        """`swepipe whatif`'s policies: resolve rate against dollars per task"""
        return self.figures / "whatif.png"


@dataclass(frozen=True)
class SweepLayout:
    """What `swepipe sweep` writes into its folder (`<runs-dir>/<sweep-id>`): a run directory per cell, its
    manifest, and its report (written after the cells, or by `swepipe sweep --report`)."""

    root: Path

    @property
    def sweep_id(self) -> str:
        return self.root.name

    @property
    def manifest(self) -> Path:
        """the grid's cells and how each ended (pipeline.studies.manifest)"""
        return self.root / "sweep.json"

    def cell(self, cell: str) -> Path:
        """a cell's run directory, laid out as any run's"""
        return self.root / cell

    @property
    def report(self) -> Path:
        """the sweep's table and figures"""
        return self.root / "sweep.md"

    @property
    def figures(self) -> Path:
        """the sweep report's figures (PNG)"""
        return self.root / "figures"

    @property
    def by_size_figure(self) -> Path:
        """reward, dollars and efficiency by team size"""
        return self.figures / "sweep-by-size.png"

    @property
    def by_cell_figure(self) -> Path:
        """reward, dollars and efficiency by cell"""
        return self.figures / "sweep-by-cell.png"


def file_name_part(name: str) -> str:
    """``name`` (a run id, read from anywhere) as a piece of a file name: letters, digits, '-', '_' and '.' kept,
    anything else '_', no leading dot."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).lstrip(".")


@dataclass(frozen=True)
class EvalOutput:
    """What `swepipe eval` writes into its output folder (by default the run's eval/), as the official harness
    does: one folder per task, the verdicts and the summary."""

    root: Path

    def task(self, instance_id: str) -> ScoringFiles:
        """a task's scoring (as a task's eval/ holds the run's own)"""
        try:
            check_instance_id(instance_id)
        except ValueError as error:
            raise SwepipeError(f"{self.root}: instance id {error}") from None
        return ScoringFiles(self.root / instance_id)

    @property
    def results(self) -> Path:
        """{instance_id: resolved}"""
        return self.root / "eval_results.json"

    @property
    def infra_errors(self) -> Path:
        """the instances whose scoring could not run"""
        return self.root / "infra_errors.json"

    @property
    def summary(self) -> Path:
        """the counts by category, the flagged results"""
        return self.root / "summary.json"


class _ShownIndex(int):
    """An index that formats as NN: a numbered file's name as the documents write it (rollout-NN.json)."""

    def __format__(self, spec: str) -> str:
        return "NN"


NN = _ShownIndex(0)
# The files of a run and of a task as the documents name them (docs/run-layout.md, docs/run-directory.md).
RUN = RunLayout(Path())
TASK = TaskPaths(Path("tasks/<instance_id>"))


def repeat_run_id(group: str, number: int) -> str:
    """The run id of repeat ``number`` (1..N) of the repeats ``group``: a sibling of the others."""
    return f"{group}-r{number}"


def repeat_dirs(parent: Path, group: str) -> dict[int, Path]:
    """The run directories of the repeats ``group`` under ``parent`` (``<group>-r<number>``), by number."""
    name = re.compile(re.escape(group) + r"-r([1-9][0-9]*)")
    found = {int(match.group(1)): path for path in (parent.iterdir() if parent.is_dir() else ())
             if (match := name.fullmatch(path.name)) and path.is_dir()}
    return dict(sorted(found.items()))
