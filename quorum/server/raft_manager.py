"""The Raft side of a node process, the same for controllers and brokers (Kafka's
``KafkaRaftManager`` and the start-up its ``SharedServer`` does).

Start-up, in this order: lock every data directory (``.lock``, ``quorum/storage/dirlock.py``:
a second process on a live directory stops here, before anything reads or repairs it), check
``meta.properties`` against the config, open the local copy of
``__cluster_metadata-0``, (a voter) read ``quorum-state`` and refuse a voter set that differs
from ``controller.quorum.voters``, load the newest valid snapshot and the log after it, then
build the ``RaftNode``, the clients to the other voters, the ``RaftDriver`` and the
``Snapshotter``. A controller is a voter; a broker is an observer, which persists no election
state. Every refusal is a ``StartupError`` whose message says what to do.

A committed prefix that diverges from the leader's log (a lost acknowledged write,
``quorum/raft/prefix_divergence.py``) stops a controller (``CommittedPrefixDivergedError``,
exit 1); a broker, which sets ``on_log_discarded``, discards its local metadata log and
snapshots and fetches everything again.

The node itself (controller or broker) keeps what differs: its image or state machine, its
gRPC services, its tasks.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any

import grpc

from quorum import meta_properties
from quorum.config import HostPort, NodeConfig, raft_config
from quorum.ids import Uuid
from quorum.limits import INT32_MAX
from quorum.metadata.batch import LogBatch
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import BrokerEndpoint, Record
from quorum.raft.messages import AddRaftVoterRequest, SnapshotId
from quorum.raft.node import Proposal, RaftNode, Ready
from quorum.raft.prefix_divergence import PrefixDivergence
from quorum.raft.voters import KRAFT_VERSION_DYNAMIC, KRAFT_VERSION_STATIC, VoterSet
from quorum.security.tls import NodeSecurity
from quorum.server.driver import Clock, RaftDriver, ShuttingDownError
from quorum.server.peers import PeerClients
from quorum.server.snapshotting import (
    SnapshotStartupError,
    Snapshotter,
    fetch_and_install,
    load_at_startup,
)
from quorum.storage import QUORUM_STATE_FILE_NAME, ElectionStore, SegmentedLog
from quorum.storage.bootstrap import CorruptBootstrapError, read_bootstrap
from quorum.storage.dirlock import (
    DirectoryLockedError,
    DirectoryLockError,
    DirLock,
    lock_directories,
    release_all,
)
from quorum.storage.snapshots import delete_all_snapshots

METADATA_PARTITION_DIR = "__cluster_metadata-0"
# controller.quorum.auto.join.enable: how often a controller that is not a voter asks to be
# added, and how long the leader may wait for it to catch up each time.
AUTO_JOIN_RETRY_S = 1.0
AUTO_JOIN_TIMEOUT_MS = 30_000


class StartupError(Exception):
    """The node cannot start; the message says why and what to do."""


class CommittedPrefixDivergedError(StartupError):
    """A controller's committed prefix diverged from the leader's log: it stops, and
    ``metaquorum controller start`` exits 1 with the message (what happened, what to do)."""


def metadata_log_dir(config: NodeConfig) -> Path:
    """The node's local copy of the metadata log: ``metadata.log.dir/__cluster_metadata-0``."""
    return config.metadata_log_dir / METADATA_PARTITION_DIR


def lock_data_dirs(config: NodeConfig) -> list[DirLock]:
    """Lock every data directory of ``config`` (``metadata.log.dir``, then ``log.dirs``) that
    exists, before anything reads it; a missing one is left to ``meta_properties.check``, which
    says how to format it. Raises ``StartupError`` naming the directory and the holder's pid."""
    try:
        return lock_directories(d for d in config.data_dirs if d.is_dir())
    except (DirectoryLockedError, DirectoryLockError) as exc:
        raise StartupError(str(exc)) from exc


