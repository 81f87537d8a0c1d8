"""``metaquorum quorum describe --status | --replication``, as ``kafka-metadata-quorum.sh``.

The tool asks one node (``--bootstrap-controller``, or ``--bootstrap-server``: a broker, which
forwards the request to the controllers as Kafka's brokers do; a comma-separated list is tried in
order) for ``QuorumService.DescribeQuorum`` with an empty cluster id and topic id: the node
fills in its own, and a node that does not lead forwards the request to the leader it knows.

Output follows Kafka's ``MetadataQuorumCommand``:

``--status`` prints ``Key:`` lines with the values aligned at column 24: ClusterId, LeaderId,
LeaderEpoch, HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters,
CurrentObservers. Voters and observers print as ``{"id": 1, "directoryId": "...", "endpoints":
["CONTROLLER://host:port"]}``; as in Kafka, ``directoryId`` is left out when unknown (the zero
id) and ``endpoints`` when there are none. MaxFollowerLag is the leader's log end offset minus
that of the voter furthest behind; MaxFollowerLagTimeMs is how much longer ago that voter was
last caught up than the leader (0 when the leader is the only voter).

``--replication`` prints a table ``NodeId DirectoryId LogEndOffset Lag LastFetchTimestamp
LastCaughtUpTimestamp Status``, the leader first, then the followers, then the observers; each
cell is padded to its column's width and followed by a tab, as Kafka's ``prettyPrintTable``
does. Lag is the leader's log end offset minus the replica's; timestamps are ms since the Unix
epoch, or ``N ms ago`` with ``--human-readable``. ``-1`` means unknown, also for the Lag of a
replica whose log end offset is unknown (Kafka would print the leader's offset + 1 there).

When the quorum has no leader (the node answers NOT_LEADER_OR_FOLLOWER, or NONE, with no
leader id), the command does not fail: ``--status`` prints ``LeaderId: no leader``, the epoch
the node knows, ``-1`` for HighWatermark and both lag values, and the voters the node listed;
``--replication`` prints the header and a ``Voter`` row per listed voter; a note on stderr says
which node was asked. Exit code 0.

Errors (exit code 1, one line on stderr): no node reachable (each address with its gRPC status),
a node answering another error code, or a node that names a leader it could not reach.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

import grpc

from quorum.errors import ErrorCode
from quorum.ids import ZERO_UUID
from quorum.rpc.v1 import raft_pb2_grpc
from quorum.security.tls import ClientSecurity
from quorum.wire.quorum_description import (
    QuorumDescription,
    ReplicaDescription,
    describe_quorum_from_proto,
    tool_describe_quorum_request,
)
from quorum.wire.scalars import MalformedMessageError

DEADLINE_S: Final = 5.0
UNKNOWN: Final = -1
# Kafka pads every key of --status to this width ("MaxFollowerLagTimeMs:   " is 24 characters).
STATUS_KEY_WIDTH: Final = 24
REPLICATION_COLUMNS: Final = (
    "NodeId",
    "DirectoryId",
    "LogEndOffset",
    "Lag",
    "LastFetchTimestamp",
    "LastCaughtUpTimestamp",
    "Status",
)
_NO_LEADER_CODES: Final = frozenset({ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER})


class QuorumDescribeError(Exception):
    """The quorum could not be described; the message names the node(s) and the reason."""


# ----- pure formatting ---------------------------------------------------------------------------


def has_no_leader(description: QuorumDescription) -> bool:
    """True when the answer says there is no leader (rather than reporting an error)."""
    return description.leader_id is None and description.error_code in _NO_LEADER_CODES


def find_leader(description: QuorumDescription) -> ReplicaDescription | None:
    """The leader's entry among the voters, or None if there is none."""
    for voter in description.voters:
        if voter.replica_id == description.leader_id:
            return voter
    return None


def max_follower_lag(description: QuorumDescription) -> tuple[int, int]:
    """``(MaxFollowerLag, MaxFollowerLagTimeMs)``; ``-1`` for what is unknown."""
    leader = find_leader(description)
    if leader is None or leader.log_end_offset < 0:
        return UNKNOWN, UNKNOWN
    followers = [v for v in description.voters if v.replica_id != leader.replica_id]
    if not followers:
        return 0, 0
    # The furthest behind: the lowest log end offset (unknown, -1, is lowest of all); among
    # equals, the one caught up longest ago.
    lagging = min(
        followers,
        key=lambda v: (
            v.log_end_offset,
            UNKNOWN if v.last_caught_up_timestamp_ms is None else v.last_caught_up_timestamp_ms,
        ),
    )
    lag = UNKNOWN if lagging.log_end_offset < 0 else leader.log_end_offset - lagging.log_end_offset
    if leader.last_caught_up_timestamp_ms is None or lagging.last_caught_up_timestamp_ms is None:
        return lag, UNKNOWN
    return lag, leader.last_caught_up_timestamp_ms - lagging.last_caught_up_timestamp_ms


