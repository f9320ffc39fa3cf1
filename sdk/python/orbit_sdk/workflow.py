"""Authoring: build ``orbit-ir/1`` and ``orbit-ir/2`` documents in Python.

The document is ``orbit-ir/1`` while only task steps, retries, compensations and ``return``
are used, and becomes ``orbit-ir/2`` as soon as a feature only ir/2 has is (signals, queries,
handlers, sleep, wait_signal, http, child, parallel, if, assign, continue_as_new, a workflow
timeout). Example::

    from orbit_sdk.workflow import workflow, expr

    wf = (
        workflow("OrderProcessing", "1.0.0")
        .input({"type": "object", "required": ["order_id"]})
        .task("validate", "orders.validate", contract="1", input=expr("$input"),
              retry={"max_attempts": 3, "non_retryable": ["INVALID_ORDER"]})
        .task("charge", "payments.charge", contract="1", language="python",
              input={"amount": expr("$steps.validate.total")},
              compensate={"task": "payments.refund", "contract": "1",
                          "input": expr("$steps.charge")})
        .returns(expr("$steps"))
    )
    client.deploy(wf)      # or json.dumps(wf.build())

Branches (``parallel``, ``if``, handlers) are functions that get a :class:`Steps` to add to,
or lists of step dicts.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Callable, Dict, List, Optional, Union

__all__ = ["expr", "workflow", "WorkflowBuilder", "Steps"]

_IR2_KEYS = ("sleep_s", "wait_signal", "http", "child", "parallel", "if", "assign", "continue_as_new")
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.+-]+)?$")

Step = Dict[str, Any]
Branch = Union[Callable[["Steps"], Any], List[Step]]


def expr(expression: str) -> str:
    """``expr("$steps.validate.total")`` is ``"{% $steps.validate.total %}"``: a JSONata
    expression in the IR's notation. A string already in ``{% %}`` is answered unchanged."""
    text = expression.strip()
    if text.startswith("{%") and text.endswith("%}"):
        return text
    return "{% " + text + " %}"


def _drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def _check_id(step_id: Any) -> str:
    if not isinstance(step_id, str) or not step_id:
        raise ValueError(f"a step id must be a non-empty string, not {step_id!r}")
    return step_id


class _Shared:
    def __init__(self) -> None:
        self.ir2 = False


