"""The senior's brief as real models write it: free text, odd span lines, paths as they were shown."""

import dataclasses
import json

import pytest

from pipeline.senior.brief import (
    BriefDraft,
    BriefFormatError,
    BriefSpan,
    check_candidate,
    check_spans,
    normalise_span_path,
    parse_brief,
    parse_span_line,
)

FILES = {"pkg/a.py": [f"a{n}" for n in range(1, 61)], "pkg/b.py": [f"b{n}" for n in range(1, 21)],
         "a/real.py": ["x"], "setup.py": ["s"]}


def read_lines(path):
    return FILES.get(path)


def exists(path):
    return path in FILES


# A multi-paragraph analysis quoting code with quotes and backslashes, prose around the blocks, bullets,
# backticks, L-ranges, en dashes, a wrapped reason, a malformed line among good ones, the submit block.
REPLY = r'''I have seen enough. Candidate 2 gets the escaping right; let me write the brief.

**ANALYSIS:**
`split_args()` in pkg/a.py splits on "\s+" with `re.split(r"\s+", line)`, so a quoted argument like
"a b" is cut in two, and a Windows path such as C:\temp\new is read with "\t" and "\n" as escapes.

The fix must keep quoted runs together:

```python
    parts = shlex.split(line, posix=True)  # "a b" stays one, \" is a quote
```

Candidate 1 only changes the caller in pkg/b.py; candidate 2 changes split_args itself.

SPANS:
- `/app/pkg/a.py:10-20` — split_args, which the fix changes
  (the regex on line 12)
* ./pkg/b.py L3-L8: the caller
3. a/pkg/a.py lines 1–4 the imports (shlex must be added)
- pkg/a.py 30-33, 40-41 - both helpers it uses
- the rest of the module is unrelated
- pkg/b.py:9-2 backwards

CANDIDATE: 2 (closest; it misses the caller)

```bash
submit
```
'''


def test_a_free_text_brief_with_quotes_backslashes_and_prose_is_read_whole():
    brief = parse_brief(REPLY)
    assert brief.analysis.startswith("`split_args()` in pkg/a.py splits on \"\\s+\" with `re.split(r\"\\s+\", line)`")
    assert 'C:\\temp\\new is read with "\\t" and "\\n"' in brief.analysis
    assert 'shlex.split(line, posix=True)  # "a b" stays one, \\" is a quote' in brief.analysis
    assert brief.analysis.endswith("candidate 2 changes split_args itself.")
    assert "submit" not in brief.analysis and "I have seen enough" not in brief.analysis
    assert [(s.file, s.start, s.end) for s in brief.spans] == [
        ("/app/pkg/a.py", 10, 20), ("./pkg/b.py", 3, 8), ("a/pkg/a.py", 1, 4), ("pkg/a.py", 30, 33),
        ("pkg/a.py", 40, 41)]
    assert brief.spans[0].reason == "split_args, which the fix changes (the regex on line 12)"
    assert brief.spans[2].reason == "the imports (shlex must be added)"
    assert brief.candidate == 2
    assert len(brief.problems) == 2  # the two malformed lines, each quoted with its reason
    assert "'- the rest of the module is unrelated': no line range" in brief.problems[0]
    assert "pkg/b.py:9-2 backwards" in brief.problems[1] and "ends before it starts" in brief.problems[1]


def test_checked_spans_are_repository_relative_whatever_prefix_the_senior_wrote():
    brief = parse_brief(REPLY)
    kept, problems = check_spans(brief.spans, read_lines, root="/app")
    assert [(s.file, s.start, s.end) for s in kept] == [
        ("pkg/a.py", 10, 20), ("pkg/b.py", 3, 8), ("pkg/a.py", 1, 4), ("pkg/a.py", 30, 33), ("pkg/a.py", 40, 41)]
    assert problems == []


@pytest.mark.parametrize("written, expected", [
    ("/app/pkg/a.py", "pkg/a.py"), ("./pkg/a.py", "pkg/a.py"), ("a/pkg/a.py", "pkg/a.py"), ("b/pkg/a.py", "pkg/a.py"),
    ("app/pkg/a.py", "pkg/a.py"), ("pkg//a.py", "pkg/a.py"), ("pkg/./a.py", "pkg/a.py"), ("`pkg/a.py`", "pkg/a.py"),
    ("pkg/a.py:10-20", "pkg/a.py"), ("pkg/a.py#L10-L20", "pkg/a.py"), ("/app/./pkg/../pkg/a.py", "pkg/a.py"),
    ("a/real.py", "a/real.py"),  # a real folder named a/ keeps its name
    ("b/missing.py", "b/missing.py"),  # stripped only when the stripped path exists
])
def test_span_paths_as_real_models_write_them(written, expected):
    assert normalise_span_path(written, "/app", exists) == (expected, None)


