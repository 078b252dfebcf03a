"""The agents' file editor against the traps real models walk into (pipeline/edits/editor.py), on a real
workspace (a clone, through LocalRuntime's file reads, writes and shell probe). No model."""

import json
import subprocess
import threading

import pytest

from pipeline.edits.editor import Editor, EditorCall, EditorError, open_editor
from pipeline.runtime.local import LocalRuntime
from pipeline.team.workspace import SharedWorkspace

SOURCE = '''def greet(name):
    return "hello " + name


def part(x):
    return x


def whole(x):
    return x
'''


@pytest.fixture
def workspace(tmp_path):
    repo = tmp_path / "source"
    (repo / "pkg" / "deep" / "deeper").mkdir(parents=True)
    (repo / "pkg" / "greet.py").write_text(SOURCE)
    (repo / "pkg" / "deep" / "deeper" / "far.txt").write_text("far\n")
    (repo / "tabs.go").write_text("func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n")
    (repo / "dos.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    (repo / "latin.txt").write_bytes("caf\xe9 cr\xe8me\nna\xefve\n".encode("latin-1"))
    (repo / "tail.txt").write_bytes(b"first\nlast line")
    (repo / "blob.bin").write_bytes(b"\x89PNG\0\0\0binary")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "base"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    with LocalRuntime(repo, commit) as runtime:
        yield runtime


def edit(editor, command, path, **arguments):
    return editor(EditorCall.from_arguments({"command": command, "path": path, **arguments}))


def text(runtime, path) -> bytes:
    return runtime.read_file(path)


def test_an_anchored_replace_changes_that_place_only_and_shows_it_numbered(workspace):
    editor = Editor(workspace)
    done = edit(editor, "str_replace", "pkg/greet.py", old_str='return "hello " + name', new_str='return f"hi {name}"')
    assert done.ok and done.changed and done.tolerated == ()
    assert text(workspace, "pkg/greet.py").decode() == SOURCE.replace('"hello " + name', 'f"hi {name}"')
    assert '2\t    return f"hi {name}"' in done.observation and "1\tdef greet(name):" in done.observation
    assert done.record() == {"command": "str_replace", "path": "pkg/greet.py", "ok": True}


def test_several_matches_change_nothing_and_name_the_count_and_lines(workspace):
    editor = Editor(workspace)
    done = edit(editor, "str_replace", "pkg/greet.py", old_str="    return x\n", new_str="    return -x\n")
    assert not done.ok and not done.changed
    assert "occurs 2 times" in done.observation and "lines 6, 10" in done.observation
    assert text(workspace, "pkg/greet.py").decode() == SOURCE
    assert done.record()["error"] == done.observation


def test_no_match_shows_the_nearest_lines_with_numbers_and_changes_nothing(workspace):
    done = edit(Editor(workspace), "str_replace", "pkg/greet.py", old_str='def greet(nam):\n    return "hello" + name',
                new_str="x")
    assert not done.ok and "does not occur" in done.observation
    assert "1 | def greet(name):" in done.observation and "2 |" in done.observation
    assert text(workspace, "pkg/greet.py").decode() == SOURCE


def test_trailing_whitespace_and_an_indentation_shift_are_tolerated_and_said(workspace):
    editor = Editor(workspace)
    drift = edit(editor, "str_replace", "pkg/greet.py", old_str="def part(x):   \n    return x   \n",
                 new_str="def part(x):\n    return x + 1\n")
    assert drift.ok and drift.tolerated == ("trailing whitespace",) and "allowing for trailing whitespace" in \
        drift.observation
    shifted = edit(editor, "str_replace", "pkg/greet.py", old_str="    def whole(x):\n        return x",
                   new_str="    def whole(x):\n        return 2 * x")  # the block as quoted from inside a class
    assert shifted.ok and shifted.tolerated == ("a uniform indentation shift",)
    assert text(workspace, "pkg/greet.py").decode().endswith("def whole(x):\n    return 2 * x\n")


def test_tabs_taken_for_spaces_fail_loudly_showing_the_tabs_and_exact_tabs_edit(workspace):
    editor = Editor(workspace)
    spaces = edit(editor, "str_replace", "tabs.go", old_str="    if x {\n        return 1\n    }",
                  new_str="    if x {\n        return 2\n    }")
    assert not spaces.ok and "indents with tabs" in spaces.observation and "3 | \t\treturn 1" in spaces.observation
    assert text(workspace, "tabs.go") == b"func f() {\n\tif x {\n\t\treturn 1\n\t}\n}\n"
    tabs = edit(editor, "str_replace", "tabs.go", old_str="\t\treturn 1", new_str="\t\treturn 2")
    assert tabs.ok and text(workspace, "tabs.go") == b"func f() {\n\tif x {\n\t\treturn 2\n\t}\n}\n"


def test_line_numbers_copied_from_a_view_are_taken_off(workspace):
    editor = Editor(workspace)
    view = edit(editor, "view", "pkg/greet.py", view_range=[5, 6])
    assert view.ok and view.observation.splitlines()[1:] == ["5\tdef part(x):", "6\t    return x"]
    done = edit(editor, "str_replace", "pkg/greet.py", old_str="  5 | def part(x):\n  6 |     return x",
                new_str="  5 | def part(x):\n  6 |     return x - 1")
    assert done.ok and "copied line numbers" in done.tolerated, done.observation
    assert "def part(x):\n    return x - 1\n" in text(workspace, "pkg/greet.py").decode()


def test_a_crlf_file_keeps_its_line_endings(workspace):
    done = edit(Editor(workspace), "str_replace", "dos.txt", old_str="two\nthree", new_str="2\n3")
    assert done.ok and "CRLF line endings" in done.tolerated
    assert text(workspace, "dos.txt") == b"one\r\n2\r\n3\r\n"


def test_a_latin1_file_keeps_every_byte(workspace):
    done = edit(Editor(workspace), "str_replace", "latin.txt", old_str="na\xefve", new_str="na\xefve!")
    assert done.ok and "Latin-1" in done.observation
    assert text(workspace, "latin.txt") == "caf\xe9 cr\xe8me\nna\xefve!\n".encode("latin-1")


def test_a_file_without_a_final_newline_keeps_none_and_inserts_at_its_end(workspace):
    editor = Editor(workspace)
    assert edit(editor, "str_replace", "tail.txt", old_str="last line", new_str="last line, edited").ok
    assert text(workspace, "tail.txt") == b"first\nlast line, edited"
    assert edit(editor, "insert", "tail.txt", insert_line=2, new_str="after\n").ok
    assert text(workspace, "tail.txt") == b"first\nlast line, edited\nafter"


def test_insert_after_a_line_and_past_the_end(workspace):
    editor = Editor(workspace)
    done = edit(editor, "insert", "pkg/greet.py", insert_line=0, new_str="import os\n")
    assert done.ok and text(workspace, "pkg/greet.py").decode() == "import os\n" + SOURCE
    past = edit(editor, "insert", "pkg/greet.py", insert_line=99, new_str="x\n")
    assert not past.ok and "past the end" in past.observation and "has 11 lines" in past.observation


def test_paths_out_of_the_repository_are_refused_and_its_own_absolute_path_taken(workspace, tmp_path):
    editor = Editor(workspace)
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    for path in ("../outside.txt", str(outside), "/etc/passwd", "pkg/../../outside.txt", ".git/config"):
        done = edit(editor, "view", path)
        assert not done.ok, path
    assert "outside the repository" in edit(editor, "view", "/etc/passwd").observation
    inside = edit(editor, "view", f"{workspace.workdir}/pkg/greet.py")
    assert inside.ok and "1\tdef greet(name):" in inside.observation


def test_a_symlink_out_of_the_repository_is_refused_for_reading_and_writing(workspace, tmp_path):
    outside = tmp_path / "target"
    outside.mkdir()
    (outside / "victim.txt").write_text("keep\n")
    root = workspace.workdir
    workspace.run(f"ln -s {outside}/victim.txt {root}/link.txt && ln -s {outside} {root}/linkdir", timeout=10)
    editor = Editor(workspace)
    for call in (("view", "link.txt", {}), ("str_replace", "link.txt", {"old_str": "keep", "new_str": "x"}),
                 ("create", "linkdir/new.txt", {"file_text": "x\n"}), ("view", "linkdir", {})):
        done = edit(editor, call[0], call[1], **call[2])
        assert not done.ok and "leads out of the repository" in done.observation, (call, done.observation)
    assert (outside / "victim.txt").read_text() == "keep\n" and not (outside / "new.txt").exists()


def test_binary_large_and_git_files_are_refused(workspace):
    editor = Editor(workspace, max_file_bytes=1000)
    assert "binary" in edit(editor, "view", "blob.bin").observation
    workspace.write_file("big.txt", "line\n" * 2_000_000)  # 10 MB
    big = edit(editor, "str_replace", "big.txt", old_str="line", new_str="x")
    assert not big.ok and "10,000,000 bytes" in big.observation and "view_range" in big.observation
    part = edit(editor, "view", "big.txt", view_range=[3, 4])
    assert part.ok and part.observation.endswith("3\tline\n4\tline")
    assert "inside .git" in edit(editor, "view", ".git/HEAD").observation


def test_create_refuses_an_existing_file_and_makes_folders_for_a_new_one(workspace):
    editor = Editor(workspace)
    over = edit(editor, "create", "pkg/greet.py", file_text="gone\n")
    assert not over.ok and "already exists" in over.observation and text(workspace, "pkg/greet.py").decode() == SOURCE
    made = edit(editor, "create", "pkg/new/mod.py", file_text="X = 1\n")
    assert made.ok and text(workspace, "pkg/new/mod.py") == b"X = 1\n"
    assert "pkg/new/mod.py" in workspace.diff()


def test_undo_goes_back_one_edit_at_a_time_and_then_says_there_is_none(workspace):
    editor = Editor(workspace)
    edit(editor, "str_replace", "pkg/greet.py", old_str="def part", new_str="def piece")
    edit(editor, "insert", "pkg/greet.py", insert_line=0, new_str="# top\n")
    first = edit(editor, "undo_edit", "pkg/greet.py")
    assert first.ok and text(workspace, "pkg/greet.py").decode() == SOURCE.replace("def part", "def piece")
    assert edit(editor, "undo_edit", "pkg/greet.py").ok and text(workspace, "pkg/greet.py").decode() == SOURCE
    third = edit(editor, "undo_edit", "pkg/greet.py")
    assert not third.ok and "no edit" in third.observation
    edit(editor, "create", "fresh.txt", file_text="new\n")
    assert edit(editor, "undo_edit", "fresh.txt").ok and edit(editor, "view", "fresh.txt").ok is False
    assert "no edit" in edit(Editor(workspace), "undo_edit", "pkg/greet.py").observation  # another agent's own


def test_a_folder_is_listed_two_levels_deep_without_hidden_files(workspace):
    done = edit(Editor(workspace), "view", ".")
    listed = done.observation.splitlines()[1:]
    assert {"pkg", "pkg/greet.py", "pkg/deep", "tabs.go"} <= set(listed)
    assert not any("deeper" in line or ".git" in line for line in listed)  # two levels, no hidden files
    below = edit(Editor(workspace), "view", "pkg/deep").observation.splitlines()[1:]
    assert below == ["pkg/deep/deeper", "pkg/deep/deeper/far.txt"]


def test_two_workers_editing_one_file_at_once_lose_no_update(workspace, tmp_path):
    """Two team workers, each with its own editor on the team's shared workspace (as pipeline.team runs them):
    their interleaved edits of one file all land, each is journalled as its worker's, and a workspace rebuilt
    from the journal holds the same file, with each worker's undo history back."""
    workspace.write_file("shared.txt", "".join(f"slot {n}\n" for n in range(40)))
    shared = SharedWorkspace(workspace, journal=tmp_path / "commands.jsonl")
    errors = []

    def worker(name, numbers):
        editor = open_editor(shared.for_agent(name), 10_000)
        for n in numbers:
            done = edit(editor, "str_replace", "shared.txt", old_str=f"slot {n}\n", new_str=f"slot {n} done\n")
            if not done.ok:
                errors.append(done.observation)

    threads = [threading.Thread(target=worker, args=(f"worker-{k}", range(k, 40, 2))) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    finished = "".join(f"slot {n} done\n" for n in range(40))
    assert errors == []
    assert text(workspace, "shared.txt").decode() == finished
    journal = [json.loads(line) for line in (tmp_path / "commands.jsonl").read_text().splitlines()]
    assert len(journal) == 40 and {e["agent"] for e in journal} == {"worker-0", "worker-1"}
    assert all(e["edit"]["command"] == "str_replace" and e["changed"] == ["shared.txt"] for e in journal)
    assert shared.writes("worker-0") == {"shared.txt": []}  # an edit is its worker's for sure

    workspace.run("git checkout -q -- . && git clean -qfd")  # a new process: the tree as the task began
    workspace.write_file("shared.txt", "".join(f"slot {n}\n" for n in range(40)))
    rebuilt = SharedWorkspace(workspace, journal=tmp_path / "commands.jsonl")
    editors = {name: open_editor(rebuilt.for_agent(name), 10_000) for name in ("worker-0", "worker-1")}
    assert rebuilt.restore({"worker-0": 20, "worker-1": 19}, editors) == 39  # worker-1's last edit was not saved
    assert text(workspace, "shared.txt").decode() == finished.replace("slot 39 done", "slot 39")
    assert edit(editors["worker-0"], "undo_edit", "shared.txt").ok
    assert "slot 38 done" not in text(workspace, "shared.txt").decode()


def test_malformed_calls_are_named(workspace):
    for arguments, said in (({"command": "delete", "path": "a"}, "command must be one of"),
                            ({"command": "view"}, "needs a path"),
                            ({"command": "insert", "path": "a", "insert_line": "two"}, "insert_line must be"),
                            ({"command": "view", "path": "a", "view_range": [1]}, "view_range must be"),
                            ({"command": "create", "path": "a", "file_text": 3}, "file_text must be a string")):
        with pytest.raises(EditorError, match=said):
            EditorCall.from_arguments(arguments)
    editor = Editor(workspace)
    assert "needs old_str" in edit(editor, "str_replace", "pkg/greet.py", old_str="", new_str="x").observation
    same = edit(editor, "str_replace", "pkg/greet.py", old_str="def greet", new_str="def greet")
    assert not same.ok and "changes nothing" in same.observation


def test_an_indentation_shift_the_replacement_cannot_follow_fails_loudly(workspace):
    """Spaces put before a tab-indented block: the search matches once its shift is taken off, but a REPLACE line
    without that shift (a closing brace) has no known place; it fails, never lands with spaces in a tab file."""
    before = text(workspace, "tabs.go")
    done = edit(Editor(workspace), "str_replace", "tabs.go", old_str="    \tif x {\n    \t\treturn 1\n    \t}\n    }",
                new_str="    \tif x {\n    \t\treturn 2\n    \t}\n    }")
    assert done.ok, done.observation  # every line carries the shift: it is taken off each
    assert text(workspace, "tabs.go") == b"func f() {\n\tif x {\n\t\treturn 2\n\t}\n}\n"
    workspace.write_file("tabs.go", before)
    odd = edit(Editor(workspace), "str_replace", "tabs.go", old_str="    \tif x {\n    \t\treturn 1\n    \t}",
               new_str="    \tif x {\n    \t\treturn 2\n    \t}\n}")
    assert not odd.ok and text(workspace, "tabs.go") == before
