"""JSON over HTTP to one ORBIT runtime, on ``http.client`` alone.

Each thread keeps one keep-alive connection per :class:`Transport`. A connection that the
server closed while it sat idle is noticed before it is used (the socket reads as readable),
so a stale keep-alive connection never turns into a spurious error. Network failures become
:class:`OrbitConnectionError`, non-2xx answers :class:`OrbitApiError`. A request in progress
can be cut from another thread with an :class:`Abort` (the worker uses it to end a long poll
at shutdown).
"""

from __future__ import annotations

import http.client
import json
import random
import select
import socket
import ssl
import threading
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import quote, urlencode, urlsplit

from .errors import OrbitApiError, OrbitConnectionError

__all__ = ["Transport", "Abort", "RequestAborted", "Backoff", "format_seconds", "quote_segment"]


class RequestAborted(Exception):
    """The request was cut by its :class:`Abort`."""


class Abort:
    """Cuts a request in progress from another thread (shuts its socket down).

    The shutdown happens under the lock that ``_attach(None)`` takes when the request ends:
    once a request has let go of its socket, an abort can no longer reach it. (Shut down
    outside the lock, a late abort hit the thread's kept-alive connection while its next
    request used it.)"""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self.aborted = False

    def abort(self) -> None:
        with self._lock:
            self.aborted = True
            _shutdown(self._sock)

    def _attach(self, sock: Optional[socket.socket]) -> None:
        with self._lock:
            self._sock = sock
            if self.aborted:
                _shutdown(sock)


def _shutdown(sock: Optional[socket.socket]) -> None:
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def format_seconds(seconds: float) -> str:
    """``0.2s``, ``1.6s``, ``5s``, ``12s``: how delays read in log lines."""
    value = round(seconds, 1) if seconds < 10 else round(seconds)
    return f"{value:g}s"


def quote_segment(segment: str) -> str:
    """One URL path segment, every reserved character escaped."""
    return quote(str(segment), safe="")


class Backoff:
    """Exponential backoff with jitter: 0.2 s, 0.4 s, 0.8 s … up to 5 s, each plus up to 20 %."""

    def __init__(
        self, initial_s: float = 0.2, max_s: float = 5.0, factor: float = 2.0, jitter: float = 0.2
    ) -> None:
        self.initial_s = initial_s
        self.max_s = max_s
        self.factor = factor
        self.jitter = jitter
        self.attempts = 0

    def next(self) -> float:
        base = min(self.max_s, self.initial_s * self.factor**self.attempts)
        self.attempts += 1
        return min(self.max_s, base * (1 + random.random() * self.jitter))

    def reset(self) -> None:
        self.attempts = 0


def _reason(err: BaseException) -> str:
    if isinstance(err, http.client.RemoteDisconnected):
        return str(err) or "Remote end closed connection without response"
    if isinstance(err, http.client.IncompleteRead):
        return f"connection closed mid-response ({err.partial and len(err.partial) or 0} bytes read)"
    if isinstance(err, ssl.SSLCertVerificationError):
        return f"TLS certificate verify failed: {err.verify_message or err.reason}"
    if isinstance(err, ssl.SSLError):
        return f"TLS error: {err.reason or err}"
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    text = str(err)
    return text or type(err).__name__


def _is_dropped(conn: http.client.HTTPConnection) -> bool:
    """True when an idle keep-alive connection was closed by the other side (or has junk)."""
    sock = conn.sock
    if sock is None:
        return False
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


