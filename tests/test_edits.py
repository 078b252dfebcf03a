"""Search/replace edits: parsing the principal's reply and applying it to files."""

from __future__ import annotations

import re

import pytest

from pipeline import prompts
from pipeline.principal.edits import Edit, EditApplyError, EditFormatError, apply_edits, parse_edits
from pipeline.prompts import render


def block(search: str, replace: str, fence: str = "```") -> str:
    return f"{fence}\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```\n"


def apply(files: dict[str, str], *edits: Edit, **kwargs) -> dict[str, str]:
    return apply_edits(edits, files.get, **kwargs)


# ---------------------------------------------------------------- parsing


def test_parses_several_files_and_blocks_around_analysis_text():
    reply = (
        "The bug is in the parser. Plan:\n\n"
        "src/a.py\n" + block("x = 1\n", "x = 2\n", "```python")
        + "\nSame file, another spot:\n" + block("y = 1\n", "y = 2\n")
        + "\n`src/b.py`\n" + block("b\n", "B\n")
        + "\nFile: src/c.py\n```\n<<<<<<< SEARCH\nc1\n=======\nC1\n>>>>>>> REPLACE\n"
        "<<<<<<< SEARCH\nc2\n=======\n>>>>>>> REPLACE\n```\n"
        "\n**docs/d.md**\n" + block("", "# Title\n```sh\nmake\n```\n", "```markdown")
        + "\nThat is all.\n"
    )
    assert parse_edits(reply) == [
        Edit("src/a.py", "x = 1\n", "x = 2\n"),
        Edit("src/a.py", "y = 1\n", "y = 2\n"),
        Edit("src/b.py", "b\n", "B\n"),
        Edit("src/c.py", "c1\n", "C1\n"),
        Edit("src/c.py", "c2\n", ""),
        Edit("docs/d.md", "", "# Title\n```sh\nmake\n```\n"),
    ]


@pytest.mark.parametrize(
    "path_line", ["src/a.py", "`src/a.py`", "File: src/a.py", "**File:** `src/a.py`", "### src/a.py", "- src/a.py:"]
)
def test_path_line_styles(path_line):
    assert parse_edits(f"{path_line}\n" + block("a\n", "b\n")) == [Edit("src/a.py", "a\n", "b\n")]


def test_parses_crlf_replies_and_a_path_inside_the_fence():
    reply = "```go\r\nmain.go\r\n<<<<<<< SEARCH\r\na\r\n=======\r\nb\r\n>>>>>>> REPLACE\r\n```\r\n"
    assert parse_edits(reply) == [Edit("main.go", "a\n", "b\n")]


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ("I would change the loop in utils.py.", "no edit block"),
        ("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n", "looks like a unified diff"),
        ("x.py\n```\n<<<<<<< SEARCH\na\n=======\nb\n```\n", "Block 1 (SEARCH marker on line 3) for x.py: "
         "the reply ends without the '>>>>>>> REPLACE' marker"),
        ("x.py\n" + block("a\n", "b\n") + "```\n<<<<<<< SEARCH\na\n>>>>>>> REPLACE\n```\n",
         "Block 2 (SEARCH marker on line 10) for x.py: found '>>>>>>> REPLACE' on line 12 before the '======='"),
        ("Here is the fix:\n```\n<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n```\n",
         "Block 1 (SEARCH marker on line 3) has no file path"),
        ("x.py\n```\na\n=======\nb\n>>>>>>> REPLACE\n```\n", "Line 6: '>>>>>>> REPLACE' without an open"),
    ],
    ids=["no-blocks", "unified-diff", "missing-replace", "missing-divider", "missing-path", "stray-replace"],
)
def test_garbage_replies_are_format_errors(reply, message):
    with pytest.raises(EditFormatError, match=re.escape(message)):
        parse_edits(reply)


# ---------------------------------------------------------------- applying


def test_exact_match_replaces_only_the_searched_lines():
    files = {"m.py": "a = 1\nb = 2\nc = 3\n"}
    assert apply(files, Edit("m.py", "b = 2\n", "b = 20\nb2 = 0\n")) == {"m.py": "a = 1\nb = 20\nb2 = 0\nc = 3\n"}


def test_trailing_whitespace_and_blank_search_ends_are_tolerated():
    files = {"m.py": "def f():   \n    return 1\n\nz = 0\n"}
    edit = Edit("m.py", "\ndef f():\n    return 1  \n\n\n", "\ndef f():\n    return 2\n\n\n")
    assert apply(files, edit) == {"m.py": "def f():\n    return 2\n\nz = 0\n"}


def test_uniform_indentation_difference_reindents_the_replacement():
    files = {"m.py": "class A:\n    def f(self):\n        if x:\n            return 1\n"}
    edit = Edit("m.py", "if x:\n    return 1\n", "if x:\n    return 2\nreturn 3\n")
    expected = "class A:\n    def f(self):\n        if x:\n            return 2\n        return 3\n"
    assert apply(files, edit) == {"m.py": expected}


