"""The model layer through the real litellm path, driven by the scripted provider."""

import json
import threading
import time

import pytest
import yaml

from pipeline.control import stopping
from pipeline.control.outages import BREAKERS, Settings
from pipeline.errors import ClusterFault, ModelUnavailable, SwepipeError
from pipeline.models.budget import Budget, CostLimitExceeded
from pipeline.models.client import ABANDONED, ModelCallFailed, ModelClient, charge_abandoned_calls
from pipeline.models.ledger import Ledger
from pipeline.settings.config import load_config
from pipeline.settings.model_spec import ModelSpec, Prices

PRICES = Prices(input=2.0, output=8.0, cached_input=0.5)


def script(tmp_path, data, name="script.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if name.endswith(".yaml") else json.dumps(data))
    return f"scripted/{path}"


def client(model, role="principal", ledger=None, **spec):
    return ModelClient(ModelSpec(model=model, prices=spec.pop("prices", PRICES), **spec), role, ledger or Ledger(),
                       task="t", backoff_base=0.001)


USER = [{"role": "user", "content": "hi"}]


def test_costs_are_exact_from_scripted_usage(tmp_path):
    model = script(tmp_path, {"principal": [
        {"content": "one", "usage": {"prompt_tokens": 1000, "completion_tokens": 100, "cached_tokens": 400}},
        {"content": "two", "usage": {"prompt_tokens": 2000, "completion_tokens": 50}}]})
    ledger = Ledger(tmp_path / "ledger.jsonl")
    c = client(model, ledger=ledger)
    budget = Budget("run")
    assert c.complete(USER, budget).content == "one"
    assert c.complete(USER + [{"role": "assistant", "content": "one"}, *USER], budget).content == "two"
    expected = (600 * 2 + 400 * 0.5 + 100 * 8) / 1e6 + (2000 * 2 + 50 * 8) / 1e6
    rows = Ledger.read(tmp_path / "ledger.jsonl")
    assert [r.input_tokens for r in rows] == [1000, 2000] and rows[0].cached_tokens == 400
    assert sum(r.cost for r in rows) == pytest.approx(expected)
    assert budget.spent == pytest.approx(expected)


def test_rate_limit_timeout_and_5xx_are_retried(tmp_path):
    model = script(tmp_path, {"principal": [{"error": "rate_limit"}, {"error": "timeout"}, {"error": "server_error"},
                                            "finally"]})
    ledger = Ledger()
    assert client(model, ledger=ledger).complete(USER, Budget("run")).content == "finally"
    assert ledger.rows[-1].retries == 3 and ledger.rows[-1].error is None


def test_a_context_window_error_is_the_call_s_own_outcome_and_not_retried(tmp_path):
    model = script(tmp_path, {"principal": [{"error": "context_window"}, "never reached"]})
    ledger = Ledger()
    with pytest.raises(ModelCallFailed) as failed:
        client(model, ledger=ledger).complete(USER, Budget("run"))
    assert failed.value.reason == "context_window"
    assert ledger.rows[-1].retries == 0 and ledger.rows[-1].error
    assert not stopping.requested()


def test_a_rejected_key_stops_the_run_at_once_naming_role_model_and_endpoint(tmp_path):
    model = script(tmp_path, {"principal": [{"error": "auth"}, "never reached"]})
    ledger = Ledger()
    with pytest.raises(stopping.Stopped):
        client(model, ledger=ledger).complete(USER, Budget("run"))
    assert ledger.rows[-1].retries == 0 and "AuthenticationError" in ledger.rows[-1].error
    assert stopping.requested() and stopping.exit_code() == 2
    assert f"principal model {model}" in stopping.reason() and "model provider" in stopping.reason()


def test_one_call_failing_past_its_retries_while_its_endpoint_works_is_infrastructure(tmp_path):
    BREAKERS.configure(Settings(pause_after=10))  # other calls keep the endpoint answering
    model = script(tmp_path, {"principal": [{"error": "rate_limit"}] * 5})
    ledger = Ledger()
    with pytest.raises(ModelUnavailable, match="after 2 retries"):
        client(model, ledger=ledger, max_retries=2).complete(USER, Budget("run"))
    assert ledger.rows[-1].retries == 2 and "RateLimitError" in ledger.rows[-1].error
    assert not stopping.requested()


def test_an_endpoint_down_past_the_outage_time_stops_the_run_after_a_bounded_number_of_calls(tmp_path):
    BREAKERS.configure(Settings(pause_after=3, outage_seconds=1.0, max_wait=0.2, first_wait=0.1))
    model = script(tmp_path, {"outage": {"error": "server_error", "seconds": 60}, "principal": ["never"]})
    ledger = Ledger()
    with pytest.raises(stopping.Stopped):
        client(model, ledger=ledger, max_retries=4).complete(USER, Budget("run"))
    [row] = ledger.rows  # one row for the whole call, written although a stop ended it
    assert "InternalServerError" in row.error and 4 <= row.retries < 20
    assert stopping.exit_code() == 1 and "longer than the outage time" in stopping.reason()


def test_calls_wait_out_a_short_outage_and_go_on(tmp_path):
    BREAKERS.configure(Settings(pause_after=2, outage_seconds=30, max_wait=0.3, first_wait=0.1))
    model = script(tmp_path, {"outage": {"error": "connection", "seconds": 1.5}, "principal": ["back"]})
    ledger = Ledger()
    assert client(model, ledger=ledger, max_retries=1).complete(USER, Budget("run")).content == "back"
    [row] = ledger.rows
    assert row.error is None and row.retries >= 2 and not stopping.requested()
    assert not BREAKERS.paused("model provider scripted")


def test_script_out_of_replies_is_a_clear_error(tmp_path):
    model = script(tmp_path, {"principal": ["only one"]}, name="s.json")
    c = client(model)
    c.complete(USER, Budget("run"))
    with pytest.raises(ModelCallFailed, match="has 1 replies and the conversation asks for reply 2"):
        c.complete(USER + [{"role": "assistant", "content": "only one"}, *USER], Budget("run"))


def test_multi_agent_roles_play_script_i_mod_n(tmp_path):
    model = script(tmp_path, {"junior": [["a0", "a1"], ["b0"]]})
    c = client(model, role="junior")
    replies = [c.complete(USER, Budget("r"), agent_index=i).content for i in (0, 1, 2)]
    assert replies == ["a0", "b0", "a0"]  # agent 2 plays script 0 from its own start
    later = USER + [{"role": "assistant", "content": "a0"}, *USER]
    assert c.complete(later, Budget("r"), agent_index=0).content == "a1"  # the position in the conversation


def test_a_resumed_conversation_continues_its_script(tmp_path):
    model = script(tmp_path, {"principal": [{"error": "rate_limit"}, "first", {"error": "timeout"}, "second"]})
    resumed = USER + [{"role": "assistant", "content": "first"}, *USER]
    fresh = client(model)  # as a new process would: nothing served yet in this scope
    assert fresh.complete(resumed, Budget("r")).content == "second"


def test_budget_stops_before_a_call_it_cannot_pay(tmp_path):
    model = script(tmp_path, {"principal": [{"content": "x", "usage": {"prompt_tokens": 1_000_000,
                                                                      "completion_tokens": 0}}] * 3})
    run = Budget("run", limit=10)
    task = run.child("task", limit=3)
    c = client(model)
    turn = [*USER, {"role": "assistant", "content": "x"}]
    c.complete(USER, task)  # $2
    c.complete(turn + USER, task)  # $4: over the task's $3 from now on
    with pytest.raises(CostLimitExceeded, match="task budget"):
        c.complete(turn + turn + USER, task)
    assert run.spent == pytest.approx(4.0)


def test_unknown_price_is_an_error_before_any_spend(tmp_path):
    with pytest.raises(SwepipeError, match="no known price.*free: true"):
        ModelClient(ModelSpec(model="openai/some-local-model"), "senior", Ledger())
    assert ModelClient(ModelSpec(model="openai/some-local-model", free=True), "senior", Ledger()).prices.input == 0
    assert ModelClient(ModelSpec(model="gpt-4o-mini"), "senior", Ledger()).prices.input > 0


def test_a_model_litellm_only_guesses_at_is_unpriced_not_free():
    """litellm answers for a model its map does not list with its provider's defaults, $0 a token: a run of it
    would spend with nothing counted against its budget. Only a model in the map has the map's price."""
    with pytest.raises(SwepipeError, match="'anthropic/claude-opus-4-1' has no known price"):
        ModelClient(ModelSpec(model="anthropic/claude-opus-4-1"), "principal", Ledger())
    haiku = ModelClient(ModelSpec(model="anthropic/claude-haiku-4-5"), "junior", Ledger()).prices
    assert haiku.input == pytest.approx(1.0) and haiku.cache_write_input == pytest.approx(1.25)
    assert haiku.cache_min_tokens == 4096  # the map's prompt_cache_min_tokens, for whatif's cache replay
    assert ModelClient(ModelSpec(model="codestral/codestral-latest"), "junior", Ledger()).prices.input == 0


def test_api_keys_are_refused_in_config(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": {"junior": {"model": "gpt-4o-mini", "extra": {"api_key": "sk-x"}}}}))
    with pytest.raises(SwepipeError, match="API keys come only from the environment"):
        load_config(config)


def test_config_file_and_flag_overrides(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"models": {"junior": {"model": "gpt-4o-mini", "temperature": 0.2}},
                                      "budgets": {"per_task": 1.5}, "juniors": {"k": 3}}))
    cfg = load_config(config).with_model("junior", "gpt-4o")
    assert cfg.models["junior"].model == "gpt-4o" and cfg.models["junior"].temperature == 0.2
    assert cfg.budgets.per_task == 1.5 and cfg.juniors.k == 3
    assert "api_key" not in cfg.to_yaml()
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  jnuior: {model: x}\n")
    with pytest.raises(SwepipeError, match="unknown role"):
        load_config(bad)


