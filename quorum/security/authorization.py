"""Authorization of admin and broker-lifecycle requests (docs/authorization.md).

``RequestAuthorization`` is what a node's admin service asks: with the node's
``authorizer.class.name``, ``super.users`` and ``allow.everyone.if.no.acl.found``, and the ACLs
of the image the request is answered from, may this caller do this? With no authorizer
configured every call is allowed (Kafka's meaning); the ACL admin RPCs then answer
SECURITY_DISABLED.

The authorizer for an image is built once per ACL map (images share an unchanged map), so a
request costs a dictionary lookup per resource, not a rebuild.
"""

from __future__ import annotations

from collections.abc import Mapping

from quorum.config import STANDARD_AUTHORIZER, NodeConfig
from quorum.ids import Uuid
from quorum.metadata.image import MetadataImage
from quorum.security.acls import (
    CLUSTER_RESOURCE_NAME,
    AclBinding,
    AclOperation,
    Authorizer,
    ResourceType,
)
from quorum.security.identity import Caller

__all__ = ["RequestAuthorization"]


class RequestAuthorization:
    def __init__(
        self,
        *,
        enabled: bool,
        cluster_id: str,
        super_users: tuple[str, ...] = (),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.enabled = enabled
        self.cluster_id = cluster_id
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self._cached: tuple[Mapping[Uuid, AclBinding], Authorizer] | None = None

    @classmethod
    def from_config(cls, config: NodeConfig, cluster_id: str) -> RequestAuthorization:
        return cls(
            enabled=config.authorizer_class_name == STANDARD_AUTHORIZER,
            cluster_id=cluster_id,
            super_users=config.super_users,
            allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
        )

    @classmethod
    def disabled(cls, cluster_id: str = "") -> RequestAuthorization:
        return cls(enabled=False, cluster_id=cluster_id)

    def _authorizer(self, acls: Mapping[Uuid, AclBinding]) -> Authorizer:
        cached = self._cached
        if cached is not None and cached[0] is acls:
            return cached[1]
        authorizer = Authorizer(
            acls,
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
            cluster_id=self.cluster_id,
        )
        self._cached = (acls, authorizer)
        return authorizer

    def allows(
        self,
        caller: Caller,
        image: MetadataImage,
        operation: AclOperation,
        resource_type: ResourceType,
        resource_name: str = CLUSTER_RESOURCE_NAME,
    ) -> bool:
        """Whether ``caller`` may ``operation`` the resource, by the ACLs of ``image`` (read
        only when an authorizer is on)."""
        if not self.enabled:
            return True
        authorizer = self._authorizer(image.acls)
        return authorizer.authorize(caller, operation, resource_type, resource_name)

    def allows_any(
        self,
        caller: Caller,
        image: MetadataImage,
        operation: AclOperation,
        resource_type: ResourceType,
    ) -> bool:
        """Whether ``caller`` may ``operation`` some resource of ``resource_type`` (Kafka's
        ``authorizeByResourceType``; ``Authorizer.authorize_any``)."""
        if not self.enabled:
            return True
        return self._authorizer(image.acls).authorize_any(caller, operation, resource_type)

    def allows_topic(
        self, caller: Caller, image: MetadataImage, operation: AclOperation, name: str
    ) -> bool:
        return self.allows(caller, image, operation, ResourceType.TOPIC, name)