def test_empty_search_creates_a_new_file_and_empty_replace_deletes():
    files = {"m.py": "keep\ndrop\nkeep too\n"}
    result = apply(files, Edit("pkg/new.py", "", "print('hi')\n"), Edit("m.py", "drop\n", ""))
    assert result == {"pkg/new.py": "print('hi')\n", "m.py": "keep\nkeep too\n"}
    assert apply({}, Edit("pkg/__init__.py", "", "")) == {"pkg/__init__.py": ""}


def test_crlf_line_endings_are_preserved():
    files = {"w.txt": "one\r\ntwo\r\nthree\r\n"}
    assert apply(files, Edit("w.txt", "two\n", "2\n2b\n")) == {"w.txt": "one\r\n2\r\n2b\r\nthree\r\n"}


def test_missing_final_newline_is_preserved():
    files = {"n.txt": "a\nb"}
    assert apply(files, Edit("n.txt", "b\n", "c\nd\n")) == {"n.txt": "a\nc\nd"}
    assert apply(files, Edit("n.txt", "a\n", "z\n")) == {"n.txt": "z\nb"}


def test_a_later_edit_sees_an_earlier_one():
    files = {"m.py": "x = 1\n"}
    result = apply(files, Edit("m.py", "x = 1\n", "x = 2\n"), Edit("m.py", "x = 2\n", "x = 3\n"),
                   Edit("new.py", "", "a\n"), Edit("new.py", "a\n", "b\n"))
    assert result == {"m.py": "x = 3\n", "new.py": "b\n"}


def test_not_found_shows_the_closest_lines_with_numbers():
    files = {"m.py": "import os\n\n\ndef load(path):\n    with open(path) as f:\n        return f.read()\n"}
    with pytest.raises(EditApplyError) as error:
        apply(files, Edit("m.py", "def load(path):\n    with open(path, 'r') as f:\n", "x\n"))
    message = str(error.value)
    assert "Block 1 (m.py): SEARCH text not found" in message
    assert "4 | def load(path):\n  5 |     with open(path) as f:" in message


def test_ambiguous_search_says_how_many_matches():
    files = {"m.py": "x = 1\ny = 0\nx = 1\n"}
    with pytest.raises(EditApplyError, match=r"matches 2 places \(starting at lines 1, 3\)"):
        apply(files, Edit("m.py", "x = 1\n", "x = 2\n"))


@pytest.mark.parametrize("path", ["../etc/passwd", "/app/m.py", "src/../../x.py", "C:\\x.py", ".git/config"])
def test_paths_outside_the_repository_are_refused(path):
    with pytest.raises(EditApplyError, match=r"path escapes the repository|inside \.git"):
        apply({}, Edit(path, "", "x\n"))


def test_missing_file_suggests_close_paths():
    files = {"src/pkg/utils.py": "a\n", "src/pkg/core.py": "b\n"}
    with pytest.raises(EditApplyError, match=r"file not found .* Did you mean: src/pkg/utils.py\?"):
        apply(files, Edit("pkg/utils.py", "a\n", "b\n"), repo_files=files)


def test_empty_search_on_an_existing_file_is_refused():
    with pytest.raises(EditApplyError, match="SEARCH is empty but the file already exists"):
        apply({"m.py": "x\n"}, Edit("m.py", "", "y\n"))


def test_all_failures_are_reported_together_and_nothing_is_returned():
    files = {"a.py": "a\n", "b.py": "b\nb\n"}
    edits = [Edit("a.py", "zzz\n", "q\n"), Edit("a.py", "a\n", "A\n"), Edit("b.py", "b\n", "B\n"),
             Edit("c.py", "c\n", "C\n")]
    with pytest.raises(EditApplyError) as error:
        apply(files, *edits)
    assert len(error.value.failures) == 3
    message = str(error.value)
    assert message.startswith("3 of 4 edit blocks could not be applied")
    for expected in ("Block 1 (a.py): SEARCH text not found", "Block 3 (b.py): SEARCH text matches 2 places",
                     "Block 4 (c.py): file not found"):
        assert expected in message


# ---------------------------------------------------------------- prompt fragment


def test_prompt_fragment_example_parses_and_applies(monkeypatch):
    monkeypatch.delenv(prompts.PROMPTS_DIR_ENV, raising=False)
    text = render("principal_format.md.j2")
    edits = parse_edits(text)
    assert [edit.path for edit in edits] == ["src/shop/cart.py", "src/shop/discounts.py"]
    cart = "class Cart:\n" + edits[0].search
    result = apply({"src/shop/cart.py": cart}, *edits)
    assert "item.quantity" in result["src/shop/cart.py"]
    assert result["src/shop/discounts.py"].startswith("def apply_discount")
