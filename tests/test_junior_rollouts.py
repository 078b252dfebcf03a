"""Juniors as real rollouts leave them (local clones, the scripted model through litellm): the pool keeps a
new module the fix imports and drops the reproduction script, and every rollout runs at its own
temperature and seed, which reach the model call."""

import threading
import time

import pytest
import yaml
from conftest import git
from litellm.integrations.custom_logger import CustomLogger

from pipeline.job import TaskJob
from pipeline.juniors.pool import build_pool
from pipeline.juniors.rollout import _take_patch, rollout_temperature, spread_temperature
from pipeline.juniors.stage import run_juniors
from pipeline.models.budget import Budget
from pipeline.models.litellm_setup import litellm
from pipeline.records import Rollout
from pipeline.rundir.layout import TaskPaths
from pipeline.runtime.base import DiffFailed
from pipeline.settings.config import Juniors, Limits, RunConfig
from pipeline.settings.model_spec import METADATA_KEY, ModelSpec
from pipeline.tasks import Task

FILES = {
    "setup.py": "from setuptools import setup\nsetup(name='shop')\n",
    "shop/__init__.py": "",
    "shop/models.py": "class Item:\n    def __init__(self, name):\n        self.name = name\n",
    "shop/views.py": "from shop.models import Item\n\n\ndef show(item):\n    return str(item)\n",
    "shop/spec/__init__.py": "",
    "shop/spec/schema.py": "def load(x):\n    return x\n",
    "tests/test_views.py": "from shop.views import show\n",
}


@pytest.fixture(scope="module")
def shop_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("shop") / "repo"
    for path, text in FILES.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return {"path": repo, "base": git(repo, "rev-parse", "HEAD")}


def bash(command):
    return {"content": f"Next.\n```bash\n{command}\n```", "usage": {"prompt_tokens": 10, "completion_tokens": 5}}


SUBMIT = bash("submit")
TEMPLATES = bash("cat > shop/templates.py <<'EOF'\ndef render_item(item):\n"
                 "    return '<li>' + item.name + '</li>'\nEOF")
USE_TEMPLATES = bash("sed -i '1a from shop.templates import render_item' shop/views.py && "
                     "sed -i 's/return str(item)/return render_item(item)/' shop/views.py")
REPRODUCE = bash("printf 'from shop.views import show\\nfrom shop.models import Item\\nprint(show(Item(1)))\\n' "
                 "> reproduce.py && python3 reproduce.py || true")
NOTES = bash("mkdir -p notes && echo 'print(1)' > notes/try.py")
SPEC_FIX = bash("sed -i 's/return x/return dict(x)/' shop/spec/schema.py")


class CallSpy(CustomLogger):
    """What litellm sent for each scripted call: (agent, temperature, seed), by script file."""

    def __init__(self, script):
        super().__init__()
        self.script, self.calls, self.lock = str(script), [], threading.Lock()

    def log_success_event(self, kwargs, response_obj, start_time, end_time):
        if str(kwargs.get("model", "")).endswith(self.script):
            agent = ((kwargs.get("litellm_params") or {}).get("metadata") or {}).get(METADATA_KEY, {}).get("agent")
            params = kwargs.get("optional_params") or {}
            with self.lock:
                self.calls.append((agent, params.get("temperature"), params.get("seed")))

    def wait_for(self, count, seconds=30):
        deadline = time.monotonic() + seconds
        while len(self.calls) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return sorted(self.calls)


@pytest.fixture
def spy_on():
    spies = []

    def attach(script):
        spy = CallSpy(script)
        litellm.callbacks.append(spy)
        spies.append(spy)
        return spy

    yield attach
    for spy in spies:
        litellm.callbacks.remove(spy)


def run_scripts(repo, tmp_path, run_id, monkeypatch, scripts, *, temperature=None, **juniors):
    monkeypatch.setenv("SWEPIPE_TEST_REPO", str(repo["path"]))
    monkeypatch.setenv("SWEPIPE_TEST_BASE", repo["base"])
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": scripts}))
    task = Task(instance_id="demo__shop-1", repo="demo/shop", base_commit=repo["base"],
                problem_statement="Items should render as list entries.", repo_language="python",
                fail_to_pass=["t"], pass_to_pass=[], selected_test_files_to_run=[], before_repo_set_cmd="",
                dockerhub_tag="unused")
    config = RunConfig(models={"junior": ModelSpec(model=f"scripted/{script}", free=True, temperature=temperature)},
                       juniors=Juniors(**juniors), limits=Limits(max_steps=6),
                       containers={"impl": "local_opener:open_local"})
    job = TaskJob(task=task, config=config, paths=TaskPaths(tmp_path), run_id=run_id, image_template="unused",
                  budget=Budget("run").child("task", None))
    return script, run_juniors(job)


