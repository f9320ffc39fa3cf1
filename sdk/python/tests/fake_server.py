"""A fake ORBIT runtime for unit tests: ``http.server`` in a thread, speaking the worker
protocol well enough, recording every request (with the client port of its connection), and
misbehaving on demand (scripted answers: garbage, a connection closed before or in the middle of
a response, 5xx, 404 UNKNOWN_SESSION). A long poll is held up to ``poll_hold_s``; the polls held
now are in ``held``, and one the client cut (closed its connection) is marked ``cut``.
"""

from __future__ import annotations

import json
import queue
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit


class Recorded:
    def __init__(
        self,
        method: str,
        path: str,
        query: str,
        body: Any,
        headers: Dict[str, str],
        port: int = 0,
        gone: Callable[[], bool] = lambda: False,
    ):
        self.method = method
        self.path = path
        self.query = query
        self.body = body
        self.headers = headers
        self.port = port  # the client's port: one per connection
        self.thread = threading.current_thread().name
        self.gone = gone  # whether the client has closed the connection
        self.handed: List[str] = []  # a poll's: the tokens it handed out
        self.cut = False  # a poll's: the client closed the connection while it was held

    def __repr__(self) -> str:
        return f"{self.method} {self.path} {json.dumps(self.body)[:120]}"


# A scripted answer: ("json", status, obj[, headers]) · ("raw", status, bytes) ·
# ("close",) the connection closes with no answer · ("partial",) it closes mid-body ·
# ("sleep", seconds, answer) waits, then answers.
Answer = Tuple[Any, ...]


