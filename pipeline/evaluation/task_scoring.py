"""Scoring one task's prediction inside a run (`swepipe run --evaluate`): the verdict an earlier session recorded,
else a new one from the official protocol (``runner.evaluate``), kept where a rerun finds it."""

from __future__ import annotations

import traceback

from pipeline.errors import InfrastructureFault
from pipeline.evaluation.batch import infra_error
from pipeline.evaluation.runner import EvalSettings, evaluate
from pipeline.records import EvalResult, Unreadable
from pipeline.records.evaluation import EvalCategory
from pipeline.rundir.layout import TaskPaths
from pipeline.rundir.storage import write_text_atomic
from pipeline.tasks import Task


def score_prediction(task: Task, patch: str, paths: TaskPaths, settings: EvalSettings) -> bool | None:
    """Score with the hidden tests into tasks/<id>/eval (reused when done); None for an infrastructure error,
    which is kept apart (eval/infra_error.json) so that the next try scores again instead of reading it back.
    A scoring that crashes (a bug, a record it cannot write) is such an error too, its traceback in
    eval/error.txt: never an exception that ends the run."""
    done = paths.eval_files.result
    earlier = EvalResult.read(done)
    if not isinstance(earlier, Unreadable):  # an unreadable one (cut short by a kill) is scored again
        return earlier.resolved is True and not earlier.flagged
    try:
        record = evaluate(task, patch, paths.eval, settings)
    except InfrastructureFault:
        raise
    except Exception as error:  # noqa: BLE001 - one task's scoring failure is recorded; the run goes on
        write_text_atomic(paths.eval_files.error, traceback.format_exc())
        record = infra_error(task.instance_id, f"scoring crashed: {type(error).__name__}: {error} "
                                               f"({paths.relative(paths.eval_files.error)})")
    if record.category == EvalCategory.INFRA_ERROR:
        record.write(paths.eval_files.infra_error)
        return None
    record.write(done)
    return record.resolved


def scoring_error(paths: TaskPaths) -> str:
    """Why the task's scoring could not run, as its infra_error.json recorded it."""
    record = EvalResult.read(paths.eval_files.infra_error)
    error = None if isinstance(record, Unreadable) else record.error
    return error if isinstance(error, str) and error else "infrastructure error"
