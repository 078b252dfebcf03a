"""The typed, versioned records of a run directory: the files that carry a task from stage to stage, each a
pydantic model with its format version on disk (``"format": 1``).

- ``Rollout``: tasks/<id>/junior/rollout-NN.json
- ``Pool``: tasks/<id>/junior/pool.json
- ``Brief``: tasks/<id>/senior/brief.json
- ``PrincipalResult``: tasks/<id>/principal/result.json
- ``Prediction``: a line of predictions.jsonl (``read_predictions`` reads the file)
- ``EvalResult``: tasks/<id>/eval/result.json, and what ``swepipe eval`` (``--candidates``) writes
- ``SoloResult``: tasks/<id>/solo/result.json (the solo baseline)
- ``ReplayResult``: tasks/<id>/replay/result.json (`swepipe replay`)
- ``TeamResult``, ``TeamDelegations``: tasks/<id>/team/result.json and delegations.json (the team baseline)
- ``TaskContainers``: tasks/<id>/containers.json (how the task's containers were sealed, carried between sessions)

Writers build the record (``Rollout.of(data)``, checked strictly) and write it (``record.write(path)``, through
pipeline.rundir.storage). Every reader reads it with ``Rollout.read(path)``: the record, an older format upgraded in the
record's ``upgrade``, or ``Unreadable`` naming why (missing, not JSON, not an object, of a newer format, of the
wrong shape). pipeline.records.base says what is checked and what is kept; docs/run-directory.md, generated from
these types (``python -m pipeline.records.schema``), lists every field. ``pipeline.records.ledger`` holds the
ledger's rows (``ledger.jsonl``, one line per paid call: typed, not versioned).
"""

from pipeline.records.base import MISSING, NOT_AN_OBJECT, Read, Record, RecordError, Unreadable, read_json
from pipeline.records.brief import Brief
from pipeline.records.evaluation import EvalResult
from pipeline.records.pool import Pool
from pipeline.records.prediction import Prediction, PredictionLines, read_predictions
from pipeline.records.principal import PrincipalResult
from pipeline.records.replay import ReplayResult
from pipeline.records.rollout import Rollout
from pipeline.records.sealing import TaskContainers
from pipeline.records.solo import SoloResult
from pipeline.records.team import TeamDelegations, TeamResult
from pipeline.records.trajectory import read_trajectory

RECORDS: tuple[type[Record], ...] = (Rollout, Pool, Brief, PrincipalResult, Prediction, EvalResult, SoloResult,
                                     ReplayResult, TeamResult, TeamDelegations, TaskContainers)

__all__ = ["MISSING", "NOT_AN_OBJECT", "RECORDS", "Brief", "EvalResult", "Pool", "Prediction", "PredictionLines",
           "PrincipalResult", "Read", "Record", "RecordError", "ReplayResult", "Rollout", "SoloResult",
           "TaskContainers", "TeamDelegations", "TeamResult", "Unreadable", "read_json", "read_predictions",
           "read_trajectory"]
