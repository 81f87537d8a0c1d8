"""``metaquorum dev up``: the local cluster of ``deploy/local/`` as real processes, and the
demo that ``scripts/run`` shows.

It formats every node's directories under ``.data/`` (wiping a previous demo's data unless told
to keep it), starts each node through the same CLI a user would type, waits with deadlines,
then walks the KIP-516 story with real admin commands, printing each command and its output:
create ``orders`` -> describe it by name and by id -> kill -9 broker 2 -> delete ``orders`` and
create it again (a new id) -> start broker 2 -> show that it moved the old partitions to
``deleting/{old_id}_{p}`` and created the new ones -> describe the old id (UNKNOWN_TOPIC_ID) ->
create a user-defined internal topic (KIP-619) and show that it is internal. Every process it
started is stopped when it ends or on Ctrl-C (SIGTERM, then SIGKILL after a bound).

mTLS is on (docs/security.md): the configs of ``deploy/local/`` point at certificates under
``.data/certs/``; what is missing there is generated first (``metaquorum dev certs``), the nodes
are formatted with the cluster id those certificates name (``.data/certs/cluster.id``), and every
admin command runs with ``--command-config .data/certs/client.properties`` (``CN=admin``).
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from quorum import harness
from quorum.admin import AdminClient
from quorum.config import NodeConfig, load_config
from quorum.errors import error_name
from quorum.extras import missing_modules
from quorum.harness import METAQUORUM, start_node, stop_node
from quorum.ids import Uuid
from quorum.security.certs import CLIENT_PROPERTIES_FILE, dev_certs
from quorum.security.tls import ClientSecurity

STOP_TIMEOUT_S = 10.0
STEP_TIMEOUT_S = 60.0
T = TypeVar("T")


@dataclass
class Managed:
    name: str
    role: str
    config: NodeConfig
    config_path: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"{self.config.listener.host}:{self.config.listener.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def _cli(*args: str) -> list[str]:
    return [*METAQUORUM, *args]


def _say(text: str) -> None:
    print(text, flush=True)


def wait_until(
    condition: Callable[[], T | None], what: str, timeout_s: float = STEP_TIMEOUT_S
) -> T:
    """The harness's wait, ending the demo with a message instead of a test failure."""
    try:
        return harness.wait_until(condition, timeout_s, what, interval_s=0.1)
    except AssertionError as exc:
        raise SystemExit(str(exc)) from None


