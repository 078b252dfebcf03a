"""Containment in real containers: what agents and scoring may use, and runaway commands that end their own
rollout while the other rollouts of the stage, and the host, go on."""

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
import yaml
from leftovers import run_containers
from scripted_pipeline import SUBMIT, apply_patch_command, bash

import pipeline
from pipeline.evaluation.protocol import PROTOCOL_VERSION
from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.job import TaskJob
from pipeline.juniors.rollout import _take_patch
from pipeline.juniors.stage import run_juniors
from pipeline.models.budget import Budget
from pipeline.records import Rollout
from pipeline.rundir.layout import TaskPaths
from pipeline.runtime import containers
from pipeline.runtime.factory import open_runtime
from pipeline.runtime.images.names import image_name
from pipeline.runtime.limits import CAPABILITIES, MEMORY_SHARE, MIB, container_limits, fill_defaults, machine_memory
from pipeline.settings.config import Containers, Juniors, Limits, RunConfig
from pipeline.settings.model_spec import ModelSpec
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, defaults_for

pytestmark = [pytest.mark.docker, pytest.mark.slow]
TASK = next(t for t in load_tasks(BUNDLED) if t.repo_language == "python")
TEMPLATE = defaults_for(BUNDLED).image_template
FORK_BOMB = ":(){ :|:& };:"


def labelled(run_id):
    return run_containers(run_id)


def host_config(container):
    container.reload()
    return container.attrs["HostConfig"]


def assert_contained(config, limits):
    assert config["PidsLimit"] == limits.pids
    assert config["Memory"] == limits.memory and config["MemorySwap"] == limits.memory
    assert config["NanoCpus"] == int(limits.cpus * 1e9)
    assert config["CapDrop"] == ["ALL"] and sorted(config["CapAdd"]) == sorted(CAPABILITIES)
    assert config["SecurityOpt"] == ["no-new-privileges"]
    assert f"size={limits.tmp_size}" in config["Tmpfs"]["/tmp"]
    assert {u["Name"]: u["Hard"] for u in config["Ulimits"] or []}.get("fsize", limits.file_size) == limits.file_size


class HostWatch:
    """Runs a command on the host every half second while a test goes on; the slowest answer is kept."""

    def __init__(self):
        self.slowest, self.failures, self._stop = 0.0, [], threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self):
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                done = subprocess.run(["sh", "-c", "echo alive"], capture_output=True, text=True, timeout=60)
                if done.stdout != "alive\n":
                    self.failures.append(done.stdout + done.stderr)
            except (OSError, subprocess.SubprocessError) as error:
                self.failures.append(repr(error))
            self.slowest = max(self.slowest, time.monotonic() - started)
            self._stop.wait(0.5)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=90)


