"""Apache Kafka itself, as real JVM processes on 127.0.0.1: the peer that the side-by-side
benchmark (``scripts/bench/peers.py --peer kafka``) measures metaquorum against, and Kafka's own
tools (``TopicCommand``, ``AclCommand``, ``ConfigCommand``, ``MetadataQuorumCommand``, ...) that
the tool tests (``tests/process/test_kafka_tools_process.py``) run against metaquorum's brokers.

Kafka's jars come from ``scripts/kafka/fetch`` (pinned by version and SHA-256, cached outside the
repository); nothing here downloads. ``kafka_missing()`` says why Kafka cannot run (no Java 17+,
no verified cache), so callers skip with that one line.

``KafkaCluster`` does for Kafka's KRaft what ``quorum.harness.ProcessCluster`` does for ours:
free ports, one properties file per node, ``kafka.tools.StorageTool format`` of every node (in
parallel), ``kafka.Kafka <properties>`` per node, readiness waited for with a deadline (a
controller: the quorum has a leader in its ``quorum-state``; a broker: its log says it started,
which a KRaft broker does only once the controller unfenced it), and every process stopped by
PID. By default every listener (controller, broker) speaks mTLS with certificates from the
harness's CA (``ClusterCerts``) and ACLs are on (``StandardAuthorizer``, the admin and the nodes
super users), as metaquorum's clusters are by default.

Durability, as configured here (Kafka's defaults, stated): the KRaft metadata log
(``__cluster_metadata-0``) is fsynced by Kafka's Raft layer itself whatever the ``log.flush.*``
keys say: the leader's Raft thread flushes the batches it appends right after appending them,
and a voter flushes what it fetched before its next Fetch reports it, so a committed metadata
record is on disk on a majority of voters, as in metaquorum. Brokers (observers) do not flush
their copy of the metadata log. Data partitions (none in the metadata benchmark) are not
fsynced per write by default (``log.flush.interval.messages`` is ``Long.MAX_VALUE``: Kafka
relies on replication and the page cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from quorum.harness import CLUSTER_ID, REPO, ClusterCerts, hold_port, wait_until

KAFKA_VERSION = "4.4.0"
FETCH_SCRIPT = REPO / "scripts" / "kafka" / "fetch"
PINS = REPO / "scripts" / "kafka" / "jars.sha256"
POM = REPO / "scripts" / "kafka" / "pom.xml"
# The Java driver for the AdminClient calls the tools do not make (by topic id); compiled into
# the cache on first use (``compile_driver``), never into the repository. ``GroupsDriver.java``
# beside it runs kafka-consumer-groups many times in one JVM (the groups tool's test).
DRIVER_SOURCE = REPO / "scripts" / "kafka" / "AdminDriver.java"

# The nodes' JVM: a small heap (the benchmark reports RSS; Kafka's scripts default to 1 GiB)
# and Kafka's own performance flags (kafka-run-class.sh's defaults).
NODE_HEAP = ("-Xms128m", "-Xmx512m")
NODE_JVM_FLAGS = (
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
)
# Short-lived tools start faster with the client compiler only and the serial collector.
TOOL_JVM_FLAGS = (
    "-Xshare:auto",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Xmx256m",
    "-Djava.awt.headless=true",
)
STARTED = "Kafka Server started"

_LOG4J_NODE = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.kafka_request.name = kafka.request.logger
logger.kafka_request.level = WARN
"""
# Tools print their results on stdout; their logging (WARN and up) goes to stderr.
_LOG4J_TOOL = """\
status = warn
appender.err.type = Console
appender.err.name = ERR
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = ERR
# Write to System.err as it is when logging, not as it was at start: a driver that runs a tool
# many times in one JVM captures each run's stderr (scripts/kafka/GroupsDriver.java).
appender.err.follow = true
"""
_LOG4J = {"node": _LOG4J_NODE, "tool": _LOG4J_TOOL}


def cache_root() -> Path:
    """Where ``scripts/kafka/fetch`` keeps its cache (the same rule as the script's)."""
    explicit = os.environ.get("METAQUORUM_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "metaquorum"


def kafka_home() -> Path:
    return cache_root() / f"kafka-{KAFKA_VERSION}"


def java_binary(tool: str = "java") -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / tool).exists():
        return str(Path(home) / "bin" / tool)
    return shutil.which(tool)


