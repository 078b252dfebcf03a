import collections
import importlib
import os
import subprocess
import uuid
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _docker_ready() -> str | None:
    """None when Docker and the base image are usable, else why not."""
    try:
        from pipeline.runtime import containers
        from pipeline.runtime.images.debian_base import BASE_IMAGE, base_image_exists

        containers.client()
        if not base_image_exists():
            return f"the base image {BASE_IMAGE} is missing (scripts/test.sh builds it)"
    except Exception as exc:  # noqa: BLE001 - any failure (no Docker engine too) means "not ready", reported below
        return str(exc)
    return None


# The suite runs on parallel workers (pytest-xdist, -n in pyproject.toml), a group of tests to a worker: a test file
# is one group, run whole on one worker, so its module fixtures (an image, a cluster, a scored run) are made once.
# Files that share what cannot be shared live (a Ray cluster's node scratch and ports) are one group, run one after
# another. Groups go to the workers in the order of the collection (--no-loadscope-reorder): the longest start
# first, so the rest fill in around them (a real model on the CPU; the Ray files), then those with most slow tests.
SHARED_GROUPS = {"ray": ("test_eval_candidates", "test_ray_eval", "test_ray_executor", "test_ray_faults",
                         "test_ray_start", "test_ray_driver_killed")}
STARTED_FIRST = ("test_local_model", "ray")


def group_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0].rpartition("/")[2].removesuffix(".py")
    return next((group for group, modules in SHARED_GROUPS.items() if module in modules), module)


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    return ByGroup(config, log)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    groups = {item: group_of(item.nodeid) for item in items}
    slow = collections.Counter(group for item, group in groups.items() if item.get_closest_marker("slow"))

    def started(item):
        group = groups[item]
        return STARTED_FIRST.index(group) if group in STARTED_FIRST else len(STARTED_FIRST), -slow[group], group

    items.sort(key=started)  # stable: a group's tests keep their order
    skip_docker_tests_unless_ready(items)


def skip_docker_tests_unless_ready(items):
    if not any(item.get_closest_marker("docker") for item in items):
        return
    problem = _docker_ready()
    if problem is None:
        return
    if IN_CI:
        raise pytest.UsageError(f"CI must run the Docker tests, but Docker is not ready: {problem}")
    skip = pytest.mark.skip(reason=f"Docker not ready: {problem}")
    for item in items:
        if item.get_closest_marker("docker"):
            item.add_marker(skip)


def promised_but_missing(what: str, install: str):
    """A dependency the README promises is missing: CI fails (it must run every test, as with Docker above); a
    developer's run skips, naming what to install."""
    if IN_CI:
        pytest.fail(f"CI must run this test, but {what} is missing: {install}", pytrace=False)
    pytest.skip(f"{what} is missing: {install}")


def import_promised(module: str, install: str):
    """The module, or promised_but_missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        promised_but_missing(f"the Python module {module} ({error})", install)


LOCAL_EXTRA = "pip install 'swepipe[local]' (scripts/setup.sh installs it)"


@pytest.fixture(autouse=True)
def no_stop_left_over():
    """Each test starts with no stop requested and no endpoint paused: a test that stops the run in this process
    (a fault stop, a configuration error) must not stop the next one."""
    from pipeline.control import stopping
    from pipeline.control.outages import BREAKERS

    yield
    stopping.reset()
    BREAKERS.reset()


@pytest.fixture
def run_id():
    return f"test-{uuid.uuid4().hex[:10]}"


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=env).stdout.strip()


@pytest.fixture(scope="session")
def leaky_repo(tmp_path_factory):
    """A repository whose history hides a later 'gold' commit every way official images do."""
    repo = tmp_path_factory.mktemp("leaky") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / ".gitignore").write_text("node_modules/\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    (repo / "README").write_text("calc\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "readme")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    git(repo, "commit", "-qam", "THE GOLD FIX")
    gold = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/remotes/origin/fix", gold)
    git(repo, "tag", "v-gold", gold)
    git(repo, "reset", "-q", "--hard", base)  # gold stays in the reflog
    (repo / "calc.py").write_text("# stashed hint: return a + b\n")
    git(repo, "stash", "-q")
    (repo / "node_modules").mkdir()
    (repo / "node_modules" / "dep.js").write_text("module.exports = 1\n")
    return {"path": repo, "base": base, "gold": gold}


@pytest.fixture
def local_repo(leaky_repo, monkeypatch):
    """leaky_repo, as the repository tests/local_opener.py opens (containers.impl "local_opener:open_local")."""
    monkeypatch.setenv("SWEPIPE_TEST_REPO", str(leaky_repo["path"]))
    monkeypatch.setenv("SWEPIPE_TEST_BASE", leaky_repo["base"])
    return leaky_repo


def demo_task(leaky_repo, number=1):
    """A task on leaky_repo: add() subtracts."""
    from pipeline.tasks import Task

    return Task(instance_id=f"demo__calc-{number}", repo="demo/calc", base_commit=leaky_repo["base"],
                problem_statement="add() subtracts instead of adding.", repo_language="python",
                fail_to_pass=["test_add"], pass_to_pass=[], selected_test_files_to_run=[], before_repo_set_cmd="",
                dockerhub_tag="unused")


@pytest.fixture(scope="module")
def tinyq_repo(tmp_path_factory):
    """The bundled tinyq task's repository at its base commit, as a local clone to run a scripted pipeline in."""
    from pipeline import bundled
    from pipeline.bundled.build import materialise_repo
    from pipeline.tasks import load_tasks

    task = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))
    repo = tmp_path_factory.mktemp("tinyq") / "repo"
    base, _ = materialise_repo(Path(bundled.__file__).parent / "tasks" / task.instance_id, repo)
    assert base == task.base_commit
    return repo


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster on 127.0.0.1 (tests/ray_cluster.py): a head with no docker slots, two nodes with two."""
    from ray_cluster import local_cluster

    with local_cluster() as started:
        yield started
