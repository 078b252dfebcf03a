"""Grammar-held sampling that looks at the model's likeliest tokens first (for the local server).

llama-cpp-python puts llama.cpp's grammar sampler before top-k, so every token of a reply is checked against the
whole vocabulary (Gemma 3's has 262,144 tokens): on a 2-core machine that took longer than the model itself and
halved its speed. llama.cpp's own tools check the token they would sample and fall back to the whole vocabulary only
when the grammar refuses it; ``GrammarFilter`` does the same as a logits processor: it keeps the grammar's allowed
tokens among the model's LIKELIEST, and checks the rest only when none of those is allowed. Every token it leaves is
one the grammar allows, so the reply still always parses; only which allowed tokens top-k then sees can differ.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

LIKELIEST = 256
_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)], align=True)


class GrammarFilter:
    """A llama-cpp-python logits processor: every logit but those of the tokens ``grammar`` (GBNF, start rule
    ``root``) allows next becomes -inf. One per completion: it follows the tokens written so far."""

    def __init__(self, llama: Any, grammar: str) -> None:  # llama: a llama_cpp.Llama
        import llama_cpp

        self._llama_cpp = llama_cpp
        self.sampler = llama_cpp.llama_sampler_init_grammar(llama._model.vocab, grammar.encode(), b"root")
        if not self.sampler:
            raise ValueError("llama.cpp could not parse the grammar (see the server's log)")
        self.seen: int | None = None  # tokens of the sequence the grammar has taken in

    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        if self.seen is not None:  # the tokens sampled since the last call (the prompt is not the grammar's)
            for token in input_ids[self.seen:]:
                self._llama_cpp.llama_sampler_accept(self.sampler, int(token))
        self.seen = len(input_ids)
        likeliest = np.argpartition(logits, -LIKELIEST)[-LIKELIEST:] if len(logits) > LIKELIEST \
            else np.arange(len(logits))
        allowed = self._allowed(likeliest, logits)
        if allowed.size == 0:
            allowed = self._allowed(np.arange(len(logits)), logits)
        kept = np.full_like(logits, -np.inf)
        kept[allowed] = logits[allowed]
        return kept

    def _allowed(self, tokens: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """Of ``tokens``, those the grammar allows next."""
        llama_cpp = self._llama_cpp
        data = np.zeros(len(tokens), dtype=_TOKEN_DATA)
        data["id"], data["logit"] = tokens, logits[tokens]
        array = llama_cpp.llama_token_data_array(
            data=data.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), size=len(tokens), selected=-1,
            sorted=False)
        llama_cpp.llama_sampler_apply(self.sampler, ctypes.byref(array))
        allowed: np.ndarray = tokens[np.isfinite(data["logit"])]
        return allowed

    def __del__(self) -> None:
        if getattr(self, "sampler", None):
            self._llama_cpp.llama_sampler_free(self.sampler)
            self.sampler = None
