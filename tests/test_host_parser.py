"""The parser on this machine's Python (pipeline.evaluation.host_parser): which parsers may run there, that they
give there the very output.json they give in the task's image, and that one which fails there, runs too long or
writes too much is bounded, and fails over to the image."""

import json
import shutil
import textwrap

import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st

from pipeline.evaluation import host_parser
from pipeline.evaluation.parsing import ParserContainer
from pipeline.evaluation.protocol import PARSE_SCRIPT, PARSER, parser_script
from pipeline.evaluation.runner import EvalSettings, _container, evaluate
from pipeline.runtime import containers
from pipeline.runtime.images.names import image_name
from pipeline.runtime.limits import container_limits
from pipeline.tasks import load_tasks
from pipeline.tasks.datasets import BUNDLED, BUNDLED_DIR, defaults_for

TASKS = {t.repo.split("/")[-1]: t for t in load_tasks(BUNDLED)}
OFFICIAL_SHAPE = textwrap.dedent("""\
    import dataclasses
    import json
    import re
    import sys
    from enum import Enum
    from pathlib import Path
    from typing import List


    class TestStatus(Enum):
        PASSED = 1
        FAILED = 2


    @dataclasses.dataclass
    class TestResult:
        name: str
        status: TestStatus


    def parse_test_output(stdout_content: str, stderr_content: str) -> List[TestResult]:
        return [TestResult(m.group(1), TestStatus[m.group(2)])
                for m in re.finditer(r"^(\\S+) (PASSED|FAILED)$", stdout_content, re.M)]


    def main(stdout_path: Path, stderr_path: Path, output_path: Path) -> None:
        results = parse_test_output(stdout_path.read_text(errors="replace"), stderr_path.read_text(errors="replace"))
        output_path.write_text(json.dumps({"tests": [{"name": r.name, "status": r.status.name} for r in results]}))


    if __name__ == "__main__":
        main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
    """)


def test_every_bundled_parser_and_one_in_the_official_shape_may_run_here():
    for parser in sorted(BUNDLED_DIR.glob("tasks/*/parser.py")):
        assert host_parser.unfit(parser.read_bytes()) is None, parser
    assert host_parser.unfit(OFFICIAL_SHAPE.encode()) is None


@pytest.mark.parametrize("source, reason", [
    ("import os\n", "it imports os"),
    ("import subprocess as s\n", "it imports subprocess"),
    ("from . import x\n", "it imports a relative import"),
    ("x = eval('1')\n", "it calls eval"),
    ("__import__('os')\n", "it calls __import__"),
    ("print(().__class__)\n", "it reaches for __class__"),
    ("open('/app/package.json')\n", "it names an absolute path"),
    ("def f(:\n", "this machine's Python cannot read it (SyntaxError)"),
    ("x = '\\0'\nprint(\0)\n", "this machine's Python cannot read it"),
])
def test_a_parser_that_may_need_the_image_or_more_than_text_runs_in_the_image(source, reason):
    assert host_parser.unfit(source.encode()).startswith(reason)


@fuzz
@given(st.one_of(st.binary(max_size=400), st.text(max_size=400).map(lambda t: t.encode("utf-8", "surrogatepass"))))
def test_any_parser_source_is_judged_never_an_exception(source):
    verdict = host_parser.unfit(source)
    assert verdict is None or isinstance(verdict, str)


def logs(tmp_path, stdout: str, stderr: str = ""):
    spool = tmp_path / "spool"
    spool.mkdir()
    (spool / "stdout.log").write_text(stdout)
    (spool / "stderr.log").write_text(stderr)
    out = tmp_path / "out"
    out.mkdir()
    return spool, out


def test_a_parser_here_reads_the_logs_and_writes_output_json_in_the_scorings_folder(tmp_path):
    spool, out = logs(tmp_path, "tests/a.py::test_x PASSED\ntests/a.py::test_y FAILED\nnoise\n")
    parsed = host_parser.parse_here(OFFICIAL_SHAPE.encode(), spool, out, 60, 10_000, 1 << 20, None)
    assert (parsed.exit_code, parsed.timed_out) == (0, False)
    assert json.loads((out / "output.json").read_text()) == {"tests": [
        {"name": "tests/a.py::test_x", "status": "PASSED"}, {"name": "tests/a.py::test_y", "status": "FAILED"}]}
    assert parsed.output_size == (out / "output.json").stat().st_size
    assert sorted(p.name for p in spool.iterdir()) == ["stderr.log", "stdout.log"]  # its folder is gone


def test_a_parser_here_reads_a_run_directory_named_relative_to_where_swepipe_runs(tmp_path, monkeypatch):
    """`swepipe run --runs-dir runs`: the scoring's folder is relative, the parser runs in a folder of its own."""
    spool, out = (path.relative_to(tmp_path) for path in logs(tmp_path, "tests/a.py::test_x PASSED\n"))
    monkeypatch.chdir(tmp_path)
    parsed = host_parser.parse_here(OFFICIAL_SHAPE.encode(), spool, out, 60, 10_000, 1 << 20, None)
    assert parsed.exit_code == 0, parsed.printed
    assert json.loads((tmp_path / out / "output.json").read_text())["tests"][0]["status"] == "PASSED"