class Steps:
    """Adds steps to a list. :class:`WorkflowBuilder` and every branch are ``Steps``; every
    method answers the builder, so calls chain."""

    def __init__(self, shared: Optional[_Shared] = None) -> None:
        self._shared = shared or _Shared()
        self._steps: List[Step] = []

    @property
    def steps(self) -> List[Step]:
        return list(self._steps)

    def _push(self, step: Step, ir2: bool) -> "Steps":
        if ir2:
            self._shared.ir2 = True
        self._steps.append(step)
        return self

    def _branch(self, branch: Branch) -> List[Step]:
        if callable(branch):
            b = Steps(self._shared)
            branch(b)
            return b.steps
        steps = [copy.deepcopy(s) for s in branch]
        for s in steps:
            if any(k in s for k in _IR2_KEYS):
                self._shared.ir2 = True
        return steps

    def task(
        self,
        id: str,
        task: str,
        *,
        contract: str,
        input: Any = None,
        language: Optional[str] = None,
        retry: Optional[Dict[str, Any]] = None,
        timeout_s: Optional[float] = None,
        compensate: Optional[Dict[str, Any]] = None,
        **extra: Any,
    ) -> "Steps":
        """A worker task. ``retry`` is ``{max_attempts, initial_ms, backoff, max_ms,
        non_retryable}``; ``compensate`` is ``{task, contract, input?, language?}``."""
        if not contract:
            raise ValueError(f"step {id}: a contract version is required")
        step: Step = {"id": _check_id(id), "task": task, "contract": str(contract)}
        step.update(
            _drop_none(
                {
                    "language": language,
                    "input": input,
                    "retry": retry,
                    "timeout_s": timeout_s,
                    "compensate": compensate,
                }
            )
        )
        step.update(_drop_none(extra))
        if compensate is not None and not compensate.get("contract"):
            raise ValueError(f"step {id}: the compensation needs a task and a contract")
        return self._push(step, False)

    def sleep(self, id: str, seconds: Union[float, str], **extra: Any) -> "Steps":
        """Waits ``seconds`` (a number or an expression) on a durable timer. orbit-ir/2."""
        return self._push({"id": _check_id(id), "sleep_s": seconds, **_drop_none(extra)}, True)

    def wait_signal(self, id: str, signal: str, *, timeout_s: Optional[float] = None, **extra: Any) -> "Steps":
        """Waits for the signal (its payload is the output). orbit-ir/2."""
        step = {"id": _check_id(id), "wait_signal": signal, "timeout_s": timeout_s, **extra}
        return self._push(_drop_none(step), True)

    def http(
        self,
        id: str,
        url: str,
        *,
        method: Optional[str] = None,
        headers: Optional[Dict[str, Any]] = None,
        body: Any = None,
        retry: Optional[Dict[str, Any]] = None,
        timeout_s: Optional[float] = None,
        **extra: Any,
    ) -> "Steps":
        """Calls an HTTP endpoint from the server (``--http-allow``). orbit-ir/2."""
        request = _drop_none({"method": method, "url": url, "headers": headers, "body": body})
        step = {"id": _check_id(id), "http": request, "retry": retry, "timeout_s": timeout_s, **extra}
        return self._push(_drop_none(step), True)

    def child(
        self,
        id: str,
        workflow: str,
        *,
        version: Optional[str] = None,
        input: Any = None,
        execution_id: Optional[str] = None,
        timeout_s: Optional[float] = None,
        **extra: Any,
    ) -> "Steps":
        """Runs a child workflow and waits for it. orbit-ir/2."""
        child = _drop_none(
            {"workflow": workflow, "version": version, "input": input, "execution_id": execution_id}
        )
        step = {"id": _check_id(id), "child": child, "timeout_s": timeout_s, **extra}
        return self._push(_drop_none(step), True)

    def parallel(self, id: str, *branches: Branch, **extra: Any) -> "Steps":
        """Runs the branches side by side and waits for all. orbit-ir/2."""
        if not branches:
            raise ValueError(f"parallel {id}: give at least one branch")
        step = {"id": _check_id(id), "parallel": [self._branch(b) for b in branches], **extra}
        return self._push(step, True)

    def if_(
        self, id: str, condition: Union[str, bool], then: Branch, otherwise: Optional[Branch] = None
    ) -> "Steps":
        """Branches on a condition (a JSONata expression; wrapped in ``{% %}`` if it is not).
        orbit-ir/2."""
        step: Step = {
            "id": _check_id(id),
            "if": expr(condition) if isinstance(condition, str) else condition,
            "then": self._branch(then),
        }
        if otherwise is not None:
            step["else"] = self._branch(otherwise)
        return self._push(step, True)

    def assign(self, id: str, **variables: Any) -> "Steps":
        """Merges ``variables`` into ``$vars``. orbit-ir/2."""
        return self._push({"id": _check_id(id), "assign": variables}, True)

    def continue_as_new(self, id: str, input: Any = None) -> "Steps":
        """Ends this run and starts a new one of the same execution. orbit-ir/2."""
        return self._push({"id": _check_id(id), "continue_as_new": _drop_none({"input": input})}, True)

    def returns(self, value: Any, id: str = "return") -> "Steps":
        """Ends the workflow with ``value`` as its output."""
        return self._push({"id": _check_id(id), "return": value}, False)

    def step(self, step: Step) -> "Steps":
        """Adds a step written by hand."""
        _check_id(step.get("id"))
        return self._push(copy.deepcopy(step), any(k in step for k in _IR2_KEYS))


