"""Repositories with git submodules (as internetarchive/openlibrary's official images have) in real containers.

The image's repository has an initialised, absorbed submodule (its history in .git/modules/...) whose
own history holds a later 'gold' commit, and a parent gold commit that moves the submodule to it.
"""

import json
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
from pipeline.runtime.base import changed_submodules
from pipeline.runtime.docker import DockerRuntime
from pipeline.runtime.images.debian_base import BASE_IMAGE
from pipeline.runtime.images.prepare import prepare_image
from pipeline.runtime.local import LocalRuntime
from pipeline.settings.config import Juniors, Limits, RunConfig
from pipeline.settings.model_spec import ModelSpec
from pipeline.tasks import Task

SUBMODULE_IMAGE = "swepipe-test-submodule:latest"
FIX = "def total(items):\n    return sum(items)\n"


@pytest.fixture(scope="session")
def submodule_repo(tmp_path_factory):
    root = tmp_path_factory.mktemp("submodule")
    lib = root / "lib"
    lib.mkdir()
    git(lib, "init", "-q", "-b", "main")
    (lib / "helpers.py").write_text("def twice(x):\n    return 2 * x\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "lib one")
    (lib / "README").write_text("lib\n")
    git(lib, "add", "-A")
    git(lib, "commit", "-qm", "lib two")
    recorded = git(lib, "rev-parse", "HEAD")
    (lib / "helpers.py").write_text("def twice(x):\n    return x + x  # SUB GOLD\n")
    git(lib, "commit", "-qam", "SUB GOLD")
    sub_gold = git(lib, "rev-parse", "HEAD")

    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("def total(items):\n    return len(items)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "initial")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib")
    git(repo, "-C", "vendor/lib", "checkout", "-q", recorded)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "vendor lib")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "app.py").write_text(FIX)
    git(repo, "-C", "vendor/lib", "checkout", "-q", sub_gold)
    git(repo, "commit", "-qam", "THE GOLD FIX")
    gold = git(repo, "rev-parse", "HEAD")
    git(repo, "update-ref", "refs/remotes/origin/fix", gold)
    git(repo, "reset", "-q", "--hard", base)
    git(repo, "submodule", "update", "-q", "--init", "--recursive")  # as the official images do
    assert git(repo, "-C", "vendor/lib", "rev-parse", "HEAD") == recorded
    assert (repo / "vendor" / "lib" / ".git").is_file()  # absorbed: the history is in .git/modules
    return {"path": repo, "base": base, "gold": gold, "sub_recorded": recorded, "sub_gold": sub_gold}