def test_keys_never_reach_the_ledger_or_result_files(tmp_path, monkeypatch):
    from pipeline.rundir.storage import write_json_atomic
    from pipeline.text.secrets import redact

    monkeypatch.setenv("OPENAI_API_KEY", "sk-live-0123456789abcdefXYZ")
    model = script(tmp_path, {"principal": [{"error": "auth"}]})
    ledger = Ledger(tmp_path / "ledger.jsonl")
    leaky = ValueError("Incorrect API key provided: sk-live-0123456789abcdefXYZ")
    from pipeline.models import client as client_module

    assert "sk-live" not in client_module._describe(leaky)
    with pytest.raises(stopping.Stopped):
        client(model, ledger=ledger).complete(USER, Budget("run"))
    write_json_atomic(tmp_path / "t.json", {"messages": [{"content": "key=sk-live-0123456789abcdefXYZ"}]})
    assert "sk-live" not in (tmp_path / "t.json").read_text()
    assert "sk-proj-" not in redact("token sk-proj-AAAAAAAAAAAAAAAAAAAAAAAA end")


def test_print_config_shows_every_option_with_its_meaning_and_loads_back(tmp_path):
    import subprocess
    import sys

    import yaml

    from pipeline.settings.config import RunConfig, commented_yaml

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"models": {"junior": {"model": "gpt-4o-mini", "temperature": 0.5}},
                                      "juniors": {"k": 6}, "budgets": {"per_task": 2.5}}))
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", "--print-config", "--config", str(config),
                           "--strategy", "vote", "-k", "3"], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    shown = done.stdout
    assert "k: 3  # rollouts per task" in shown and "strategy: vote" in shown
    assert "per_task: 2.5  # all stages of one task" in shown and "model: gpt-4o-mini" in shown
    again = RunConfig.model_validate(yaml.safe_load(shown))
    assert again.juniors.k == 3 and again.models["junior"].temperature == 0.5 and again.strategy == "vote"
    assert yaml.safe_load(commented_yaml(RunConfig())) == RunConfig().model_dump(mode="json")
    # Every option is documented: a field without a description would print without its comment.
    undocumented = [line for line in commented_yaml(again).splitlines() if "#" not in line and ":" in line
                    and not line.strip().startswith("junior:")]
    assert undocumented == []


