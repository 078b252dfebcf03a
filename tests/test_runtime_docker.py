import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import threading

import pytest
import runtime_contract as contract

from pipeline.errors import RuntimeUnavailable
from pipeline.runtime import containers
from pipeline.runtime.docker import DockerRuntime
from pipeline.runtime.factory import open_runtime
from pipeline.runtime.images.debian_base import BASE_IMAGE
from pipeline.runtime.images.prepare import prepare_image
from pipeline.runtime.limits import ResourceLimitHit
from pipeline.settings.config import Containers
from pipeline.tasks import Task

pytestmark = pytest.mark.docker
LEAKY_IMAGE = "swepipe-test-leaky:latest"


@pytest.fixture(scope="session")
def leaky_image(leaky_repo, tmp_path_factory):
    context = tmp_path_factory.mktemp("leaky-context")
    shutil.copytree(leaky_repo["path"], context / "repo", symlinks=True)
    (context / "Dockerfile").write_text(f"FROM {BASE_IMAGE}\nCOPY repo /app\nWORKDIR /app\n")
    containers.client().images.build(path=str(context), tag=LEAKY_IMAGE, rm=True)
    return LEAKY_IMAGE


def start(image, base_commit, run_id, sanitise=True, **options) -> DockerRuntime:
    """A container of ``image`` prepared (ensured and, when ``sanitise``, sanitised) the way stages get one."""
    return DockerRuntime(prepare_image(image, base_commit, sanitise=sanitise), base_commit, run_id=run_id,
                         server_in_image=sanitise, **options)


@pytest.fixture(params=["command-server", "exec-per-command"])
def rt(request, leaky_image, leaky_repo, run_id):
    server = request.param == "command-server"
    with start(leaky_image, leaky_repo["base"], run_id, command_server=server) as runtime:
        runtime.run("true")
        assert (runtime._session is not None) is server
        yield runtime


def labelled(run_id):
    return containers.client().containers.list(all=True, filters={"label": f"{containers.RUN_LABEL}={run_id}"})


def test_exit_code_and_merged_output(rt):
    contract.check_exit_code_and_merged_output(rt)


def test_timeout_kills_command_not_container(rt):
    contract.check_timeout_kills_command_not_workspace(rt)
    rt.container.reload()
    assert rt.container.status == "running"


@pytest.mark.slow
def test_concurrent_commands_run_at_once_and_each_keeps_its_own_timeout(rt):
    """Two callers (a team's workers) run commands in the one container at the same time: the first sees the
    second's file while it runs, its timeout kills it alone, and the second goes on to its end."""
    duration = f"30.{random.randrange(10**6):06d}"
    wait_for = "for i in $(seq 200); do [ -e {path} ] && break; sleep 0.1; done; [ -e {path} ]"
    first: list = []
    thread = threading.Thread(target=lambda: first.append(rt.run(
        f"touch /tmp/first-runs && {wait_for.format(path='/tmp/second-runs')} && echo saw-second; sleep {duration}",
        timeout=4)))
    thread.start()
    try:
        second = rt.run(f"{wait_for.format(path='/tmp/first-runs')} && touch /tmp/second-runs && sleep 8 && "
                        "echo second-done", timeout=60)
    finally:
        thread.join(timeout=60)
    [first] = first
    assert first.timed_out and "saw-second" in first.output  # one lock would have run them one after the other
    assert second.ok and second.output == "second-done\n" and not second.timed_out
    assert f"sleep {duration}" not in rt.run("ps -eo args").output
    assert rt.run("echo alive").output == "alive\n"


@pytest.mark.slow
def test_huge_output_is_bounded(rt):
    contract.check_huge_output_is_bounded(rt)


def test_non_utf8_output(rt):
    contract.check_non_utf8_output(rt)


def test_files_and_diff(rt):
    contract.check_files_and_diff(rt)


def test_writes_keep_mode_and_owner(rt):
    contract.check_writes_keep_mode_and_owner(rt)


def test_no_solution_leak(rt, leaky_repo):
    contract.check_no_solution_leak(rt, leaky_repo)


def test_unsanitised_image_still_holds_the_gold_commit(leaky_image, leaky_repo, run_id):
    # The guard above is only meaningful if the image really carries the answer.
    with start(leaky_image, leaky_repo["base"], run_id, sanitise=False) as runtime:
        assert runtime.run(f"git cat-file -e {leaky_repo['gold']}").ok


