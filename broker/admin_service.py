"""The ``AdminService`` of a broker (the handlers are quorum/server/admin_service.py's).

Reads are served from the broker's own image, like a Kafka broker's metadata cache: with
``min_metadata_offset`` once the image has applied it (read-your-writes), without it at once,
but only once the image has caught up with the metadata log since the process started; until
then they are refused UNAVAILABLE (retriable), so a restarted broker never answers from an image
older than what it served before (docs/architecture.md#brokers). Every write, after the checks
a controller makes first, is answered NOT_CONTROLLER naming the active controller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import NoReturn, TypeVar

import grpc

from quorum.config import HostPort
from quorum.controller.describe_configs import Describer
from quorum.metadata.image import MetadataImage
from quorum.security.authorization import RequestAuthorization
from quorum.security.identity import CallerResolver
from quorum.server.admin_service import AdminServicer, NotCaughtUpError, WriteOperation
from quorum.server.driver import RaftDriver

__all__ = ["BrokerAdminServicer"]

T = TypeVar("T")


class BrokerAdminServicer(AdminServicer):
    def __init__(
        self,
        driver: RaftDriver,
        *,
        cluster_id: str,
        voters: Mapping[int, HostPort],
        image: Callable[[], MetadataImage],
        caught_up: Callable[[], str | None] = lambda: None,
        callers: CallerResolver | None = None,
        authorization: RequestAuthorization | None = None,
        describer: Describer | None = None,
    ) -> None:
        """``caught_up``: None once the image has caught up with the metadata log since the
        process started, else why not. ``describer``: DescribeConfigs with this broker's own
        configuration (None: as a controller, from the image alone)."""
        super().__init__(
            driver,
            cluster_id=cluster_id,
            voters=voters,
            image=image,
            callers=callers,
            authorization=authorization,
        )
        self._caught_up = caught_up
        if describer is not None:
            self.describer = describer

    def _write_image(self) -> None:
        return None  # nothing is written here: no topic is authorized for it

    async def _write(
        self,
        context: grpc.aio.ServicerContext,
        operation: WriteOperation[T],
        *,
        linearizable: bool = True,
        timeout_s: float | None = None,
    ) -> NoReturn:
        raise self._not_controller()

    async def _read_newest(self, timeout_s: float) -> None:
        if (behind := self._caught_up()) is not None:
            raise NotCaughtUpError(behind)