@pytest.mark.parametrize("fault", ["rate_limit", "server_error", "connection", "timeout", "overloaded"])
def test_every_transient_fault_outlasting_the_retries_is_an_outage_not_a_result(tmp_path, fault):
    BREAKERS.configure(Settings(pause_after=2, outage_seconds=0.5, max_wait=0.1, first_wait=0.05))
    model = script(tmp_path, {"outage": {"error": fault, "seconds": 60}, "principal": ["never"]})
    with pytest.raises(stopping.Stopped):
        client(model, max_retries=1).complete(USER, Budget("run"))
    assert stopping.exit_code() == 1 and "longer than the outage time" in stopping.reason()


class SettleFails:
    """A budget kept elsewhere (a cluster's) whose settlement fails after the provider has answered."""

    def reserve(self, amount):
        return "hold"

    def settle(self, token, amount, cost):
        raise ClusterFault("the run's budget actor did not answer within 60 s")

    def left(self):
        return None


def test_a_paid_reply_whose_remote_settle_fails_is_on_record_and_not_paid_again(tmp_path):
    model = script(tmp_path, {"principal": [{"content": "paid", "usage": {"prompt_tokens": 100,
                                                                          "completion_tokens": 10}}]})
    ledger, journal = Ledger(tmp_path / "ledger.jsonl"), tmp_path / "reply.journal"
    with pytest.raises(ClusterFault):
        client(model, ledger=ledger).complete(USER, Budget("run", remote=SettleFails()), journal=journal)
    [row] = Ledger.read(tmp_path / "ledger.jsonl")
    assert row.error is None and row.cost > 0 and json.loads(journal.read_text())["row"]["call"] == row.call
    again = client(model, ledger=Ledger(tmp_path / "ledger.jsonl"))  # the resumed task
    budget = Budget("run")
    assert again.complete(USER, budget, journal=journal).content == "paid"
    assert len(Ledger.read(tmp_path / "ledger.jsonl")) == 1 and budget.spent == 0  # seeded from the ledger


