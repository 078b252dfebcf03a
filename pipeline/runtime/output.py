"""Bounded capture of command output: keep the head and the tail, count what was cut."""

from __future__ import annotations

DEFAULT_LIMIT = 20_000


class BoundedOutput:
    """Collects bytes as they arrive, holding at most ``limit`` of them in memory.

    The first half of the budget keeps the start of the output, the second half a rolling
    window on its end; everything between is counted and dropped. ``limit=None`` keeps all.
    """

    def __init__(self, limit: int | None = DEFAULT_LIMIT):
        self.limit = limit
        self.total = 0
        self._head = bytearray()
        self._tail = bytearray()
        self._head_cap = None if limit is None else limit - limit // 2
        self._tail_cap = None if limit is None else limit // 2

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.total += len(chunk)
        if self._head_cap is None:
            self._head += chunk
            return
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self._tail_cap:
            self._tail += chunk[-self._tail_cap:]
            # Trim lazily so a stream of small chunks does not copy the window on every write.
            if len(self._tail) > 2 * self._tail_cap:
                del self._tail[: len(self._tail) - self._tail_cap]

    @property
    def cut(self) -> int:
        """How many bytes were dropped from the middle."""
        kept = len(self._head) + min(len(self._tail), self._tail_cap or 0)
        return self.total - kept

    def kept(self) -> tuple[bytes, bytes]:
        """The head and the tail kept, as they came (``cut`` bytes were dropped between them)."""
        return bytes(self._head), bytes(self._tail[-self._tail_cap:]) if self._tail_cap else b""

    def text(self) -> str:
        """The kept output, decoded without ever raising; a marker says how much was cut."""
        return join_head_tail(*self.kept(), self.cut)


def join_head_tail(head: bytes, tail: bytes, cut: int) -> str:
    """Decode kept output (never raising on bad bytes), with a marker where ``cut`` bytes were dropped."""
    head_text, tail_text = head.decode("utf-8", errors="replace"), tail.decode("utf-8", errors="replace")
    if cut:
        return f"{head_text}\n[... {cut} bytes of output cut ...]\n{tail_text}"
    return head_text + tail_text
