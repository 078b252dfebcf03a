"""Patches of files that are not UTF-8 keep their bytes: diff transport, JSON, files, prompts."""

import json

import pytest
from conftest import git

from pipeline.juniors.pool import build_pool
from pipeline.principal.stage import select_candidates
from pipeline.records import Rollout
from pipeline.rundir.storage import append_jsonl, write_json_atomic
from pipeline.runtime.base import CommandResult, DiffFailed, read_diff
from pipeline.runtime.local import LocalRuntime
from pipeline.senior.stage import _pool_variables
from pipeline.settings.config import PrincipalConfig
from pipeline.text import patchtext

LATIN1 = b"# -*- coding: latin-1 -*-\nNAME = 'Jos\xe9'\nCITY = 'S\xe3o Paulo'\n"


@pytest.fixture(scope="module")
def latin1_repo(tmp_path_factory):
    repo = tmp_path_factory.mktemp("latin1") / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "names.py").write_bytes(LATIN1)
    (repo / "utf8.py").write_text("GREETING = 'Olá'\n", encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    return {"path": repo, "base": git(repo, "rev-parse", "HEAD")}


def test_latin1_and_utf8_edits_keep_their_bytes_through_json_files_and_back(latin1_repo, tmp_path):
    with LocalRuntime(latin1_repo["path"], latin1_repo["base"]) as rt:
        rt.write_file("names.py", LATIN1.replace(b"Jos\xe9'", b"Jos\xe9 Mar\xeda'"))
        rt.write_file("utf8.py", "GREETING = 'Olá, mundo'\n")
        rt.write_file("new_\u00e9.py", b"X = '\xff'\n")  # a new file, a byte that is never UTF-8
        patch = rt.diff()
        assert "\ufffd" not in patch and "Olá, mundo" in patch
        data = patchtext.to_bytes(patch)
        assert b"+NAME = 'Jos\xe9 Mar\xeda'" in data and b"-NAME = 'Jos\xe9'" in data and b"X = '\xff'" in data

        # JSON (records, pool, predictions) carries it exactly, as escapes.
        record = tmp_path / "rollout.json"
        write_json_atomic(record, {"patch": patch})
        append_jsonl(tmp_path / "predictions.jsonl", {"model_patch": patch})
        assert json.loads(record.read_text(encoding="utf-8"))["patch"] == patch
        line = (tmp_path / "predictions.jsonl").read_text(encoding="utf-8").splitlines()[0]
        assert json.loads(line)["model_patch"] == patch
        pool = build_pool("demo", [Rollout(index=0, patch=patch)])
        kept = patchtext.to_bytes(pool.candidates[0].patch)  # re-serialised by unidiff, the bytes unchanged
        assert b"+NAME = 'Jos\xe9 Mar\xeda'" in kept and b"X = '\xff'" in kept and "Olá, mundo".encode() in kept

        # Written back into a clean checkout, it applies.
        rt.run("git reset -q --hard && git clean -fdq")
        rt.write_file("/tmp/candidate.diff", pool.candidates[0].patch)
        check = rt.run("git apply --check /tmp/candidate.diff && git apply /tmp/candidate.diff")
        assert check.ok, check.output
        assert rt.read_file("names.py") == LATIN1.replace(b"Jos\xe9'", b"Jos\xe9 Mar\xeda'")

        # Text for a model: no lone surrogate (a provider's JSON would refuse it), the bytes shown as U+FFFD.
        principal = select_candidates(pool, PrincipalConfig(), len).text
        for shown in (principal, _pool_variables(pool, "")["candidates"][0]["patch"]):
            json.dumps({"content": shown}, ensure_ascii=False).encode("utf-8")
            assert "Jos\ufffd Mar\ufffd" in shown and "Olá, mundo" in shown


def test_foreign_lone_surrogates_become_question_marks_rather_than_crash():
    assert patchtext.to_bytes("a\ud83db\udce9") == b"a?b\xe9"
    assert patchtext.printable("caf\udce9") == "caf\ufffd"
    assert patchtext.from_bytes(b"caf\xe9") == "caf\udce9"


def result(output, exit_code=0):
    return CommandResult(exit_code=exit_code, output=output, timed_out=False, duration=0.1, total_bytes=len(output),
                         cut_bytes=0)


def test_a_diff_that_arrives_garbled_cut_or_unmarked_is_an_error_not_a_patch():
    assert read_diff(result("SWEPIPE-DIFF base64 3\nYWJj\n"), "w") == "abc"
    assert read_diff(result("SWEPIPE-DIFF raw 4\nabc\n"), "w") == "abc\n"
    assert read_diff(result("SWEPIPE-DIFF base64 0\n\n"), "w") == ""
    with pytest.raises(DiffFailed, match="cut short"):
        read_diff(result("SWEPIPE-DIFF base64 9\nYWJj\n"), "w")
    with pytest.raises(DiffFailed, match="garbled"):
        read_diff(result("SWEPIPE-DIFF base64 3\nYWJ\n"), "w")
    with pytest.raises(DiffFailed, match="printed no patch"):
        read_diff(result("warning: something\ndiff --git a/x b/x\n"), "w")
    with pytest.raises(DiffFailed, match="not a git repository"):
        read_diff(result("fatal: not a git repository: /nowhere\n", exit_code=128), "w")