@pytest.mark.parametrize("written, reason", [
    ("/etc/passwd", "absolute path outside the repository (/app)"), ("/application/x.py", "absolute path outside"),
    ("../etc/passwd", "outside the repository"), ("pkg/../../x.py", "outside the repository"),
    ("/app/../etc/passwd", "outside the repository"), ("~/x.py", "outside the repository"),
    ("/app", "whole repository"), ("/app/", "whole repository"), ("./", "whole repository"), ("pkg/..", "whole"),
    ("pkg/", "directory"),
])
def test_only_paths_outside_the_repository_or_not_files_are_refused(written, reason):
    path, problem = normalise_span_path(written, "/app", exists)
    assert problem is not None and reason in problem


def test_refused_and_missing_spans_are_recorded_with_their_reason():
    spans = [BriefSpan("/app/pkg/a.py", 5, 9), BriefSpan("/srv/pkg/a.py", 1, 2), BriefSpan("pkg/../../a.py", 1, 2),
             BriefSpan("pkg/c.py", 1, 2), BriefSpan("pkg/b.py", 30, 40), BriefSpan("pkg/b.py", 15, 99)]
    kept, problems = check_spans(spans, read_lines, root="/app/")
    assert [(s.file, s.start, s.end) for s in kept] == [("pkg/a.py", 5, 9), ("pkg/b.py", 15, 20)]
    assert problems == [
        "'/srv/pkg/a.py': is an absolute path outside the repository (/app); name the file from the repository root",
        "'pkg/../../a.py': reaches outside the repository",
        "pkg/c.py: no such file in the repository",
        "pkg/b.py:30-40: outside the file's 20 lines"]


@pytest.mark.parametrize("line, expected", [
    ("pkg/a.py:10-42 why this matters", [("pkg/a.py", 10, 42, "why this matters")]),
    ("/app/pkg/b.py 5-9 - reason", [("/app/pkg/b.py", 5, 9, "reason")]),
    ("- `pkg/a.py` (lines 10-42): the parser", [("pkg/a.py", 10, 42, "the parser")]),
    ("* **pkg/a.py:10–42** — bold", [("pkg/a.py", 10, 42, "bold")]),
    ("`pkg/a.py:7` one line", [("pkg/a.py", 7, 7, "one line")]),
    ("pkg/a.py#L10-L42", [("pkg/a.py", 10, 42, "")]),
    ("pkg/a.py, lines 10 to 42: words", [("pkg/a.py", 10, 42, "words")]),
    ("pkg/a.py:10-20, 30-40 two ranges", [("pkg/a.py", 10, 20, "two ranges"), ("pkg/a.py", 30, 40, "two ranges")]),
    ("pkg/a.py:10-20, 3 callers use it", [("pkg/a.py", 10, 20, "3 callers use it")]),
])
def test_span_lines_in_the_shapes_models_use(line, expected):
    spans, problem = parse_span_line(line)
    assert problem is None and [(s.file, s.start, s.end, s.reason) for s in spans] == expected


@pytest.mark.parametrize("line, reason", [
    ("pkg/a.py the whole file", "no line range"), ("The principal should also read the tests.", "no line range"),
    ("pkg/a.py:42-10", "ends before it starts"), ("`pkg/a.py:10-20 unclosed", "quote is not closed")])
def test_malformed_span_lines_are_dropped_with_a_reason(line, reason):
    spans, problem = parse_span_line(line)
    assert spans == [] and reason in problem


def test_the_json_block_stays_accepted_and_forgives_raw_newlines_and_lone_backslashes():
    # What a model writes when it puts code in a JSON string: a raw newline, a regex's \d, and a malformed span.
    block = ('{"analysis": "The regex \\"\\d+\\" in parse()\nmisses signs.", "spans": ['
             '{"file": "/app/pkg/a.py", "start": 3, "end": 9, "reason": "parse"}, {"file": "pkg/b.py:2-4"}, '
             '{"file": "pkg/b.py", "lines": "5-7"}, {"file": "pkg/b.py"}, "pkg/a.py:1-2 header"], "candidate": 1}')
    brief = parse_brief(f"Here it is.\n```json\n{block}\n```\n```bash\nsubmit\n```")
    assert brief.analysis == 'The regex "\\d+" in parse()\nmisses signs.'
    assert [(s.file, s.start, s.end) for s in brief.spans] == [
        ("/app/pkg/a.py", 3, 9), ("pkg/b.py:2-4", 2, 4), ("pkg/b.py", 5, 7), ("pkg/a.py", 1, 2)]
    assert brief.candidate == 1 and len(brief.problems) == 1 and "span 4 dropped" in brief.problems[0]
    kept, _ = check_spans(brief.spans, read_lines, root="/app")
    assert [s.file for s in kept] == ["pkg/a.py", "pkg/b.py", "pkg/b.py", "pkg/a.py"]