def stop_on_signals() -> asyncio.Event:
    """An event that SIGTERM or SIGINT sets: the node process stops when it is set."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


def warn_unused_config(config: NodeConfig, logger: Any) -> None:
    """One warning naming what a Kafka config holds that this node does not use: keys that
    mean nothing here (quorum/config_kafka.py) and listeners it does not serve."""
    if not config.ignored_keys and not config.unserved_listeners:
        return
    from quorum.config_kafka import NOT_APPLICABLE_KEYS  # noqa: PLC0415

    logger.warning(
        "config_keys_ignored",
        keys=list(config.ignored_keys),
        parts=sorted({NOT_APPLICABLE_KEYS[key] for key in config.ignored_keys}),
        listeners_not_served=[str(listener) for listener in config.unserved_listeners],
        serving=str(config.listener),
        meaning="accepted for compatibility with Kafka's configs; their values are not used",
    )


class RaftManager:
    """The metadata log, the ``RaftNode`` on it, the clients to the voters, the ``RaftDriver``
    that runs the node and the ``Snapshotter``; built by ``open``."""

    def __init__(
        self,
        *,
        config: NodeConfig,
        security: NodeSecurity,
        cluster_id: str,
        directory: Path,
        segments: SegmentedLog,
        clock: Clock,
        node: RaftNode,
        peers: PeerClients,
        driver: RaftDriver,
        snapshotter: Snapshotter,
        logger: Any,
        locks: Sequence[DirLock] = (),
    ) -> None:
        self.config = config
        # The listener's protocol and certificates; ``security.client`` is how this node's
        # clients (peers, FetchSnapshot, a broker's controller client) connect.
        self.security = security
        self.cluster_id = cluster_id
        self.directory = directory
        self.segments = segments
        self.clock = clock
        self.node = node
        self.peers = peers
        self.driver = driver
        self.snapshotter = snapshotter
        self.log = logger
        # The data directories' locks, held until the process exits (or ``close``).
        self.locks = tuple(locks)
        # Snapshots being taken or fetched; a task removes itself when it ends.
        self._background: set[asyncio.Task[Any]] = set()
        # Metadata this node could not load: corrupt snapshots skipped at start-up, snapshot
        # fetches that failed (Kafka's metadata-load-error-count; docs/operating.md#metrics).
        self.metadata_load_errors = 0
        # Set by a node that can rebuild its image (a broker): called in the driver loop once
        # its diverged local log was discarded, to start its image again from empty. Without
        # it (a controller) a diverged committed prefix stops the process.
        self.on_log_discarded: Callable[[PrefixDivergence], None] | None = None
        # The snapshot being taken, if any; a diverged log is discarded only after it ended.
        self._snapshot_task: asyncio.Task[Any] | None = None
        self._discarding = False

    @classmethod
    def open(
        cls,
        config: NodeConfig,
        *,
        voter: bool,
        logger: Any,
        on_committed: Callable[[Sequence[LogBatch]], None],
        on_ready: Callable[[Ready], None],
        on_proposed: Callable[[Sequence[Record], Proposal], None] | None = None,
    ) -> tuple[RaftManager, MetadataImage]:
        """Open the node's metadata log and build the Raft side on it; also return the image
        of the snapshot it starts from (the log batches after it are replayed once committed).
        The driver calls the node back with ``on_committed``, ``on_ready`` and
        ``on_proposed``. Raises ``StartupError``."""
        security = NodeSecurity(config)  # ConfigError before anything is locked or opened
        warn_unused_config(config, logger)
        locks = lock_data_dirs(config)
        try:
            return cls._open_locked(
                config,
                locks,
                security,
                voter=voter,
                logger=logger,
                on_committed=on_committed,
                on_ready=on_ready,
                on_proposed=on_proposed,
            )
        except BaseException:
            release_all(locks)
            raise

    @classmethod
    def _open_locked(
        cls,
        config: NodeConfig,
        locks: Sequence[DirLock],
        security: NodeSecurity,
        *,
        voter: bool,
        logger: Any,
        on_committed: Callable[[Sequence[LogBatch]], None],
        on_ready: Callable[[Ready], None],
        on_proposed: Callable[[Sequence[Record], Proposal], None] | None,
    ) -> tuple[RaftManager, MetadataImage]:
        properties = meta_properties.check(config)
        cluster_id = str(properties[config.metadata_log_dir].cluster_id)
        # A node serves only with its own certificate: one naming its id and roles in this
        # cluster (docs/security.md#node-identity); peers would refuse anything else.
        identity_problem = security.identity_problem(
            cluster_id, config.node_id, sorted(config.process_roles)
        )
        if identity_problem is not None:
            raise StartupError(identity_problem)
        directory_id = properties[config.metadata_log_dir].directory_id
        directory = metadata_log_dir(config)
        segments = SegmentedLog.open(directory, segment_bytes_max=config.metadata_log_segment_bytes)
        election_store = None
        election = None
        voters: frozenset[int] | VoterSet = config.voter_ids
        kraft_version = KRAFT_VERSION_STATIC
        if config.dynamic_quorum:
            # KIP-853: the voters are in the log; a controller formatted with --standalone or
            # --initial-controllers starts from its bootstrap voter set.
            kraft_version = KRAFT_VERSION_DYNAMIC
            try:
                bootstrap = read_bootstrap(directory) if voter else None
            except CorruptBootstrapError as exc:
                segments.close()
                raise StartupError(str(exc)) from exc
            voters = bootstrap[1] if bootstrap is not None else VoterSet()
        if voter:
            election_store = ElectionStore(directory / QUORUM_STATE_FILE_NAME)
            election = election_store.read()
            if election is not None and election.epoch >= INT32_MAX:
                segments.close()
                raise StartupError(
                    f"{directory / QUORUM_STATE_FILE_NAME} holds epoch {election.epoch}, the "
                    "largest an int32 carries: no election can follow it, so this quorum can "
                    "never elect a leader again (a forged Vote from an older version pushed it "
                    "there). Epochs never go back: copy the metadata out with `metaquorum log "
                    "dump`, format a new cluster and recreate the topics."
                )
            if (
                election is not None
                and not config.dynamic_quorum
                and election.voters != config.voter_ids
            ):
                segments.close()
                raise StartupError(
                    f"controller.quorum.voters in {config.describe_source()} names voters "
                    f"{sorted(config.voter_ids)}, but {directory / QUORUM_STATE_FILE_NAME} was "
                    f"written by a quorum of voters {sorted(election.voters)}. A static voter "
                    "set never changes: restore the original controller.quorum.voters, or "
                    "format a new cluster (a quorum formatted with --standalone or "
                    "--initial-controllers changes its voters with `quorum add-controller`)."
                )
        try:
            loaded = load_at_startup(directory, segments, logger)
        except SnapshotStartupError as exc:
            segments.close()
            raise StartupError(str(exc)) from exc
        clock = Clock()
        # A voter sends its requests to the other voters; an observer fetches from any voter
        # (or, knowing none, from controller.quorum.bootstrap.servers).
        advertised = config.advertised(config.listener)
        peers = PeerClients(
            config.controller_quorum_voters,
            config.controller_quorum_request_timeout_ms,
            security.client,
            bootstrap=config.controller_quorum_bootstrap_servers,
            local_id=config.node_id if voter else None,
            local_endpoint=HostPort(advertised.host, advertised.port) if voter else None,
            listener_name=config.listener.name,
            cluster_id=cluster_id,
        )
        node = RaftNode(
            node_id=config.node_id,
            voters=voters,
            cluster_id=cluster_id,
            config=raft_config(config),
            rng=random.Random(),
            now_ms=clock.now_ms(),
            election_state=election,  # observers persist no election state
            batches=loaded.batches,
            snapshot=loaded.snapshot,
            directory_id=directory_id,
            kraft_version=kraft_version,
            snapshot_voters=loaded.snapshot_voters,
            bootstrap_ids=peers.bootstrap_ids,
            persists_election=voter,
        )
        peers.update_from_voter_sets(node.voter_history.all_sets())

        def on_ready_and_addresses(ready: Ready) -> None:
            if any(event.name == "voter_set_changed" for event in ready.events):
                peers.update_from_voter_sets(node.voter_history.all_sets())
            if ready.prefix_diverged is not None:
                manager.prefix_diverged(ready.prefix_diverged)  # built below, before any Ready
            on_ready(ready)

        driver = RaftDriver(
            node=node,
            log=segments,
            election_store=election_store,
            send_request=peers.send,
            clock=clock,
            on_committed=on_committed,
            on_ready=on_ready_and_addresses,
            on_proposed=on_proposed,
        )
        # Brokers snapshot their image too (same triggers and retention as controllers), so
        # their copy of the log stays bounded and a restart replays only the suffix.
        snapshotter = Snapshotter.for_node(
            config, directory=directory, log=segments, driver=driver, logger=logger
        )
        manager = cls(
            config=config,
            security=security,
            cluster_id=cluster_id,
            directory=directory,
            segments=segments,
            clock=clock,
            node=node,
            peers=peers,
            driver=driver,
            snapshotter=snapshotter,
            logger=logger,
            locks=locks,
        )
        manager.metadata_load_errors = loaded.corrupt_skipped
        return manager, loaded.image

    # ----- called by the node from its driver callbacks -------------------------------------

    def after_replay(self, batches: Sequence[LogBatch], image: MetadataImage) -> Uuid | None:
        """The node replayed committed ``batches`` into ``image``: count them toward the next
        snapshot, and key the Raft RPCs by the metadata topic's own id once the image has one
        (KIP-516). Returns that id when the node adopted it just now."""
        self.snapshotter.on_committed(batches)
        topic_id = image.metadata_topic_id
        if topic_id is not None and self.node.metadata_topic_id != topic_id:
            self.node.set_metadata_topic_id(topic_id)
            return topic_id
        return None

    def maybe_take_snapshot(self, image: MetadataImage) -> None:
        """Snapshot ``image`` (the committed image) in the background when one is due (not
        while a diverged log is discarded or its image rebuilt)."""
        if self._discarding or self.node.rebuilding_committed_prefix:
            return
        if self.snapshotter.due():
            self._snapshot_task = self.spawn(self.snapshotter.take(image))

    # ----- a committed prefix that diverged (quorum/raft/prefix_divergence.py) --------------

    def prefix_diverged(self, divergence: PrefixDivergence) -> None:
        """The leader's log no longer holds what this node saw committed (the driver logged
        ``committed_prefix_diverged``). A controller stops: raises
        ``CommittedPrefixDivergedError`` out of the driver loop. A broker discards its local
        log and snapshots in the background and fetches again."""
        if not divergence.recoverable or self.on_log_discarded is None:
            raise CommittedPrefixDivergedError(divergence.describe())
        self.spawn(self._discard_diverged_log(divergence))

    async def _discard_diverged_log(self, divergence: PrefixDivergence) -> None:
        """Empty the local metadata log and delete the snapshots (they hold what the quorum
        lost), then, in the driver loop, start the core again at offset 0 and the node's image
        from empty (``on_log_discarded``). The core fetches nothing meanwhile; a snapshot
        being written finishes first (it compacts the old log, which is then emptied)."""
        self._discarding = True
        try:
            task = self._snapshot_task
            if task is not None and not task.done():
                await asyncio.wait([task])
            on_log_discarded = self.on_log_discarded
            assert on_log_discarded is not None

            def discard() -> None:
                self.segments.truncate_fully_and_start_at(0)
                delete_all_snapshots(self.directory)
                self.snapshotter.bytes_since = 0
                self.node.discard_diverged_log(self.clock.now_ms())  # the core logs it
                on_log_discarded(divergence)

            await self.driver.call_in_loop(discard)
        except ShuttingDownError:
            return  # stopped meanwhile: the next start finds the diverged log again
        finally:
            self._discarding = False

    async def fetch_snapshot(
        self,
        leader_id: int,
        snapshot: SnapshotId,
        on_image: Callable[[MetadataImage], None],
    ) -> None:
        """Behind the leader's log start: download its snapshot and install it; ``on_image``
        replaces the node's image with the snapshot's (inside the driver loop)."""
        address = self.peers.address_of(leader_id)
        if address is None:
            self.log.warning("snapshot_fetch_failed", reason=f"no address for leader {leader_id}")
            await self.driver.call_in_loop(
                lambda: self.node.snapshot_fetch_failed(self.clock.now_ms())
            )
            self.metadata_load_errors += 1
            return
        installed = await fetch_and_install(
            driver=self.driver,
            log=self.segments,
            directory=self.directory,
            address=f"{address.host}:{address.port}",
            snapshot=snapshot,
            cluster_id=self.cluster_id,
            on_image=on_image,
            security=self.security.client,
            logger=self.log,
        )
        if not installed:
            self.metadata_load_errors += 1

    async def auto_join(self) -> None:
        """``controller.quorum.auto.join.enable`` (Kafka 4.1, KIP-853): a controller that is
        not a voter of a dynamic quorum asks the leader, every ``AUTO_JOIN_RETRY_S``, to add
        it (AddRaftVoter for itself, which its node certificate may send); the leader waits for
        it to catch up. It stops once added, so a later remove-controller is not undone. A node
        id that is a voter under another directory is left to the operator (remove it first)."""
        node = self.node
        directory_id = node.local_key.directory_id
        listener = self.config.advertised(self.config.listener)
        endpoint = BrokerEndpoint(listener.name, listener.host, listener.port)
        while not node.is_voter:
            await asyncio.sleep(AUTO_JOIN_RETRY_S)
            leader = node.leader_id
            if (
                not node.is_dynamic
                or directory_id is None
                or leader is None
                or node.node_id in node.voters
                or node.is_voter
            ):
                continue
            request = AddRaftVoterRequest(
                self.cluster_id, node.node_id, directory_id, (endpoint,), AUTO_JOIN_TIMEOUT_MS
            )
            try:
                answer, _ = await self.peers.send_voter_change(
                    leader, request, AUTO_JOIN_TIMEOUT_MS / 1000 + 5
                )
            except (grpc.aio.AioRpcError, OSError) as exc:
                self.log.info("auto_join_failed", leader_id=leader, reason=repr(exc))
                continue
            self.log.info(
                "auto_join_answered",
                leader_id=leader,
                error=answer.error_code.name,
                message=answer.error_message,
            )
        self.log.info("auto_join_done", voters=sorted(node.voters))

    def spawn(self, coroutine: Coroutine[Any, Any, object]) -> asyncio.Task[Any]:
        """Run ``coroutine`` as a background task of this node (a snapshot taken or fetched, a
        diverged log discarded)."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    def cancel_background(self) -> None:
        """Cancel the snapshots being taken or fetched (a controller does so as it stops)."""
        for task in list(self._background):
            task.cancel()

    async def close(self) -> None:
        """Close the clients to the voters and the log (the driver has stopped)."""
        await self.peers.close()
        self.segments.close()
        release_all(self.locks)
