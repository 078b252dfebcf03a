"""What other threads leave for an agent (messages, worker reports), read before its next turn."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class InboxItem:
    sender: str
    kind: str  # message or report
    text: str
    on_delivery: Callable[[], None] | None = None


class Inbox:
    def __init__(self) -> None:
        self._items: list[InboxItem] = []
        self._lock = threading.Lock()

    def put(self, item: InboxItem) -> None:
        with self._lock:
            self._items.append(item)

    def take(self, match: Callable[[InboxItem], bool] = lambda item: True) -> list[InboxItem]:
        with self._lock:
            taken = [item for item in self._items if match(item)]
            self._items = [item for item in self._items if not match(item)]
        for item in taken:
            if item.on_delivery:
                item.on_delivery()
        return taken

    def peek(self) -> list[InboxItem]:
        with self._lock:
            return list(self._items)