class LocalCluster:
    def __init__(self, deploy_dir: Path, data_dir: Path) -> None:
        self.deploy_dir = deploy_dir
        self.data_dir = data_dir
        if not deploy_dir.is_dir():
            raise SystemExit(
                f"dev up: {deploy_dir} does not exist here ({Path.cwd()}). `dev up` runs the "
                "local cluster that a checkout of the metaquorum repository describes in "
                "deploy/local/ (configs, certificates and data next to it); an installed "
                "package does not ship it. Run it from the repository root (scripts/run does), "
                "or pass --deploy-dir DIR holding controller-*.toml and broker-*.toml"
            )
        self.nodes: list[Managed] = []
        for role in ("controller", "broker"):
            for path in sorted(deploy_dir.glob(f"{role}-*.toml")):
                self.nodes.append(
                    Managed(
                        path.stem,
                        role,
                        load_config(path),
                        path,
                        data_dir / "logs" / f"{path.stem}.log",
                    )
                )
        if not self.controllers:
            raise SystemExit(
                f"dev up: no controller-*.toml in {deploy_dir}; give --deploy-dir a directory of "
                "node configs like the repository's deploy/local/"
            )
        # The admin's client properties, once the certificates exist (``prepare_certs``).
        self.command_config: Path | None = None
        self.security = ClientSecurity.plaintext()

    @property
    def certs_dir(self) -> Path | None:
        """Where the configs expect their certificates (None: the first controller's listener
        is PLAINTEXT)."""
        config = self.controllers[0].config
        if config.listener_protocol != "SSL" or config.ssl_keystore_location is None:
            return None
        return config.ssl_keystore_location.parent

    def prepare_certs(self) -> str | None:
        """Generate the missing certificates (``dev certs``); the cluster id they name."""
        certs_dir = self.certs_dir
        if certs_dir is None:
            return None
        cluster_id, result = dev_certs(certs_dir, deploy_dir=self.deploy_dir)
        self.command_config = Path(os.path.relpath(certs_dir / CLIENT_PROPERTIES_FILE))
        self.security = ClientSecurity.from_properties_file(self.command_config)
        _say(
            f"== mTLS: certificates in {certs_dir}/ ({len(result.written)} written, "
            f"{len(result.kept)} kept); admin commands use --command-config {self.command_config}"
        )
        return cluster_id

    @property
    def controllers(self) -> list[Managed]:
        return [n for n in self.nodes if n.role == "controller"]

    @property
    def brokers(self) -> list[Managed]:
        return [n for n in self.nodes if n.role == "broker"]

    @property
    def bootstrap(self) -> str:
        return ",".join(m.address for m in self.controllers)

    def format(self, cluster_id: Uuid, wipe: bool) -> None:
        if wipe:
            for managed in self.nodes:
                for directory in managed.config.data_dirs:
                    shutil.rmtree(directory, ignore_errors=True)
        for managed in self.nodes:
            subprocess.run(
                _cli(
                    "storage", "format", "--config", str(managed.config_path),
                    "--cluster-id", str(cluster_id), "--ignore-formatted",
                ),
                check=True,
                stdout=subprocess.DEVNULL,
            )  # fmt: skip

    def start(self, managed: Managed) -> None:
        # Ctrl-C reaches us, not the nodes: we stop the children ourselves.
        managed.process = start_node(
            managed.role, managed.config_path, managed.log_path, cwd=None, new_session=True
        )
        _say(f"   started {managed.name} (pid {managed.process.pid}), log: {managed.log_path}")

    def stop(self, managed: Managed, *, crash: bool = False) -> None:
        """SIGTERM (a broker's controlled shutdown, a controller's resignation), or with
        ``crash`` SIGKILL: nothing is told, the node's session lives on until it expires."""
        if not managed.alive:
            return
        assert managed.process is not None
        if crash:
            managed.process.kill()
            managed.process.wait(timeout=STOP_TIMEOUT_S)
        else:
            stop_node(managed.process, STOP_TIMEOUT_S)
        _say(f"   stopped {managed.name} (exit code {managed.process.returncode})")

    def stop_all(self) -> None:
        for managed in reversed(self.nodes):  # brokers first, then controllers
            self.stop(managed)

    def check_alive(self) -> None:
        for managed in self.nodes:
            if managed.process is not None and managed.process.poll() is not None:
                raise SystemExit(
                    f"{managed.name} exited with code {managed.process.returncode}; "
                    f"see {managed.log_path}"
                )

    def run(
        self, *args: str, show: bool = True, timeout_s: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a metaquorum command the way a user would, printing it and its output. Commands
        that connect get ``--command-config`` (the admin's certificate)."""
        connects = args[0] in ("topics", "quorum", "acls") and "--command-config" not in args
        if self.command_config is not None and connects:
            args = (*args, "--command-config", str(self.command_config))
        result = subprocess.run(
            _cli(*args), capture_output=True, text=True, check=False, timeout=timeout_s
        )
        if show:
            _say(f"\n$ metaquorum {' '.join(args)}")
            if result.stdout.strip():
                _say(result.stdout.rstrip())
            if result.stderr.strip():
                _say(result.stderr.rstrip())
        return result

    def leader_status(self) -> str | None:
        self.check_alive()
        result = self.run(
            "quorum", "describe", "--status", "--bootstrap-controller", self.bootstrap, show=False
        )
        if result.returncode == 0 and "no leader" not in result.stdout:
            return result.stdout
        return None

    def unfenced_brokers(self) -> int:
        self.check_alive()
        with AdminClient(self.bootstrap, timeout_s=5, security=self.security) as admin:
            return sum(1 for b in admin.describe_cluster().brokers if not b.is_fenced)


def _listing(directory: Path) -> list[str]:
    if not directory.exists():
        return []
    return sorted(p.name for p in directory.iterdir() if p.is_dir())


def _topic_id_of(output: str) -> str:
    first = output.splitlines()[0]
    return first.split("TopicId: ")[1].split("\t")[0]


def _partition_ids(log_dir: Path, topic: str) -> dict[str, str]:
    found = {}
    for name in _listing(log_dir):
        meta = log_dir / name / "partition.metadata"
        if name.startswith(f"{topic}-") and meta.exists():
            found[name] = meta.read_text().split("topic_id: ")[1].strip()
    return found


def kip516_story(cluster: LocalCluster) -> None:
    server = cluster.bootstrap
    broker2 = cluster.brokers[-1]
    broker2_logs = broker2.config.log_dirs[0]
    _say("\n== KIP-516: topic ids, and a broker that was away while a topic was recreated")
    cluster.run(
        "topics", "--bootstrap-server", server, "--create", "--topic", "orders",
        "--partitions", "3", "--replication-factor", "2",
    )  # fmt: skip
    described = cluster.run(
        "topics", "--bootstrap-server", server, "--describe", "--topic", "orders"
    )
    old_id = _topic_id_of(described.stdout)
    cluster.run("topics", "--bootstrap-server", server, "--describe", "--topic-id", old_id)
    wait_until(
        lambda: len(_partition_ids(broker2_logs, "orders")) == 3, f"{broker2.name}'s partitions"
    )
    _say(f"\n   {broker2.name} holds: {json.dumps(_partition_ids(broker2_logs, 'orders'))}")
    records = RecordsStory.of(cluster)
    if records is not None:
        records.produce(["order-1", "order-2", "order-3"])
    _say(f"\n== {broker2.name} crashes (kill -9)")
    cluster.stop(broker2, crash=True)
    cluster.run("topics", "--bootstrap-server", server, "--delete", "--topic", "orders")
    cluster.run(
        "topics", "--bootstrap-server", server, "--create", "--topic", "orders",
        "--partitions", "3", "--replication-factor", "2",
    )  # fmt: skip
    described = cluster.run(
        "topics", "--bootstrap-server", server, "--describe", "--topic", "orders"
    )
    new_id = _topic_id_of(described.stdout)
    _say(f"\n   the name 'orders' now has a new id: {old_id} -> {new_id}")
    _say(
        f"   {broker2.name} (stopped) still holds the old partitions: "
        f"{json.dumps(_partition_ids(broker2_logs, 'orders'))}"
    )
    _say(f"\n== starting {broker2.name} again")
    cluster.start(broker2)
    wait_until(
        lambda: (
            set(_partition_ids(broker2_logs, "orders").values()) == {new_id}
            and len(_partition_ids(broker2_logs, "orders")) == 3
        ),
        f"{broker2.name} reconciling",
    )
    _say(f"   {broker2.name} now holds: {json.dumps(_partition_ids(broker2_logs, 'orders'))}")
    _say(f"   and moved the stale ones aside: deleting/ = {_listing(broker2_logs / 'deleting')}")
    if records is not None:
        records.after_recreate(old_id, ["order-4"])
    pending = cluster.run("broker", "pending-deletions", "--config", str(broker2.config_path))
    del pending
    delay_s = broker2.config.delete_topic_delay_ms / 1000
    if delay_s <= 30:
        wait_until(
            lambda: not _listing(broker2_logs / "deleting"),
            "the stale partitions' deletion",
            delay_s + 30,
        )
        _say(f"\n   after delete.topic.delay.ms ({delay_s:.0f} s) deleting/ is empty")
    cluster.run("topics", "--bootstrap-server", server, "--describe", "--topic-id", old_id)
    _say("\n== KIP-619: a user-defined internal topic")
    cluster.run(
        "topics", "--bootstrap-server", server, "--create", "--topic", "audit-trail",
        "--partitions", "1", "--replication-factor", "2", "--config", "internal=true",
    )  # fmt: skip
    cluster.run("topics", "--bootstrap-server", server, "--list")
    cluster.run("topics", "--bootstrap-server", server, "--list", "--exclude-internal")


class RecordsStory:
    """The KIP-516 story with records (docs/kafka-listener.md#the-data-plane): records of the
    first `orders` are produced with confluent-kafka through broker 1's Kafka listener; after the
    topic was deleted and created again, a consumer that kept the old topic id fetches by it
    (Fetch v13, as a client holding that id sends it) and gets UNKNOWN_TOPIC_ID, and the new
    `orders` serves only its own records, from offset 0."""

    def __init__(self, cluster: LocalCluster, client: dict[str, str]) -> None:
        self.cluster = cluster
        self.client = client

    @classmethod
    def of(cls, cluster: LocalCluster) -> RecordsStory | None:
        if cluster.command_config is None:
            return None
        try:
            import confluent_kafka  # noqa: F401, PLC0415
        except ImportError:
            _say("\n== (confluent-kafka is not installed: the story goes on without records)")
            return None
        listener = cluster.brokers[0].config.kafka_listeners[0]
        keystore = str(cluster.command_config.parent / "admin.pem")
        return cls(
            cluster,
            {
                "bootstrap.servers": f"{listener.host}:{listener.port}",
                "security.protocol": "SSL",
                "ssl.ca.location": str(cluster.command_config.parent / "ca.pem"),
                "ssl.certificate.location": keystore,
                "ssl.key.location": keystore,
            },
        )

    def produce(self, values: list[str]) -> None:
        from confluent_kafka import Producer  # noqa: PLC0415

        # Idempotent: a retried batch lands once (docs/kafka-listener.md#produce).
        producer = Producer({**self.client, "acks": "all", "enable.idempotence": True})
        acknowledged: list[str] = []

        def delivered(error: object, message: Any) -> None:
            if error is not None:
                raise SystemExit(f"producing to 'orders' failed: {error}")
            acknowledged.append(f"{bytes(message.value() or b'').decode()}@{message.offset()}")

        for value in values:
            producer.produce("orders", value=value.encode(), partition=0, on_delivery=delivered)
        if producer.flush(30) != 0:
            raise SystemExit("producing to 'orders' did not finish in 30 s")
        _say(
            f"\n   produced to orders-0 (confluent-kafka, idempotent, acks=all): "
            f"{', '.join(acknowledged)}"
        )

    def consume(self) -> list[str]:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition  # noqa: PLC0415

        # assign(), not subscribe(): the story needs no consumer group.
        consumer = Consumer(
            {
                **self.client,
                "group.id": "dev-up-story",
                "enable.auto.commit": False,
                "enable.auto.offset.store": False,
            }
        )
        consumer.assign([TopicPartition("orders", 0, OFFSET_BEGINNING)])
        read: list[str] = []
        try:
            # Read until the end of the partition: one empty poll after the last record.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                batch = consumer.consume(100, 2.0)
                if not batch and read:
                    break
                for message in batch:
                    if message.error() is not None:
                        raise SystemExit(f"consuming 'orders' failed: {message.error()}")
                    read.append(f"{bytes(message.value() or b'').decode()}@{message.offset()}")
        finally:
            consumer.close()
        return read

    def fetch_by_id(self, topic_id: str) -> str:
        """What a broker answers a Fetch v13 by ``topic_id`` for partition 0 at offset 0."""
        from kio.schema.fetch.v13.request import (  # noqa: PLC0415
            FetchPartition,
            FetchRequest,
            FetchTopic,
        )
        from kio.static.primitive import i32, i32Timedelta, i64  # noqa: PLC0415

        from quorum.kafka_wire import KafkaWire, tls_context  # noqa: PLC0415

        context = tls_context(
            Path(self.client["ssl.ca.location"]), Path(self.client["ssl.certificate.location"])
        )
        request = FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(0)),
            min_bytes=i32(1),
            topics=(
                FetchTopic(
                    topic_id=Uuid.parse(topic_id).to_uuid(),
                    partitions=(
                        FetchPartition(
                            partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(65536)
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        with KafkaWire(self.client["bootstrap.servers"], context, client_id="dev-up") as wire:
            answer = wire.ask(request)
        (topic,) = answer.responses
        (partition,) = topic.partitions
        return error_name(int(partition.error_code))

    def after_recreate(self, old_id: str, values: list[str]) -> None:
        self.produce(values)
        read = self.consume()
        _say(f"   the new orders-0 from the beginning: {', '.join(read)} (only its own records)")
        expected = [f"{value}@{offset}" for offset, value in enumerate(values)]
        if read != expected:
            raise SystemExit(f"the new 'orders' served {read}, not {expected}")
        answer = self.fetch_by_id(old_id)
        _say(f"   a consumer that kept the old id {old_id}: Fetch v13 by it -> {answer}")
        if answer != "UNKNOWN_TOPIC_ID":
            raise SystemExit(f"a Fetch by the old id was answered {answer}, not UNKNOWN_TOPIC_ID")


def acl_story(cluster: LocalCluster) -> None:
    """Authorization (docs/authorization.md): alice, a client with a valid certificate but no
    ACL, is refused; the admin (a super user) grants her DESCRIBE on 'orders'; she gets in."""
    assert cluster.command_config is not None
    server = cluster.bootstrap
    alice = str(cluster.command_config.parent / "alice.properties")
    _say("\n== ACLs: alice has a certificate but no ACL yet")
    refused = cluster.run(
        "topics", "--bootstrap-server", server, "--describe", "--topic", "orders",
        "--command-config", alice,
    )  # fmt: skip
    if "TOPIC_AUTHORIZATION_FAILED" not in refused.stdout + refused.stderr:
        raise SystemExit("alice was not refused: is the authorizer on in deploy/local/?")
    cluster.run(
        "acls", "--bootstrap-server", server, "--add", "--allow-principal", "User:CN=alice",
        "--operation", "Describe", "--topic", "orders",
    )  # fmt: skip
    cluster.run("acls", "--bootstrap-server", server, "--list", "--topic", "orders")
    granted = cluster.run(
        "topics", "--bootstrap-server", server, "--describe", "--topic", "orders",
        "--command-config", alice,
    )  # fmt: skip
    if granted.returncode != 0:
        raise SystemExit("alice is still refused after the ACL was added")
    _say("\n   alice may now describe 'orders' (and nothing else)")


def kafka_client_story(cluster: LocalCluster) -> None:
    """Kafka's own clients (docs/kafka-listener.md): kafka-python's KafkaAdminClient, over SSL
    with the admin certificate, reads the topics and their ids through broker 1's Kafka
    listener; the id of 'orders' is the one ``topics --describe`` printed."""
    try:
        from kafka.admin import KafkaAdminClient  # type: ignore[import-untyped]  # noqa: PLC0415
    except ImportError:
        _say("\n== (kafka-python is not installed: skipping the Kafka client)")
        return
    assert cluster.command_config is not None
    broker = cluster.brokers[0]
    listener = broker.config.kafka_listeners[0]
    certs = cluster.command_config.parent
    address = f"{listener.host}:{listener.port}"
    _say(f"\n== Kafka's own clients: kafka-python's KafkaAdminClient at {broker.name}'s Kafka")
    _say(f"   listener {address} (SSL, the admin certificate)")
    client = KafkaAdminClient(
        bootstrap_servers=address,
        security_protocol="SSL",
        ssl_cafile=str(certs / "ca.pem"),
        ssl_certfile=str(certs / "admin.pem"),
        ssl_keyfile=str(certs / "admin.pem"),
        request_timeout_ms=20_000,
    )
    try:
        (orders,) = client.describe_topics(["orders"])
        raw = orders["topic_id"]  # kafka-python gives a uuid.UUID or its text
        raw_bytes = (raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw))).bytes
        topic_id = base64.urlsafe_b64encode(raw_bytes).decode().rstrip("=")
        _say(f"   list_topics(): {sorted(client.list_topics())}")
        _say(
            f"   describe_topics(['orders']): topic_id {topic_id} (as the CLI shows it), "
            f"{len(orders['partitions'])} partitions"
        )
    finally:
        client.close()


def replay_with_spark(cluster: LocalCluster, *, verbose: bool = False) -> None:
    """Replay the first controller's metadata log with Spark: the name-reuse table must show
    'orders' with its two ids."""
    log_dir = cluster.controllers[0].config.metadata_log_dir
    out = cluster.data_dir / "replay"
    _say("\n== Spark replays the metadata log (KIP-516's case: one name, several ids)")
    missing = missing_modules("analytics")
    if missing:
        _say(
            f"   skipped: the 'analytics' extra is not installed (missing: {', '.join(missing)});"
            " pip install 'metaquorum[analytics]' to see this step"
        )
        return
    # Spark starts a JVM and runs a dozen jobs: a minute on an idle 2-core machine is plenty,
    # but a loaded one (a CI runner, tests beside it) needs more.
    result = cluster.run(
        "replay", "--log-dir", str(log_dir), "--out", str(out), "--master", "local[2]",
        *(["--verbose"] if verbose else []),
        timeout_s=300,
    )  # fmt: skip
    if result.returncode != 0:
        raise SystemExit(f"the Spark replay failed (exit code {result.returncode})")
    _say(f"\n   report: {out / 'report.md'}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@contextlib.contextmanager
def running(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """Stop every process we started, however the block ends (SIGTERM included)."""
    previous = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield cluster
    finally:
        _say("\n== stopping the cluster")
        cluster.stop_all()
        signal.signal(signal.SIGTERM, previous)


def ports_in_use(nodes: list[Managed], timeout_s: float = 0.5) -> list[str]:
    """The nodes whose listener address already accepts connections (another process holds
    the port), as ``name (host:port)``."""
    taken = []
    for node in nodes:
        for listener in node.config.listeners:  # the gRPC one and any Kafka listener
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                probe.settimeout(timeout_s)
                if probe.connect_ex((listener.host, listener.port)) == 0:
                    taken.append(f"{node.name} ({listener.host}:{listener.port})")
    return taken


def dev_up(
    deploy_dir: Path,
    data_dir: Path,
    *,
    keep_running: bool,
    wipe: bool,
    story: bool,
    verbose: bool = False,
) -> int:
    cluster = LocalCluster(deploy_dir, data_dir)
    # Before anything is formatted (and wiped): another cluster on these ports would answer
    # the story's commands, and its data directories may be ours.
    taken = ports_in_use(cluster.nodes)
    if taken:
        raise SystemExit(
            f"dev up: the ports of {', '.join(taken)} are in use: another cluster (an earlier "
            "`dev up --keep-running`?) or another program listens there. Stop it, or change "
            f"the listeners in {deploy_dir}/; nothing was started or wiped"
        )
    cluster_id = Uuid.parse(cluster.prepare_certs() or str(Uuid.random()))
    _say(
        f"== formatting {len(cluster.controllers)} controllers and {len(cluster.brokers)} "
        f"brokers (cluster id {cluster_id}, data in {data_dir}/)"
    )
    cluster.format(cluster_id, wipe=wipe)
    with running(cluster):
        _say("== starting the controllers")
        started = time.monotonic()
        for managed in cluster.controllers:
            cluster.start(managed)
        status = wait_until(cluster.leader_status, "a leader")
        _say(f"== a leader was elected {time.monotonic() - started:.1f} s after start")
        if cluster.brokers:
            _say("== starting the brokers")
            for managed in cluster.brokers:
                cluster.start(managed)
            wait_until(
                lambda: cluster.unfenced_brokers() == len(cluster.brokers),
                "the brokers to register and catch up",
            )
        _say("\n$ metaquorum quorum describe --status")
        _say(status.rstrip())
        cluster.run(
            "quorum", "describe", "--replication", "--human-readable",
            "--bootstrap-controller", cluster.bootstrap,
        )  # fmt: skip
        if story and len(cluster.brokers) >= 2:
            kip516_story(cluster)
            if cluster.command_config is not None:
                acl_story(cluster)
                kafka_client_story(cluster)
            replay_with_spark(cluster, verbose=verbose)
        if keep_running:
            _say(
                f"\n== the cluster keeps running; try:\n"
                f"   .venv/bin/metaquorum topics --bootstrap-server {cluster.bootstrap} --list"
                + (
                    f" --command-config {cluster.command_config}\n"
                    if cluster.command_config
                    else "\n"
                )
                + "   Ctrl-C stops every process."
            )
            with contextlib.suppress(KeyboardInterrupt):
                while all(m.alive for m in cluster.nodes):
                    time.sleep(0.5)
    return 0