def test_real_rollouts_keep_the_new_module_drop_the_scratch_and_get_spread_temperatures(
        shop_repo, tmp_path, run_id, monkeypatch, spy_on):
    scripts = [[REPRODUCE, TEMPLATES, USE_TEMPLATES, SUBMIT],   # the fix with a new module, and a reproduction
               [TEMPLATES, USE_TEMPLATES, NOTES, SUBMIT],       # the same fix, and notes in a new folder
               [SPEC_FIX, SUBMIT]]                              # an edit in a source folder named spec/
    spy = spy_on(tmp_path / "script.yaml")
    _, records = run_scripts(shop_repo, tmp_path, run_id, monkeypatch, scripts, k=3)
    assert [r.exit_reason for r in records] == ["submitted"] * 3
    assert "reproduce.py" in records[0].patch and "notes/try.py" in records[1].patch
    assert "setup.py" in records[0].base_entries and "shop/views.py" in records[0].base_entries
    pool = build_pool("demo__shop-1", records)
    assert [(c.files, c.rollouts) for c in pool.candidates] == [(["shop/templates.py", "shop/views.py"], [0, 1]),
                                                                (["shop/spec/schema.py"], [2])]
    assert [(d["rollout"], d["file"]) for d in pool.dropped] == [(0, "reproduce.py"), (1, "notes/try.py")]
    assert pool.candidates[1].test_patch == ""
    # three distinct temperatures, spread from the first rollouts on, and each reached the model call
    assert [(r.temperature, r.seed) for r in records] == [(0.0, 0), (1.0, 1), (0.5, 2)]
    calls = spy.wait_for(4 + 4 + 2)
    assert {(agent, t, s) for agent, t, s in calls} == {(0, 0.0, 0), (1, 1.0, 1), (2, 0.5, 2)}


@pytest.mark.slow
def test_ten_rollouts_by_default_run_at_ten_temperatures_told_to_keep_scratch_under_tmp(
        shop_repo, tmp_path, run_id, monkeypatch, spy_on):
    spy = spy_on(tmp_path / "script.yaml")
    _, records = run_scripts(shop_repo, tmp_path, run_id, monkeypatch, [[SUBMIT]], seed=100)  # K: the default
    assert len(records) == 10  # the method's K
    for record in records:  # a file a rollout leaves in the repository lands in its patch
        system = " ".join(record.trajectory["messages"][0]["content"].split())
        assert "keep scratch files (reproduction scripts, notes, logs) under /tmp, never in the repository" in system
    temperatures = [r.temperature for r in records]
    assert len(set(temperatures)) == 10 and all(0.0 <= t <= 1.0 for t in temperatures)
    assert [r.seed for r in records] == list(range(100, 110))
    assert spy.wait_for(10) == sorted(zip(range(10), temperatures, range(100, 110), strict=True))


def test_a_temperature_set_on_the_junior_model_is_used_by_every_rollout(shop_repo, tmp_path, run_id, monkeypatch,
                                                                        spy_on):
    spy = spy_on(tmp_path / "script.yaml")
    _, records = run_scripts(shop_repo, tmp_path, run_id, monkeypatch, [[SUBMIT]], temperature=0.3, k=2)
    assert [r.temperature for r in records] == [0.3, 0.3]
    assert spy.wait_for(2) == [(0, 0.3, 0), (1, 0.3, 1)]


@pytest.mark.parametrize(("system", "tools"), [("agent_system.md.j2", False), ("agent_system_tools.md.j2", True),
                                               ("agent_system_piv.md.j2", False), ("agent_system_piv.md.j2", True)])
@pytest.mark.parametrize("editor", [True, False])
def test_every_agent_prompt_says_scratch_files_go_under_tmp_and_how_to_edit(system, tools, editor):
    from pipeline.text.prompts import render

    text = " ".join(render(system, workdir="/app", command_timeout=120, max_steps=50, task_text="x",
                           tools=tools, editor=editor).split())
    assert "under /tmp, never in the repository" in text
    how = ("`str_replace_editor`" if tools else "```edit") if editor else "`sed -i` or Python"
    assert how in text and ("not with sed or heredocs" in text) == editor


def test_temperature_precedence_and_the_default_spread():
    spread = [spread_temperature(i) for i in range(10)]
    assert spread[:5] == [0.0, 1.0, 0.5, 0.25, 0.75] and len(set(spread)) == 10
    assert len({spread_temperature(i) for i in range(64)}) == 64  # no repeat up to juniors.k's limit
    assert [rollout_temperature([0.2, 0.9], 0.3, i) for i in range(3)] == [0.2, 0.9, 0.2]  # the list wins
    assert [rollout_temperature(None, 0.3, i) for i in range(3)] == [0.3] * 3  # then the model's own
    assert [rollout_temperature([], None, i) for i in range(3)] == [0.0, 1.0, 0.5]  # then the spread


class _DiffFails:
    """A workspace whose diff cannot be taken (its container's limits were hit, its server died)."""

    base_commit = "0" * 40

    def diff(self, max_bytes=None):
        raise DiffFailed("git diff failed in box (exit -1): [swepipe: the command server stopped during this command]")


@pytest.mark.parametrize("ended, recorded", [("resource_limit", "resource_limit"), ("runtime_error", "runtime_error"),
                                             ("submitted", "patch_error"), ("step_limit", "patch_error")])
def test_a_diff_that_fails_after_the_workspace_failed_keeps_the_rollout_s_own_ending(ended, recorded):
    record = Rollout(exit_reason=ended, error="what ended it")
    _take_patch(_DiffFails(), record, max_bytes=1000)
    assert record.exit_reason == recorded and record.patch == ""
    assert "command server stopped" in record.patch_error and record.error == "what ended it"
    assert record.agent_exit_reason == (None if recorded == ended else ended)
