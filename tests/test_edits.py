"""Search/replace edits: parsing the principal's reply and applying it to files."""

from __future__ import annotations

import re

import pytest

from pipeline.edits.blocks import Edit, EditApplyError, EditFormatError, apply_edits, parse_edits
from pipeline.text import prompts
from pipeline.text.prompts import render


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


# ---------------------------------------------------------------- what real models write


def numbered(first: int, text: str) -> str:
    """Lines as the principal's context shows them (pipeline/senior/brief.py `_render`): `  12 | code`."""
    lines = text.splitlines()
    width = len(str(first + len(lines) - 1))
    return "".join(f"{first + n:>{width}} | {line}\n" for n, line in enumerate(lines))


SOURCE = "import os\n\n\ndef load(path):\n    if not path:\n        return None\n\n    return open(path).read()\n"


def test_line_numbers_copied_from_the_context_are_taken_off_search_and_replace():
    search = numbered(4, "def load(path):\n    if not path:\n        return None\n")
    replace = numbered(4, "def load(path):\n    if not path:\n        raise ValueError('no path')\n")
    reply = "/app/m.py\n" + block(search, replace)
    result = apply({"m.py": SOURCE}, *parse_edits(reply), roots=["/app"])
    assert result == {"m.py": SOURCE.replace("return None", "raise ValueError('no path')")}


def test_line_numbers_with_blank_lines_stripped_and_new_lines_unnumbered():
    # A blank line rendered "  7 | " comes back as "  7 |" (trailing space trimmed) or empty; the new lines the
    # model adds in REPLACE carry no number while the ones it copied do.
    search = " 5 |     if not path:\n 6 |         return None\n 7 |\n 8 |     return open(path).read()\n"
    replace = (" 5 |     if not path:\n 6 |         return None\n    log(path)\n\n"
               " 8 |     return open(path).read()\n")
    result = apply({"m.py": SOURCE}, Edit("m.py", search, replace))
    assert result == {"m.py": SOURCE.replace("\n\n    return open", "\n    log(path)\n\n    return open")}


def test_a_file_whose_lines_look_numbered_is_matched_as_written():
    table = "rank | name\n1 | ada\n2 | bob\n"
    assert apply({"t.md": table}, Edit("t.md", "1 | ada\n", "1 | eve\n")) == {"t.md": "rank | name\n1 | eve\n2 | bob\n"}
    # Not every line numbered: the SEARCH is taken as written (and not found), never half stripped.
    with pytest.raises(EditApplyError, match="SEARCH text not found"):
        apply({"m.py": SOURCE}, Edit("m.py", "4 | def load(path):\n    if not path:\n", "x\n"))


def test_delete_line_removes_a_file_and_is_not_confused_with_prose():
    reply = ("The helper module is dead code now.\n\nDELETE pkg/old_helper.py\n\n"
             "Please delete the old tests too? No: keep them.\n\n"
             "pkg/main.py\n" + block("import old_helper\n", "") + "\n**DELETE** `pkg/legacy.cfg`\n")
    edits = parse_edits(reply)
    assert edits == [Edit("pkg/old_helper.py", "", "", delete=True), Edit("pkg/main.py", "import old_helper\n", ""),
                     Edit("pkg/legacy.cfg", "", "", delete=True)]
    files = {"pkg/old_helper.py": "x = 1\n", "pkg/main.py": "import old_helper\nrun()\n", "pkg/legacy.cfg": "a=1\n"}
    assert apply(files, *edits) == {"pkg/old_helper.py": None, "pkg/main.py": "run()\n", "pkg/legacy.cfg": None}