def test_agent_containers_are_limited_and_unprivileged(run_id):
    chosen = Containers(cpus=1.5, memory="1g", pids_limit=300, tmp_size="64m", file_size="100m")
    with open_runtime(TASK, "rollout-00", chosen, run_id=run_id, image_template=TEMPLATE) as runtime:
        assert_contained(host_config(runtime.container), container_limits(chosen))
        inside = runtime.run("grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ulimit -f; "
                             "df -k /tmp | tail -1; id -u").output.split()
        assert inside[inside.index("CapEff:") + 1] == "00000000000000fb"  # the seven capabilities, nothing more
        assert inside[inside.index("NoNewPrivs:") + 1] == "1"
        assert str(100 * MIB // 1024) in inside and "65536" in inside and inside[-1] == "0"
        # Still root for what a test run needs: files of another user, dropping to it, git in the repository.
        chown = runtime.run("touch /tmp/f && chown nobody /tmp/f && su -s /bin/sh nobody -c 'id -un' && "
                            "git status --short && git commit -q --allow-empty -m x && echo committed")
        assert chown.ok and "nobody" in chown.output and "committed" in chown.output, chown.output
        refused = runtime.run("mount -t tmpfs none /mnt 2>&1; ip link set lo down 2>&1; "
                              "chroot / true 2>&1; mknod /tmp/d c 1 3 2>&1; echo done")
        assert refused.output.count("ermission denied") + refused.output.count("not permitted") >= 3
        # The archive API cannot see into the /tmp tmpfs: files there go through the container itself.
        runtime.write_file("/tmp/notes/patch.diff", "the bytes\n")
        assert runtime.run("cat /tmp/notes/patch.diff").output == "the bytes\n"
        assert runtime.read_file("/tmp/notes/patch.diff") == b"the bytes\n"
        with pytest.raises(FileNotFoundError):
            runtime.read_file("/tmp/missing")
    with open_runtime(TASK, "senior", chosen, run_id=run_id, image_template=TEMPLATE, read_only=True) as senior:
        assert_contained(host_config(senior.container), container_limits(chosen))
        assert senior.container.attrs["HostConfig"]["ReadonlyRootfs"] is True
        senior.write_file("/tmp/scratch.txt", "notes")  # its /tmp is the one writable place
        assert senior.read_file("/tmp/scratch.txt") == b"notes"
    assert labelled(run_id) == []


def test_the_sanitise_scratch_container_is_limited_too(tmp_path, run_id, monkeypatch, leaky_repo):
    from pipeline.runtime.images import prepare as images
    from pipeline.runtime.images.debian_base import BASE_IMAGE

    shutil.copytree(leaky_repo["path"], tmp_path / "repo", symlinks=True)
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY repo /app\nWORKDIR /app\n"
                                         f"LABEL swepipe.test={run_id}\n")
    tag = f"swepipe-test-containment:{run_id}"
    image = containers.client().images.build(path=str(tmp_path), tag=tag, rm=True)[0]
    seen = []
    remove = containers.remove

    def inspect_then_remove(container):
        seen.append(host_config(container))
        remove(container)

    monkeypatch.setattr(images.containers, "remove", inspect_then_remove)
    chosen = container_limits(Containers(pids_limit=200, memory="700m", tmp_size="32m"))
    sanitised = None
    try:
        sanitised = images.sanitised_image(image, leaky_repo["base"], limits=chosen)
        [scratch] = seen
        assert scratch["PidsLimit"] == 200 and scratch["Memory"] == 700 * MIB and scratch["CapDrop"] == ["ALL"]
        assert scratch["SecurityOpt"] == ["no-new-privileges"] and "size=33554432" in scratch["Tmpfs"]["/tmp"]
        assert not scratch.get("Ulimits")  # no file-size limit: the whole history is written as one pack
        probe = f"git cat-file -e {leaky_repo['gold']} 2>/dev/null && echo LEAK; ls /usr/local/share/swepipe"
        out = containers.client().containers.run(sanitised, entrypoint=["bash", "-c"], remove=True, command=[probe])
        assert out.decode().split() == ["command_server.py"]  # sanitised; its script and scratch space gone
    finally:
        if sanitised:
            containers.client().images.remove(sanitised, force=True)
        containers.client().images.remove(tag, force=True)


def test_scoring_has_no_network_unless_asked_and_is_limited(tmp_path, run_id, monkeypatch):
    from pipeline.evaluation import runner

    seen = []
    remove = containers.remove

    def inspect_then_remove(container):
        container.reload()
        seen.append(container.attrs)
        remove(container)

    monkeypatch.setattr(runner.containers, "remove", inspect_then_remove)
    chosen = container_limits(Containers(memory="2g", pids_limit=512, cpus=1))
    settings = EvalSettings(image_template=TEMPLATE, run_scripts=defaults_for(BUNDLED).run_scripts, run_id=run_id,
                            limits=chosen)
    offline = evaluate(TASK, TASK.patch, tmp_path / "offline", settings).to_dict()
    settings.network = True
    online = evaluate(TASK, TASK.patch, tmp_path / "online", settings).to_dict()
    official = EvalSettings(image_template=TEMPLATE, run_scripts=defaults_for(BUNDLED).run_scripts, run_id=run_id,
                            limits=chosen, profile="official", seed=7)
    graded = evaluate(TASK, TASK.patch, tmp_path / "official", official).to_dict()
    assert offline["resolved"] and online["resolved"] and graded["resolved"]  # the gold patch scores under them
    assert offline["network"] is False and online["network"] is True
    assert offline["limits"]["pids"] == 512 and offline["limits"]["memory"] == "2g"
    image_id = containers.client().images.get(image_name(TEMPLATE, TASK.to_row())).id
    assert offline["scorer"] == {"swepipe": pipeline.__version__, "protocol": PROTOCOL_VERSION, "profile": "local",
                                 "timeout": 1800, "image_id": image_id, "image_digest": None,
                                 "parser": "this machine's Python"}  # built here, not pulled; a text-program parser
    assert image_id.startswith("sha256:")
    assert graded["scorer"] == {**offline["scorer"], "profile": "official", "timeout": 3600, "seed": 7}
    assert len(seen) == 3  # each scoring: the tests' container (the bundled parsers run on this machine's Python)
    assert seen[0]["Config"].get("NetworkDisabled") is True
    assert not seen[1]["Config"].get("NetworkDisabled")
    local = dataclasses.replace(chosen, cpus=float(os.cpu_count()))  # the local profile: no CPU cap
    for attrs in seen[:2]:
        assert_contained(attrs["HostConfig"], local)
    # the official profile: up to 4 CPUs and 30 GiB, capped at this machine; the seed reaches the tests
    graded_limits = dataclasses.replace(chosen, cpus=float(min(4, os.cpu_count())),
                                        memory=min(30 * 1024 * MIB, int(machine_memory() * MEMORY_SHARE)))
    assert_contained(seen[2]["HostConfig"], graded_limits)
    assert graded["limits"]["cpus"] == graded_limits.cpus and "SWEPIPE_SCORING_SEED=7" in seen[2]["Config"]["Env"]
    assert not any(e.startswith("SWEPIPE_SCORING_SEED") for e in seen[0]["Config"]["Env"] or [])


