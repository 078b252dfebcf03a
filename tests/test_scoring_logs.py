"""Scoring logs stay bounded: a 200 MiB test log is saved as its head and tail with a note of the cut, read as a
stream from the container's archive and redacted as a stream, in bounded memory; a secret that spans two of the
redactor's pieces is still found."""

import tarfile
import tracemalloc

import pytest

from pipeline.evaluation.files import extract_archive
from pipeline.evaluation.logs import save_capped
from pipeline.rundir.storage import redact_file
from pipeline.text.secrets import REDACTED, StreamRedactor, redact

MiB = 1 << 20
LINE = b"tests/test_calc.py::test_case PASSED [ 42%] https://proxy.golang.org/github.com/x/y/@v/v1.2.3.mod\n"
HEAD_KEY = "sk-proj-" + "HeadKey0123456789abcdefXYZ" * 2
TAIL_KEY = "sk-ant-api03-" + "TailKey0123456789abcdefXYZ" * 2
MIDDLE_KEY = "sk-" + "MiddleKey0123456789abcdefXYZ" * 2


def log_chunks(size: int):
    """``size`` bytes of test log, a block at a time: a key near its start, one in the middle, one near its end."""
    block = LINE * (MiB // len(LINE))
    yield f"collected 1 item\nAuthorization: Bearer {HEAD_KEY}\n".encode()
    sent = 0
    while sent < size:
        yield block if sent != size // 2 // len(block) * len(block) else block + f"{MIDDLE_KEY}\n".encode()
        sent += len(block)
    yield f"token {TAIL_KEY}\n== 1 passed ==\n".encode()


def tar_stream(name: str, chunks):
    """A `get_archive` stream holding one file (its blocks are the same few objects: little memory)."""
    pieces = list(chunks)
    size = sum(len(piece) for piece in pieces)
    info = tarfile.TarInfo(name)
    info.size = size
    yield info.tobuf(format=tarfile.GNU_FORMAT)
    yield from pieces
    yield b"\0" * ((512 - size % 512) % 512) + b"\0" * 1024


@pytest.fixture
def peak_memory():
    tracemalloc.start()
    yield lambda: tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()


def test_a_200_mib_test_log_is_kept_as_head_and_tail_redacted_in_bounded_memory(tmp_path, peak_memory):
    limit = 4_000_000
    stream = tar_stream("workspace/stdout.log", log_chunks(200 * MiB))
    found = extract_archive(stream, {"stdout.log", "output.json"}, tmp_path, {"stdout.log": limit})
    log = tmp_path / "stdout.log"
    assert found == {"stdout.log"}
    redact_file(log)
    assert peak_memory() < 64 * MiB

    data = log.read_bytes()
    assert limit - 2 * 65_536 < len(data) < limit + 500  # the head and tail kept, at lines' ends, and the note
    assert data.startswith(b"collected 1 item\nAuthorization: Bearer [redacted]\n")
    assert data.endswith(b"token [redacted]\n== 1 passed ==\n")
    assert HEAD_KEY.encode() not in data and TAIL_KEY.encode() not in data and MIDDLE_KEY.encode() not in data
    assert b"bytes of this log cut here, to keep it under 4,000,000 bytes" in data
    head, _, tail = data.partition(b"\n[swepipe: ")
    assert head.endswith(b"\n") and tail.split(b"\n\n", 1)[1].startswith(LINE)  # whole lines on both sides
    assert b"https://proxy.golang.org/github.com/x/y/@v/v1.2.3.mod" in data  # Go's module URLs are no secret


def test_a_log_under_the_limit_is_kept_whole(tmp_path):
    text = b"".join(log_chunks(2 * MiB))
    assert save_capped(iter([text[:1000], text[1000:]]), tmp_path / "stdout.log", 4_000_000) == 0
    assert (tmp_path / "stdout.log").read_bytes() == text


@pytest.mark.slow
def test_redacting_a_big_file_streams_it(tmp_path, peak_memory):
    log = tmp_path / "big.log"
    with open(log, "wb") as out:
        for chunk in log_chunks(32 * MiB):
            out.write(chunk)
    size = log.stat().st_size
    tracemalloc.reset_peak()
    redact_file(log)
    assert peak_memory() < 16 * MiB  # reading it whole took more than twice its size
    data = log.read_bytes()
    assert HEAD_KEY.encode() not in data and MIDDLE_KEY.encode() not in data and TAIL_KEY.encode() not in data
    assert len(data) == size - sum(len(key) - len(REDACTED) for key in (HEAD_KEY, MIDDLE_KEY, TAIL_KEY))


def test_a_secret_split_between_two_pieces_is_redacted_whole():
    text = ("x" * 100 + "\n") * 20 + f"Authorization: Bearer {HEAD_KEY} and {TAIL_KEY} " + "y" * 3000
    for size in range(1, 400, 7):  # every way of cutting it into pieces
        redactor = StreamRedactor(values=[], overlap=256)
        out = "".join(redactor.feed(text[i:i + size]) for i in range(0, len(text), size)) + redactor.finish()
        assert out == redact(text, values=[]), size
        assert redactor.changed


def test_an_environment_secret_split_between_two_pieces_is_redacted_whole():
    secret = "s3cr3t-value-from-the-environment"
    text = "a" * 1000 + secret + "b" * 1000
    for size in (1, 10, 999, 1005, 1010):
        redactor = StreamRedactor(values=[secret], overlap=128)
        out = "".join(redactor.feed(text[i:i + size]) for i in range(0, len(text), size)) + redactor.finish()
        assert out == "a" * 1000 + REDACTED + "b" * 1000, size


def test_bytes_that_are_not_utf8_split_between_blocks_are_kept(tmp_path):
    raw = ("é" * 5000).encode() + b"\xff\xfe" + ("ü" * 5000).encode() + f" {HEAD_KEY}\n".encode()
    log = tmp_path / "stdout.log"
    log.write_bytes(raw)
    redact_file(log, block=1001)  # odd blocks: multi-byte characters cut in two
    assert log.read_bytes() == raw.replace(HEAD_KEY.encode(), REDACTED.encode())
