"""An example principal plug-in: no model call; it merges the junior candidates that apply together.

Use it with ``principal: {impl: "merge_principal:MergePrincipal"}`` in the run's config and this
folder on PYTHONPATH. It shows the interface a principal stage has: constructed with the run's
config, ``write(job, pool, brief)`` returns a PrincipalResult record with the final ``patch`` and its
``source`` (keys of its own, like ``merged`` here, are kept).
"""

from __future__ import annotations

import shlex

from pipeline.job import TaskJob, once
from pipeline.pool_rules import CandidatePool
from pipeline.principal.stage import check_applies
from pipeline.records import Brief, PrincipalResult

SCRATCH = "/tmp/merge-candidate.diff"


class MergePrincipal:
    role = None  # it calls no model, so none need be configured for the principal
    def __init__(self, config):
        self.config = config

    def write(self, job: TaskJob, pool: CandidatePool, brief: Brief) -> PrincipalResult:
        def make() -> PrincipalResult:
            merged, used = "", []
            with job.open_runtime("principal") as runtime:
                for number, candidate in enumerate(pool.candidates, start=1):  # most-voted first
                    runtime.write_file(SCRATCH, candidate.patch)
                    if runtime.run(f"git apply {shlex.quote(SCRATCH)}", timeout=60).ok:
                        used.append(number)
                merged = runtime.diff()
                problem = check_applies(merged, runtime) if merged.strip() else "no candidate applied"
            if problem:
                return PrincipalResult(patch="", source="none", error=f"merge: {problem}", merged=used)
            return PrincipalResult(patch=merged, source="merge", error=None, merged=used)

        return once(job.paths.principal / "result.json", make, PrincipalResult)