def swepipe(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "250"}, stdin=subprocess.DEVNULL)


def test_eval_network_flag_is_recorded(tmp_path):
    predictions = tmp_path / "preds.json"
    predictions.write_text(json.dumps([{"instance_id": TASK.instance_id, "patch": TASK.patch}]))
    for flags, expected in ((["--eval-network"], True), ([], False)):
        out = tmp_path / f"out{len(flags)}{expected}"
        done = swepipe("eval", "--predictions", str(predictions), "--output", str(out), *flags, cwd=tmp_path)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        result = json.loads((out / TASK.instance_id / "result.json").read_text())
        assert result["network"] is expected and result["resolved"] is True


def test_fork_bomb_and_disk_fillers_end_their_own_rollouts_while_another_submits_a_fix(tmp_path, run_id):
    scripts = [
        [bash(apply_patch_command(TASK.patch)), SUBMIT],                         # 0: fixes and submits
        [bash(FORK_BOMB), SUBMIT],                                               # 1: a fork bomb
        [bash("yes > /app/big; echo still here"), SUBMIT],                       # 2: fills the repository's disk
        [bash("dd if=/dev/zero of=/tmp/fill bs=1M count=100000"), SUBMIT],      # 3: fills /tmp
        [bash(f"({FORK_BOMB}) > /dev/null 2>&1 & echo started"), bash("ls"), SUBMIT],  # 4: a bomb left behind
        [bash("python3 -c 'import time; x = bytearray(700 * 2**20); time.sleep(60)'"), SUBMIT],  # 5: memory
    ]
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": scripts}))
    k = len(scripts)
    chosen = fill_defaults(Containers(file_size="300m", tmp_size="64m", memory="512m"), concurrent=k)
    config = RunConfig(models={"junior": ModelSpec(model=f"scripted/{script}", free=True)},
                       juniors=Juniors(k=k, temperatures=[0.0]), containers=chosen,
                       limits=Limits(max_steps=4, command_timeout=120))
    job = TaskJob(task=TASK, config=config, paths=TaskPaths(tmp_path), run_id=run_id, image_template=TEMPLATE,
                  budget=Budget("run").child("task", None))
    started = time.monotonic()
    with HostWatch() as host:
        records = run_juniors(job)
    assert host.failures == [] and host.slowest < 20  # the host kept answering throughout
    assert subprocess.run(["sh", "-c", "echo alive"], capture_output=True, text=True, timeout=30).stdout == "alive\n"
    assert time.monotonic() - started < 120 * 2  # no runaway lasted until the command timeout and beyond

    reasons = [r.exit_reason for r in records]
    assert reasons == ["submitted"] + ["resource_limit"] * (k - 1), [r.error for r in records]
    assert "process limit" in records[1].error and "process limit" in records[4].error
    assert "file-size limit (300m per file)" in records[2].error
    assert "full /tmp (64m; emptied)" in records[3].error
    assert "memory limit (512m" in records[5].error
    for record in records[1:]:  # each is recorded with the command's output, and its diff was still taken
        step = record.trajectory["steps"][0]
        assert step["output"] is not None and record.patch == ""
        saved = json.loads((tmp_path / "junior" / f"rollout-{record.index:02d}.json").read_text())
        assert saved["exit_reason"] == "resource_limit"
        # 2's runaway file is still there when its diff is taken; 4's bomb may run into the limit only after its
        # last command, so the diff meets it (both the rollout's own doing, as its exit says).
        if record.index not in (2, 4):
            assert record.patch_error is None
    assert "File size limit exceeded" in records[2].trajectory["steps"][0]["output"]
    assert "No space left on device" in records[3].trajectory["steps"][0]["output"]
    # The 300m runaway file is still in the repository: taking the diff of it may run into the limits too,
    # which is then that rollout's recorded error, not an empty patch passed off as its work.
    assert records[2].patch_error is None or "limits" in records[2].patch_error
    assert records[0].patch and labelled(run_id) == []
    result = evaluate(TASK, records[0].patch, tmp_path / "eval",
                      EvalSettings(image_template=TEMPLATE, run_scripts=defaults_for(BUNDLED).run_scripts,
                                   run_id=run_id)).to_dict()
    assert result["resolved"] and result["network"] is False


