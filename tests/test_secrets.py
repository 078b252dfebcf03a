"""No API key reaches a file swepipe writes: every key shape litellm's providers use, from the environment,
from provider error text, from tracebacks; and keys are refused in the config wherever they hide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from pipeline.errors import SwepipeError
from pipeline.rundir.storage import append_jsonl, redact_file, write_code_atomic, write_json_atomic, write_text_atomic
from pipeline.settings.config import load_config
from pipeline.tasks import load_tasks
from pipeline.text.secrets import REDACTED, redact, redact_data

TESTS = Path(__file__).parent
TASK = next(t for t in load_tasks("bundled") if t.repo.endswith("/tinyq"))

# Keys in the environment, under the names litellm reads them from (values look like the real ones).
ENV_KEYS = {
    "OPENAI_API_KEY": "sk-proj-" + "Ab3dE5fG7hJ9kL2mN4pQ6rS8tU0vW1xY" * 2,
    "ANTHROPIC_API_KEY": "sk-ant-api03-" + "Zx9_Cv8-Bn7Mq6Wr5Ty4Ui3Op2As1Df0Gh" * 2 + "AA",
    "GEMINI_API_KEY": "AIzaSyD" + "q8W3e7R2t6Y1u5I0o4P9a3S8d2F7g6H1j",
    "HF_TOKEN": "hf_" + "QwErTy8UiOp7AsDfGh6JkLzXcV5bNm4QwE",
    "GROQ_API_KEY": "gsk_" + "Gr0qK3y" * 8,
    "XAI_API_KEY": "xai-" + "Xa1Ke2Y3" * 10,
    "AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",  # no shape: only the name tells
    "AZURE_API_KEY": "0f1e2d3c4b5a69788796a5b4c3d2e1f0",
    "AZURE_OPENAI_KEY": "9a8b7c6d5e4f30211203f4e5d6c7b8a9",
}
# Keys that appear only in text (a provider's error, a traceback), in no environment variable: caught by shape.
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
SHAPED = {
    "openai": "sk-" + "T3BlbkFJ" * 6,
    "openai project": "sk-proj-" + "Pr0j3ctK3y" * 5,
    "anthropic": "sk-ant-api03-" + "An7hr0p1c" * 10,
    "google": "AIza" + "SyB" * 12,
    "hugging face": "hf_" + "Hf7" * 12,
    "groq": "gsk_" + "Gq5" * 17,
    "xai": "xai-" + "Xq9" * 27,
    "aws key id": "AKIAJ7Q3EXAMPLE2ZZZZ",
    "jwt": JWT,
    "bearer": "4f9d8c7b6a5e4d3c2b1a0f9e8d7c6b5a",  # as "Authorization: Bearer <it>"
    "url password": "s3cr3t-pa55w0rd",  # as https://alice:<it>@proxy.example.com
    "url api_key": "QWxhZGRpbjpvcGVuIHNlc2FtZQ123",  # as ?api_key=<it>
    "url key": "k3y0fG00gle123456",  # as &key=<it>
}
LEAK_TEXT = (
    "upstream rejected the request: Authorization: Bearer {bearer}; retried via "
    "https://alice:{url password}@proxy.example.com/v1 and "
    "https://api.example.com/v1/chat?api_key={url api_key} and "
    "https://generativelanguage.googleapis.com/v1/models?alt=sse&key={url key}; "
    "keys tried: {openai}, {openai project}, {anthropic}, {google}, {hugging face}, {groq}, {xai}, "
    "{aws key id}, token {jwt}".format(**SHAPED)
    + "; env keys: " + ", ".join(ENV_KEYS.values())
)
NEEDLES = [*ENV_KEYS.values(), *SHAPED.values()]


def leaked(text: str) -> list[str]:
    return [needle for needle in NEEDLES if needle in text]


# -- the redactor -----------------------------------------------------------------------------------


def test_every_key_shape_and_every_secret_variable_is_redacted(monkeypatch):
    for name, value in ENV_KEYS.items():
        monkeypatch.setenv(name, value)
    assert leaked(LEAK_TEXT) == NEEDLES
    clean = redact(LEAK_TEXT)
    assert leaked(clean) == [], clean
    # What stays is what tells a reader what went wrong.
    assert "Authorization: Bearer [redacted]" in clean and "https://alice:[redacted]@proxy.example.com" in clean
    assert "?api_key=[redacted]" in clean and "&key=[redacted]" in clean and "upstream rejected" in clean
    # Prose, code and ordinary URLs that merely look near a key are left alone.
    text = ("Bearer authentication failed; see task-list-item-checkbox, commit "
            "1e137b07052bc3ea0da44ed201702c94055b8ad2, url = f'{base}?key={key}&token={token}', "
            "git clone ssh://git@github.com:22/org/repo.git, http://localhost:8080/v1?api-version=2024-02-01, "
            "headers = {'Authorization': f'Bearer {token}'}, disk-usage-percentage-threshold")
    assert redact(text) == text


def test_env_values_are_redacted_by_name_not_by_shape(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ENV_KEYS["AWS_SECRET_ACCESS_KEY"])
    monkeypatch.setenv("AZURE_OPENAI_KEY", ENV_KEYS["AZURE_OPENAI_KEY"])
    monkeypatch.setenv("MY_GATEWAY_SECRET_VALUE", "gw-s3cret-value")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false-but-long")  # not a secret: no TOKEN word
    text = f"{ENV_KEYS['AWS_SECRET_ACCESS_KEY']} {ENV_KEYS['AZURE_OPENAI_KEY']} gw-s3cret-value false-but-long"
    assert redact(text) == f"{REDACTED} {REDACTED} {REDACTED} false-but-long"


# Passwords of a developer's own services, in the environment swepipe runs in: words that code holds too.
WORD_PASSWORDS = {"DB_PASSWORD": "deferred", "POSTGRES_PASSWORD": "postgres", "REDIS_PASS": "development_password",
                  "APP_SECRET": "changeme-please", "MY_TOKEN": "developmentPassword"}


def test_a_password_that_is_a_word_rewrites_no_patch_reply_or_trajectory(monkeypatch, tmp_path):
    """With DB_PASSWORD=deferred, a prediction's patch once read job.record(..., "[redacted]", reason) while
    principal/patch.diff was intact, and eval and export scored the corrupted one. A value that code can hold
    is no generated credential: it is left alone everywhere; a generated one still goes everywhere."""
    for name, value in WORD_PASSWORDS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEYS["OPENAI_API_KEY"])
    patch = ("--- a/jobs.py\n+++ b/jobs.py\n@@ -1 +1 @@\n-job.record(self.clock.now(), 'deferred')\n"
             "+job.record(self.clock.now(), \"deferred\", reason)  # postgres changeme-please development_password "
             "developmentPassword\n")
    reply = f"Fix.\n```edit\njobs.py\n<<<<<<< SEARCH\n{patch}=======\nx\n>>>>>>> REPLACE\n```"
    prediction = {"instance_id": "a", "model_patch": patch}
    append_jsonl(tmp_path / "predictions.jsonl", prediction)
    write_json_atomic(tmp_path / "trajectory.json", {"messages": [{"role": "assistant", "content": reply}],
                                                     "steps": [{"reply": reply, "command": reply}]})
    write_code_atomic(tmp_path / "patch.diff", patch)
    assert json.loads((tmp_path / "predictions.jsonl").read_text())["model_patch"] == patch
    assert (tmp_path / "patch.diff").read_text() == patch
    saved = json.loads((tmp_path / "trajectory.json").read_text())
    assert saved["messages"][0]["content"] == reply == saved["steps"][0]["reply"] == saved["steps"][0]["command"]
    leaking = patch + ENV_KEYS["OPENAI_API_KEY"]
    assert redact_data({"model_patch": leaking})["model_patch"] == patch + REDACTED


def test_go_module_urls_are_left_alone_and_credentials_in_urls_are_not():
    """Go's module proxy paths have an "@" after a "/" (.../@v/v1.2.3.mod): no credentials, which come before the
    host (scheme://user:pass@host, scheme://token@host) and hold no "/"."""
    ordinary = ["go: downloading github.com/x/y v43.3.0",
                "GET https://proxy.golang.org/github.com/x/y/@v/v43.3.0.mod",
                "https://goproxy.corp.example:8443/github.com/future-architect/vuls/@v/list",
                "https://proxy.golang.org/cache/download/github.com/x/y/@v/v0.0.0-20230101120000-abcdef123456.zip",
                "see https://example.com/docs/api/v2/@types/node for details",
                # between "://" and "@", a control character: no URL's credentials (found by the 5000-example fuzz)
                "\x1b]8;;https://example.com\x07:0@", "ftp://a b:c@d"]
    for text in ordinary:
        assert redact(text) == text
    credentials = {
        "https://alice:s3cr3t-pa55w0rd@proxy.example.com/v1": f"https://alice:{REDACTED}@proxy.example.com/v1",
        "git clone https://oauth2:glpat-Ab3dE5fG7hJ9kL2m@gitlab.com/x/y.git":
            f"git clone https://oauth2:{REDACTED}@gitlab.com/x/y.git",
        "https://x0123456789abcdefTOKEN@github.com/x/y/@v/v1.2.3.mod":
            f"https://{REDACTED}@github.com/x/y/@v/v1.2.3.mod",
        "GOPROXY=https://u:Pr0xyPassw0rd%21@goproxy.corp.example/github.com/x/y/@v/list":
            f"GOPROXY=https://u:{REDACTED}@goproxy.corp.example/github.com/x/y/@v/list",
    }
    for text, expected in credentials.items():
        assert redact(text) == expected


def test_patches_keep_key_shaped_fixtures_but_never_an_environment_key(monkeypatch, tmp_path):
    """A patch is code that must apply byte for byte: a JWT in a test fixture stays; the environment's keys
    (which only a leak could have put there) go."""
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEYS["OPENAI_API_KEY"])
    patch = f"+TOKEN = '{JWT}'\n+KEY = '{ENV_KEYS['OPENAI_API_KEY']}'\n"
    record = redact_data({"model_patch": patch, "error": f"bad {JWT}", "patch": patch})
    assert JWT in record["model_patch"] and JWT in record["patch"] and JWT not in record["error"]
    assert ENV_KEYS["OPENAI_API_KEY"] not in json.dumps(record)
    append_jsonl(tmp_path / "p.jsonl", {"model_patch": patch})
    write_code_atomic(tmp_path / "context.md", patch)
    for name in ("p.jsonl", "context.md"):
        written = (tmp_path / name).read_text()
        assert JWT.replace("/", "\\/") in written or JWT in written
        assert ENV_KEYS["OPENAI_API_KEY"] not in written


