"""A deterministic model for tests and offline runs, served through litellm's custom-provider path.

Model string: ``scripted/<path to a YAML or JSON file>``. The file maps a role to replies:

    junior:            # roles that run several agents (junior, solo, worker): a list of scripts;
      - [reply, ...]   # agent i plays script i mod n
    principal:         # every other role: one list of replies, in call order
      - reply
    delay: 0.0         # optional seconds to wait before every reply
    outage:            # optional: an endpoint that is down; every call fails while it lasts, whatever its position
      error: server_error  # the fault raised (one of the error kinds below)
      after_calls: 0   # calls this process makes with this file before it begins
      seconds: 10      # how long it lasts from there, in this process; or:
      while_exists: /path/to/flag  # as long as this file exists (a test ends the outage by deleting it)
    served: /path/to/file  # optional: every reply given (not the faults) is a JSON line there (scope, role, agent,
                           # position), appended by whichever process gives it: what a provider would bill

A reply is a string (the assistant's content) or an object with ``content``, optional ``tool_calls``
(``[{name, arguments}]``, for the tool-call action format; arguments an object, or the raw text a provider
sent, malformed JSON included), optional ``usage``
(``prompt_tokens``, ``completion_tokens``, ``cached_tokens``; output billed at most the call's
``max_tokens``, as a provider does) and ``delay``, or ``error``: one of rate_limit, timeout, server_error,
connection, overloaded (transient), auth, not_found (configuration), context_window, bad_request (the
request refused), to raise that fault at that call
(with ``usage``, the error's response body reports those tokens, as a provider that bills a failed call).

Which reply a call gets follows from the conversation it sends: the number of assistant messages
in it. So a conversation resumed from a saved trajectory, in a new process, continues its script
where it stopped, and every task's agents start their scripts from the top. Error entries belong to
the content reply after them: that position first raises each of its errors once (counted per
process and per scope, the scope coming from the call's metadata), then answers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast

import httpx
import litellm
import yaml
from litellm import CustomLLM, ModelResponse

from pipeline.records.chat import ChatMessage
from pipeline.settings.model_spec import METADATA_KEY, Role  # {"scope": str, "role": str, "agent": int}

MULTI_AGENT_ROLES = (Role.JUNIOR, Role.SOLO, Role.WORKER)


class ScriptError(litellm.BadRequestError):
    """A script file that is missing, malformed or used up; never retried."""

    def __init__(self, message: str, model: str = "scripted"):
        super().__init__(message=message, model=model, llm_provider="scripted")


class _Billed(Protocol):
    """An error carrying the provider's HTTP response: litellm's errors of a time-out and of a lost connection
    declare none, yet one is read back from any error (``client``'s billed usage reads it with getattr)."""

    response: httpx.Response


_FAULTS: dict[str, Callable[[str], Exception]] = {
    "rate_limit": lambda m: litellm.RateLimitError(message="scripted rate limit", llm_provider="scripted", model=m),
    "timeout": lambda m: litellm.Timeout(message="scripted timeout", model=m, llm_provider="scripted"),
    "server_error": lambda m: litellm.InternalServerError(message="scripted 500", llm_provider="scripted", model=m),
    "connection": lambda m: litellm.APIConnectionError(message="scripted connection reset", llm_provider="scripted",
                                                        model=m),
    "auth": lambda m: litellm.AuthenticationError(message="scripted bad key", llm_provider="scripted", model=m),
    "context_window": lambda m: litellm.ContextWindowExceededError(message="scripted context too long", model=m,
                                                                    llm_provider="scripted"),
    "bad_request": lambda m: litellm.BadRequestError(message="scripted request refused", model=m,
                                                     llm_provider="scripted"),
    "not_found": lambda m: litellm.NotFoundError(message="scripted unknown model", model=m, llm_provider="scripted"),
    "overloaded": lambda m: litellm.ServiceUnavailableError(message="scripted overloaded", model=m,
                                                            llm_provider="scripted"),
}


@dataclass
class _OutageState:
    """A script's outage as it goes: the calls made, and when it began (time.monotonic; None: not yet)."""

    calls: int = 0
    began: float | None = None


class ScriptedModel(CustomLLM):
    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._scripts: dict[str, dict[str, Any]] = {}
        self._errors_served: dict[tuple[Any, ...], int] = {}  # (model, scope, role, agent, position) -> served
        self._outages: dict[str, _OutageState] = {}  # per script file

    def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any) -> ModelResponse:
        metadata = ((kwargs.get("litellm_params") or {}).get("metadata") or {}).get(METADATA_KEY) or {}
        role, agent, scope = metadata.get("role", "junior"), int(metadata.get("agent", 0)), metadata.get("scope", "")
        script = self._load(model)
        if script.get("outage"):
            self._outage(model, script["outage"])
        slots = _slots(self._replies(model, script, role, agent))
        position = sum(1 for message in messages if message.get("role") == "assistant")
        who = f"the {role} script" + (f" for agent {agent}" if role in MULTI_AGENT_ROLES else "")
        if position >= len(slots):
            raise ScriptError(f"scripted model {model}: {who} has {len(slots)} replies and the conversation "
                              f"asks for reply {position + 1}", model)
        errors, reply = slots[position]
        with self._lock:
            key = (model, scope, role, agent, position)
            served = self._errors_served.get(key, 0)
            self._errors_served[key] = served + 1
        if served < len(errors):
            reply = errors[served]
        elif reply is None:
            raise ScriptError(f"scripted model {model}: {who} ends with errors and has no reply {position + 1}", model)
        if isinstance(reply, str):
            reply = {"content": reply}
        delay = reply.get("delay", script.get("delay", 0)) or 0
        if delay:
            time.sleep(float(delay))
        if "error" in reply:
            fault = _FAULTS.get(reply["error"])
            if fault is None:
                raise ScriptError(f"scripted model {model}: unknown error kind {reply['error']!r}; use one of "
                                  f"{', '.join(_FAULTS)}", model)
            error = fault(model)
            if reply.get("usage"):  # what the provider billed before failing, in its error response's body
                cast(_Billed, error).response = httpx.Response(
                    getattr(error, "status_code", None) or 500,
                    json={"error": {"message": str(error)}, "usage": reply["usage"]},
                    request=httpx.Request("POST", "http://scripted/v1/chat/completions"))
            raise error
        content = str(reply.get("content", ""))
        message: ChatMessage = {"role": "assistant", "content": content}
        if reply.get("tool_calls"):
            message["tool_calls"] = [
                {"id": f"call_{position}_{n}", "type": "function",
                 "function": {"name": call["name"], "arguments": _arguments_text(call.get("arguments"))}}
                for n, call in enumerate(reply["tool_calls"])]
        usage = reply.get("usage") or {}
        prompt = int(usage.get("prompt_tokens", _estimate_tokens(messages)))
        completion = int(usage.get("completion_tokens", max(1, len(content) // 4)))
        cached = int(usage.get("cached_tokens", 0))
        finish = "tool_calls" if "tool_calls" in message else "stop"
        max_tokens = (kwargs.get("optional_params") or {}).get("max_tokens")
        if max_tokens and completion > int(max_tokens):  # as a provider does: no more output than asked for
            completion, finish = int(max_tokens), "length"
        if script.get("served"):
            line = json.dumps({"scope": scope, "role": role, "agent": agent, "position": position}) + "\n"
            with open(str(script["served"]), "a", encoding="utf-8") as log:
                log.write(line)  # one short append: whole lines from any number of processes
        return ModelResponse(
            model=model,
            choices=[{"index": 0, "finish_reason": finish, "message": message}],
            usage={"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                   "prompt_tokens_details": {"cached_tokens": cached}},
        )

    def _outage(self, model: str, outage: dict[str, Any]) -> None:
        """Raise the outage's fault while it lasts (see the module's docstring)."""
        if not isinstance(outage, dict) or outage.get("error") not in _FAULTS:
            raise ScriptError(f"scripted model {model}: outage must be a mapping with error one of "
                              f"{', '.join(_FAULTS)}", model)
        with self._lock:
            state = self._outages.setdefault(model, _OutageState())
            state.calls += 1
            if state.calls <= int(outage.get("after_calls", 0)):
                return
            if state.began is None:
                state.began = time.monotonic()
            began = state.began
        flag, seconds = outage.get("while_exists"), outage.get("seconds")
        down = (flag is not None and Path(flag).exists()) or \
            (seconds is not None and time.monotonic() - began < float(seconds))
        if down:
            raise _FAULTS[outage["error"]](model)

    def _load(self, model: str) -> dict[str, Any]:
        with self._lock:
            if model in self._scripts:
                return self._scripts[model]
        path = Path(model)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ScriptError(f"scripted model: cannot read the script file {path} ({error})", model) from None
        try:
            data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        except (ValueError, yaml.YAMLError) as error:
            raise ScriptError(f"scripted model: {path} is not valid YAML/JSON ({error})", model) from None
        if not isinstance(data, dict):
            raise ScriptError(f"scripted model: {path} must map roles to replies", model)
        with self._lock:
            self._scripts[model] = data
        return data

    def _replies(self, model: str, script: dict[str, Any], role: str, agent: int) -> list[Any]:
        entry = script.get(role)
        if entry is None:
            raise ScriptError(f"scripted model {model}: the file has no replies for role '{role}'", model)
        if role in MULTI_AGENT_ROLES:
            if not isinstance(entry, list) or not entry or not all(isinstance(s, list) for s in entry):
                raise ScriptError(f"scripted model {model}: '{role}' must be a list of scripts (lists of replies)",
                                  model)
            replies: list[Any] = entry[agent % len(entry)]
            return replies
        if not isinstance(entry, list):
            raise ScriptError(f"scripted model {model}: '{role}' must be a list of replies", model)
        return entry


def _slots(replies: list[Any]) -> list[tuple[list[Any], Any]]:
    """(errors raised first, then the reply) per conversation position."""
    slots, pending = [], []
    for reply in replies:
        if isinstance(reply, dict) and "error" in reply:
            pending.append(reply)
        else:
            slots.append((pending, reply))
            pending = []
    if pending:
        slots.append((pending, None))
    return slots


def _estimate_tokens(messages: list[Any]) -> int:
    return max(1, sum(len(str(m.get("content", ""))) for m in messages) // 4)


def _arguments_text(arguments: object) -> str:
    """A scripted call's arguments as a provider sends them: JSON text; text given as such is sent unchanged."""
    return arguments if isinstance(arguments, str) else json.dumps(arguments or {})
