"""Worker role, the executor: runs a handler for one attempt (input, context, cancellation)."""

from __future__ import annotations

import json
from typing import Any, Dict

from ..contracts import from_json
from ..errors import OrbitValidationError
from ..task import Outcome, TaskContext, fail_outcome, run_attempt
from .common import _WorkerBase


class _ExecuteRole(_WorkerBase):
    """Runs one attempt's handler: finds its task, reads its input, gives it a context (which
    carries cancellations and deadlines) and answers its outcome."""

    def _execute(self, task: Dict[str, Any]) -> Outcome:
        name, contract = str(task.get("task")), str(task.get("contract"))
        self.logger.info(
            "executing %s",
            json.dumps(
                {
                    "execution_id": task.get("execution_id"),
                    "step": task.get("step"),
                    "attempt": task.get("attempt"),
                    "task": name,
                    "redelivery": bool(task.get("redelivery")),
                }
            ),
        )
        definition = self._tasks.get((name, contract))
        if definition is None:
            self.logger.error(
                "the runtime handed out task %s contract %s, which this worker does not serve",
                name,
                contract,
            )
            return fail_outcome(
                "UNKNOWN_TASK",
                f"worker {self.worker_id} does not serve task {name} contract {contract}",
                True,
                {},
            )
        try:
            value = from_json(definition.input_type, task.get("input"), f"input for {name}")
        except OrbitValidationError as err:
            return fail_outcome("INVALID_INPUT", str(err), False, {"issues": err.issues})
        ctx = TaskContext(task, heartbeat=self._heartbeat_once, logger=self.logger)
        with self._lock:
            entry = self._inflight.get(ctx.token)
            if entry is not None:
                entry.ctx = ctx
                if entry.cancel_reason is not None:
                    ctx._cancel(entry.cancel_reason)
        return run_attempt(definition, value, ctx)
