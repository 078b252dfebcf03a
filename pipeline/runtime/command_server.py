"""A tiny command server that runs inside a task container (copied in and started with python3).

`docker exec` costs tens of milliseconds per command on a typical host, more than an agent step
should. This process is started once per container and runs every later command itself: it reads
one JSON request per line on stdin and answers on stdout with a JSON header line followed by the
kept output bytes. Timeouts and the head/tail bound are applied in here, so a command printing a
gigabyte never crosses the socket. Standard library only, Python 3.6+, no third-party code.

It also watches the container's own limits (its cgroup's counters, /tmp, the file-size limit): a command
that makes the process limit refuse a fork (a fork bomb) or the memory limit kill a process is killed at
once with everything it started, and the header names the limits a command ran into (``limits``).
"""

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

# Where the container sees its cgroup's counters: cgroup v2 (one hierarchy), then v1 (one per controller).
# Each is (file, line name): how often a fork was refused at pids.max, how often the OOM killer ran.
COUNTERS = {
    "pids": (("/sys/fs/cgroup/pids.events", "max"), ("/sys/fs/cgroup/pids/pids.events", "max")),
    "memory": (("/sys/fs/cgroup/memory.events", "oom_kill"),
               ("/sys/fs/cgroup/memory/memory.oom_control", "oom_kill")),
}
WATCH_EVERY = 0.5  # seconds between looks at the counters while a command runs
SIGXFSZ = getattr(signal, "SIGXFSZ", 25)
XFSZ_REPORT = re.compile(rb"\d+\s+File size limit exceeded")  # bash's report of a job the limit killed
TMP = "/tmp"


def counters():
    """The cgroup's limit counters this container can read, e.g. {"pids": 0, "memory": 2}."""
    found = {}
    for kind, places in COUNTERS.items():
        for path, name in places:
            try:
                with open(path) as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            for line in lines:
                key, _, value = line.partition(" ")
                if key == name and value.strip().isdigit():
                    found[kind] = int(value)
            break
    return found


# The counters as the last command (of any command server of this container) left them: a limit a process left
# running in the background runs into between commands is then the next command's report, not lost. In /tmp,
# the container's own tmpfs, so that no image ever carries another container's counters.
BASELINE = os.path.join(TMP, ".swepipe-counters")


def baseline():
    try:
        with open(BASELINE) as handle:
            saved = json.load(handle)
        return {kind: int(value) for kind, value in saved.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return counters()


def save_baseline(now):
    temporary = "%s.%d" % (BASELINE, os.getpid())
    try:
        with open(temporary, "w") as handle:
            json.dump(now, handle)
        os.replace(temporary, BASELINE)
    except OSError:
        pass  # a read-only place: each command then compares with its own start


def risen(before, now):
    return [kind for kind in sorted(now) if now[kind] > before.get(kind, now[kind])]


KEEP_ALIVE = b"tail\0-f\0/dev/null"  # the container's entrypoint: killing it would stop the container


def kill_session(sid, everything=False):
    """SIGKILL the command's process group and every process of its session, until none is left (a fork
    bomb forks while it is being killed; a job-control shell puts jobs in groups of their own).

    ``everything``: every process of the container but its init, its entrypoint and processes started from
    outside (this server, other `docker exec`s), since what hit a limit may have left its own session.
    Whole process groups are killed at once, so a group of forking processes cannot refill the slots.
    """
    groups = {sid} if sid > 0 else set()  # killpg(0) would be this server's own group
    for _ in range(100):
        for group in groups:
            try:
                os.killpg(group, signal.SIGKILL)
            except OSError:
                pass
        left = []
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in (1, os.getpid()):
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
                state, ppid, group, session = fields[0], int(fields[1]), int(fields[2]), int(fields[3])
            except (OSError, IndexError, ValueError):
                continue
            if state == b"Z":
                continue
            if everything:
                if ppid == 0 or (ppid == 1 and _cmdline(name).startswith(KEEP_ALIVE)):
                    continue
            elif session != sid:
                continue
            left.append(int(name))
            if group > 1 and group != os.getpgrp():
                groups.add(group)
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.02)