def replica_json(replica: ReplicaDescription) -> str:
    """One entry of CurrentVoters / CurrentObservers, e.g. ``{"id": 1, "directoryId": "..",
    "endpoints": ["CONTROLLER://127.0.0.1:19091"]}``."""
    entry: dict[str, object] = {"id": replica.replica_id}
    if replica.directory_id != ZERO_UUID:
        entry["directoryId"] = str(replica.directory_id)
    if replica.endpoints:
        entry["endpoints"] = list(replica.endpoints)
    return json.dumps(entry)


def _replica_list(replicas: Sequence[ReplicaDescription]) -> str:
    return "[" + ", ".join(replica_json(r) for r in replicas) + "]"


def format_status(description: QuorumDescription) -> str:
    """The ``--status`` output (without a trailing newline)."""
    no_leader = has_no_leader(description)
    if no_leader:
        leader_id = "no leader"
        high_watermark = UNKNOWN
        lag, lag_time_ms = UNKNOWN, UNKNOWN
    else:
        leader_id = str(description.leader_id)
        high_watermark = description.high_watermark
        lag, lag_time_ms = max_follower_lag(description)
    rows = (
        # Not told to a caller without a certificate (docs/security.md#what-a-node-may-claim).
        ("ClusterId", description.cluster_id or "(hidden: connect with a client certificate)"),
        ("LeaderId", leader_id),
        ("LeaderEpoch", str(description.leader_epoch)),
        ("HighWatermark", str(high_watermark)),
        ("MaxFollowerLag", str(lag)),
        ("MaxFollowerLagTimeMs", str(lag_time_ms)),
        ("CurrentVoters", _replica_list(description.voters)),
        ("CurrentObservers", _replica_list(description.observers)),
    )
    return "\n".join(f"{key + ':':<{STATUS_KEY_WIDTH}}{value}" for key, value in rows)


def _timestamp(value: int | None, now_ms: int, human_readable: bool) -> str:
    if value is None:
        return str(UNKNOWN)
    if human_readable:
        # Clocks of the leader and of this host may disagree a little; never print "-3 ms ago".
        return f"{max(0, now_ms - value)} ms ago"
    return str(value)


