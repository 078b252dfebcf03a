"""Behaviour every runtime must show; the Docker and local test modules run it on their runtime."""

import random
import resource

LEAK_PROBE = (
    "git log --all --format=%H; echo ---; git rev-list --all; echo ---; git stash list; echo ---; "
    "git reflog; echo ---; git for-each-ref; echo ---; git cat-file -e {gold} && echo GOLD-REACHABLE; "
    "git fsck --unreachable --no-reflogs 2>/dev/null | grep -c unreachable || true"
)


def check_exit_code_and_merged_output(rt):
    result = rt.run("echo out; echo err >&2; exit 3")
    assert result.exit_code == 3
    assert "out" in result.output and "err" in result.output
    assert not result.timed_out


def check_timeout_kills_command_not_workspace(rt):
    # A duration no other sleep on the machine has (a local runtime sees every process, containers' too).
    duration = f"30.{random.randrange(10**6):06d}"
    result = rt.run(f"echo before; sleep {duration}; echo after", timeout=1.5)
    assert result.timed_out
    assert "before" in result.output and "after" not in result.output
    assert result.duration < 15
    again = rt.run("echo alive")
    assert again.ok and again.output == "alive\n"
    # The sleeping child was killed with its shell, not left behind.
    assert f"sleep {duration}" not in rt.run("ps -eo args").output


def check_huge_output_is_bounded(rt):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = rt.run("head -c 220000000 /dev/zero | tr '\\0' 'x'; echo; echo THE-END", timeout=120,
                    output_limit=10_000)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert result.ok
    assert result.total_bytes > 220_000_000
    assert result.cut_bytes == result.total_bytes - 10_000
    assert result.output.startswith("xxxx") and result.output.rstrip().endswith("THE-END")
    assert f"{result.cut_bytes} bytes of output cut" in result.output
    assert len(result.output) < 12_000
    assert grown_mib < 60, f"process memory grew by {grown_mib:.0f} MiB while reading 220 MB"


def check_non_utf8_output(rt):
    result = rt.run("printf 'ok \\377\\376 \\303(\\n'")
    assert result.ok
    assert result.output.startswith("ok ") and "\ufffd" in result.output


def check_files_and_diff(rt):
    rt.write_file("calc.py", "def add(a, b):\n    return a + b\n")
    rt.write_file("pkg/new_module.py", b"VALUE = 1\n")
    assert rt.read_file("pkg/new_module.py") == b"VALUE = 1\n"
    rt.run("git add calc.py")  # the agent's own staging must survive diff()
    patch = rt.diff()
    assert "+    return a + b" in patch and "-    return a - b" in patch
    assert "new file mode" in patch and "+VALUE = 1" in patch
    assert "node_modules" not in patch
    assert rt.run("git diff --cached --name-only").output.strip() == "calc.py"


def check_writes_keep_mode_and_owner(rt):
    """A file written over keeps its permission bits and owner: no mode change enters the diff, a script stays
    executable (the Docker runtime once wrote every file 0644, as root)."""
    made = rt.run("printf '#!/bin/sh\\necho one\\n' > run.sh && chmod 750 run.sh && "
                  "echo data > owned.txt && chmod 600 owned.txt && chown 1234:2345 owned.txt")
    assert made.ok or "chown" in made.output, made.output  # chown needs root; the mode part runs anyway
    owned = made.ok
    rt.write_file("run.sh", "#!/bin/sh\necho two\n")
    rt.write_file("owned.txt", b"changed\n")
    rt.write_file("fresh.txt", "new\n")
    assert rt.run("./run.sh").output == "two\n"
    stats = rt.run("stat -c '%n %a %u %g' run.sh owned.txt fresh.txt").output.splitlines()
    assert stats[0] == "run.sh 750 " + rt.run("stat -c '%u %g' run.sh").output.strip()
    assert stats[1].split()[1] == "600"
    if owned:
        assert stats[1].split()[2:] == ["1234", "2345"], stats
    assert stats[2].split()[1] == "644"
    patch = rt.diff()
    assert "new file mode 100755\n" in patch and "new file mode 100644\n" in patch and "old mode" not in patch


def check_no_solution_leak(rt, repo, ignored_files_kept=True):
    probe = rt.run(LEAK_PROBE.format(gold=repo["gold"]), output_limit=None)
    log_all, rev_list, stashes, reflog, refs, rest = probe.output.split("---\n")
    assert log_all.split() == rev_list.split()
    assert repo["gold"] not in probe.output
    assert len(rev_list.split()) == 2 and repo["base"] in rev_list
    assert stashes.strip() == "" and reflog.strip() == "" and refs.strip() == ""
    assert "GOLD-REACHABLE" not in rest
    assert rest.strip().splitlines()[-1] == "0"  # no unreachable objects either
    assert rt.read_file("calc.py") == b"def add(a, b):\n    return a - b\n"
    if ignored_files_kept:  # a clone has no ignored files; an image's repository does
        assert rt.read_file("node_modules/dep.js")
    assert rt.run("git status --porcelain").output == ""
