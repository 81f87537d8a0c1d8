"""A node speaks only for itself: the ids a Raft request claims must be its certificate's.

Kafka lets any principal allowed ``ClusterAction`` claim any replica id; here each controller
and broker certificate names one node (docs/security.md#node-identity), and a Raft request
whose claimed id differs from it is refused before the core sees it
(docs/security.md#what-a-node-may-claim). The check applies to authenticated callers; on a
plaintext listener nobody is authenticated and the claims are believed (that is what PLAINTEXT
means).
"""

from __future__ import annotations

from dataclasses import dataclass

from quorum.errors import ErrorCode
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    Message,
    VoteRequest,
)
from quorum.security.identity import Caller

__all__ = ["IdentityRefusal", "claimed_node_id", "refuse_claim"]


@dataclass(frozen=True, slots=True)
class IdentityRefusal:
    """Why a request is refused, with Kafka's error code."""

    error_code: ErrorCode
    message: str


def claimed_node_id(message: Message) -> tuple[str, int] | None:
    """The field that names the sender and the id it claims, for the Raft requests that
    carry one."""
    match message:
        case VoteRequest():
            return "candidate_id", message.candidate_id
        case BeginQuorumEpochRequest():
            return "leader_id", message.leader_id
        case EndQuorumEpochRequest():
            return "leader_id", message.leader_id
        case FetchRequest():
            return "replica_id", message.replica_id
    return None


def refuse_claim(
    caller: Caller, cluster_id: str, field: str, claimed: int
) -> IdentityRefusal | None:
    """None when ``caller`` may send a request that claims ``field = claimed``; otherwise why
    not. Unauthenticated callers (plaintext) are not checked."""
    if not caller.authenticated:
        return None
    if caller.node_id is None:
        return IdentityRefusal(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{caller.principal} is not a node: its certificate has no "
            f"spiffe://metaquorum/<cluster-id>/node/<id> name, and only controllers and "
            f"brokers may send this request ({field} {claimed})",
        )
    if caller.cluster_id != cluster_id:
        return IdentityRefusal(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"the caller's certificate names node {caller.node_id} of cluster "
            f"{caller.cluster_id!r}, not of this cluster",
        )
    if claimed != caller.node_id:
        return IdentityRefusal(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{field} {claimed} is not the caller: its certificate names node "
            f"{caller.node_id}, and a node may only speak for itself",
        )
    return None