def test_a_brief_with_an_analysis_and_no_usable_span_is_still_a_brief():
    brief = parse_brief("ANALYSIS:\nThe bug is the sign in add().\n\nSPANS:\ncalc.py (the add function)\n"
                        "CANDIDATE: none\n```bash\nsubmit\n```")
    assert brief.analysis == "The bug is the sign in add()." and brief.spans == [] and brief.candidate is None
    assert "no line range" in brief.problems[0]
    only_analysis = parse_brief("## Analysis\nadd() subtracts; the fix is in calc.py.\n")
    assert only_analysis.analysis == "add() subtracts; the fix is in calc.py."
    assert only_analysis.problems == ["the brief has no SPANS section"]


def test_spans_without_an_analysis_header_take_the_text_before_them_as_the_analysis():
    brief = parse_brief("The sign in add() is wrong; sub() is right.\n\nSpans:\n- calc.py:1-2 add\n")
    assert brief.analysis == "The sign in add() is wrong; sub() is right." and brief.spans[0].file == "calc.py"


def test_a_brief_wrapped_in_a_plain_code_block_is_unwrapped():
    brief = parse_brief("My brief:\n```\nANALYSIS:\nadd() subtracts.\nSPANS:\ncalc.py:1-2 add\nCANDIDATE: 1\n```\n"
                        "```bash\nsubmit\n```")
    assert brief.analysis == "add() subtracts." and [s.file for s in brief.spans] == ["calc.py"]
    assert brief.candidate == 1


@pytest.mark.parametrize("reply", [
    "I looked at calc.py; the bug is in add().\n```bash\nsubmit\n```",  # prose only
    "ANALYSIS:\n\nSPANS:\ncalc.py:1-2\n",  # an empty analysis
    '```json\n{"analysis": "x", "spans": [\n```',  # broken JSON and no text form
])
def test_a_reply_without_an_analysis_is_not_a_brief(reply):
    with pytest.raises(BriefFormatError, match="ANALYSIS"):
        parse_brief(reply)


@pytest.mark.parametrize("answer, number", [
    ("2", 2), ("#3", 3), ("Candidate 1", 1), ("2 (closest)", 2), ("4, since it handles both", 4), ("none", None),
    ("None of them: all miss the caller", None), ("n/a", None)])
def test_the_candidate_answer(answer, number):
    brief = parse_brief(f"ANALYSIS:\nx\nSPANS:\ncalc.py:1-2\nCANDIDATE: {answer}\n")
    assert brief.candidate == number and brief.problems == []


def test_a_candidate_line_inside_the_analysis_is_not_the_answer():
    brief = parse_brief("ANALYSIS:\nfirst.\nCandidate: 1 and 2 both touch add().\nlast.\nSPANS:\ncalc.py:1-2\n"
                        "CANDIDATE:\n2\nSubmitting now.\n")
    assert brief.analysis == "first.\nCandidate: 1 and 2 both touch add().\nlast." and brief.candidate == 2
    assert brief.problems == []


def test_a_candidate_number_outside_the_pool_is_dropped_with_a_reason():
    brief = BriefDraft("x", [], candidate=5)
    check_candidate(brief, 3)
    assert brief.candidate is None and "numbered 1 to 3" in brief.problems[0]
    alone = BriefDraft("x", [], candidate=1)
    check_candidate(alone, 0)
    assert alone.candidate is None and "none were shown" in alone.problems[0]


def test_the_brief_record_round_trips_with_its_candidate():
    brief = parse_brief(REPLY)
    again = BriefDraft.from_dict(json.loads(json.dumps(brief.to_dict())))
    assert again == brief and again.to_dict()["candidate"] == 2
    # to_dict names the fields by hand: it must say what dataclasses.asdict said, key for key, in order
    assert json.dumps(brief.to_dict()) == json.dumps(dataclasses.asdict(brief))
