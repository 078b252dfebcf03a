"""Keeping API keys out of everything swepipe writes.

Keys live only in the environment. Provider error messages, tracebacks and request dumps sometimes
quote them, so every file swepipe writes passes through ``redact`` on its way to disk (see
``pipeline.rundir.storage``). Two nets:

- the exact values of environment variables named like secrets (``*_API_KEY``, ``*_TOKEN``,
  ``*_SECRET*``, ``AWS_SECRET_ACCESS_KEY``, ``AZURE_*_KEY``, ...) that look like generated credentials
  (``looks_like_credential``), wherever they appear;
- the shapes of the keys litellm's providers use (``sk-``, ``sk-proj-``, ``sk-ant-``, ``AIza``,
  ``hf_``, ``gsk_``, ``xai-``, ``AKIA...``, ...), bearer tokens, JWTs and credentials inside URLs,
  even when the key did not come from this process's environment.

Patches are code that must apply byte for byte, and a repository's own test fixtures hold JWTs and
fake keys, so the fields that carry a patch get the first net only (``redact_data``): a patch can
hold a key only if the model was given one, and the model is only ever given this environment's.
That net takes only values that look generated: a password that is a word (``postgres``) also
occurs in code, and redacting it there would rewrite patches.
"""

from __future__ import annotations

import os
import re

REDACTED = "[redacted]"

# An environment variable whose name has one of these words (split at underscores) holds a secret:
# OPENAI_API_KEY, AZURE_OPENAI_KEY, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN, HF_TOKEN, WATSONX_APIKEY, ...
_SECRET_NAME = re.compile(r"(?:^|_)(?:API_?KEYS?|KEYS?|TOKEN|SECRET|PASSWORD|PASSWD|PASS|CREDENTIALS?"
                          r"|AUTHORIZATION|COOKIE)(?:_|$)", re.IGNORECASE)
_MIN_SECRET_LENGTH = 8
_MIXED_CASE_LENGTH = 24  # a key with no digit: random letters of both cases, longer than camelCase names run