def test_every_writer_redacts_and_logs_keep_their_other_bytes(monkeypatch, tmp_path):
    for name, value in ENV_KEYS.items():
        monkeypatch.setenv(name, value)
    write_json_atomic(tmp_path / "a.json", {"messages": [{"content": LEAK_TEXT}], LEAK_TEXT: 1})
    write_text_atomic(tmp_path / "error.txt", f"Traceback ...\nRuntimeError: {LEAK_TEXT}\n")
    append_jsonl(tmp_path / "ledger.jsonl", {"error": LEAK_TEXT, "quoted": f'"{LEAK_TEXT}"\\'})
    log = tmp_path / "stdout.log"
    log.write_bytes(b"caf\xe9 latin-1 line\n" + LEAK_TEXT.encode() + b"\n\xff\xfe end\n")
    redact_file(log)
    for path in tmp_path.iterdir():
        assert leaked(path.read_bytes().decode("utf-8", errors="replace")) == [], path.name
    assert log.read_bytes().startswith(b"caf\xe9 latin-1 line\n") and log.read_bytes().endswith(b"\n\xff\xfe end\n")


def test_reports_are_redacted_even_over_a_run_an_older_swepipe_wrote(tmp_path, monkeypatch):
    """A prediction written before a key shape was known holds the key in its error; the report (Markdown
    and HTML) that quotes the error does not."""
    import shutil

    from pipeline.report.build import build_report, write_report

    monkeypatch.setenv("MPLCONFIGDIR", str(tmp_path / "mpl"))
    run = tmp_path / "failed"
    shutil.copytree(TESTS / "fixtures" / "runs" / "failed", run)
    lines = (run / "predictions.jsonl").read_text().splitlines()
    first = json.loads(lines[0]) | {"error": f"junior: {SHAPED['groq']} {SHAPED['xai']} {JWT}"}
    (run / "predictions.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    write_report(build_report([run], None), run)
    for page in (run / "report.md", run / "report.html"):
        text = page.read_text()
        assert "junior: [redacted] [redacted]" in text and leaked(text) == [], page


# -- keys in the config -----------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "field"), [
    ({"extra": {"extra_headers": {"Authorization": f"Bearer {SHAPED['bearer']}"}}},
     "extra.extra_headers.Authorization"),
    ({"extra": {"extra_headers": {"x-api-key": SHAPED["anthropic"]}}}, "extra.extra_headers.x-api-key"),
    ({"extra": {"extra_headers": {"X-Gateway": SHAPED["openai"]}}}, "extra.extra_headers.X-Gateway"),
    ({"extra": {"aws_secret_access_key": ENV_KEYS["AWS_SECRET_ACCESS_KEY"]}}, "extra.aws_secret_access_key"),
    ({"extra": {"vertex_credentials": "{...}"}}, "extra.vertex_credentials"),
    ({"api_base": f"https://alice:{SHAPED['url password']}@proxy.example.com/v1"}, "a user or password"),
    ({"api_base": f"https://proxy.example.com/v1?api_key={SHAPED['url api_key']}"}, "query parameter 'api_key'"),
    ({"api_base": f"https://proxy.example.com/v1?alt=sse&key={SHAPED['url key']}"}, "query parameter 'key'"),
])
def test_keys_hidden_in_headers_or_the_endpoint_are_refused(tmp_path, spec, field):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"models": {"senior": {"model": "openai/mine", "free": True, **spec}}}))
    with pytest.raises(SwepipeError) as caught:
        load_config(config)
    message = str(caught.value)
    assert "models.senior" in message and field in message and "come only from the environment" in message
    assert leaked(message) == []