def test_sanitised_image_is_made_once_and_reused(leaky_image, leaky_repo, run_id):
    with start(leaky_image, leaky_repo["base"], run_id) as first:
        image_one = first.container.image.id
    with start(leaky_image, leaky_repo["base"], run_id) as second:
        assert second.container.image.id == image_one
    assert prepare_image(leaky_image, leaky_repo["base"]).startswith(f"{containers.SANITISED_REPOSITORY}:")
    assert labelled(run_id) == []


def test_network_is_off_and_no_api_key_enters(leaky_image, leaky_repo, run_id, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-should-not-leak")
    with start(leaky_image, leaky_repo["base"], run_id) as runtime:
        assert "sk-ant" not in runtime.run("env").output
        assert runtime.run("cat /sys/class/net/*/operstate 2>/dev/null; ls /sys/class/net").output.split() \
            in (["unknown", "lo"], ["lo"])


def test_container_removed_after_an_exception(leaky_image, leaky_repo, run_id):
    with pytest.raises(ZeroDivisionError):
        with start(leaky_image, leaky_repo["base"], run_id) as runtime:
            assert labelled(run_id)
            runtime.run("true")
            raise ZeroDivisionError
    assert labelled(run_id) == []


def test_container_removed_after_sigint(leaky_image, leaky_repo, run_id, tmp_path):
    script = tmp_path / "hold.py"
    # Ctrl-C raises KeyboardInterrupt even when the test run was started with SIGINT ignored (a background job of
    # a non-interactive shell), which the child would inherit: it then slept on and exited 0.
    script.write_text(textwrap.dedent(f"""
        import signal, time
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from pipeline.runtime.docker import DockerRuntime
        from pipeline.runtime.images.prepare import prepare_image
        image = prepare_image({leaky_image!r}, {leaky_repo['base']!r})
        rt = DockerRuntime(image, {leaky_repo['base']!r}, run_id={run_id!r}, server_in_image=True)
        print("started", flush=True)
        time.sleep(120)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            cwd=os.getcwd(), env={**os.environ, "PYTHONPATH": os.getcwd()})
    try:
        assert proc.stdout.readline().strip() == "started"
        assert len(labelled(run_id)) == 1
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode != 0
    assert labelled(run_id) == []


def test_cleanup_command_removes_leftovers(leaky_image, run_id):
    # A process killed with SIGKILL cannot clean up; its labelled container is found later.
    containers.client().containers.run(leaky_image, entrypoint=["tail", "-f", "/dev/null"], detach=True,
                                       labels=containers.labels(run_id))
    assert len(labelled(run_id)) == 1
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "cleanup", run_id],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "removed 1 container" in done.stdout
    assert labelled(run_id) == []


def test_missing_image_is_a_clear_error(run_id):
    with pytest.raises(RuntimeUnavailable, match="swepipe-no-such/image:1 is not available locally"):
        start("swepipe-no-such/image:1", "HEAD", run_id)
    assert labelled(run_id) == []


def test_unknown_base_commit_is_a_clear_error(leaky_image, run_id):
    with pytest.raises(RuntimeUnavailable, match="base commit 0123456789abcdef is not in the repository"):
        start(leaky_image, "0123456789abcdef", run_id)
    # The scratch container that tried to sanitise is gone too.
    mine = [f"{containers.RUN_LABEL}=sanitise", f"swepipe.owner_pid={os.getpid()}"]
    assert containers.client().containers.list(all=True, filters={"label": mine}) == []


def test_image_without_python_falls_back_to_exec(tmp_path, leaky_image, leaky_repo, run_id):
    with start(leaky_image, leaky_repo["base"], run_id) as runtime:
        runtime.run("rm -f /usr/bin/python3*")
        runtime._drop_session(kill=True)
        result = runtime.run("echo still works")
        assert result.ok and result.output == "still works\n"
        assert runtime._session is None and not runtime._use_session


def test_command_server_killed_mid_command_is_restarted(leaky_image, leaky_repo, run_id):
    with start(leaky_image, leaky_repo["base"], run_id) as runtime:
        runtime.run("true")
        pid = runtime._session.server_pid
        result = runtime.run(f"kill -9 {pid}; sleep 5")
        assert result.exit_code == -1 and "command server stopped" in result.output
        assert runtime.run("echo back").output == "back\n"


def test_a_command_server_that_dies_while_its_command_runs_into_a_limit_reports_the_limit(leaky_image, leaky_repo,
                                                                                          run_id):
    # The server is stopped so that only a new server can see the OOM kill; then it is killed, as the OOM killer
    # did under a fork bomb in CI (the diff then failed, and the rollout was a patch_error, not its limit).
    with start(leaky_image, leaky_repo["base"], run_id, memory="256m") as runtime:
        runtime.run("true")
        pid = runtime._session.server_pid
        with pytest.raises(ResourceLimitHit, match="memory limit") as hit:
            runtime.run(f"kill -STOP {pid}; python3 -c 'x = bytearray(400 * 2**20)'; kill -9 {pid}")
        assert hit.value.limits == ["memory"] and "command server stopped" in hit.value.result.output
        assert runtime.run("echo back").output == "back\n"


def test_a_command_is_the_oom_killer_s_pick_before_the_command_server(leaky_image, leaky_repo, run_id):
    with start(leaky_image, leaky_repo["base"], run_id) as runtime:
        runtime.run("true")
        pid = runtime._session.server_pid
        scores = runtime.run(f"cat /proc/{pid}/oom_score_adj /proc/self/oom_score_adj").output.split()
        assert scores == ["0", "1000"]


def test_read_only_container_refuses_writes_but_reads(leaky_image, leaky_repo, run_id):
    with start(leaky_image, leaky_repo["base"], run_id, read_only=True) as runtime:
        assert runtime.run("git log --oneline | wc -l").output.strip() == "2"
        assert runtime.run("grep -n 'return' calc.py").ok
        refused = runtime.run("echo hacked > calc.py; sed -i 's/-/+/' calc.py; git checkout -b x")
        assert "Read-only file system" in refused.output
        assert runtime.read_file("calc.py") == b"def add(a, b):\n    return a - b\n"
        assert runtime._session is not None  # the command server still runs
        assert runtime.run("echo scratch > /tmp/notes && cat /tmp/notes").output == "scratch\n"


def calc_task(leaky_repo) -> Task:
    return Task(instance_id="demo__calc-1", repo="demo/calc", base_commit=leaky_repo["base"],
                problem_statement="add() subtracts instead of adding.", repo_language="python",
                fail_to_pass=["test_add"], pass_to_pass=[], selected_test_files_to_run=[],
                before_repo_set_cmd="", dockerhub_tag="unused")


def test_open_runtime_in_the_background_is_labelled_and_stops(leaky_image, leaky_repo, run_id):
    task = calc_task(leaky_repo)
    runtime = open_runtime(task, "rollout-03", Containers(), run_id=run_id, image_template=leaky_image,
                           background=True)
    try:
        assert runtime.run("git log --oneline | wc -l").output.strip() == "2"
        assert not runtime.run(f"git cat-file -e {leaky_repo['gold']}").ok  # started from the sanitised image
        [container] = labelled(run_id)
        assert container.labels["swepipe.agent"] == "rollout-03"
        assert container.labels["swepipe.instance_id"] == "demo__calc-1"
        assert container.id == runtime.container.id
    finally:
        runtime.stop()
    assert labelled(run_id) == []


def test_a_background_runtime_whose_warm_up_fails_leaves_no_container(leaky_image, leaky_repo, run_id, monkeypatch):
    """The warm-up command raising (Docker failing under it) must not leave its container: the caller never gets
    that runtime, so its stop() has nothing to stop, and each Docker retry of the task would leak one more."""
    def failing(self, command, timeout=60, output_limit=None):
        raise RuntimeUnavailable("the engine went away")

    monkeypatch.setattr(DockerRuntime, "run", failing)
    task = calc_task(leaky_repo)
    runtime = open_runtime(task, "rollout-00", Containers(), run_id=run_id, image_template=leaky_image,
                           background=True)
    with pytest.raises(RuntimeUnavailable, match="went away"):
        runtime.run("true")  # the first use raises the start's error
    assert labelled(run_id) == []
    runtime.stop()  # nothing left to stop, and the error is not raised again
