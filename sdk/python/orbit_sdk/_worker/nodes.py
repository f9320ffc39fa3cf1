"""Worker role, the router: in a cluster in shared mode, which server each slot talks to.

Every server of a shared cluster accepts every request, and a poll prefers the executions of the
server it reaches; the result then goes back on the same connection, to the owner. This role
reads ``/v1/health`` of the configured address, learns the live servers and their advertised
addresses (``nodes[].addr``), and spreads the slots over them: slot ``i`` talks to node
``(i + offset) % n``, the offset random per worker. A node whose address does not answer is left
out for ``UNREACHABLE_S`` (its slots use the configured address meanwhile); a node that leaves
the live list has its slots' polls ended so that they move at once, and the results on their way
to it sent to the configured address instead. A single server, a standby
cluster or a health answer without addresses keeps every slot on the configured address. The
TypeScript SDK's ``worker/nodes.ts`` does the same.
"""

from __future__ import annotations

import random
import time
from typing import Any, Dict, List, Optional
from urllib.parse import urlsplit

from .._http import Abort, Transport
from ..errors import OrbitError
from .common import _WorkerBase

UNREACHABLE_S = 10.0


def live_addresses(health: Any) -> List[str]:
    """The live nodes' advertised ``http``/``https`` addresses of a health answer, sorted."""
    if not isinstance(health, dict) or health.get("role") != "shared":
        return []
    nodes = health.get("nodes")
    if not isinstance(nodes, list):
        return []
    out = set()
    for n in nodes:
        if not isinstance(n, dict) or n.get("live") is not True:
            continue
        addr = n.get("addr")
        if not isinstance(addr, str):
            continue
        try:
            parts = urlsplit(addr)
        except ValueError:
            continue
        if parts.scheme not in ("http", "https") or not parts.hostname:
            continue
        out.add(addr.rstrip("/"))
    return sorted(out)


class _NodesRole(_WorkerBase):
    """The live nodes, each slot's node, and a transport per node address."""

    spread_over_nodes: bool
    node_refresh_s: float
    _node_addrs: List[str]
    _node_offset: int
    _node_unreachable: Dict[str, float]
    _node_transports: Dict[str, Transport]
    _slot_targets: Dict[int, Optional[str]]
    # The first delivery of a result each slot has on its way to its node (cut when it leaves).
    _deliveries: Dict[int, Abort]

    def _init_nodes(self, spread: bool, refresh_s: float) -> None:
        self.spread_over_nodes = spread
        self.node_refresh_s = max(0.05, float(refresh_s))
        self._node_addrs = []
        self._node_offset = random.randrange(1024)
        self._node_unreachable = {}
        self._node_transports = {}
        self._slot_targets = {}
        self._deliveries = {}

    @property
    def node_addresses(self) -> List[str]:
        """The live nodes the slots are spread over (empty: every slot uses ``server``)."""
        with self._lock:
            return list(self._node_addrs)

    def _nodes_refresh(self) -> None:
        """One read of ``/v1/health``; a failed read keeps the last list."""
        if not self.spread_over_nodes:
            return
        try:
            health = self._transport.get("/v1/health", timeout=min(self.request_timeout_s, 10.0))
        except OrbitError as err:
            self.logger.debug("cannot read the cluster's nodes: %s", self._describe(err))
            return
        self._nodes_update(live_addresses(health))

    def _nodes_loop(self) -> None:
        while not self._hb_stop.wait(self.node_refresh_s):
            try:
                self._nodes_refresh()
            except Exception:  # never let the router's thread die
                self.logger.exception("reading the cluster's nodes failed")

    def _nodes_update(self, addrs: List[str]) -> None:
        """Takes a new live list; the polls of slots on nodes that left it end at once."""
        with self._lock:
            before = self._node_addrs
            if before == addrs:
                return
            self._node_addrs = addrs
            left = set(before) - set(addrs)
            gone = [slot for slot, target in self._slot_targets.items() if target in left]
            aborts = [self._polls[slot][1] for slot in gone if slot in self._polls]
            aborts += [self._deliveries[slot] for slot in gone if slot in self._deliveries]
        if addrs:
            self.logger.info("slots spread over %d node(s): %s", len(addrs), ", ".join(addrs))
        else:
            self.logger.info("slots use the configured address")
        for abort in aborts:
            abort.abort()

    def _target_for(self, slot: int) -> Optional[str]:
        """The node address slot ``slot`` talks to, or None for the configured address."""
        with self._lock:
            n = len(self._node_addrs)
            if n == 0:
                return None
            addr = self._node_addrs[(slot + self._node_offset) % n]
            until = self._node_unreachable.get(addr)
            if until is None:
                return addr
            if time.monotonic() < until:
                return None
            del self._node_unreachable[addr]
            return addr

    def _slot_transport(self, slot: int) -> Transport:
        """The transport of the node slot ``slot`` talks to now (recorded as its target)."""
        target = self._target_for(slot)
        with self._lock:
            previous = self._slot_targets.get(slot)
            self._slot_targets[slot] = target
            if target is None:
                transport = self._transport
            else:
                transport = self._node_transports.get(target)
                if transport is None:
                    transport = self._transport.sibling(target)
                    self._node_transports[target] = transport
            old = self._node_transports.get(previous) if previous else self._transport
        if old is not None and old is not transport:
            old.close()  # this thread's connection to the node it leaves
        return transport

    def _node_unreachable_now(self, slot: int, why: str) -> bool:
        """A request of slot ``slot`` failed to connect: when it went to a node's address, that
        node is left out for a while (answers True: try again at once, elsewhere)."""
        with self._lock:
            addr = self._slot_targets.get(slot)
            if addr is None:
                return False
            if addr in self._node_unreachable:
                return True
            self._node_unreachable[addr] = time.monotonic() + UNREACHABLE_S
        self.logger.warning(
            "node %s did not answer (%s); its slots use %s for %g s",
            addr,
            why,
            self._transport.server,
            UNREACHABLE_S,
        )
        return True

    def _close_node_transports(self) -> None:
        with self._lock:
            transports = list(self._node_transports.values())
        for t in transports:
            t.close_all()
