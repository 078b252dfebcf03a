"""The exit's cleanup removes every container this process still tracks, also once the interpreter has stopped
starting threads (atexit runs after that): a daemon that died under a scoring left two containers tracked, and the
cleanup printed a RuntimeError traceback instead of removing them (found by bench_faults' dockerd-killed row)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = """
import sys
from pathlib import Path
from pipeline.runtime import containers

class Tracked:  # a container whose removal leaves a mark, as the engine's would remove it
    def __init__(self, name):
        self.id = name
    def remove(self, force=False):
        Path(sys.argv[1], self.id).write_text("removed")

containers.install_cleanup_handlers()
for name in ("first", "second", "third"):
    containers.track(Tracked(name))
"""


def test_containers_still_tracked_at_exit_are_all_removed_without_a_traceback(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROGRAM, str(tmp_path)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["first", "second", "third"]