def _replication_row(
    replica: ReplicaDescription,
    leader_log_end_offset: int,
    status: str,
    now_ms: int,
    human_readable: bool,
) -> list[str]:
    known = replica.log_end_offset >= 0 and leader_log_end_offset >= 0
    lag = leader_log_end_offset - replica.log_end_offset if known else UNKNOWN
    return [
        str(replica.replica_id),
        str(replica.directory_id),
        str(replica.log_end_offset),
        str(lag),
        _timestamp(replica.last_fetch_timestamp_ms, now_ms, human_readable),
        _timestamp(replica.last_caught_up_timestamp_ms, now_ms, human_readable),
        status,
    ]


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Kafka's ``ToolsUtils.prettyPrintTable``: every cell left-aligned to its column's width
    and followed by a tab."""
    widths = [len(title) for title in header]
    for row in rows:
        widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=True)]
    return "\n".join(
        "".join(f"{cell:<{width}}\t" for cell, width in zip(line, widths, strict=True))
        for line in (header, *rows)
    )


def format_replication(
    description: QuorumDescription, now_ms: int, *, human_readable: bool = False
) -> str:
    """The ``--replication`` table (without a trailing newline). ``now_ms`` is wall-clock ms
    since the Unix epoch, for ``--human-readable``."""
    rows: list[list[str]] = []
    leader = None if has_no_leader(description) else find_leader(description)
    if leader is None:
        for voter in description.voters:
            rows.append(_replication_row(voter, UNKNOWN, "Voter", now_ms, human_readable))
        leader_log_end_offset = UNKNOWN
    else:
        leader_log_end_offset = leader.log_end_offset
        rows.append(
            _replication_row(leader, leader_log_end_offset, "Leader", now_ms, human_readable)
        )
        for voter in description.voters:
            if voter is not leader:
                rows.append(
                    _replication_row(
                        voter, leader_log_end_offset, "Follower", now_ms, human_readable
                    )
                )
    for observer in description.observers:
        rows.append(
            _replication_row(observer, leader_log_end_offset, "Observer", now_ms, human_readable)
        )
    return format_table(REPLICATION_COLUMNS, rows)


# ----- asking a node -----------------------------------------------------------------------------


def parse_bootstrap(text: str) -> list[str]:
    """``HOST:PORT[,HOST:PORT...]`` as gRPC targets; ``[::1]:9093`` for IPv6."""
    addresses: list[str] = []
    for item in text.split(","):
        address = item.strip()
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise QuorumDescribeError(
                f"--bootstrap-controller / --bootstrap-server: {address!r} is not HOST:PORT (e.g. "
                "127.0.0.1:19091)"
            )
        addresses.append(address)
    return addresses


def ask_node(
    address: str, timeout_s: float, security: ClientSecurity | None = None
) -> QuorumDescription:
    """One DescribeQuorum call (PLAINTEXT unless ``security`` says otherwise). Raises
    ``grpc.RpcError`` when the node cannot answer."""
    with (security or ClientSecurity.plaintext()).channel(address) as channel:
        stub = raft_pb2_grpc.QuorumServiceStub(channel)
        response: Any = stub.DescribeQuorum(tool_describe_quorum_request(), timeout=timeout_s)
    try:
        return describe_quorum_from_proto(response)
    except MalformedMessageError as exc:
        raise QuorumDescribeError(f"{address} sent an answer this tool cannot read: {exc}") from exc


def _rpc_failure(address: str, exc: Exception) -> str:
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    status = code().name if callable(code) else type(exc).__name__
    text = details() if callable(details) else str(exc)
    return f"{address}: {status} ({text})" if text else f"{address}: {status}"


def describe_quorum(
    addresses: Sequence[str],
    *,
    timeout_s: float = DEADLINE_S,
    ask: Callable[[str, float], QuorumDescription] = ask_node,
) -> tuple[str, QuorumDescription]:
    """Ask ``addresses`` in order; the first answer with a leader wins. Returns the address
    that answered and its answer. If none names a leader, the first answer there was; if no
    node answered, ``QuorumDescribeError`` naming every address and its gRPC status."""
    failures: list[str] = []
    first: tuple[str, QuorumDescription] | None = None
    for address in addresses:
        try:
            description = ask(address, timeout_s)
        except grpc.RpcError as exc:
            failures.append(_rpc_failure(address, exc))
            continue
        if description.error_code is ErrorCode.NONE and description.leader_id is not None:
            return address, description
        if first is None:
            first = (address, description)
    if first is not None:
        return first
    raise QuorumDescribeError("cannot describe the quorum: " + "; ".join(failures))


def run_describe(
    bootstrap: str,
    *,
    replication: bool,
    human_readable: bool,
    out: TextIO,
    err: TextIO,
    now_ms: Callable[[], int],
    timeout_s: float = DEADLINE_S,
    ask: Callable[[str, float], QuorumDescription] | None = None,
    security: ClientSecurity | None = None,
) -> int:
    """The whole command; returns its exit code. Raises ``QuorumDescribeError`` for errors.
    ``security``: how to connect (``--command-config``); ``ask`` replaces the call in tests."""
    if ask is None:

        def ask(address: str, timeout_s: float) -> QuorumDescription:
            return ask_node(address, timeout_s, security)

    addresses = parse_bootstrap(bootstrap)
    try:
        address, description = describe_quorum(addresses, timeout_s=timeout_s, ask=ask)
    except QuorumDescribeError as exc:
        unreachable = str(exc).startswith("cannot describe the quorum")
        if unreachable and (security is None or security.protocol == "PLAINTEXT"):
            raise QuorumDescribeError(
                f"{exc} (this command speaks PLAINTEXT; if the listeners are SSL, pass "
                "--command-config client.properties with security.protocol=SSL and the ssl.* "
                "keys, docs/security.md#clients)"
            ) from exc
        raise
    no_leader = has_no_leader(description)
    if description.error_code is not ErrorCode.NONE and not no_leader:
        message = description.error_message or "no message"
        raise QuorumDescribeError(
            f"{address} answered {description.error_code.name}: {message}"
            + (
                f" (the leader is node {description.leader_id} in epoch "
                f"{description.leader_epoch}; ask it directly)"
                if description.error_code is ErrorCode.NOT_LEADER_OR_FOLLOWER
                else ""
            )
        )
    if replication:
        print(format_replication(description, now_ms(), human_readable=human_readable), file=out)
    else:
        print(format_status(description), file=out)
    if no_leader:
        print(
            f"Note: the quorum has no leader in epoch {description.leader_epoch} as seen by "
            f"{address}; try again after the election timeout",
            file=err,
        )
    return 0
