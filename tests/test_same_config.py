"""A resumed run keeps the config that decides its results; budgets, containers, the executor and how a model is
reached or priced may change. Runs are prepared in-process with scripted models (no Docker, no model call)."""

import pytest
from run_sessions import session

from pipeline.errors import SwepipeError
from pipeline.evaluation.options import ScoringOptions
from pipeline.settings.config import RunConfig


def config(tmp_path, **changes) -> RunConfig:
    spec = {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": {"input": 1.0, "output": 1.0}}
    data = {"models": {role: dict(spec) for role in ("junior", "senior", "principal")}, "juniors": {"k": 2},
            "containers": {"impl": "local_opener:open_local"}}
    for dotted, value in changes.items():
        *path, last = dotted.split("__")
        target = data
        for key in path:
            target = target.setdefault(key, {})
        target[last] = value
    return RunConfig.model_validate(data)


def prepare(tmp_path, cfg: RunConfig, run_id: str = "r"):
    return session(cfg, run_id, tmp_path / "runs")


def started(settings) -> None:
    (settings.layout.root / "tasks" / "some-task").mkdir(parents=True)


def test_a_resume_that_changes_what_decides_results_is_refused_naming_each_change(tmp_path):
    settings = prepare(tmp_path, config(tmp_path))
    started(settings)
    before = settings.layout.config.read_text()
    changed = config(tmp_path, models__junior__model="openai/gpt-4o-mini", juniors__k=4)
    with pytest.raises(SwepipeError) as refused:
        prepare(tmp_path, changed)
    message = str(refused.value)
    assert "run r ran with another config" in message and "juniors.k: 2 -> 4" in message
    assert f"models.junior.model: scripted/{tmp_path / 'script.yaml'} -> openai/gpt-4o-mini" in message
    assert "--reuse-juniors-from r" in message and str(settings.layout.config) in message
    assert settings.layout.config.read_text() == before  # the run's record is untouched


def test_budgets_containers_executor_and_how_a_model_is_reached_may_change(tmp_path):
    settings = prepare(tmp_path, config(tmp_path))
    started(settings)
    prepare(tmp_path, config(tmp_path, budgets__per_task=2.5, containers__memory="2g", executor__kind="threads",
                             models__senior__api_base="http://127.0.0.1:9999/v1", models__senior__timeout=30,
                             models__principal__prices={"input": 2.0, "output": 2.0}))
    assert "per_task: 2.5" in settings.layout.config.read_text()  # the new config is the run's now


def test_a_run_with_no_task_started_takes_any_config(tmp_path):
    prepare(tmp_path, config(tmp_path))
    prepare(tmp_path, config(tmp_path, juniors__k=5, limits__max_steps=7))


def test_many_changes_are_named_up_to_six_and_counted(tmp_path):
    started(prepare(tmp_path, config(tmp_path)))
    changed = config(tmp_path, juniors__k=3, juniors__seed=4, limits__max_steps=9, limits__wall_time=60,
                     senior__max_steps=2, principal__candidate_tokens=500, strategy="vote", team__size=2)
    with pytest.raises(SwepipeError, match=r"\(and 2 more\)"):
        prepare(tmp_path, changed)


def test_a_config_yaml_this_version_cannot_read_is_not_compared(tmp_path):
    settings = prepare(tmp_path, config(tmp_path))
    started(settings)
    settings.layout.config.write_text("juniors: {k: 2, a_field_from_another_version: 1}\n")
    prepare(tmp_path, config(tmp_path, juniors__k=3))  # nothing to compare with: goes on, and records the new one
    assert "k: 3" in settings.layout.config.read_text()


ANTHROPIC = "anthropic/claude-sonnet-4-5-20250929"


def test_a_prompt_cache_change_may_resume(tmp_path):
    """Cache markers change no reply, and the reply journal is keyed without them (test_models has the journal)."""
    claude = {"models__junior__model": ANTHROPIC, "models__junior__prices": None}
    started(prepare(tmp_path, config(tmp_path, **claude)))
    prepare(tmp_path, config(tmp_path, **claude, models__junior__prompt_cache="off"))


def test_another_image_template_or_container_network_is_refused(tmp_path):
    template = "registry.example/sweap:{dockerhub_tag}"
    settings = prepare(tmp_path, config(tmp_path, containers__image_template=template))
    started(settings)
    with pytest.raises(SwepipeError, match="containers.image_template: registry.example/sweap:{dockerhub_tag} -> "
                                           "mirror.example/sweap:{dockerhub_tag}"):
        prepare(tmp_path, config(tmp_path, containers__image_template="mirror.example/sweap:{dockerhub_tag}"))
    with pytest.raises(SwepipeError, match="containers.network: false -> true"):
        prepare(tmp_path, config(tmp_path, containers__image_template=template, containers__network=True))
    prepare(tmp_path, config(tmp_path, containers__image_template=template))


def test_the_image_template_given_by_flag_or_by_the_dataset_is_recorded_and_kept(tmp_path):
    cfg = config(tmp_path)
    settings = session(cfg, "r", tmp_path / "runs", image_template="mirror.example/{dockerhub_tag}")
    assert "image_template: mirror.example/{dockerhub_tag}" in settings.layout.config.read_text()
    started(settings)
    with pytest.raises(SwepipeError, match=r"containers.image_template: mirror.example/\{dockerhub_tag\} -> "):
        prepare(tmp_path, cfg)  # the flag forgotten: the dataset's default template is another one
    settings = session(cfg, "r", tmp_path / "runs", image_template="mirror.example/{dockerhub_tag}")


def test_a_run_from_before_the_template_was_recorded_takes_the_one_given_now(tmp_path):
    settings = prepare(tmp_path, config(tmp_path))
    started(settings)
    text = settings.layout.config.read_text()
    settings.layout.config.write_text("\n".join(line for line in text.splitlines() if "image_template" not in line))
    prepare(tmp_path, config(tmp_path, containers__image_template="mirror.example/{dockerhub_tag}"))


def test_scoring_with_another_network_than_the_scored_tasks_had_is_refused(tmp_path):
    def scoring_session(evaluate: bool = False, **scoring):
        return session(config(tmp_path), "r", tmp_path / "runs", evaluate=evaluate, scoring=ScoringOptions(**scoring))

    settings = scoring_session(evaluate=True)
    started(settings)
    scoring_session(evaluate=True, eval_network=True)  # nothing scored yet: nothing to mix
    result = settings.layout.task("some-task").eval / "result.json"
    result.parent.mkdir(parents=True)
    result.write_text('{"instance_id": "some-task", "resolved": true, "network": false}')
    with pytest.raises(SwepipeError, match=r"scoring network \(--eval-network\): off -> on"):
        scoring_session(evaluate=True, eval_network=True)
    scoring_session(evaluate=True)
    scoring_session(eval_network=True)  # this session does not score


def test_scoring_under_another_profile_than_the_scored_tasks_had_is_refused(tmp_path):
    def scoring_session(evaluate: bool = False, **scoring):
        return session(config(tmp_path), "r", tmp_path / "runs", evaluate=evaluate, scoring=ScoringOptions(**scoring))

    settings = scoring_session(evaluate=True, scoring_profile="official")
    assert settings.evaluation.profile == "official" and settings.evaluation.time_limit == 3600
    started(settings)
    result = settings.layout.task("some-task").eval / "result.json"
    result.parent.mkdir(parents=True)
    result.write_text('{"instance_id": "some-task", "resolved": true, "network": false, '
                      '"scorer": {"profile": "official", "timeout": 3600}}')
    with pytest.raises(SwepipeError, match=r"scoring profile \(--scoring-profile\): official -> local"):
        scoring_session(evaluate=True)
    scoring_session(evaluate=True, scoring_profile="official")
    scoring_session()  # this session does not score
