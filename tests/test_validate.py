import json
import subprocess
import sys

import pytest

from pipeline.datasets import BUNDLED, BUNDLED_DIR, BUNDLED_IMAGE_TEMPLATE
from pipeline.evaluation.validate import leaked_test_names
from pipeline.tasks import load_tasks

TASK = load_tasks(BUNDLED)[0]


def test_prompt_leak_is_found_by_full_name_and_by_function_name():
    assert leaked_test_names(TASK) == []
    name = TASK.fail_to_pass[0]
    by_name = TASK.model_copy(update={"problem_statement": TASK.problem_statement + f"\nRun {name}."})
    assert name in leaked_test_names(by_name)
    function = name.split("::")[-1].split(" | ")[-1]
    by_function = TASK.model_copy(update={"requirements": f"- make {function} pass"})
    assert name in leaked_test_names(by_function)


@pytest.mark.docker
def test_validate_fails_on_a_broken_task_and_names_the_problems(tmp_path):
    row = TASK.to_row()
    row["pass_to_pass"] = row["pass_to_pass"] + [row["fail_to_pass"][0]]  # fails at base: not a P2P test
    row["problem_statement"] += f"\n\nSee {row['fail_to_pass'][1 % len(row['fail_to_pass'])]}."
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(row) + "\n")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "validate", "--dataset", str(broken),
                           "--run-scripts", str(BUNDLED_DIR / "tasks"), "--image-template", BUNDLED_IMAGE_TEMPLATE,
                           "--output-dir", str(tmp_path / "out")], capture_output=True, text=True,
                          env={"COLUMNS": "400", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "PASS_TO_PASS not passing at base" in done.stdout
    assert "prompt mentions hidden tests" in done.stdout
    assert "0 of 1 task(s) sound" in done.stdout