def test_an_endpoint_and_headers_without_keys_are_fine_and_one_key_among_them_is_not(tmp_path):
    spec = {"model": "azure/gpt-4o", "free": True, "api_base": "https://me.openai.azure.com/?api-version=2024-02-01",
            "extra": {"extra_headers": {"anthropic-beta": "prompt-caching-2024-07-31"}, "api_version": "2024-02-01",
                      "thinking": {"budget_tokens": 1024}}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"models": {"senior": spec}}))
    assert load_config(config).models["senior"].extra["thinking"] == {"budget_tokens": 1024}
    spec["extra"]["extra_headers"]["api-key"] = ENV_KEYS["AZURE_API_KEY"]  # Azure's key header
    config.write_text(yaml.safe_dump({"models": {"senior": spec}}))
    with pytest.raises(SwepipeError, match="extra.extra_headers.api-key must not be in the config"):
        load_config(config)


# -- a whole run that fails every way, then the run directory searched ---------------------------------


class _Provider(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses every request and quotes the key back, with more, as some do:
    with 401 (a rejected key, which stops the run) when asked at /401/v1, else with 400 (a refused request,
    the rollout's own outcome)."""

    def do_POST(self):  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        message = f"Incorrect API key provided: {self.headers.get('Authorization')}. {LEAK_TEXT}"
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                     "code": "invalid_api_key"}}).encode()
        self.send_response(401 if self.path.startswith("/401/") else 400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


PLUGINS = textwrap.dedent('''
    """A senior workspace whose tool crashes and a principal that fails, both quoting keys."""
    import os

    from local_opener import open_local
    from pipeline.runtime.local import LocalRuntime


    class CrashingRuntime(LocalRuntime):
        def run(self, command, *args, **kwargs):
            if "SWEPIPE_BOOM" in command:
                raise RuntimeError("the senior's tool crashed: " + os.environ["LEAK_TEXT"])
            return super().run(command, *args, **kwargs)


    def open_leaky(task, role, containers, **options):
        if role == "senior":
            return CrashingRuntime(os.environ["SWEPIPE_TEST_REPO"], os.environ["SWEPIPE_TEST_BASE"])
        return open_local(task, role, containers, **options)


    class FailingPrincipal:
        role = None

        def __init__(self, config):
            self.config = config

        def write(self, job, pool, brief):
            raise RuntimeError("principal gateway said: " + os.environ["LEAK_TEXT"])
''')


@pytest.mark.slow
def test_no_key_of_any_shape_is_written_by_a_run_that_fails_every_way(tmp_path, leaky_repo):
    """Keys in the environment; a provider that quotes them (and others) in its 401; a senior tool and a
    principal that crash with them in their tracebacks; a config holding one (refused). Then every file of
    the run directory, the report included, and everything printed, is searched for every key."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Provider)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "leaky_plugins.py").write_text(PLUGINS)
    (tmp_path / "script.yaml").write_text(yaml.safe_dump({"senior": ["```bash\necho SWEPIPE_BOOM\n```"]}))
    prices = {"input": 1.0, "output": 2.0}
    config = {"models": {"junior": {"model": "openai/fake", "api_base": f"http://127.0.0.1:{server.server_port}/v1",
                                    "prices": prices, "max_retries": 0},
                         "senior": {"model": f"scripted/{tmp_path / 'script.yaml'}", "prices": prices}},
              "juniors": {"k": 2}, "limits": {"max_steps": 3},
              "principal": {"impl": "leaky_plugins:FailingPrincipal"},
              "containers": {"impl": "leaky_plugins:open_leaky"}}
    env = {**os.environ, **ENV_KEYS, "LEAK_TEXT": LEAK_TEXT, "SWEPIPE_TEST_REPO": str(leaky_repo["path"]),
           "SWEPIPE_TEST_BASE": leaky_repo["base"], "COLUMNS": "250",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "plugins"), str(TESTS),
                                                       os.environ.get("PYTHONPATH")]))}

    def swepipe(*args):
        return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)

    try:
        keyed = {**config, "models": {**config["models"], "junior": {
            **config["models"]["junior"], "extra": {"extra_headers": {"Authorization": f"Bearer {SHAPED['bearer']}"}}}}}
        (tmp_path / "keyed.yaml").write_text(yaml.safe_dump(keyed))
        refused = swepipe("run", "--instance-ids", TASK.instance_id, "--config", "keyed.yaml", "--run-id", "leaky")
        assert refused.returncode == 2 and "extra.extra_headers.Authorization" in refused.stderr
        assert not (tmp_path / "runs").exists()

        rejected = {**config, "models": {**config["models"], "junior": {
            **config["models"]["junior"], "api_base": f"http://127.0.0.1:{server.server_port}/401/v1"}}}
        (tmp_path / "rejected.yaml").write_text(yaml.safe_dump(rejected))
        stopped = swepipe("run", "--instance-ids", TASK.instance_id, "--config", "rejected.yaml", "--run-id",
                          "rejected")
        assert stopped.returncode == 2 and "refused the call" in stopped.stdout + stopped.stderr

        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
        done = swepipe("run", "--instance-ids", TASK.instance_id, "--config", "config.yaml", "--run-id", "leaky")
        report = swepipe("report", "runs/leaky")
    finally:
        server.shutdown()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert report.returncode == 0, report.stdout[-3000:] + report.stderr[-3000:]
    run = tmp_path / "runs" / "leaky"
    task_dir = run / "tasks" / TASK.instance_id
    # Every way of failing happened and was recorded ...
    rollout = json.loads((task_dir / "junior" / "rollout-00.json").read_text())
    assert rollout["exit_reason"] == "model_error" and "BadRequestError" in rollout["error"]
    assert "Incorrect API key provided: Bearer [redacted]" in (task_dir / "ledger.jsonl").read_text()
    # The senior's crashed tool ends its agent (runtime_error, the traceback in its trajectory); the brief says why.
    assert "RuntimeError: the senior's tool crashed" in (task_dir / "senior" / "brief.json").read_text()
    assert "Traceback" in (task_dir / "senior" / "trajectory.json").read_text()
    assert "principal gateway said" in (task_dir / "error.txt").read_text()
    assert (run / "report.md").exists() and (run / "report.html").exists() and (run / "config.yaml").exists()
    # ... and no key was written anywhere, nor printed.
    files = [path for path in (*run.rglob("*"), *(tmp_path / "runs" / "rejected").rglob("*")) if path.is_file()]
    assert len(files) > 10
    found = {str(path.relative_to(tmp_path)): leaked(path.read_bytes().decode("utf-8", errors="replace"))
             for path in files}
    assert {name: keys for name, keys in found.items() if keys} == {}
    for output in (refused, stopped, done, report):
        assert leaked(output.stdout + output.stderr) == []


def warning_patch() -> str:
    """A patch to the package (tests are restored at scoring) whose import warns with keys built at run time,
    so the patch itself holds none; pytest prints the warning in its summary."""
    import difflib

    name = "tinyq/__init__.py"
    base = TESTS.parent / "pipeline" / "bundled" / "tasks" / TASK.instance_id / "base" / name
    old = base.read_text().splitlines(keepends=True)
    new = old + ["import warnings as _warnings\n",
                 '_warnings.warn("gateway token: " + "gsk_" + "Gq5" * 17 + " and " + ".".join(['
                 '"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9", "eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ", '
                 '"SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"]))\n']
    return f"diff --git a/{name} b/{name}\n" + "".join(difflib.unified_diff(old, new, f"a/{name}", f"b/{name}"))


@pytest.mark.docker
@pytest.mark.slow
def test_the_test_logs_of_scoring_are_redacted(tmp_path):
    """A patch whose tests print keys: the scoring logs kept in the eval directory say the line was there,
    without the keys."""
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text(json.dumps({"instance_id": TASK.instance_id, "model_patch": warning_patch()}) + "\n")
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", "eval", "--predictions", str(predictions),
                           "--output", str(tmp_path / "out")],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    instance = tmp_path / "out" / TASK.instance_id
    assert json.loads((instance / "result.json").read_text())["patch_applied"] is True
    assert "gateway token: [redacted] and [redacted]" in (instance / "stdout.log").read_text()
    for path in instance.rglob("*"):
        if path.is_file():
            assert leaked(path.read_bytes().decode("utf-8", errors="replace")) == [], path.name
