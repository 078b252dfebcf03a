"""The command line on top of the config file: ``--set PATH=VALUE`` and the shortcut flags are one kind of
assignment, checked by RunConfig as the file is, with errors that name what the user typed."""

from __future__ import annotations

import pytest
import yaml

from pipeline.errors import SwepipeError
from pipeline.settings.config import load_config
from pipeline.settings.config_overlay import flag, parse_set


def test_values_are_read_as_yaml_scalars_and_text_stays_as_typed():
    assert parse_set("juniors.k=4").value == 4
    assert parse_set("team.messages=false").value is False
    assert parse_set("budgets.per_task=null").value is None
    assert parse_set("juniors.temperatures=[0.2, 0.8]").value == [0.2, 0.8]
    # A value may hold '=' (a URL's query), '#' and quotes: only the first '=' splits, text is kept as typed.
    assert parse_set("models.senior.api_base=http://127.0.0.1:8080/v1?x=1").value == "http://127.0.0.1:8080/v1?x=1"
    assert parse_set("models.junior.model=openai/gpt-4o #cheap").value == "openai/gpt-4o #cheap"
    assert parse_set("models.junior.model='quoted'").value == "'quoted'"
    assert parse_set(" team.mode = async ").path == ("team", "mode")


@pytest.mark.parametrize("typed", ["team.mode", "=async", "", " =1"])
def test_an_assignment_without_a_path_or_value_is_refused_with_an_example(typed):
    with pytest.raises(SwepipeError, match="expected PATH=VALUE, e.g. --set team.mode=async"):
        parse_set(typed)


def test_assignments_land_in_the_config_and_later_ones_win(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"juniors": {"k": 2}, "team": {"mode": "blocking", "size": 5}}))
    cfg = load_config(path, [parse_set("team.mode=async"), parse_set("juniors.k=4"), flag("juniors.k", 6, "-k 6")])
    assert (cfg.team.mode, cfg.team.size, cfg.juniors.k) == ("async", 5, 6)  # the file's size kept


def test_a_new_model_for_a_role_drops_the_old_models_prices_unless_they_are_set_too(tmp_path):
    path = tmp_path / "config.yaml"
    prices = {"input": 1.0, "output": 2.0}
    path.write_text(yaml.safe_dump({"models": {"junior": {"model": "openai/old", "prices": prices}}}))
    assert load_config(path, [flag("models.junior.model", "openai/old", "--junior-model openai/old")]
                       ).models["junior"].prices is not None
    assert load_config(path, [flag("models.junior.model", "openai/new", "--junior-model openai/new")]
                       ).models["junior"].prices is None
    kept = load_config(path, [parse_set("models.junior.model=openai/new"),
                              parse_set("models.junior.prices.input=3")]).models["junior"].prices
    assert kept is not None and (kept.input, kept.output) == (3, 2.0)


def test_a_flag_changes_only_the_role_it_names_when_the_file_shares_one_model_between_roles(tmp_path):
    """A YAML alias (``principal: *m``, which yaml.safe_dump writes for one dict used twice) loads as one mapping
    for both roles: --principal-model none must not switch the senior off too."""
    path = tmp_path / "config.yaml"
    path.write_text("models:\n  senior: &m {model: openai/x, prices: {input: 1.0, output: 2.0}}\n  principal: *m\n")
    cfg = load_config(path, [flag("models.principal.model", "none", "--principal-model none")])
    assert cfg.plays("senior") and not cfg.plays("principal") and cfg.models["senior"].model == "openai/x"


@pytest.mark.parametrize("typed, message", [
    ("no.such.key=1", "--set no.such.key=1: no option 'no'; the keys at the top are strategy, models"),
    ("team.moed=async", "no option 'team.moed'; the keys under team are"),
    ("juniors.k.x=1", "juniors.k is a single value, it has no 'x'"),
    ("models.boss.model=x", "no role 'boss' under models; roles are junior"),
    ("juniors.k=many", "--set juniors.k=many: Input should be a valid integer"),
    ("juniors.k=100", "--set juniors.k=100: Input should be less than or equal to 64"),
    ("team.mode=sideways", "--set team.mode=sideways: Input should be 'blocking' or 'async'"),
])
def test_a_bad_path_or_value_is_refused_naming_what_was_typed(typed, message):
    with pytest.raises(SwepipeError) as error:
        load_config(None, [parse_set(typed)])
    assert message in str(error.value)


def test_a_shortcut_flags_bad_value_names_the_flag_and_a_files_problem_names_the_file(tmp_path):
    with pytest.raises(SwepipeError, match=r"^-k 99: Input should be less than or equal to 64$"):
        load_config(None, [flag("juniors.k", 99, "-k 99")])
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"juniors": {"k": -1}}))
    with pytest.raises(SwepipeError, match=rf"^{path}: juniors.k: Input should be greater than or equal to 0"):
        load_config(path)
    path.write_text("- a list\n- not options\n")
    with pytest.raises(SwepipeError, match="is not a mapping of options"):
        load_config(path)


def test_free_form_options_take_any_key_below_them():
    cfg = load_config(None, [parse_set("models.junior.model=openai/x"),
                             parse_set("models.junior.extra.top_p=0.9")])
    assert cfg.models["junior"].extra == {"top_p": 0.9}