class Transport:
    """JSON requests with a bearer token to the runtime at ``server``."""

    def __init__(
        self,
        server: str,
        token: Optional[str] = None,
        ca_file: Optional[str] = None,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        if not server:
            raise ValueError("ORBIT: `server` (the runtime's URL) is required")
        self.server = server.rstrip("/")
        parts = urlsplit(self.server)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"ORBIT: server must be an http:// or https:// URL, not {server!r}")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._base_path = parts.path.rstrip("/")
        self._token = token
        self._ssl: Optional[ssl.SSLContext]
        if parts.scheme == "https":
            self._ssl = ssl_context or ssl.create_default_context(cafile=ca_file)
        else:
            self._ssl = None
        self._local = threading.local()
        self._all: "set[http.client.HTTPConnection]" = set()
        self._all_lock = threading.Lock()
        self._busy: "set[http.client.HTTPConnection]" = set()

    def sibling(self, server: str) -> "Transport":
        """A transport to another address with this one's token and TLS settings (a node of a
        shared cluster at the address it advertises)."""
        return Transport(server, token=self._token, ssl_context=self._ssl)

    def _connection(self, timeout: float) -> Tuple[http.client.HTTPConnection, bool]:
        conn: Optional[http.client.HTTPConnection] = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None and not _is_dropped(conn):
            conn.sock.settimeout(timeout)
            return conn, True
        if conn is not None:
            conn.close()
            with self._all_lock:
                self._all.discard(conn)
        if self._ssl is not None:
            conn = http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout, context=self._ssl
            )
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=timeout)
        self._local.conn = conn
        with self._all_lock:
            self._all.add(conn)
        return conn, False

    def close(self) -> None:
        """Closes this thread's connection."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
            with self._all_lock:
                self._all.discard(conn)

    def close_all(self) -> None:
        """Closes the idle connections of every thread (one in use by a request that is still
        running is left to that request's thread)."""
        with self._all_lock:
            conns = self._all - self._busy
            self._all -= conns
        for conn in conns:
            conn.close()

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        query: Optional[Mapping[str, Any]] = None,
        timeout: float = 30.0,
        abort: Optional[Abort] = None,
        send_body: bool = False,
    ) -> Any:
        """Sends one request; answers the parsed JSON body (None for an empty one). A ``body``
        of bytes is sent as it is (JSON the caller encoded)."""
        target = self._base_path + path
        if query:
            pairs = {k: _qs(v) for k, v in query.items() if v is not None}
            if pairs:
                target += "?" + urlencode(pairs)
        headers: Dict[str, str] = {"accept": "application/json"}
        if self._token:
            headers["authorization"] = f"Bearer {self._token}"
        payload: Optional[bytes] = None
        if body is not None or send_body:
            headers["content-type"] = "application/json"
            payload = (
                body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
            )
        if abort is not None and abort.aborted:
            raise RequestAborted()
        conn, _reused = self._connection(timeout)
        with self._all_lock:
            self._busy.add(conn)
        try:
            if conn.sock is None:
                conn.connect()
            if abort is not None:
                abort._attach(conn.sock)
            conn.request(method, target, body=payload, headers=headers)
            resp = conn.getresponse()
            status = resp.status
            raw = resp.read()
        # AttributeError and ValueError: http.client's own errors when the socket went away
        # under it (closed by another thread).
        except (OSError, http.client.HTTPException, AttributeError, ValueError) as err:
            conn.close()
            if abort is not None and abort.aborted:
                raise RequestAborted() from err
            if isinstance(err, socket.timeout) or isinstance(err, TimeoutError):
                raise OrbitConnectionError(
                    self.server, f"timed out after {format_seconds(timeout)}"
                ) from err
            raise OrbitConnectionError(self.server, _reason(err)) from err
        finally:
            with self._all_lock:
                self._busy.discard(conn)
            if abort is not None:
                abort._attach(None)
        text = raw.decode("utf-8", errors="replace")
        data, parsed = parse_body(text)
        if status < 200 or status >= 300:
            raise api_error(status, resp.reason, data, parsed, method, path)
        if not parsed:
            raise OrbitApiError(
                status,
                "INVALID_RESPONSE",
                f"the ORBIT runtime answered {method} {path} with a body that is not JSON",
                body=data,
                method=method,
                path=path,
            )
        return data

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: Any, **kwargs: Any) -> Any:
        return self.request("POST", path, body=body, send_body=True, **kwargs)


def _qs(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_body(text: str) -> Tuple[Any, bool]:
    """A body as JSON (``parsed``), or as its text when it is not JSON; ``""`` is None."""
    if not text:
        return None, True
    try:
        return json.loads(text), True
    except ValueError:
        return text, False


def api_error(
    status: int, reason: str, data: Any, parsed: bool, method: str, path: str
) -> OrbitApiError:
    err = data.get("error") if parsed and isinstance(data, dict) else None
    if isinstance(err, dict):
        code = err.get("code")
        message = err.get("message")
        details = {k: v for k, v in err.items() if k not in ("code", "message")}
        return OrbitApiError(
            status,
            code if isinstance(code, str) else f"HTTP_{status}",
            message if isinstance(message, str) else (reason or f"HTTP {status}"),
            body=data,
            details=details,
            method=method,
            path=path,
        )
    snippet = data.strip()[:200] if isinstance(data, str) else ""
    return OrbitApiError(
        status,
        f"HTTP_{status}",
        snippet or reason or f"HTTP {status}",
        body=data,
        method=method,
        path=path,
    )