@pytest.fixture(scope="session")
def submodule_image(submodule_repo, tmp_path_factory):
    context = tmp_path_factory.mktemp("submodule-context")
    shutil.copytree(submodule_repo["path"], context / "repo", symlinks=True)
    (context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY repo /app\nWORKDIR /app\n")
    containers.client().images.build(path=str(context), tag=SUBMODULE_IMAGE, rm=True)
    return SUBMODULE_IMAGE


def start(image, base_commit, run_id, sanitise=True) -> DockerRuntime:
    return DockerRuntime(prepare_image(image, base_commit, sanitise=sanitise), base_commit, run_id=run_id,
                         server_in_image=sanitise)


def test_local_runtime_clones_and_sanitises_initialised_submodules(submodule_repo):
    repo = submodule_repo
    with LocalRuntime(repo["path"], repo["base"]) as runtime:
        assert runtime.run("git -C vendor/lib log --all --format=%H").output.split() == \
            git(repo["path"], "-C", "vendor/lib", "rev-list", repo["sub_recorded"]).split()
        assert not runtime.run(f"git -C vendor/lib cat-file -e {repo['sub_gold']}").ok
        assert runtime.read_file("vendor/lib/helpers.py") == b"def twice(x):\n    return 2 * x\n"
        runtime.write_file("app.py", FIX)
        assert "+    return sum(items)" in runtime.diff() and changed_submodules(runtime) == []


@pytest.mark.docker
def test_the_image_really_carries_both_gold_commits(submodule_image, submodule_repo, run_id):
    with start(submodule_image, submodule_repo["base"], run_id, sanitise=False) as runtime:
        assert runtime.run(f"git cat-file -e {submodule_repo['gold']}").ok
        assert runtime.run(f"git -C vendor/lib cat-file -e {submodule_repo['sub_gold']}").ok


@pytest.mark.docker
def test_sanitised_submodule_works_and_holds_nothing_newer(submodule_image, submodule_repo, run_id):
    repo = submodule_repo
    with start(submodule_image, repo["base"], run_id) as runtime:
        sub_log = runtime.run("git -C vendor/lib log --all --format=%H", output_limit=None)
        assert sub_log.ok, sub_log.output
        assert sub_log.output.split()[0] == repo["sub_recorded"] and len(sub_log.output.split()) == 2
        probe = runtime.run(f"git -C vendor/lib cat-file -e {repo['sub_gold']} && echo SUB-GOLD; "
                            f"git cat-file -e {repo['gold']} && echo GOLD; "
                            "git -C vendor/lib for-each-ref; git -C vendor/lib reflog; git -C vendor/lib stash list; "
                            "git -C vendor/lib fsck --unreachable --no-reflogs 2>/dev/null | grep -c unreachable; "
                            "ls .git/modules 2>&1; git -C vendor/lib config --get-regexp 'remote|worktree'",
                            output_limit=None)
        assert "GOLD" not in probe.output and "SUB GOLD" not in probe.output
        assert probe.output.splitlines()[0] == "0"
        assert "No such file or directory" in probe.output  # the old module store is gone
        assert runtime.read_file("vendor/lib/helpers.py") == b"def twice(x):\n    return 2 * x\n"
        assert runtime.run("git status --porcelain --ignore-submodules=none").output == ""
        assert runtime.run("git submodule status").output.split()[:2] == [repo["sub_recorded"], "vendor/lib"]

        # The agent's view: an edit to the parent is the diff; one inside the submodule is named, not diffed.
        runtime.write_file("app.py", FIX)
        runtime.write_file("vendor/lib/helpers.py", "def twice(x):\n    return x * 2\n")
        patch = runtime.diff()
        assert "+    return sum(items)" in patch and "helpers" not in patch and "vendor/lib" not in patch
        assert changed_submodules(runtime) == ["vendor/lib"]
        runtime.run("git -C vendor/lib checkout -q -- helpers.py")
        assert changed_submodules(runtime) == []
        runtime.run("git -C vendor/lib -c user.name=a -c user.email=a@a commit -q --allow-empty -m moved")
        assert "Subproject" not in runtime.diff() and changed_submodules(runtime) == ["vendor/lib"]


def submodule_task(repo) -> Task:
    return Task(instance_id="demo__vendored-1", repo="demo/vendored", base_commit=repo["base"],
                problem_statement="total() counts the items instead of adding them up.", repo_language="python",
                fail_to_pass=["test_total"], pass_to_pass=[], selected_test_files_to_run=[], before_repo_set_cmd="",
                dockerhub_tag="unused")


def bash(command):
    return {"content": f"Next.\n```bash\n{command}\n```", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


@pytest.mark.docker
@pytest.mark.slow
def test_rollout_in_a_repository_with_a_submodule_lands_its_fix_in_the_pool(submodule_image, submodule_repo,
                                                                            tmp_path, run_id):
    fix = bash("sed -i 's/return len(items)/return sum(items)/' app.py && git status --short")
    sub_edit = bash("echo '# note' >> vendor/lib/helpers.py")
    broken = bash("rm -rf vendor/lib/.git && echo 'gitdir: /nowhere' > vendor/lib/.git")
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [[fix, bash("submit")], [fix, sub_edit, bash("submit")],
                                                 [fix, broken, bash("submit")]]}))
    job = TaskJob(task=submodule_task(submodule_repo),
                  config=RunConfig(models={"junior": ModelSpec(model=f"scripted/{script}", free=True)},
                                   juniors=Juniors(k=3), limits=Limits(max_steps=5)),
                  paths=TaskPaths(tmp_path), run_id=run_id, image_template=submodule_image,
                  budget=Budget("run").child("task", None))
    records = run_juniors(job)
    assert [r.exit_reason for r in records] == ["submitted", "submitted", "patch_error"]
    for record in records[:2]:
        assert "+    return sum(items)" in record.patch and not record.patch_error
    assert records[0].submodule_changes is None
    assert records[1].submodule_changes == ["vendor/lib"] and "vendor/lib" in records[1].patch_note
    # A diff that fails is that rollout's recorded error, never an empty patch passed off as a result.
    assert records[2].patch == "" and "not a git repository" in records[2].patch_error
    assert records[2].agent_exit_reason == "submitted"
    saved = json.loads((tmp_path / "junior" / "rollout-02.json").read_text())
    assert saved["exit_reason"] == "patch_error"

    pool = build_pool(job.task.instance_id, records)
    assert len(pool.candidates) == 1 and pool.candidates[0].rollouts == [0, 1]
    assert pool.candidates[0].files == ["app.py"]
    assert pool.failed == [2] and pool.empty == []
    assert containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={run_id}"}) == []
