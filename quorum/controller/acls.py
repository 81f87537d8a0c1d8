"""CreateAcls, DeleteAcls and DescribeAcls against an image (Kafka's ``AclControlManager``):
validation in, records and per-entry outcomes out (docs/authorization.md). Pure.

- Create: each binding must be storable (``AclBinding.problem``: INVALID_REQUEST naming why);
  one identical to an ACL that exists (or earlier in the request) succeeds without a record,
  as Kafka's does; past ``ACLS_MAX`` ACLs in all, POLICY_VIOLATION. Ids are drawn like topic
  ids and never collide with a live ACL's.
- Delete: every ACL each filter matches goes, with one ``RemoveAccessControlEntryRecord`` each
  (an ACL matched by two filters is removed once, reported under the first).
- Describe: the ACLs a filter matches, in a stable order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from quorum.controller.result import ControllerResult
from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.limits import ACLS_MAX
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import MetadataRecord, RemoveAccessControlEntryRecord
from quorum.security.acls import AclBinding, AclBindingFilter, acl_record

__all__ = ["AclOutcome", "create_acls", "delete_acls", "describe_acls", "sort_key"]


@dataclass(frozen=True, slots=True)
class AclOutcome:
    """One creation's or one filter's outcome; ``acls``: what a filter deleted."""

    error_code: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    acls: tuple[AclBinding, ...] = ()


def sort_key(acl: AclBinding) -> tuple[object, ...]:
    return (
        int(acl.resource_type),
        acl.resource_name,
        int(acl.pattern_type),
        acl.principal,
        int(acl.operation),
        int(acl.permission_type),
    )


def create_acls(
    image: MetadataImage,
    bindings: Sequence[AclBinding],
    *,
    new_acl_id: Callable[[], Uuid],
) -> ControllerResult[tuple[AclOutcome, ...]]:
    existing = set(image.acls.values())
    records: list[MetadataRecord] = []
    outcomes: list[AclOutcome] = []
    for binding in bindings:
        problem = binding.problem()
        if problem is not None:
            outcomes.append(
                AclOutcome(ErrorCode.INVALID_REQUEST, f"cannot store this ACL: {problem}")
            )
            continue
        if binding in existing:
            outcomes.append(AclOutcome())  # already there: nothing to write (Kafka)
            continue
        if len(existing) >= ACLS_MAX:
            outcomes.append(
                AclOutcome(
                    ErrorCode.POLICY_VIOLATION,
                    f"the cluster holds {len(existing)} ACLs, the most allowed "
                    f"({ACLS_MAX}): remove some first, or use PREFIXED patterns",
                )
            )
            continue
        acl_id = new_acl_id()
        while acl_id in image.acls:  # astronomically unlikely; never reuse a live id
            acl_id = new_acl_id()
        existing.add(binding)
        records.append(acl_record(acl_id, binding))
        outcomes.append(AclOutcome())
    return ControllerResult(tuple(records), tuple(outcomes))


def delete_acls(
    image: MetadataImage, filters: Sequence[AclBindingFilter]
) -> ControllerResult[tuple[AclOutcome, ...]]:
    removed: set[Uuid] = set()
    records: list[MetadataRecord] = []
    outcomes: list[AclOutcome] = []
    ordered = sorted(image.acls.items(), key=lambda item: (sort_key(item[1]), item[0].bytes))
    for acl_filter in filters:
        matched: list[AclBinding] = []
        for acl_id, binding in ordered:
            if acl_id in removed or not acl_filter.matches(binding):
                continue
            removed.add(acl_id)
            records.append(RemoveAccessControlEntryRecord(acl_id))
            matched.append(binding)
        outcomes.append(AclOutcome(acls=tuple(matched)))
    return ControllerResult(tuple(records), tuple(outcomes), is_atomic=False)


def describe_acls(image: MetadataImage, acl_filter: AclBindingFilter) -> tuple[AclBinding, ...]:
    return tuple(sorted((b for b in image.acls.values() if acl_filter.matches(b)), key=sort_key))
