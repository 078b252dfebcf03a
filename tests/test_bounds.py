"""Bounds on what a rollout carries: build outputs left out of its diff, a patch size cap, no span of a folder."""

import shutil

import pytest
import yaml
from conftest import git

from pipeline.job import TaskJob
from pipeline.juniors.pool import build_pool
from pipeline.juniors.stage import run_juniors
from pipeline.models.budget import Budget
from pipeline.rundir.layout import TaskPaths
from pipeline.runtime import containers
from pipeline.runtime.base import PatchTooLarge
from pipeline.runtime.docker import DockerRuntime
from pipeline.runtime.images.debian_base import BASE_IMAGE
from pipeline.runtime.images.prepare import prepare_image
from pipeline.runtime.local import LocalRuntime
from pipeline.senior.brief import BriefSpan, check_spans
from pipeline.settings.config import Juniors, Limits, RunConfig
from pipeline.settings.model_spec import ModelSpec
from pipeline.tasks import Task

OUTPUTS_IMAGE = "swepipe-test-outputs:latest"

# What an agent's commands leave behind: installs, caches, builds and logs, each in several places.
JUNK = {
    "node_modules/left-pad/index.js": "module.exports = 1\n",
    "web/node_modules/react/index.js": "module.exports = 2\n",
    "myenv/pyvenv.cfg": "home = /usr/bin\n",
    "myenv/bin/activate": "# activate\n",
    "myenv/lib/python3.11/site-packages/six.py": "X = 1\n",
    ".venv/lib/python3.11/site-packages/requests/api.py": "X = 1\n",
    "__pycache__/calc.cpython-311.pyc": "\0\0pyc",
    "pkg/__pycache__/mod.cpython-311.pyc": "\0\0pyc",
    ".pytest_cache/v/cache/lastfailed": "{}\n",
    "test-run.log": "PASSED\n",
    "dist/calc-1.0.tar.gz": "tarball\n",
    "target/debug/calc": "elf\n",
    "pkg/calc.egg-info/PKG-INFO": "Name: calc\n",
    ".coverage": "sqlite\n",
}
# Genuinely new sources, some with names close to the junk's, and edits to tracked files in an output-looking folder.
SOURCES = {
    "pkg/new_module.py": "VALUE = 1\n",
    "tools/build/helper.py": "def helper():\n    return 1\n",
    "src/dist_utils.py": "def dist():\n    return 2\n",
    "src/logging.py": "LEVEL = 3\n",
    "build/extra.py": "EXTRA = 4\n",  # build/ is tracked at base: a source folder here
    "build/helpers.py": "def build():\n    return 'changed'\n",  # tracked: an edit
}