def _cmdline(pid):
    try:
        with open("/proc/%s/cmdline" % pid, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def empty_tmp():
    for name in os.listdir(TMP):
        path = os.path.join(TMP, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                os.unlink(path)
        except OSError:
            pass


def tmp_full():
    try:
        stat = os.statvfs(TMP)
    except OSError:
        return False
    return stat.f_blocks > 0 and stat.f_bavail * stat.f_frsize < 1024 * 1024


def expendable():
    """Run in each command's process before bash starts: the OOM killer then picks the command and what it started
    before this server (the largest process of a small container), whose death would lose the command's answer."""
    try:
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")
    except OSError:
        pass


def run(request):
    limit = request.get("limit")
    head_cap = None if limit is None else limit - limit // 2
    tail_cap = None if limit is None else limit // 2
    head, tail, total = bytearray(), bytearray(), 0
    env = dict(os.environ)
    env.update(request.get("env") or {})
    started = time.monotonic()
    watched, tmp_was_full = baseline(), tmp_full()
    try:
        proc = subprocess.Popen(["bash", "-c", request["command"]], cwd=request.get("cwd") or None, env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=expendable)
    except OSError as error:
        now = counters()
        hit = risen(watched, now)  # no process left to start one: something still forks in the background
        if hit:
            kill_session(0, everything=True)
        save_baseline(now)
        message = ("cannot start bash: %s\n" % error).encode()
        return {"exit_code": 127, "timed_out": False, "total": len(message), "limits": hit}, message, b""
    fd, timed_out, hit = proc.stdout.fileno(), False, []
    deadline = started + float(request.get("timeout", 60))
    next_look = time.monotonic() + WATCH_EVERY
    while True:
        now = time.monotonic()
        remaining = deadline - now
        if remaining <= 0:
            timed_out = True
            break
        if now >= next_look:
            next_look = now + WATCH_EVERY
            hit = risen(watched, counters())
            if hit:
                break
        ready, _, _ = select.select([fd], [], [], min(remaining, WATCH_EVERY))
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        total += len(chunk)
        if head_cap is None:
            head += chunk
            continue
        room = head_cap - len(head)
        if room > 0:
            head += chunk[:room]
            chunk = chunk[room:]
        if chunk and tail_cap:
            tail += chunk[-tail_cap:]
            if len(tail) > 2 * tail_cap:
                del tail[: len(tail) - tail_cap]
    if timed_out or hit:
        kill_session(proc.pid, everything=bool(hit))
    proc.stdout.close()
    exit_code = proc.wait()
    tail = bytes(tail[-tail_cap:]) if tail_cap else b""
    # One reading for both this check and the next command's baseline: a rise between two readings would be in
    # neither report.
    after = counters()
    late = [kind for kind in risen(watched, after) if kind not in hit]
    if late:  # e.g. a fork bomb started in the background, its output elsewhere
        kill_session(proc.pid, everything=True)
        hit += late
        after = counters()  # what the kill itself ran into belongs to this command too
    if exit_code in (-SIGXFSZ, 128 + SIGXFSZ) or XFSZ_REPORT.search(bytes(head) + tail):
        hit.append("file_size")
    if tmp_full() and not tmp_was_full:
        hit.append("tmp")
        empty_tmp()  # what filled it goes, so that the harness's own commands (the diff) have room again
    save_baseline(after)
    return {"exit_code": exit_code, "timed_out": timed_out, "total": total, "limits": hit}, bytes(head), tail


def main():
    out = sys.stdout.buffer
    out.write(json.dumps({"ready": True, "pid": os.getpid()}).encode() + b"\n")
    out.flush()
    for line in sys.stdin.buffer:
        if not line.strip():
            continue
        header, head, tail = run(json.loads(line.decode("utf-8")))
        header.update(head_len=len(head), tail_len=len(tail))
        out.write(json.dumps(header).encode() + b"\n" + head + tail)
        out.flush()


if __name__ == "__main__":
    main()
