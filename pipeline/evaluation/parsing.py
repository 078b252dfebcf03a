"""The parser's container: a fresh container of the task's image, made ready while the tests run and handed their
output once they have ended (pipeline.evaluation.protocol says why the parser runs apart), for a parser that does
not run on this machine's Python (pipeline.evaluation.host_parser says which do).

It is created, given parser.py and its script, and started before the tests end; its script first reads a tar of
the tests' stdout.log and stderr.log from its standard input, so it waits there until swepipe sends them (the
tests' container has ended by then). What the tests' run costs in time is then only what the parser itself takes,
not a container's creation and start.
"""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

from docker.errors import NotFound

from pipeline.evaluation.capture import write_input
from pipeline.evaluation.engine import InfraError
from pipeline.evaluation.files import extract_archive, tar_of, tar_stream
from pipeline.evaluation.protocol import OUTPUT, TEST_LOGS, WORKSPACE
from pipeline.runtime import containers
from pipeline.runtime.output import BoundedOutput

OUTPUT_LIMIT = 64 * 2**20  # bytes of output.json read at most
SEND_TIME = 120.0  # seconds the tests' output has to reach the parser's container


class ParserContainer:
    """A started parser container (``container``: created with its stdin open, not started) waiting for the
    tests' output; ``files``: what its /workspace holds before (parser.py and the script that runs it)."""

    def __init__(self, container: Any, files: dict[str, bytes]):
        self.container = container
        container.put_archive("/", tar_of(files, WORKSPACE))
        self._stdin = container.attach_socket(params={"stdin": 1, "stream": 1})
        container.start()

    def send(self, spool: Path) -> None:
        """Hand it the tests' output (``spool``/stdout.log and stderr.log): its script goes on to the parser."""
        try:
            write_input(self._stdin, tar_stream({name: spool / name for name in TEST_LOGS}, WORKSPACE), SEND_TIME)
        except OSError as error:
            raise InfraError(f"the tests' output could not be sent to the parser's container: {error}") from error
        finally:
            self._close_stdin()

    def printed(self, limit: int) -> BoundedOutput:
        """What the parser's container printed, bounded."""
        printed = BoundedOutput(limit)
        for chunk in self.container.logs(stream=True, follow=False):
            printed.feed(chunk)
        return printed

    def save_output(self, out_dir: Path, image: str) -> int | None:
        """output.json saved in ``out_dir`` when it is no larger than OUTPUT_LIMIT; its size (None: the parser
        wrote none)."""
        try:
            chunks, stat = self.container.get_archive(f"{WORKSPACE}/{OUTPUT}")
        except NotFound:
            return None
        size = int(stat.get("size") or 0)
        if size <= OUTPUT_LIMIT:
            try:
                extract_archive(chunks, {OUTPUT}, out_dir)  # saved as ScoringFiles.output, the container's name
            except tarfile.TarError as error:  # a stream cut short: the engine went away while sending it
                raise InfraError(f"the outputs of the container of {image} cannot be read: {error}") from error
        return size

    def _close_stdin(self) -> None:
        try:
            self._stdin.close()
        except OSError:
            pass

    def remove(self) -> None:
        self._close_stdin()
        containers.remove(self.container)
