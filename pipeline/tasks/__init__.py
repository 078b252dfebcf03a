"""SWE-Bench Pro tasks: the record, decoding of raw rows, sources and filters."""

from .decode import CellError
from .filters import TaskFilter, parse_instance_ids
from .sources import load_task_file, load_tasks, register_named_dataset
from .task import COLUMNS, LIST_COLUMNS, REQUIRED_COLUMNS, Task, check_instance_id

__all__ = [
    "COLUMNS",
    "LIST_COLUMNS",
    "REQUIRED_COLUMNS",
    "CellError",
    "Task",
    "TaskFilter",
    "check_instance_id",
    "load_task_file",
    "load_tasks",
    "parse_instance_ids",
    "register_named_dataset",
]