class WorkflowBuilder(Steps):
    """Builds one workflow definition; start one with :func:`workflow`."""

    def __init__(self, name: str, version: str) -> None:
        super().__init__(_Shared())
        if not name:
            raise ValueError("workflow: a name is required")
        if not isinstance(version, str) or not _SEMVER.match(version):
            raise ValueError(f"workflow {name}: version must be semver (like 1.0.0), not {version!r}")
        self.name = name
        self.version = version
        self._input_schema: Any = None
        self._timeout_s: Optional[float] = None
        self._signals: Dict[str, Dict[str, Any]] = {}
        self._queries: Dict[str, Any] = {}
        self._handlers: Dict[str, List[Step]] = {}
        self._extra: Dict[str, Any] = {}
        self._forced: Optional[str] = None

    def input(self, schema: Any) -> "WorkflowBuilder":
        """The input's JSON Schema."""
        self._input_schema = schema
        return self

    def timeout(self, seconds: float) -> "WorkflowBuilder":
        """The whole execution's timeout. orbit-ir/2."""
        self._timeout_s = seconds
        self._shared.ir2 = True
        return self

    def signal(self, name: str, schema: Any = None, **extra: Any) -> "WorkflowBuilder":
        """Declares a signal, with an optional JSON Schema for its payload. orbit-ir/2."""
        self._signals[name] = _drop_none({"schema": schema, **extra})
        self._shared.ir2 = True
        return self

    def query(self, name: str, value: Any) -> "WorkflowBuilder":
        """Declares a query (usually an expression over ``$vars``/``$steps``). orbit-ir/2."""
        self._queries[name] = value
        self._shared.ir2 = True
        return self

    def handler(self, signal: str, branch: Branch) -> "WorkflowBuilder":
        """Steps run each time ``signal`` arrives (``$signal`` is its payload); declares the
        signal if it is not yet. orbit-ir/2."""
        self._signals.setdefault(signal, {})
        b = Steps(self._shared)
        if callable(branch):
            branch(b)
        else:
            for s in branch:
                b.step(s)
        self._handlers[signal] = b.steps
        self._shared.ir2 = True
        return self

    def set(self, key: str, value: Any) -> "WorkflowBuilder":
        """Another top-level member of the document (``description``, …)."""
        self._extra[key] = value
        return self

    def ir(self, version: str) -> "WorkflowBuilder":
        """Forces ``orbit-ir/2`` (or ``orbit-ir/1``, refused by :meth:`build` when ir/2
        features are used)."""
        if version not in ("orbit-ir/1", "orbit-ir/2"):
            raise ValueError(f"unknown IR version {version!r}")
        self._forced = version
        return self

    @property
    def ir_version(self) -> str:
        return self._forced or ("orbit-ir/2" if self._shared.ir2 else "orbit-ir/1")

    def build(self) -> Dict[str, Any]:
        """The document (a fresh copy each time). Raises ValueError on duplicate step ids."""
        ir = self.ir_version
        if ir == "orbit-ir/1" and self._shared.ir2:
            raise ValueError(f"workflow {self.name}: orbit-ir/1 was forced but ir/2 features are used")
        doc: Dict[str, Any] = {"ir": ir, "name": self.name, "version": self.version}
        if self._input_schema is not None:
            doc["input_schema"] = self._input_schema
        if self._timeout_s is not None:
            doc["timeout_s"] = self._timeout_s
        if self._signals:
            doc["signals"] = self._signals
        if self._queries:
            doc["queries"] = self._queries
        doc["steps"] = self._steps
        if self._handlers:
            doc["handlers"] = self._handlers
        doc.update(self._extra)
        _check_unique_ids(doc)
        return copy.deepcopy(doc)


def workflow(name: str, version: str) -> WorkflowBuilder:
    """Starts building the definition ``name`` at semver ``version``."""
    return WorkflowBuilder(name, version)


def _check_unique_ids(doc: Dict[str, Any]) -> None:
    seen: Dict[str, str] = {}

    def visit(steps: Any, path: str) -> None:
        if not isinstance(steps, list):
            return
        for i, s in enumerate(steps):
            if not isinstance(s, dict):
                continue
            here = f"{path}[{i}]"
            sid = str(s.get("id"))
            if sid in seen:
                raise ValueError(
                    f"workflow {doc['name']}: step id {sid!r} is used twice ({seen[sid]} and {here})"
                )
            seen[sid] = here
            for j, branch in enumerate(s.get("parallel") or []):
                visit(branch, f"{here}.parallel[{j}]")
            visit(s.get("then"), f"{here}.then")
            visit(s.get("else"), f"{here}.else")

    visit(doc["steps"], "$.steps")
    for name, steps in (doc.get("handlers") or {}).items():
        visit(steps, f"$.handlers.{name}")