def _java_major(java: str) -> int:
    result = subprocess.run(
        [java, "-XshowSettings:properties", "-version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    for line in result.stderr.splitlines():
        name, _, value = line.strip().partition(" = ")
        if name == "java.specification.version":
            return int(value.split(".")[0]) if value.split(".")[0].isdigit() else 0
    return 0


def _expected_stamp() -> str:
    return hashlib.sha256(POM.read_bytes() + PINS.read_bytes()).hexdigest()


def kafka_missing() -> str | None:
    """Why Kafka's jars cannot run here (one line), or None when they can."""
    java = java_binary()
    if java is None:
        return f"no java on the PATH (Kafka {KAFKA_VERSION} needs Java 17+)"
    major = _java_major(java)
    if major < 17:
        return f"{java} is Java {major}; Kafka {KAFKA_VERSION} needs 17+"
    stamp = kafka_home() / ".verified"
    if not stamp.exists():
        return (
            f"Kafka {KAFKA_VERSION} is not fetched: run scripts/kafka/fetch (cache {kafka_home()})"
        )
    if stamp.read_text().strip() != _expected_stamp():
        return (
            f"the Kafka cache {kafka_home()} was verified for other pins: run scripts/kafka/fetch"
        )
    return None


def classpath(extra: Sequence[Path] = ()) -> str:
    return os.pathsep.join([*(str(p) for p in extra), str(kafka_home() / "libs" / "*")])


def _log4j_file(name: str, text: str) -> Path:
    path = kafka_home() / name
    if not path.exists() or path.read_text() != text:
        tmp = path.with_name(f".{name}.{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(path)
    return path


def java_command(
    main_class: str,
    *args: str,
    jvm_flags: Sequence[str] = TOOL_JVM_FLAGS,
    extra_classpath: Sequence[Path] = (),
    logging: str = "tool",
) -> list[str]:
    """The command line of ``main_class`` on the cached jars; ``logging`` is "tool" (WARN and
    up to stderr) or "node" (INFO to stdout, the node's log file)."""
    java = java_binary()
    assert java is not None, "no java on the PATH"
    log_config = _log4j_file(f"log4j2-{logging}.properties", _LOG4J[logging])
    return [
        java,
        *jvm_flags,
        f"-Dlog4j2.configurationFile={log_config}",
        "-cp",
        classpath(extra_classpath),
        main_class,
        *args,
    ]


def run_tool(
    main_class: str,
    *args: str,
    timeout_s: float = 120,
    extra_classpath: Sequence[Path] = (),
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run one of Kafka's tools (a Java main class) to completion, with ``input_text`` as its
    stdin (none when None); never raises on its exit code (callers compare output and codes)."""
    return subprocess.run(
        java_command(main_class, *args, extra_classpath=extra_classpath),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        input=input_text,
        stdin=subprocess.DEVNULL if input_text is None else None,
    )


def compile_driver(source_path: Path = DRIVER_SOURCE) -> Path:
    """A Java driver of ``scripts/kafka/`` (``AdminDriver.java`` by default,
    ``GroupsDriver.java``) compiled against the cached jars, into the cache
    (``classes-<hash of the source>/``); compiled once, reused after. Returns the class dir."""
    source = source_path.read_bytes()
    out = kafka_home() / f"classes-{hashlib.sha256(source).hexdigest()[:16]}"
    if (out / f"{source_path.stem}.class").exists():
        return out
    javac = java_binary("javac")
    assert javac is not None, "no javac on the PATH"
    staging = out.with_name(f".{out.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    result = subprocess.run(
        [javac, "-nowarn", "-d", str(staging), "-cp", classpath(), str(source_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise AssertionError(f"javac {source_path.name} failed:\n{result.stdout}{result.stderr}")
    with contextlib.suppress(OSError):
        staging.replace(out)
    shutil.rmtree(staging, ignore_errors=True)
    return out


@dataclass
class KafkaNode:
    node_id: int
    role: str  # "controller" or "broker"
    port: int
    config: Path
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    # Where this start's log begins (a restart appends to the same file).
    log_offset: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log_since_start(self) -> str:
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as f:
            f.seek(self.log_offset)
            return f.read().decode(errors="replace")


def _properties(values: dict[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in values.items())


@dataclass
class KafkaCluster:
    """Kafka's KRaft: ``controllers`` voters (ids 1..) and ``brokers`` brokers (ids 101..), one
    listener each (CONTROLLER, BROKER: the brokers' client and inter-broker listener)."""

    root: Path
    controllers: int = 3
    brokers: int = 2
    security: str = "ssl"  # "ssl" (mTLS on every listener, ACLs on) or "plaintext"
    cluster_id: str = CLUSTER_ID
    heap: Sequence[str] = NODE_HEAP
    # More keys for every node, after the harness's (e.g. timeouts).
    settings: dict[str, str] = field(default_factory=dict)
    nodes: dict[int, KafkaNode] = field(default_factory=dict)
    certs: ClusterCerts | None = None

    def __post_init__(self) -> None:
        missing = kafka_missing()
        assert missing is None, missing
        assert self.security in ("ssl", "plaintext"), self.security
        self.root.mkdir(parents=True, exist_ok=True)
        if self.security == "ssl":
            self.certs = ClusterCerts(self.root / "certs", self.cluster_id)
        held: list[socket.socket] = []
        try:
            controller_ports = {n: hold_port(held) for n in range(1, self.controllers + 1)}
            broker_ports = {n: hold_port(held) for n in range(101, 101 + self.brokers)}
        finally:
            for sock in held:
                sock.close()
        voters = ",".join(f"{n}@127.0.0.1:{p}" for n, p in controller_ports.items())
        for node_id, port in [*controller_ports.items(), *broker_ports.items()]:
            role = "controller" if node_id in controller_ports else "broker"
            name = f"kafka-{role}-{node_id}"
            node = KafkaNode(
                node_id,
                role,
                port,
                self.root / f"{name}.properties",
                self.root / name,
                self.root / f"{name}.log",
            )
            node.config.write_text(_properties(self._config(node, voters)))
            self.nodes[node_id] = node

    def _config(self, node: KafkaNode, voters: str) -> dict[str, str]:
        listener = "CONTROLLER" if node.role == "controller" else "BROKER"
        protocol = "SSL" if self.certs is not None else "PLAINTEXT"
        values = {
            "process.roles": node.role,
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "controller.listener.names": "CONTROLLER",
            "listeners": f"{listener}://127.0.0.1:{node.port}",
            "listener.security.protocol.map": f"CONTROLLER:{protocol},BROKER:{protocol}",
            "log.dirs": str(node.data_dir),
            # One replica of Kafka's own internal topics: none is used by the metadata
            # benchmark, and their defaults (RF 3) would only wait for brokers.
            "offsets.topic.replication.factor": "1",
            "transaction.state.log.replication.factor": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "auto.create.topics.enable": "false",
        }
        if node.role == "broker":
            values["inter.broker.listener.name"] = "BROKER"
            values["advertised.listeners"] = f"BROKER://127.0.0.1:{node.port}"
        if self.certs is not None:
            for node_id in range(1, self.controllers + 1):
                self.certs.set_roles(node_id, ["controller"])
            supers = [
                "User:CN=admin",
                *(f"User:CN=node-{n}" for n in range(1, self.controllers + 1)),
                *(f"User:CN=node-{n}" for n in range(101, 101 + self.brokers)),
            ]
            values |= {
                "ssl.keystore.type": "PEM",
                "ssl.keystore.location": str(self.certs.node_keystore(node.node_id)),
                "ssl.truststore.type": "PEM",
                "ssl.truststore.location": str(self.certs.ca),
                "ssl.client.auth": "required",
                "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                "super.users": ";".join(supers),
            }
        return values | self.settings

    # ----- lifecycle ------------------------------------------------------------------------

    def format(self) -> None:
        """``kafka-storage.sh format`` of every node (``kafka.tools.StorageTool``), in
        parallel: one JVM each."""
        running = [
            (
                node,
                subprocess.Popen(
                    java_command(
                        "kafka.tools.StorageTool",
                        "format",
                        "--cluster-id",
                        self.cluster_id,
                        "--config",
                        str(node.config),
                        "--ignore-formatted",
                    ),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                ),
            )
            for node in self.nodes.values()
        ]
        for node, process in running:
            output, _ = process.communicate(timeout=120)
            if process.returncode != 0:
                raise AssertionError(
                    f"StorageTool format of node {node.node_id} exited {process.returncode}:\n"
                    + output.decode(errors="replace")
                )

    def start(self, node_id: int) -> KafkaNode:
        node = self.nodes[node_id]
        assert not node.alive, f"Kafka node {node_id} is already running"
        node.starts += 1
        node.log_offset = node.log_path.stat().st_size if node.log_path.exists() else 0
        with node.log_path.open("ab") as log:
            node.process = subprocess.Popen(
                java_command(
                    "kafka.Kafka",
                    str(node.config),
                    jvm_flags=[*self.heap, *NODE_JVM_FLAGS],
                    logging="node",
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return node

    def start_all(self) -> None:
        for node_id in self.nodes:
            self.start(node_id)

    def wait_started(self, node_id: int, timeout_s: float = 90) -> None:
        """Until the node's log of this start says ``Kafka Server started`` (a broker: once
        unfenced); fails early, with its log, if the process exits."""
        node = self.nodes[node_id]

        def started() -> bool:
            if not node.alive:
                raise AssertionError(
                    f"Kafka node {node_id} exited {node.process and node.process.poll()}:\n"
                    + node.log_since_start()[-4000:]
                )
            return STARTED in node.log_since_start()

        try:
            wait_until(started, timeout_s, f"Kafka node {node_id} started", interval_s=0.05)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{node.log_since_start()[-4000:]}") from None

    def wait_ready(self, timeout_s: float = 120) -> None:
        for node_id in self.nodes:
            self.wait_started(node_id, timeout_s)
        self.wait_for_leader(timeout_s)

    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout_s: float = 30) -> int:
        node = self.nodes[node_id]
        assert node.process is not None
        if node.process.poll() is None:
            node.process.send_signal(sig)
        return node.process.wait(timeout=timeout_s)

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
        for node in self.nodes.values():
            if node.process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=10)

    # ----- queries --------------------------------------------------------------------------

    @property
    def controller_ids(self) -> list[int]:
        return [n for n, node in self.nodes.items() if node.role == "controller"]

    @property
    def broker_ids(self) -> list[int]:
        return [n for n, node in self.nodes.items() if node.role == "broker"]

    @property
    def bootstrap(self) -> str:
        return ",".join(self.nodes[n].address for n in self.broker_ids)

    def quorum_state(self, node_id: int) -> dict[str, object] | None:
        """A controller's ``quorum-state`` file (Kafka's election state: leaderId,
        leaderEpoch, votedId, ...), or None before it has one."""
        path = self.nodes[node_id].data_dir / "__cluster_metadata-0" / "quorum-state"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return state if isinstance(state, dict) else None

    def leader(self) -> tuple[int, int] | None:
        """(leader id, epoch) of the newest epoch a live controller has persisted a leader
        for, when that leader is alive."""
        best: tuple[int, int] | None = None
        for node_id in self.controller_ids:
            if not self.nodes[node_id].alive:
                continue
            state = self.quorum_state(node_id)
            if state is None:
                continue
            leader, epoch = state.get("leaderId", -1), state.get("leaderEpoch", -1)
            if not isinstance(leader, int) or not isinstance(epoch, int) or leader < 0:
                continue
            if best is None or epoch > best[1]:
                best = (leader, epoch)
        if best is None or best[0] not in self.nodes or not self.nodes[best[0]].alive:
            return None
        return best

    def wait_for_leader(self, timeout_s: float = 30) -> tuple[int, int]:
        return wait_until(self.leader, timeout_s, "a Kafka controller leader")

    def logs(self, node_id: int) -> str:
        path = self.nodes[node_id].log_path
        return path.read_text(errors="replace") if path.exists() else ""

    # ----- clients --------------------------------------------------------------------------

    def confluent_config(self, bootstrap: str | None = None) -> dict[str, str]:
        """confluent-kafka settings for this cluster's brokers, as ``CN=admin``."""
        config = {"bootstrap.servers": bootstrap or self.bootstrap}
        if self.certs is not None:
            keystore = str(self.certs.client_keystore("admin"))
            config |= {
                "security.protocol": "SSL",
                "ssl.ca.location": str(self.certs.ca),
                "ssl.certificate.location": keystore,
                "ssl.key.location": keystore,
            }
        return config


@contextlib.contextmanager
def kafka_cluster(root: Path, **kwargs: object) -> Iterator[KafkaCluster]:
    """A formatted, started and ready ``KafkaCluster``; every process killed by PID after
    (the tail of each node's log on stderr when the body failed)."""
    cluster = KafkaCluster(root, **kwargs)  # type: ignore[arg-type]
    try:
        cluster.format()
        cluster.start_all()
        cluster.wait_ready()
        yield cluster
    except BaseException:
        for node_id, node in cluster.nodes.items():
            sys.stderr.write(f"---- Kafka {node.role} {node_id} log (tail) ----\n")
            sys.stderr.write(cluster.logs(node_id)[-3000:] + "\n")
        raise
    finally:
        cluster.stop_all()
