import pytest
import runtime_contract as contract

from pipeline.errors import RuntimeUnavailable
from pipeline.runtime.local import LocalRuntime


@pytest.fixture
def rt(leaky_repo):
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        yield runtime


def test_exit_code_and_merged_output(rt):
    contract.check_exit_code_and_merged_output(rt)


def test_timeout_kills_command_not_workspace(rt):
    contract.check_timeout_kills_command_not_workspace(rt)


def test_huge_output_is_bounded(rt):
    contract.check_huge_output_is_bounded(rt)


def test_non_utf8_output(rt):
    contract.check_non_utf8_output(rt)


def test_files_and_diff(rt):
    contract.check_files_and_diff(rt)


def test_writes_keep_mode_and_owner(rt):
    contract.check_writes_keep_mode_and_owner(rt)


def test_no_solution_leak(rt, leaky_repo):
    contract.check_no_solution_leak(rt, leaky_repo, ignored_files_kept=False)


def test_api_keys_do_not_reach_commands(leaky_repo, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-should-not-leak")
    with LocalRuntime(leaky_repo["path"], leaky_repo["base"]) as runtime:
        assert "sk-secret" not in runtime.run("env").output


def test_stop_deletes_the_clone(leaky_repo):
    runtime = LocalRuntime(leaky_repo["path"], leaky_repo["base"])
    root = runtime.workdir
    runtime.stop()
    import os
    assert not os.path.exists(root)


def test_unknown_base_commit_is_a_clear_error(leaky_repo):
    with pytest.raises(RuntimeUnavailable, match="base commit 0123456789abcdef is not in the repository"):
        LocalRuntime(leaky_repo["path"], "0123456789abcdef")
