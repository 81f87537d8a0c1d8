"""Kafka's StandardAuthorizer decision, pure (docs/authorization.md): DENY wins, PREFIXED and
wildcard patterns, implied DESCRIBE, super users, allow.everyone.if.no.acl.found, and nodes'
CLUSTER_ACTION."""

from __future__ import annotations

import pytest

from quorum.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    PatternType,
    ResourceType,
)
from quorum.security.identity import ANONYMOUS, Caller

TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation


def acl(
    name: str,
    principal: str = "User:CN=alice",
    operation: AclOperation = Op.DESCRIBE,
    permission: AclPermissionType = ALLOW,
    pattern: PatternType = LITERAL,
    resource: ResourceType = TOPIC,
) -> AclBinding:
    return AclBinding(resource, name, pattern, principal, "*", operation, permission)


def user(principal: str = "User:CN=alice") -> Caller:
    return Caller(principal, None, None, authenticated=True, peer="ipv4:1")


def test_no_acl_no_access_unless_everyone_is_allowed() -> None:
    assert not Authorizer([]).authorize(user(), Op.DESCRIBE, TOPIC, "orders")
    assert Authorizer([], allow_everyone_if_no_acl_found=True).authorize(
        user(), Op.DESCRIBE, TOPIC, "orders"
    )
    # allow.everyone applies only where no ACL names the resource at all.
    other = Authorizer([acl("orders", "User:CN=bob")], allow_everyone_if_no_acl_found=True)
    assert not other.authorize(user(), Op.DESCRIBE, TOPIC, "orders")
    assert other.authorize(user(), Op.DESCRIBE, TOPIC, "payments")


def test_allow_literal_prefixed_and_wildcard() -> None:
    authorizer = Authorizer(
        [
            acl("orders"),
            acl("pay.", pattern=PREFIXED, operation=Op.DELETE),
            acl("*", principal="User:*", operation=Op.CREATE),
        ]
    )
    assert authorizer.authorize(user(), Op.DESCRIBE, TOPIC, "orders")
    assert not authorizer.authorize(user(), Op.DESCRIBE, TOPIC, "orders2")
    assert authorizer.authorize(user(), Op.DELETE, TOPIC, "pay.eu")
    assert not authorizer.authorize(user(), Op.DELETE, TOPIC, "payments")
    # DELETE implies DESCRIBE (Kafka), not the other way round.
    assert authorizer.authorize(user(), Op.DESCRIBE, TOPIC, "pay.eu")
    assert not authorizer.authorize(user(), Op.DELETE, TOPIC, "orders")
    assert authorizer.authorize(user("User:CN=anyone"), Op.CREATE, TOPIC, "whatever")


def test_deny_wins_over_allow() -> None:
    authorizer = Authorizer(
        [
            acl("pay.", pattern=PREFIXED, operation=Op.ALL),
            acl("pay.secret", permission=DENY, operation=Op.DESCRIBE),
        ]
    )
    assert authorizer.authorize(user(), Op.DESCRIBE, TOPIC, "pay.eu")
    assert not authorizer.authorize(user(), Op.DESCRIBE, TOPIC, "pay.secret")
    assert authorizer.authorize(user(), Op.DELETE, TOPIC, "pay.secret")  # DENY was DESCRIBE only
    everything_denied = Authorizer([acl("x"), acl("x", "User:*", Op.ALL, DENY)])
    assert not everything_denied.authorize(user(), Op.DESCRIBE, TOPIC, "x")


def test_super_users_and_nodes() -> None:
    authorizer = Authorizer(
        [acl("orders", "User:CN=admin", Op.ALL, DENY)],
        super_users=["User:CN=admin"],
        cluster_id="Y2x1c3Rlcg",
    )
    assert authorizer.authorize(user("User:CN=admin"), Op.DELETE, TOPIC, "orders")
    node = Caller("User:CN=node-101", 101, "Y2x1c3Rlcg", authenticated=True, peer="ipv4:1")
    assert authorizer.authorize(node, Op.CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME)
    assert not authorizer.authorize(node, Op.DESCRIBE, TOPIC, "orders")
    # The group coordinator's topic, created by a broker as itself (docs/groups.md).
    assert authorizer.authorize(node, Op.CREATE, TOPIC, "__consumer_offsets")
    assert not authorizer.authorize(node, Op.CREATE, TOPIC, "__transaction_state")
    assert not authorizer.authorize(user(), Op.CREATE, TOPIC, "__consumer_offsets")
    foreign = Caller("User:CN=node-101", 101, "b3RoZXI", authenticated=True, peer="ipv4:1")
    assert not authorizer.authorize(foreign, Op.CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME)
    assert not authorizer.authorize(foreign, Op.CREATE, TOPIC, "__consumer_offsets")


def test_group_acls_are_their_own_resource_type() -> None:
    group = ResourceType.GROUP
    authorizer = Authorizer([acl("app-", operation=Op.READ, pattern=PREFIXED, resource=group)])
    assert authorizer.authorize(user(), Op.READ, group, "app-1")
    assert authorizer.authorize(user(), Op.DESCRIBE, group, "app-1")  # READ implies DESCRIBE
    assert not authorizer.authorize(user(), Op.DELETE, group, "app-1")
    assert not authorizer.authorize(user(), Op.READ, TOPIC, "app-1")  # not a topic ACL
    assert acl("g", resource=group).problem() is None
    anonymous = Caller(ANONYMOUS, None, None, authenticated=False, peer="ipv4:1")
    assert not authorizer.authorize(anonymous, Op.CLUSTER_ACTION, CLUSTER, CLUSTER_RESOURCE_NAME)


@pytest.mark.parametrize(
    ("binding", "fragment"),
    [
        (acl("kafka-cluster", resource=CLUSTER, pattern=PREFIXED), "LITERAL name"),
        (acl("other", resource=CLUSTER), "LITERAL name"),
        (acl("*", pattern=PREFIXED), "PREFIXED pattern cannot be '*'"),
        (acl("x", principal="alice"), "'User:<name>'"),
        (acl("x", operation=Op.ANY), "operation ANY is for filters"),
        (acl("x", permission=AclPermissionType.ANY), "ALLOW or DENY"),
        (acl("x", pattern=PatternType.MATCH), "LITERAL or PREFIXED"),
        (acl(""), "empty"),
    ],
)
def test_bindings_that_cannot_be_stored_say_why(binding: AclBinding, fragment: str) -> None:
    problem = binding.problem()
    assert problem is not None and fragment in problem


def test_filters_match_like_kafka() -> None:
    literal, prefixed = acl("pay.eu"), acl("pay.", pattern=PREFIXED, operation=Op.DELETE)
    everything = AclBindingFilter()
    assert everything.matches(literal) and everything.matches(prefixed)
    by_match = AclBindingFilter(
        resource_type=TOPIC, resource_name="pay.eu", pattern_type=PatternType.MATCH
    )
    assert by_match.matches(literal) and by_match.matches(prefixed)
    exact = AclBindingFilter(resource_type=TOPIC, resource_name="pay.", pattern_type=PREFIXED)
    assert exact.matches(prefixed) and not exact.matches(literal)
    assert not AclBindingFilter(operation=Op.DESCRIBE).matches(prefixed)
    assert AclBindingFilter(permission_type=ALLOW, principal="User:CN=alice").matches(literal)
