"""Prompt templates and the task text handed to agents."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.errors import SwepipeError
from pipeline.tasks import load_tasks
from pipeline.text import prompts
from pipeline.text.prompts import render, render_task_prompt

FIXTURE = Path(__file__).parent / "fixtures" / "swebench_pro_rows.jsonl"
REPO_PROMPTS = Path(__file__).resolve().parent.parent / "prompts"


@pytest.fixture(autouse=True)
def default_prompts_dir(monkeypatch):
    monkeypatch.delenv(prompts.PROMPTS_DIR_ENV, raising=False)


@pytest.fixture
def tasks():
    return {task.repo_language: task for task in load_tasks(str(FIXTURE))}


def test_task_prompt_matches_the_official_concatenation(tasks):
    task = tasks["js"]
    official = (
        task.problem_statement
        + "\n\nRequirements:\n"
        + task.requirements
        + "\n\nNew interfaces introduced:\n"
        + task.interface
    )
    assert render_task_prompt(task) == official


def test_task_prompt_has_the_three_parts_in_order(tasks):
    text = render_task_prompt(tasks["python"])
    problem = text.index("## Title: URL parsing drops the fragment")
    requirements = text.index("Requirements:\n- `urlutils.fuzzy_url` must keep the fragment")
    interfaces = text.index("New interfaces introduced:\nNo new interfaces are introduced")
    assert problem < requirements < interfaces


def test_empty_sections_are_left_out(tasks):
    task = tasks["go"]
    assert render_task_prompt(task) == task.problem_statement
    only_interface = task.model_copy(update={"requirements": "  \n", "interface": "Type: Function"})
    assert render_task_prompt(only_interface) == (
        task.problem_statement + "\n\nNew interfaces introduced:\nType: Function"
    )


def test_task_prompt_hides_patches_and_tests(tasks):
    for task in tasks.values():
        text = render_task_prompt(task)
        assert task.patch and task.patch not in text
        assert task.test_patch and task.test_patch not in text
        for marker in ("GOLD_PATCH", "TEST_PATCH", "diff --git"):
            assert marker not in text
        for name in task.hidden_test_names:
            assert name not in text
        for path in task.selected_test_files_to_run:
            assert path not in text


def test_default_prompts_dir_is_the_repo_prompts_folder():
    assert prompts.prompts_dir() == REPO_PROMPTS
    assert (REPO_PROMPTS / prompts.TASK_TEMPLATE).is_file()


def test_env_var_overrides_the_prompts_dir(tmp_path, monkeypatch):
    (tmp_path / "hello.md.j2").write_text("Hello {{ name }}!\n")
    monkeypatch.setenv(prompts.PROMPTS_DIR_ENV, str(tmp_path))
    assert render("hello.md.j2", name="world") == "Hello world!\n"  # trailing newline kept


def test_env_var_pointing_nowhere(tmp_path, monkeypatch):
    monkeypatch.setenv(prompts.PROMPTS_DIR_ENV, str(tmp_path / "missing"))
    with pytest.raises(SwepipeError, match="missing"):
        render("task.md.j2", problem_statement="p", requirements="", interface="")


def test_undefined_variables_are_errors(tmp_path, monkeypatch):
    (tmp_path / "strict.md.j2").write_text("{{ typo }}")
    monkeypatch.setenv(prompts.PROMPTS_DIR_ENV, str(tmp_path))
    with pytest.raises(SwepipeError, match="typo"):
        render("strict.md.j2")


def test_template_syntax_error(tmp_path, monkeypatch):
    (tmp_path / "broken.md.j2").write_text("line one\n{% if %}")
    monkeypatch.setenv(prompts.PROMPTS_DIR_ENV, str(tmp_path))
    with pytest.raises(SwepipeError, match="broken.md.j2, line 2"):
        render("broken.md.j2")


def test_missing_template(tmp_path, monkeypatch):
    monkeypatch.setenv(prompts.PROMPTS_DIR_ENV, str(tmp_path))
    with pytest.raises(SwepipeError, match="nope.md.j2"):
        render("nope.md.j2")