def test_a_stop_during_a_backoff_still_writes_the_billed_attempt(tmp_path):
    billed = {"prompt_tokens": 400, "completion_tokens": 100}
    model = script(tmp_path, {"principal": [{"error": "server_error", "usage": billed}, "never"]})
    ledger = Ledger(tmp_path / "ledger.jsonl")
    slow = ModelClient(ModelSpec(model=model, prices=PRICES), "principal", ledger, task="t", backoff_base=30.0)
    threading.Timer(0.5, stopping.request).start()
    with pytest.raises(stopping.Stopped):
        slow.complete(USER, Budget("run"))
    [row] = Ledger.read(tmp_path / "ledger.jsonl")
    assert "InternalServerError" in row.error and row.cost == pytest.approx((400 * 2.0 + 100 * 8.0) / 1e6)


def test_a_call_abandoned_at_a_stop_is_charged_its_worst_case_once(tmp_path):
    model = script(tmp_path, {"principal": [{"content": "late", "delay": 1.5,
                                             "usage": {"prompt_tokens": 100, "completion_tokens": 10}}]})
    ledger, journal = Ledger(tmp_path / "ledger.jsonl"), tmp_path / "reply.journal"
    waiting = client(model, ledger=ledger, max_tokens=1000)
    caller = threading.Thread(target=lambda: waiting.complete(USER, Budget("run"), journal=journal))
    caller.start()
    time.sleep(0.5)
    stopping.request()
    assert charge_abandoned_calls() == 1
    [row] = Ledger.read(tmp_path / "ledger.jsonl")
    assert row.error == ABANDONED and row.cost == pytest.approx(waiting.worst_case(USER))
    caller.join(timeout=10)  # the reply still came: journaled under the same call, not charged again
    assert len(Ledger.read(tmp_path / "ledger.jsonl")) == 1
    assert json.loads(journal.read_text())["row"]["call"] == row.call
    stopping.reset()
    resumed = client(model, ledger=Ledger(tmp_path / "ledger.jsonl"), max_tokens=1000)
    assert resumed.complete(USER, Budget("run"), journal=journal).content == "late"
    assert len(Ledger.read(tmp_path / "ledger.jsonl")) == 1


def test_a_reply_journaled_under_cache_markers_is_reused_without_them(tmp_path):
    model = script(tmp_path, {"principal": [{"content": "paid", "usage": {"prompt_tokens": 100,
                                                                          "completion_tokens": 10}}]})
    path, journal = tmp_path / "ledger.jsonl", tmp_path / "reply.journal"
    long = [{"role": "system", "content": "rules " * 2000}, *USER]
    client(model, ledger=Ledger(path), prompt_cache="on").complete(long, Budget("run"), journal=journal)
    [row] = Ledger.read(path)  # the process dies here, before its caller saved the reply
    again = client(model, ledger=Ledger(path), prompt_cache="off").complete(long, Budget("run"), journal=journal)
    assert again.content == "paid" and len(Ledger.read(path)) == 1


def test_the_local_model_s_threads_come_from_the_environment_and_a_bad_value_is_named(monkeypatch):
    from pipeline.errors import SwepipeError
    from pipeline.models.local_server import THREADS_VARIABLE, LocalModelServer

    monkeypatch.setenv(THREADS_VARIABLE, "1")
    assert LocalModelServer().threads == 1 and LocalModelServer(threads=3).threads == 3
    monkeypatch.delenv(THREADS_VARIABLE)
    assert LocalModelServer().threads >= 1
    for bad in ("two", "0", "-1"):
        monkeypatch.setenv(THREADS_VARIABLE, bad)
        with pytest.raises(SwepipeError, match=f"{THREADS_VARIABLE}='{bad}' is not a number of threads"):
            LocalModelServer()
