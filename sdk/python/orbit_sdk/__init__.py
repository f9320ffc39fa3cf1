"""ORBIT SDK for Python, on the standard library alone (Python >= 3.9).

- :class:`Worker` serves tasks (SPEC §4): ``@worker.task("payments.charge", contract="1")``.
- :class:`Client` deploys, starts, waits, reads history, signals, queries, cancels, schedules.
- :mod:`orbit_sdk.workflow` builds ``orbit-ir/1`` and ``orbit-ir/2`` documents.
- :class:`TaskError` fails an attempt with a code; :class:`OrbitApiError` carries the API's.
"""

from .client import TERMINAL_STATUSES, Client, is_terminal
from .contracts import from_json, to_json
from .errors import (
    OrbitApiError,
    OrbitConnectionError,
    OrbitError,
    OrbitExecutionError,
    OrbitValidationError,
    TaskError,
)
from .task import TaskContext, TaskDefinition
from .worker import Worker
from .workflow import WorkflowBuilder, expr, workflow

__version__ = "0.1.0"

__all__ = [
    "Client",
    "TERMINAL_STATUSES",
    "is_terminal",
    "Worker",
    "TaskContext",
    "TaskDefinition",
    "TaskError",
    "OrbitError",
    "OrbitApiError",
    "OrbitConnectionError",
    "OrbitExecutionError",
    "OrbitValidationError",
    "from_json",
    "to_json",
    "workflow",
    "expr",
    "WorkflowBuilder",
    "__version__",
]