def test_delete_of_a_missing_file_fails_with_close_paths_and_a_recreated_file_is_kept():
    files = {"pkg/helper.py": "x\n"}
    with pytest.raises(EditApplyError, match=r"Block 1 \(helper.py\): file to delete not found.*pkg/helper.py"):
        apply(files, *parse_edits("DELETE helper.py\n"), repo_files=files)
    # Deleted then written anew in the same reply: the new text stands.
    result = apply(files, *parse_edits("DELETE pkg/helper.py\n\npkg/helper.py\n" + block("", "y = 2\n")))
    assert result == {"pkg/helper.py": "y = 2\n"}


def test_search_of_the_whole_file_with_empty_replace_empties_it_but_keeps_it():
    assert apply({"m.py": "a\nb\n"}, Edit("m.py", "a\nb\n", "")) == {"m.py": ""}


@pytest.mark.parametrize("path", ["/app/pkg/m.py", "/app//pkg/m.py", "./pkg/m.py", "a/pkg/m.py", "b/pkg/m.py",
                                  "/srv/repo/pkg/m.py", "`/app/pkg/m.py`"])
def test_absolute_and_diff_style_paths_name_the_repository_file(path):
    files = {"pkg/m.py": "x = 1\n"}
    edits = parse_edits(f"{path}\n" + block("x = 1\n", "x = 2\n"))
    assert apply(files, *edits, roots=["/srv/repo", "/app"], repo_files=files) == {"pkg/m.py": "x = 2\n"}


def test_diff_prefix_is_kept_where_the_repository_has_that_folder():
    files = {"a/m.py": "in a\n", "m.py": "top\n", "b/x.py": "x\n"}
    assert apply(files, Edit("a/m.py", "in a\n", "A\n"), repo_files=files) == {"a/m.py": "A\n"}
    # A new file: "b/new.py" stays in b/ when the repository has a b/ folder, and loses a diff's prefix otherwise.
    assert apply(files, Edit("b/new.py", "", "n\n"), repo_files=files) == {"b/new.py": "n\n"}
    assert apply({"pkg/m.py": "m\n"}, Edit("b/pkg/new.py", "", "n\n"), repo_files=["pkg/m.py"]) == \
        {"pkg/new.py": "n\n"}


@pytest.mark.parametrize("path", ["/etc/passwd", "/app/../etc/passwd", "/application/m.py", "/tmp/app/m.py"])
def test_absolute_paths_outside_the_repository_stay_refused(path):
    with pytest.raises(EditApplyError, match="path escapes the repository"):
        apply({}, Edit(path, "", "x\n"), roots=["/app"])


def test_quotes_backslashes_and_regex_text_in_code_are_plain_text():
    source = 'PATTERN = re.compile(r"\\d+\\.\\d+")\nMSG = "it\'s \\"quoted\\"\\n"\nPATH = "C:\\\\temp\\\\x"\n'
    reply = ("Fix the pattern.\n\nconf.py\n```python\n<<<<<<< SEARCH\n"
             'PATTERN = re.compile(r"\\d+\\.\\d+")\nMSG = "it\'s \\"quoted\\"\\n"\n'
             "=======\n"
             'PATTERN = re.compile(r"\\d+(\\.\\d+)*$")\nMSG = "it\'s \\"quoted\\"\\n"\n'
             ">>>>>>> REPLACE\n```\n")
    result = apply({"conf.py": source}, *parse_edits(reply))
    assert result == {"conf.py": source.replace('r"\\d+\\.\\d+"', 'r"\\d+(\\.\\d+)*$"')}


def test_crlf_reply_with_trailing_spaces_on_a_crlf_file():
    source = "def f():\r\n    return 1\r\n\r\ndef g():\r\n    return 2\r\n"
    reply = ("Sure! Here is the change:\r\n\r\nw.py\r\n```python\r\n<<<<<<< SEARCH\r\n"
             "def g():   \r\n    return 2 \r\n=======\r\ndef g():\r\n    return 3\r\n>>>>>>> REPLACE\r\n```\r\n"
             "Let me know if you need anything else.\r\n")
    assert apply({"w.py": source}, *parse_edits(reply)) == {"w.py": source.replace("return 2", "return 3")}