# Provider key shapes (litellm's providers), whole tokens only.
_SHAPES = (
    r"\bsk-[A-Za-z0-9_\-]{16,}",                    # OpenAI sk-, sk-proj-, Anthropic sk-ant-, OpenRouter, DeepSeek
    r"\bAIza[0-9A-Za-z_\-]{30,}",                   # Google (Gemini, Vertex, PaLM)
    r"\bya29\.[0-9A-Za-z_\-]{20,}",                 # Google OAuth access tokens
    r"\bhf_[A-Za-z0-9]{30,}",                       # Hugging Face
    r"\bgsk_[A-Za-z0-9]{20,}",                      # Groq
    r"\bxai-[A-Za-z0-9]{20,}",                      # xAI
    r"\b(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}\b",     # AWS access key ids (Bedrock, SageMaker)
    r"\bpplx-[A-Za-z0-9]{20,}",                     # Perplexity
    r"\br8_[A-Za-z0-9]{20,}",                       # Replicate
    r"\bnvapi-[A-Za-z0-9_\-]{20,}",                 # NVIDIA NIM
    r"\bfw_[A-Za-z0-9]{20,}",                       # Fireworks
    r"\bgh[pousr]_[A-Za-z0-9]{30,}",                # GitHub tokens (github/ and copilot models)
    r"\bgithub_pat_[A-Za-z0-9_]{30,}",
    r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",  # JWTs (Azure AD, Vertex, gateways)
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",  # service-account key files
)
# Every shape starts with one of these characters: looking for one first makes a scan of a long log 4 times faster
# than trying each shape at every position.
_FIRST = "".join(sorted({re.sub(r"^(\\b)?(\(\?:)?", "", shape)[0] for shape in _SHAPES}))
_KEY_SHAPES = re.compile(f"(?=[{re.escape(_FIRST)}])(?:{'|'.join(_SHAPES)})", re.DOTALL)
# A secret after a marker: the marker is kept, the secret replaced. Token values must hold a digit or
# one of + / = so that prose ("Bearer authentication") and code ("?key={key}") are left alone.
_TOKEN = r"(?=[A-Za-z0-9\-._~+/%]*[0-9+/=%])[A-Za-z0-9\-._~+/%]{12,}=*"
# Credentials in a URL come before its host, so they hold no "/": Go's module paths (.../x/y/@v/v1.2.3.mod) have an
# "@" after a "/", and are not credentials.
_USERINFO_TOKEN = r"(?=[A-Za-z0-9\-._~+%]*[0-9+=%])[A-Za-z0-9\-._~+%]{12,}=*"
# A character a URL's user name or password may hold (RFC 3986: unreserved, %-escapes, sub-delimiters but quotes):
# text with a control character or a space between "://" and "@" is no URL's credentials.
_USERINFO = r"[A-Za-z0-9\-._~%!$&()*+,;=]"
_AFTER_MARKER = re.compile("|".join((
    rf"(?P<auth>\b(?:Bearer|Basic)\s+){_TOKEN}",                         # Authorization: Bearer <token>
    rf"(?P<userinfo>\b[a-zA-Z][a-zA-Z0-9+.\-]*://{_USERINFO}*:){_USERINFO}+(?=@)",  # https://user:pass@host
    rf"(?P<usertoken>\b[a-zA-Z][a-zA-Z0-9+.\-]*://){_USERINFO_TOKEN}(?=@)",  # https://<token>@host
    r"(?P<query>[?&;](?:api[_\-]?key|apikey|key|token|access[_\-]?token|auth[_\-]?token|auth|secret|password"
    rf"|sig|signature|x-api-key|code)=){_TOKEN}",                        # ?api_key=..., &key=...
)), re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    """Whether an environment variable or config key of this name holds a secret."""
    return bool(_SECRET_NAME.search(name.replace("-", "_")))


def secret_values() -> list[str]:
    """Values of environment variables named like secrets that look like credentials, longest first."""
    values = {v for k, v in os.environ.items() if is_secret_name(k) and looks_like_credential(v)}
    return sorted(values, key=len, reverse=True)


def looks_like_credential(value: str) -> bool:
    """Whether an environment value is a generated credential rather than a word. Every written file is cleared
    of these values, patches included, so a value that code also holds must not count: ``DB_PASSWORD=deferred``
    or ``POSTGRES_PASSWORD=postgres`` would rewrite every patch that names the word. Provider keys hold digits
    or mix cases over dozens of characters; a word, an identifier or a camelCase name does neither."""
    if len(value) < _MIN_SECRET_LENGTH or any(c.isspace() for c in value):
        return False
    letters, digits = any(c.isalpha() for c in value), any(c.isdigit() for c in value)
    if letters and digits:
        return True
    return len(value) >= _MIXED_CASE_LENGTH and any(c.isupper() for c in value) and any(c.islower() for c in value)


def looks_like_secret(text: str) -> bool:
    """Whether ``text`` holds a key shape, a bearer token, a JWT or credentials in a URL."""
    return bool(_KEY_SHAPES.search(text) or _AFTER_MARKER.search(text))


def redact(text: str, values: list[str] | None = None) -> str:
    """``text`` with every secret (environment values, then key shapes) replaced by ``[redacted]``."""
    text = redact_values(text, values)
    text = _KEY_SHAPES.sub(REDACTED, text)
    return _AFTER_MARKER.sub(_keep_marker, text)


def redact_values(text: str, values: list[str] | None = None) -> str:
    """``text`` with only the environment's secret values replaced (for patches: no shape guessing)."""
    for value in secret_values() if values is None else values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


class StreamRedactor:
    """``redact`` over a text that arrives in pieces (a log read block by block), in bounded memory.

    Each piece's redacted text is handed back at once, except the last ``overlap`` characters or so, held back
    for the next piece; the cut is made at a line's end where one is near, and never inside a secret, so a
    secret split across two pieces is found whole (any secret shorter than ``overlap``: a PEM key is 3 KB).
    """

    def __init__(self, values: list[str] | None = None, overlap: int = 65_536):
        self.values = secret_values() if values is None else values
        self.overlap = overlap
        self.changed = False  # whether anything was redacted so far
        self._held = ""

    def feed(self, text: str) -> str:
        text = self._held + text
        cut = self._cut(text)
        self._held = text[cut:]
        return self._redact(text[:cut])

    def finish(self) -> str:
        text, self._held = self._held, ""
        return self._redact(text)

    def _redact(self, text: str) -> str:
        clean = redact(text, self.values)
        self.changed = self.changed or clean != text
        return clean

    def _cut(self, text: str) -> int:
        """Where to cut ``text``: before the last ``overlap`` characters, at a line's end when there is one in
        the ``overlap`` before that, and moved back to the start of any secret it would split or end."""
        if len(text) <= 2 * self.overlap:
            return 0
        limit = len(text) - self.overlap
        newline = text.rfind("\n", limit - self.overlap, limit)
        cut = newline + 1 if newline >= 0 else limit
        start = max(0, cut - self.overlap)
        window = text[start:]
        spans = [(start + m.start(), start + m.end())
                 for pattern in (_KEY_SHAPES, _AFTER_MARKER) for m in pattern.finditer(window)]
        for value in self.values:
            found = window.find(value)
            while found >= 0:
                spans.append((start + found, start + found + len(value)))
                found = window.find(value, found + 1)
        # A match ending at the cut may have needed the character after it (a lookahead); one longer than
        # ``overlap`` is no real secret and is cut anyway, so what is held back stays bounded.
        moved = True
        while moved:
            moved = False
            for begin, end in spans:
                if begin < cut <= end and end - begin <= self.overlap:
                    cut, moved = begin, True
        return cut


def _keep_marker(match: re.Match) -> str:
    marker = next(group for group in match.groupdict().values() if group is not None)
    return marker + REDACTED


# Fields that hold a patch: code that must apply byte for byte (see the module's docstring).
PATCH_FIELDS = frozenset({"patch", "model_patch", "test_patch"})


def redact_data(data, values: list[str] | None = None):
    """``redact`` applied to every string (keys included) inside nested dicts and lists; only
    ``redact_values`` for the strings of PATCH_FIELDS."""
    if values is None:
        values = secret_values()
    if isinstance(data, str):
        return redact(data, values)
    if isinstance(data, dict):
        return {(redact(key, values) if isinstance(key, str) else key):
                (redact_values(value, values) if key in PATCH_FIELDS and isinstance(value, str)
                 else redact_data(value, values)) for key, value in data.items()}
    if isinstance(data, (list, tuple)):
        return [redact_data(value, values) for value in data]
    return data
