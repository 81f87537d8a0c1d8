"""Trust follows role: a node speaks only for itself, and only in a role its certificate names.

Kafka lets any principal allowed ``ClusterAction`` claim any replica id; here each controller
and broker certificate names one node and its roles (docs/security.md#node-identity), and a
request is refused before the core sees it when the id it claims is not the certificate's, or
when the role that may send it is not among the certificate's
(docs/security.md#what-a-node-may-claim):

- Vote, BeginQuorumEpoch, EndQuorumEpoch, AddRaftVoter (adding itself), UpdateRaftVoter: a
  controller;
- Fetch and FetchSnapshot: a controller when the claimed replica is a voter (its Fetch moves the
  high watermark), a controller or a broker otherwise (an observer's Fetch only reads);
- RegisterBroker, BrokerHeartbeat, AllocateProducerIds and AlterPartition (and forwarding a client's
  principal, checked where the principal is resolved): a broker.

The checks apply to authenticated callers; on a plaintext listener nobody is authenticated and
the claims are believed (that is what PLAINTEXT means).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from quorum.errors import ErrorCode
from quorum.raft.messages import (
    BeginQuorumEpochRequest,
    EndQuorumEpochRequest,
    FetchRequest,
    Message,
    VoteRequest,
)
from quorum.security.identity import NODE_ROLES, ROLE_BROKER, ROLE_CONTROLLER, Caller

__all__ = [
    "ANY_NODE",
    "BROKER_ONLY",
    "CONTROLLER_ONLY",
    "Claim",
    "IdentityRefusal",
    "claim_of",
    "fetch_claim",
    "refuse_claim",
]

CONTROLLER_ONLY = frozenset({ROLE_CONTROLLER})
BROKER_ONLY = frozenset({ROLE_BROKER})
ANY_NODE = frozenset(NODE_ROLES)


@dataclass(frozen=True, slots=True)
class IdentityRefusal:
    """Why a request is refused, with Kafka's error code."""

    error_code: ErrorCode
    message: str


@dataclass(frozen=True, slots=True)
class Claim:
    """What a request says of its sender: ``field`` names node ``node_id``, and a node in one
    of ``roles`` may send it."""

    field: str
    node_id: int
    roles: frozenset[str]


def fetch_claim(replica_id: int, voters: Collection[int]) -> Claim:
    """A Fetch or FetchSnapshot as ``replica_id``: a voter's moves the high watermark, so only
    a controller may send it; an observer's only reads."""
    return Claim("replica_id", replica_id, CONTROLLER_ONLY if replica_id in voters else ANY_NODE)


def claim_of(message: Message, voters: Collection[int]) -> Claim | None:
    """The claim of a Raft request that names its sender (None for the others)."""
    match message:
        case VoteRequest():
            return Claim("candidate_id", message.candidate_id, CONTROLLER_ONLY)
        case BeginQuorumEpochRequest():
            return Claim("leader_id", message.leader_id, CONTROLLER_ONLY)
        case EndQuorumEpochRequest():
            return Claim("leader_id", message.leader_id, CONTROLLER_ONLY)
        case FetchRequest():
            return fetch_claim(message.replica_id, voters)
    return None


def refuse_claim(caller: Caller, cluster_id: str, claim: Claim) -> IdentityRefusal | None:
    """None when ``caller`` may send a request making ``claim``; otherwise why not.
    Unauthenticated callers (plaintext) are not checked."""
    if not caller.authenticated:
        return None
    field, claimed = claim.field, claim.node_id
    needed = " or ".join(r for r in NODE_ROLES if r in claim.roles)
    if caller.node_id is None:
        return IdentityRefusal(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{caller.principal} is not a node: its certificate has no "
            f"spiffe://metaquorum/<cluster-id>/<role>/<id> name, and only a {needed} may "
            f"send this request ({field} {claimed})",
        )
    if caller.cluster_id != cluster_id:
        return IdentityRefusal(
            ErrorCode.INCONSISTENT_CLUSTER_ID,
            f"the caller's certificate names {caller.describe_node()} of cluster "
            f"{caller.cluster_id!r}, not of this cluster",
        )
    if claimed != caller.node_id:
        return IdentityRefusal(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{field} {claimed} is not the caller: its certificate names "
            f"{caller.describe_node()}, and a node may only speak for itself",
        )
    if not caller.roles & claim.roles:
        return IdentityRefusal(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"only a {needed} may send this request ({field} {claimed}); the caller's "
            f"certificate names {caller.describe_node()}",
        )
    return None
