"""The ORBIT client: deploy definitions, start executions, wait for them, read their history,
signal, query and cancel them, manage schedules.

An error answer of the runtime raises :class:`OrbitApiError` with the API's ``code``
(``UNKNOWN_EXECUTION``, ``SIGNAL_PAYLOAD_INVALID``, …). A standby of a cluster answers writes
with 503 NOT_LEADER and the leader's address: the client repeats such a request once against
that address (as the CLI does). GETs are idempotent and are repeated a few times after a
connection error. Example::

    client = Client("http://127.0.0.1:7233", token=os.environ.get("ORBIT_TOKEN"))
    client.deploy(json.load(open("workflow.json")))
    client.start("OrderProcessing", input={...}, execution_id="order-1")
    execution = client.wait("order-1", timeout_s=60)
"""

from __future__ import annotations

import ssl
import time
from typing import Any, Dict, Iterator, List, Optional, cast

from ._http import Backoff, Transport, quote_segment as _q
from .contracts import from_json
from .errors import OrbitApiError, OrbitConnectionError, OrbitExecutionError

__all__ = ["Client", "TERMINAL_STATUSES", "is_terminal"]

#: Statuses after which an execution (run) changes no more.
TERMINAL_STATUSES = ("completed", "failed", "cancelled", "timed_out", "continued")


def is_terminal(status: Any) -> bool:
    """True for a status after which the run changes no more."""
    return status in TERMINAL_STATUSES


def _document(doc: Any) -> Dict[str, Any]:
    build = getattr(doc, "build", None)
    return cast(Dict[str, Any], build() if callable(build) else doc)