@pytest.fixture(scope="session")
def outputs_repo(tmp_path_factory):
    """A repository with no .gitignore (so only swepipe's rules apply) that tracks a build/ folder."""
    repo = tmp_path_factory.mktemp("outputs") / "repo"
    (repo / "build").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "build" / "helpers.py").write_text("def build():\n    return 'base'\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return {"path": repo, "base": git(repo, "rev-parse", "HEAD")}


@pytest.fixture(scope="session")
def outputs_image(outputs_repo, tmp_path_factory):
    context = tmp_path_factory.mktemp("outputs-context")
    shutil.copytree(outputs_repo["path"], context / "repo", symlinks=True)
    (context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY repo /app\nWORKDIR /app\n")
    containers.client().images.build(path=str(context), tag=OUTPUTS_IMAGE, rm=True)
    return OUTPUTS_IMAGE


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def rt(request, outputs_repo, run_id):
    if request.param == "local":
        with LocalRuntime(outputs_repo["path"], outputs_repo["base"]) as runtime:
            yield runtime
    else:
        image = request.getfixturevalue("outputs_image")
        with DockerRuntime(prepare_image(image, outputs_repo["base"]), outputs_repo["base"], run_id=run_id,
                           server_in_image=True) as runtime:
            yield runtime


def write_all(rt, files):
    for path, text in files.items():
        rt.write_file(path, text)


def changed_paths(patch):
    return sorted(line.split(" b/", 1)[1] for line in patch.splitlines() if line.startswith("diff --git "))


@pytest.mark.parametrize("staged", [False, True], ids=["untracked", "staged-by-the-agent"])
def test_build_outputs_stay_out_of_the_diff_and_new_sources_stay_in(rt, staged):
    write_all(rt, {**JUNK, **SOURCES})
    rt.write_file("calc.py", "def add(a, b):\n    return a + b\n")
    if staged:
        assert rt.run("git add -A && git status --short | grep -c node_modules").output.strip() == "2"
    patch = rt.diff()
    assert changed_paths(patch) == sorted([*SOURCES, "calc.py"])
    # The agent's own index is left as it was.
    assert ("node_modules" in rt.run("git diff --cached --name-only").output) is staged


def test_a_patch_over_the_cap_is_refused_and_one_under_it_kept(rt):
    rt.write_file("data.py", "ROWS = [\n" + "    'row',\n" * 2000 + "]\n")
    patch = rt.diff()
    size = len(patch.encode())
    assert size > 20_000
    assert rt.diff(max_bytes=size) == patch  # exactly at the cap: kept
    with pytest.raises(PatchTooLarge, match=f"over the {size - 1}-byte limit"):
        rt.diff(max_bytes=size - 1)
    rt.run("rm data.py")
    assert rt.diff(max_bytes=1000) == ""


def bash(command):
    return {"content": f"Next.\n```bash\n{command}\n```", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


def test_rollout_over_the_patch_cap_is_recorded_and_its_patch_dropped(outputs_repo, tmp_path, run_id, monkeypatch):
    monkeypatch.setenv("SWEPIPE_TEST_REPO", str(outputs_repo["path"]))
    monkeypatch.setenv("SWEPIPE_TEST_BASE", outputs_repo["base"])
    fix = bash("sed -i 's/a - b/a + b/' calc.py")
    huge = bash("python3 -c \"print('X = [' + '1,' * 40000 + ']')\" > table.py")
    junk = bash("mkdir -p node_modules/x .venv/lib && echo 1 > node_modules/x/i.js && echo 2 > .venv/lib/m.py "
                "&& echo log > run.log")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [[fix, huge, bash("submit")], [fix, junk, bash("submit")]]}))
    task = Task(instance_id="demo__calc-2", repo="demo/calc", base_commit=outputs_repo["base"],
                problem_statement="add() subtracts.", repo_language="python", fail_to_pass=["t"], pass_to_pass=[],
                selected_test_files_to_run=[], before_repo_set_cmd="", dockerhub_tag="unused")
    config = RunConfig(models={"junior": ModelSpec(model=f"scripted/{script}", free=True)},
                       juniors=Juniors(k=2, max_patch_bytes=20_000), limits=Limits(max_steps=5),
                       containers={"impl": "local_opener:open_local"})
    job = TaskJob(task=task, config=config, paths=TaskPaths(tmp_path), run_id=run_id, image_template="unused",
                  budget=Budget("run").child("task", None))
    records = run_juniors(job)
    assert records[0].exit_reason == "patch_too_large" and records[0].agent_exit_reason == "submitted"
    assert records[0].patch == "" and records[0].patch_dropped == "too_large"
    assert "20000-byte limit" in records[0].patch_error and "juniors.max_patch_bytes" in records[0].patch_error
    assert records[1].exit_reason == "submitted" and changed_paths(records[1].patch) == ["calc.py"]
    pool = build_pool(task.instance_id, records)
    assert pool.failed == [0] and [c.rollouts for c in pool.candidates] == [[1]]


def lines_of(files):
    return lambda path: files.get(path)


def test_spans_of_the_whole_repository_a_folder_or_outside_it_are_refused():
    files = {"calc.py": ["a", "b", "c"]}
    directories = {"pkg", "src/app"}
    read = []

    def read_lines(path):
        read.append(path)
        return files.get(path)

    spans = [BriefSpan(name, 1, 2) for name in (".", "/", "", "./", " . ", "src/", "../etc/passwd", "/etc/passwd",
                                                "pkg", "src/app", "/app/calc.py", "calc.py", "missing.py")]
    kept, problems = check_spans(spans, read_lines, lambda path: path in directories, root="/app")
    assert [(s.file, s.start, s.end) for s in kept] == [("calc.py", 1, 2), ("calc.py", 1, 2)]
    reasons = dict(p.split(": ", 1) for p in problems)
    for whole in ("'.'", "'/'", "''", "'./'", "' . '"):
        assert "names the whole repository" in reasons[whole]
    assert "directory" in reasons["'src/'"] and "directory" in reasons["pkg"] and "directory" in reasons["src/app"]
    assert "outside the repository" in reasons["'../etc/passwd'"]
    assert "absolute path" in reasons["'/etc/passwd'"]
    assert "no such file" in reasons["missing.py"]
    assert len(problems) == 11
    # Nothing was read for the refused shapes: "/" or "." never reaches the runtime.
    assert set(read) == {"pkg", "src/app", "calc.py", "missing.py"}


@pytest.mark.docker
def test_a_directory_is_not_archived_to_be_read(outputs_image, outputs_repo, run_id):
    from pipeline.senior.stage import _FileCache

    with DockerRuntime(prepare_image(outputs_image, outputs_repo["base"]), outputs_repo["base"], run_id=run_id,
                       server_in_image=True) as runtime:
        with pytest.raises(IsADirectoryError):
            runtime.read_file("/")
        files = _FileCache(runtime)
        kept, problems = check_spans([BriefSpan("build", 1, 5), BriefSpan("calc.py", 1, 1)], files.lines,
                                     files.is_directory, root=str(runtime.workdir))
        assert [s.file for s in kept] == ["calc.py"]
        assert problems == ["build: a directory, not a file; a span is one file and a range of its lines"]