def test_a_parser_here_is_bounded_in_time_output_and_what_it_prints(tmp_path):
    spool, out = logs(tmp_path, "")
    slow = host_parser.parse_here(b"import time\ntime.sleep(30)\n", spool, out, 1, 10_000, 1 << 20, None)
    assert (slow.exit_code, slow.timed_out, slow.output_size) == (None, True, None)
    huge = b"import sys\nwith open(sys.argv[3], 'w') as f:\n    f.write('x' * 5_000_000)\n"
    big = host_parser.parse_here(huge, spool, out, 60, 10_000, 1 << 20, None)
    assert big.exit_code != 0 and big.output_size <= 2 << 20 and not (out / "output.json").exists()
    chatty = host_parser.parse_here(b"print('y' * 1_000_000)\n", spool, out, 60, 1000, 1 << 20, None)
    assert chatty.exit_code == 0 and chatty.printed.total > 1_000_000 and chatty.printed.cut > 990_000
    nothing = host_parser.parse_here(b"import sys\nsys.exit(3)\n", spool, out, 60, 1000, 1 << 20, None)
    assert (nothing.exit_code, nothing.output_size) == (3, None)


def test_a_parser_here_sees_no_site_packages_and_no_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEPIPE_SECRET_FOR_TEST", "hunter2")
    spool, out = logs(tmp_path, "")
    probe = (b"import json, os, sys\nopen(sys.argv[3], 'w').write(json.dumps({'env': dict(os.environ), "
             b"'path': sys.path}))\n")
    parsed = host_parser.parse_here(probe, spool, out, 60, 1000, 1 << 20, None)
    seen = json.loads((out / "output.json").read_text())
    assert parsed.exit_code == 0 and "SWEPIPE_SECRET_FOR_TEST" not in seen["env"]
    assert not any("site-packages" in entry for entry in seen["path"])


@pytest.mark.docker
@pytest.mark.parametrize("name", ["tinyq", "flagpole", "cronlite"])
def test_a_parser_gives_here_the_output_json_it_gives_in_the_tasks_image(tmp_path, run_id, name):
    task = TASKS[name]
    defaults = defaults_for(BUNDLED)
    settings = EvalSettings(image_template=defaults.image_template, run_scripts=defaults.run_scripts, run_id=run_id)
    result = evaluate(task, task.patch, tmp_path / "eval", settings).to_dict()
    assert result["resolved"] and result["scorer"]["parser"] == "this machine's Python"
    here = (tmp_path / "eval" / "output.json").read_bytes()
    parser = (defaults.run_scripts / task.instance_id / PARSER).read_bytes()
    spool, out = tmp_path / "spool", tmp_path / "image"
    spool.mkdir()
    out.mkdir()
    for log in ("stdout.log", "stderr.log"):  # the tests' output as the scoring kept it (whole: they are small)
        shutil.copy(tmp_path / "eval" / log, spool / log)
    image = image_name(settings.image_template, task.to_row())
    in_image = ParserContainer(_container(task, image, PARSE_SCRIPT, settings, container_limits(), stdin=True),
                               {PARSER: parser, PARSE_SCRIPT: parser_script([]).encode()})
    try:
        in_image.send(spool)
        assert in_image.container.wait(timeout=120)["StatusCode"] == 0
        assert in_image.save_output(out, image) == len(here)
    finally:
        in_image.remove()
    assert (out / "output.json").read_bytes() == here
    assert containers.client().containers.list(all=True, filters={"label": f"swepipe.run_id={run_id}"}) == []


@pytest.mark.docker
def test_a_parser_that_fails_here_runs_in_the_image_and_says_so(tmp_path, run_id):
    """Its working folder here is not the image's /app: it fails here, and the image gives the verdict."""
    task = TASKS["tinyq"]
    scripts = tmp_path / "run_scripts" / task.instance_id
    scripts.mkdir(parents=True)
    shutil.copy(defaults_for(BUNDLED).run_scripts / task.instance_id / "run_script.sh", scripts)
    official = (defaults_for(BUNDLED).run_scripts / task.instance_id / PARSER).read_text()
    (scripts / PARSER).write_text("import sys\nfrom pathlib import Path\n"
                                  "if not Path('tinyq').is_dir():\n    sys.exit(4)\n" + official)
    settings = EvalSettings(image_template=defaults_for(BUNDLED).image_template, run_scripts=tmp_path / "run_scripts",
                            run_id=run_id)
    result = evaluate(task, task.patch, tmp_path / "eval", settings).to_dict()
    assert result["resolved"] is True and result["parser_exit_code"] == 0
    assert result["scorer"]["parser"] == "the task's image: it failed here (exit status 4)"