# Forks once the command that started it has returned, until the process limit refuses one; then it stops
# (Python's fork does not retry) and its children soon end, so a later command neither runs into the limit
# nor finds it full: only the counter says it was hit.
LATE_FORKS = ("python3 -c 'import os, time\ntime.sleep(2)\nfor _ in range(400):\n    pid = os.fork()\n"
              "    if pid == 0:\n        time.sleep(1)\n        os._exit(0)\n' > /dev/null 2>&1 & echo started")


def test_a_limit_hit_between_commands_ends_the_rollout_that_left_its_cause_behind(run_id):
    """A process the agent left in the background runs into the process limit after its command returned and
    before the next one (here: the harness taking the diff of a rollout that submitted). That is the rollout's
    doing, so it ends ``resource_limit`` with the limit named, not an infrastructure error and not a clean
    submission."""
    chosen = fill_defaults(Containers(pids_limit=64), concurrent=1)
    with open_runtime(TASK, "rollout-00", chosen, run_id=run_id, image_template=TEMPLATE) as runtime:
        started = runtime.run(LATE_FORKS, timeout=30)
        assert started.output.strip() == "started"
        time.sleep(8)  # the forks happen, and end, while no command runs
        record = Rollout(exit_reason="submitted", error=None)
        _take_patch(runtime, record, max_bytes=1_000_000)
        assert record.exit_reason == "resource_limit" and record.agent_exit_reason == "submitted"
        assert "process limit (64 processes" in record.error and record.patch == ""
        assert runtime.run("echo alive", timeout=30).output == "alive\n"  # reported once, not again
    assert labelled(run_id) == []


def test_swepipe_run_sizes_limits_records_them_and_scores_with_eval_network(tmp_path):
    script = {"junior": [[bash(apply_patch_command(TASK.patch)), SUBMIT], [bash(FORK_BOMB), SUBMIT]]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({
        "models": {"junior": {"model": f"scripted/{tmp_path / 'script.yaml'}", "free": True}},
        "juniors": {"k": 2}, "containers": {"pids_limit": 400}}))
    done = swepipe("run", "--strategy", "vote", "--instance-ids", TASK.instance_id, "--config", "config.yaml",
                   "--run-id", "contained", "--workers", "2", "--evaluate", "--eval-network", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    root = tmp_path / "runs" / "contained"
    recorded = yaml.safe_load((root / "config.yaml").read_text())["containers"]
    expected = container_limits(Containers(pids_limit=400), concurrent=4)  # 2 tasks at once x K=2
    assert recorded["pids_limit"] == 400 and recorded["cpus"] == expected.cpus
    assert container_limits(Containers(**recorded)) == expected
    task_dir = root / "tasks" / TASK.instance_id
    bomb = json.loads((task_dir / "junior" / "rollout-01.json").read_text())
    assert bomb["exit_reason"] == "resource_limit" and "400 processes" in bomb["error"]
    result = json.loads((task_dir / "eval" / "result.json").read_text())
    assert result["network"] is True and result["resolved"] is True and result["limits"]["pids"] == 400
    assert labelled("contained") == []


def test_a_resumed_rollout_replays_its_fork_bomb_and_keeps_its_ending(tmp_path, run_id):
    """A session killed after the bomb was recorded but before the rollout's record was written: the replay
    runs into the limit again, and the saved ending stands."""
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"junior": [[SUBMIT]]}))
    (tmp_path / "junior").mkdir()
    (tmp_path / "junior" / "rollout-00.trajectory.json").write_text(json.dumps({
        "name": "rollout-00", "exit_reason": "resource_limit", "error": "its process limit",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                     {"role": "assistant", "content": f"```bash\n{FORK_BOMB}\n```"}, {"role": "user", "content": "o"}],
        "steps": [{"index": 0, "reply": f"```bash\n{FORK_BOMB}\n```", "command": FORK_BOMB, "action": "bash",
                   "exit_code": -9, "output": "fork: retry"}]}))
    config = RunConfig(models={"junior": ModelSpec(model=f"scripted/{script}", free=True)},
                       juniors=Juniors(k=1, temperatures=[0.0]), containers=Containers(pids_limit=200))
    job = TaskJob(task=TASK, config=config, paths=TaskPaths(tmp_path), run_id=run_id, image_template=TEMPLATE,
                  budget=Budget("run").child("task", None))
    [record] = run_juniors(job)
    assert record.exit_reason == "resource_limit" and record.error == "its process limit"
    assert record.patch == "" and record.patch_error is None and labelled(run_id) == []