class Client:
    """Talks to the ORBIT HTTP API (``orbit-api/1``).

    :param server: base URL, e.g. ``http://127.0.0.1:7233`` (or ``https://…``)
    :param token: bearer token
    :param ca_file: PEM file of the CA (or the self-signed certificate) to trust for https
    :param timeout_s: timeout of a request other than a long wait
    :param get_retries: how many times a GET that hit a connection error is repeated
    :param follow_leader: repeat a request once against the leader named by 503 NOT_LEADER
    """

    def __init__(
        self,
        server: str,
        *,
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
        timeout_s: float = 30.0,
        get_retries: int = 3,
        follow_leader: bool = True,
    ) -> None:
        self._token = token
        self._ca_file = ca_file
        self._ssl_context = ssl_context
        self._transport = Transport(server, token=token, ca_file=ca_file, ssl_context=ssl_context)
        self._leaders: Dict[str, Transport] = {}
        self.timeout_s = timeout_s
        self.get_retries = max(0, get_retries)
        self.follow_leader = follow_leader

    @property
    def server(self) -> str:
        return self._transport.server

    def close(self) -> None:
        """Closes the client's keep-alive connections."""
        self._transport.close_all()
        for transport in self._leaders.values():
            transport.close_all()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- plumbing -------------------------------------------------------------------------

    def _leader(self, addr: str) -> Transport:
        transport = self._leaders.get(addr)
        if transport is None:
            transport = Transport(
                addr, token=self._token, ca_file=self._ca_file, ssl_context=self._ssl_context
            )
            self._leaders[addr] = transport
        return transport

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Optional[Dict[str, Any]] = None,
        timeout_s: Optional[float] = None,
    ) -> Any:
        """One request; on 503 NOT_LEADER repeated once against the advertised leader, and for
        a GET repeated after connection errors."""
        timeout = timeout_s if timeout_s is not None else self.timeout_s
        backoff = Backoff()
        attempt = 0
        while True:
            try:
                return self._send(self._transport, method, path, body, query, timeout)
            except OrbitApiError as err:
                addr = err.leader_addr if err.status == 503 and err.code == "NOT_LEADER" else None
                if not (self.follow_leader and addr) or addr.rstrip("/") == self.server:
                    raise
                return self._send(self._leader(addr), method, path, body, query, timeout)
            except OrbitConnectionError:
                if method != "GET" or attempt >= self.get_retries:
                    raise
                attempt += 1
                time.sleep(backoff.next())

    def _object(self, method: str, path: str, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        """A request whose answer is a JSON object."""
        return cast(Dict[str, Any], self.request(method, path, *args, **kwargs))

    @staticmethod
    def _send(
        transport: Transport,
        method: str,
        path: str,
        body: Any,
        query: Optional[Dict[str, Any]],
        timeout: float,
    ) -> Any:
        if method == "GET":
            return transport.get(path, query=query, timeout=timeout)
        return transport.request(
            method, path, body=body, query=query, timeout=timeout, send_body=method != "DELETE"
        )

    # ---- definitions ----------------------------------------------------------------------

    def deploy(self, document: Any) -> Dict[str, Any]:
        """Deploys a definition (a dict, or a builder from :mod:`orbit_sdk.workflow`).
        Idempotent for an identical document; 409 WORKFLOW_VERSION_EXISTS for a different one;
        422 INVALID_WORKFLOW lists every problem in ``details["problems"]``."""
        return self._object("POST", "/v1/workflows", _document(document))

    def workflows(self) -> Any:
        """The deployed definitions."""
        return self.request("GET", "/v1/workflows")

    def workflow(self, name: str, version: Optional[str] = None) -> Dict[str, Any]:
        """A definition: the latest version, or the one named."""
        path = f"/v1/workflows/{_q(name)}" + ("" if version is None else f"/{_q(version)}")
        return self._object("GET", path)

    # ---- executions -----------------------------------------------------------------------

    def start(
        self,
        workflow: Any,
        input: Any = None,
        *,
        execution_id: Optional[str] = None,
        version: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Starts an execution of ``workflow`` (a name, a document or a builder); answers the
        execution. Starting an ``execution_id`` that exists is a no-op that returns it, so a
        start with an id is safe to repeat after an error."""
        if isinstance(workflow, str):
            name = workflow
        else:
            doc = _document(workflow)
            name = doc["name"]
            version = version or doc.get("version")
        body: Dict[str, Any] = {"workflow": name}
        if version is not None:
            body["version"] = version
        if input is not None:
            body["input"] = input
        if execution_id is not None:
            body["execution_id"] = execution_id
        return self._object("POST", "/v1/executions", body)

    def get(self, execution_id: str) -> Dict[str, Any]:
        """Reads an execution."""
        return self._object("GET", f"/v1/executions/{_q(execution_id)}")

    def list(
        self,
        workflow: Optional[str] = None,
        status: Optional[str] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> Dict[str, Any]:
        """One page of executions: ``{"executions": [...], "next_cursor"?}``."""
        res = self.request(
            "GET",
            "/v1/executions",
            query={"workflow": workflow, "status": status, "limit": limit, "cursor": cursor},
        )
        return {"executions": res} if isinstance(res, list) else cast(Dict[str, Any], res)

    def list_all(self, workflow: Optional[str] = None, status: Optional[str] = None) -> Iterator[Dict[str, Any]]:
        """Every execution matching the filters, page after page."""
        cursor: Optional[str] = None
        while True:
            page = self.list(workflow=workflow, status=status, cursor=cursor)
            executions = page.get("executions") or []
            yield from executions
            nxt = page.get("next_cursor")
            if not nxt or not executions or nxt == cursor:
                return
            cursor = nxt

    def wait(self, execution_id: str, timeout_s: Optional[float] = None) -> Dict[str, Any]:
        """Waits until the execution is terminal or ``timeout_s`` passed; answers it as last
        read (check ``status``). Long waits are cut into server waits of at most 300 s."""
        deadline = None if timeout_s is None else time.monotonic() + max(0.0, timeout_s)
        path = f"/v1/executions/{_q(execution_id)}/wait"
        while True:
            left = 300.0 if deadline is None else deadline - time.monotonic()
            wait_s = int(max(0, min(300, -(-left // 1))))
            began = time.monotonic()
            execution = self._object(
                "GET", path, query={"timeout_s": wait_s}, timeout_s=wait_s + self.timeout_s
            )
            if is_terminal(execution.get("status")):
                return execution
            if deadline is not None and time.monotonic() >= deadline:
                return execution
            if time.monotonic() - began < 1:  # answered early without a final status: no spin
                time.sleep(1 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic())))

    def result(self, execution_id: str, timeout_s: Optional[float] = None, output: Any = None) -> Any:
        """Waits for the execution and answers its output (checked against the type
        ``output`` when given). Raises :class:`OrbitExecutionError` when it did not complete."""
        execution = self.wait(execution_id, timeout_s)
        status = execution.get("status")
        if status != "completed":
            error = execution.get("error") or {}
            why = (
                "is still running"
                if status == "running"
                else f"ended {status}"
                + (f": {error.get('code', '')} {error.get('message', '')}" if error else "")
            )
            raise OrbitExecutionError(f"execution {execution_id} {why}".strip(), execution)
        out = execution.get("output")
        return out if output is None else from_json(output, out, f"output of {execution_id}")

    def history(
        self,
        execution_id: str,
        after_seq: Optional[int] = None,
        limit: Optional[int] = None,
        run_id: Optional[str] = None,
    ) -> Dict[str, Any]:
        """One page of history: ``{"events": [...], "next_after_seq"?}``."""
        return self._object(
            "GET",
            f"/v1/executions/{_q(execution_id)}/history",
            query={"after_seq": after_seq, "limit": limit, "run_id": run_id},
        )

    def history_events(
        self, execution_id: str, after_seq: Optional[int] = None, limit: Optional[int] = None
    ) -> Iterator[Dict[str, Any]]:
        """Every history event, page after page (following ``next_after_seq``)."""
        while True:
            page = self.history(execution_id, after_seq=after_seq, limit=limit)
            events = page.get("events") or []
            yield from events
            nxt = page.get("next_after_seq")
            if nxt is None or not events or nxt == after_seq:
                return
            after_seq = nxt

    def pending(self, execution_id: str) -> Dict[str, Any]:
        """Why a running execution waits: its open items and their reasons."""
        return self._object("GET", f"/v1/executions/{_q(execution_id)}/pending")

    def signal(self, execution_id: str, name: str, payload: Any = None) -> Dict[str, Any]:
        """Sends a signal; answers ``{"seq", …}``. Errors: 404 UNKNOWN_SIGNAL, 409
        EXECUTION_FINISHED, 422 SIGNAL_PAYLOAD_INVALID."""
        body = {} if payload is None else {"payload": payload}
        return self._object("POST", f"/v1/executions/{_q(execution_id)}/signals/{_q(name)}", body)

    def query(self, execution_id: str, name: str) -> Any:
        """Evaluates a declared query on the execution's current state; answers its result."""
        res = self.request("GET", f"/v1/executions/{_q(execution_id)}/queries/{_q(name)}")
        return res.get("result") if isinstance(res, dict) else None

    def cancel(self, execution_id: str, reason: Optional[str] = None) -> Dict[str, Any]:
        """Cancels an execution (its compensations run); answers it with its state."""
        body = {} if reason is None else {"reason": reason}
        return self._object("POST", f"/v1/executions/{_q(execution_id)}/cancel", body)

    # ---- schedules ------------------------------------------------------------------------

    def create_schedule(self, schedule: Dict[str, Any]) -> Dict[str, Any]:
        """Creates a schedule (SPEC §6: ``{schedule_id, workflow, every_s | cron, …}``)."""
        return self._object("POST", "/v1/schedules", schedule)

    def schedules(self) -> List[Dict[str, Any]]:
        """Every schedule."""
        res = self.request("GET", "/v1/schedules")
        if isinstance(res, dict):
            return list(res.get("schedules") or [])
        return list(res or [])

    def schedule(self, schedule_id: str) -> Dict[str, Any]:
        return self._object("GET", f"/v1/schedules/{_q(schedule_id)}")

    def update_schedule(self, schedule_id: str, changes: Dict[str, Any]) -> Dict[str, Any]:
        """Merges ``changes`` into the schedule (None removes an optional member)."""
        return self._object("PATCH", f"/v1/schedules/{_q(schedule_id)}", changes)

    def delete_schedule(self, schedule_id: str) -> Any:
        return self.request("DELETE", f"/v1/schedules/{_q(schedule_id)}")

    def trigger_schedule(self, schedule_id: str) -> Dict[str, Any]:
        """Starts one occurrence now; answers the execution."""
        return self._object("POST", f"/v1/schedules/{_q(schedule_id)}/trigger", {})

    def pause_schedule(self, schedule_id: str) -> Dict[str, Any]:
        return self._object("POST", f"/v1/schedules/{_q(schedule_id)}/pause", {})

    def resume_schedule(self, schedule_id: str) -> Dict[str, Any]:
        return self._object("POST", f"/v1/schedules/{_q(schedule_id)}/resume", {})

    # ---- the server -----------------------------------------------------------------------

    def workers(self) -> Any:
        """The registered worker sessions."""
        return self.request("GET", "/v1/workers")

    def health(self) -> Dict[str, Any]:
        return self._object("GET", "/v1/health")

    def ready(self) -> Dict[str, Any]:
        """``GET /v1/ready``: the body whatever the status (503 on a standby)."""
        try:
            return self._object("GET", "/v1/ready")
        except OrbitApiError as err:
            if err.status == 503 and isinstance(err.body, dict):
                return err.body
            raise