class FakeOrbit:
    def __init__(self) -> None:
        self.requests: List[Recorded] = []
        self.tasks: "queue.Queue[Dict[str, Any]]" = queue.Queue()
        self.scripts: Dict[str, List[Answer]] = {}
        self.sessions: set = set()
        self.cancel: List[str] = []
        self.handlers: Dict[str, Callable[[Recorded], Optional[Answer]]] = {}
        self.poll_hold_s = 0.2  # a poll is held at most this long (and at most its wait_s)
        self.held: List[Recorded] = []  # the polls held now
        self.closed = threading.Event()
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self._n = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode(errors="replace")
                parts = urlsplit(self.path)
                rec = Recorded(
                    self.command,
                    parts.path,
                    parts.query,
                    body,
                    dict(self.headers),
                    self.client_address[1],
                    self._client_gone,
                )
                with fake.changed:
                    fake.requests.append(rec)
                    fake.changed.notify_all()
                answer = fake._answer(rec)
                self._send(answer)

            def _client_gone(self) -> bool:
                try:
                    readable, _, _ = select.select([self.connection], [], [], 0)
                    return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
                except OSError:
                    return True

            def _send(self, answer: Answer) -> None:
                kind = answer[0]
                if kind == "sleep":
                    time.sleep(answer[1])
                    return self._send(answer[2])
                if kind == "close":
                    self.close_connection = True
                    return
                if kind == "partial":
                    self.send_response(200)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", "100")
                    self.end_headers()
                    self.wfile.write(b'{"tasks": [')
                    self.wfile.flush()
                    self.close_connection = True
                    return
                status = answer[1]
                if kind == "json":
                    data = json.dumps(answer[2]).encode()
                    ctype = "application/json"
                else:
                    data = answer[2]
                    ctype = "text/plain"
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                for k, v in (answer[3] if len(answer) > 3 else {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

        class Server(ThreadingHTTPServer):
            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that went away (the worker's aborted long poll): not news

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.closed.set()
        self.server.shutdown()
        self.server.server_close()

    # ---- scripting ---------------------------------------------------------------------

    def script(self, path: str, *answers: Answer) -> None:
        """Answers the next requests to ``path`` with ``answers``, in order."""
        with self.lock:
            self.scripts.setdefault(path, []).extend(answers)

    def add_task(self, **task: Any) -> Dict[str, Any]:
        full = self.new_task(**task)
        self.tasks.put(full)
        return full

    def new_task(self, **task: Any) -> Dict[str, Any]:
        """A task as a poll hands it out, not queued (for an answer that carries it)."""
        self._n += 1
        n = self._n
        full = {
            "token": f"ex-{n}/tok-{n}",
            "execution_id": f"ex-{n}",
            "step": "s",
            "attempt": 1,
            "task": "t",
            "contract": "1",
            "input": {},
            "idempotency_key": f"run-{n}:s",
            "redelivery": False,
            "deadline_ms": None,
        }
        full.update(task)
        return full

    def of(self, path: str) -> List[Recorded]:
        with self.lock:
            return [r for r in self.requests if r.path == path]

    def wait_for(self, what: str, cond: Callable[[], Any], timeout: float = 10.0) -> Any:
        end = time.monotonic() + timeout
        with self.changed:
            while True:
                value = cond()
                if value:
                    return value
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"timed out waiting for {what}; the last requests: {self.requests[-30:]}"
                    )
                self.changed.wait(min(left, 0.05))

    def results(self) -> List[Recorded]:
        return [r for r in self.requests if r.path in ("/v1/tasks/complete", "/v1/tasks/fail")]

    # ---- default behaviour -------------------------------------------------------------

    def _answer(self, rec: Recorded) -> Answer:
        with self.lock:
            scripted = self.scripts.get(rec.path)
            if scripted:
                return scripted.pop(0)
        custom = self.handlers.get(rec.path)
        if custom is not None:
            answer = custom(rec)
            if answer is not None:
                return answer
        body = rec.body if isinstance(rec.body, dict) else {}
        if rec.path == "/v1/workers/register":
            with self.lock:
                sid = f"session-{len(self.sessions) + 1}-{time.monotonic_ns()}"
                self.sessions.add(sid)
            return ("json", 200, {"session_id": sid})
        if rec.path in ("/v1/workers/poll", "/v1/workers/heartbeat", "/v1/workers/unregister"):
            if body.get("session_id") not in self.sessions:
                return (
                    "json",
                    404,
                    {"error": {"code": "UNKNOWN_SESSION", "message": "unknown session"}},
                )
        if rec.path == "/v1/workers/poll":
            picked: List[Dict[str, Any]] = []
            end = time.monotonic() + min(float(body.get("wait_s", 0.2)), self.poll_hold_s)
            with self.changed:
                self.held.append(rec)
                self.changed.notify_all()
            try:
                while len(picked) < int(body.get("max_tasks", 1)):
                    left = end - time.monotonic()
                    try:
                        picked.append(self.tasks.get(timeout=max(0.0, min(left, 0.05))))
                        end = time.monotonic()  # answer with what is there now
                        continue
                    except queue.Empty:
                        pass
                    if left <= 0 or self.closed.is_set():
                        break
                    if body.get("session_id") not in self.sessions:
                        break  # forgotten meanwhile: 404 now
                    if rec.gone():
                        rec.cut = True
                        return ("close",)
            finally:
                with self.changed:
                    self.held.remove(rec)
                    self.changed.notify_all()
            if body.get("session_id") not in self.sessions:  # forgotten meanwhile: keep them
                for task in picked:
                    self.tasks.put(task)
                return (
                    "json",
                    404,
                    {"error": {"code": "UNKNOWN_SESSION", "message": "unknown session"}},
                )
            rec.handed = [t["token"] for t in picked if isinstance(t, dict)]
            return ("json", 200, {"tasks": picked})
        if rec.path == "/v1/workers/heartbeat":
            with self.lock:
                cancel, self.cancel = self.cancel, []
            return ("json", 200, {"cancel": cancel})
        if rec.path == "/v1/workers/unregister":
            return ("json", 200, {"ok": True})
        if rec.path in ("/v1/tasks/complete", "/v1/tasks/fail"):
            return ("json", 200, {"accepted": True, "tasks": []})
        return ("json", 404, {"error": {"code": "NOT_FOUND", "message": f"no route {rec.path}"}})
