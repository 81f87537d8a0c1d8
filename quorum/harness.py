"""Real processes on 127.0.0.1, started through the ``metaquorum`` CLI and stopped by PID: the
one harness behind the process tests, the benchmarks in ``scripts/bench/`` and ``metaquorum dev
up`` (``quorum/devcluster.py`` starts and stops its nodes with ``start_node`` / ``stop_node``).

``ProcessCluster`` writes its own configs (free ports, a temporary root); ``dev up`` uses the
configs of ``deploy/local/``. Clusters speak mTLS by default (docs/security.md): one CA per test
session (``session_authority``), a certificate per node naming its node URI, ``CN=admin`` for
the tests' own clients; ``ClusterCerts.node_security(any_id)`` gives a client the identity of
any node id (``FakeBrokers`` register made-up broker ids). ``security="plaintext"`` opts out.
Every wait is a condition polled against a deadline
(``wait_until``); nothing sleeps blindly.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc

from quorum.errors import ErrorCode
from quorum.ids import Uuid
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc, raft_pb2, raft_pb2_grpc
from quorum.security.certs import CA_FILE, Authority, client_properties, node_file, write_private
from quorum.security.identity import ROLE_BROKER
from quorum.security.tls import ClientSecurity, KeyStore

REPO = Path(__file__).resolve().parent.parent
METAQUORUM = [sys.executable, "-m", "quorum.cli"]
CLUSTER_ID = "MkU3OEVBNTcwNTJENDM2Qg"
# The tests' admin client certificate (CN=admin), a super user of every mTLS test cluster.
ADMIN_PRINCIPAL = "User:CN=admin"

T = TypeVar("T")


# The ports the harness hands out (a node's listeners, a test's own servers) come from a range
# of their own: below the kernel's ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 by
# default), so neither a bind to port 0 (metrics listeners, the fault proxy's links) nor the
# local port of an outgoing connection can take one between the moment it is chosen and the
# moment its node binds it; and above deploy/local's fixed 19xxx ports (``dev up``). Each
# pytest-xdist worker (PYTEST_XDIST_WORKER=gwN of PYTEST_XDIST_WORKER_COUNT) picks from a slice
# of its own, so two workers never choose the same port, and within a process the slice is
# walked in turn from a random point, so a port comes back only after the whole slice did
# (docs/testing.md#layout). A port found bound (another program's) is skipped.
PORT_RANGE = (20_000, 32_000)


class _PortSlice:
    def __init__(self) -> None:
        low, high = PORT_RANGE
        worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        index, count = 0, 1
        if worker.startswith("gw") and worker[2:].isdigit():
            index = int(worker[2:])
            count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), index + 1)
        size = (high - low) // count
        self.low = low + index * size
        self.size = size
        self.offset = random.SystemRandom().randrange(size)  # the tests' seeded random untouched
        self.lock = threading.Lock()

    def bind(self, sock: socket.socket) -> int:
        with self.lock:
            for _ in range(self.size):
                port = self.low + self.offset
                self.offset = (self.offset + 1) % self.size
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
        raise OSError(f"no free port in {self.low}-{self.low + self.size - 1}")


_PORTS: _PortSlice | None = None


def hold_port(held: list[socket.socket]) -> int:
    """A free port on 127.0.0.1 from this process's slice (``PORT_RANGE``), kept bound (in
    ``held``) until the caller closes it."""
    global _PORTS  # one slice per process, made on first use (once xdist set its variables)
    if _PORTS is None:
        _PORTS = _PortSlice()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.append(sock)
    return _PORTS.bind(sock)


def free_port() -> int:
    """A free port on 127.0.0.1 from this process's slice, released: for a server the caller
    starts at once (no other test process can be handed it meanwhile)."""
    held: list[socket.socket] = []
    try:
        return hold_port(held)
    finally:
        for sock in held:
            sock.close()


def resident_mib(pid: int) -> float:
    """The resident memory (VmRSS) of process ``pid`` now, in MiB (benchmarks report it)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time process ``pid`` (all its threads) has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_until(
    condition: Callable[[], T | None], timeout_s: float, what: str, interval_s: float = 0.02
) -> T:
    """Poll ``condition`` until it returns something truthy; fail with ``what`` on timeout."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception as exc:  # the condition may hit a node that is down
            last_error = exc
            value = None
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(
        f"timed out after {timeout_s} s waiting for {what} (last error: {last_error})"
    )


def run_cli(
    *args: str, check: bool = True, timeout_s: float = 60
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*METAQUORUM, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"metaquorum {' '.join(args)} exited {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
    return result


def start_node(
    role: str,
    config: Path,
    log_path: Path,
    *extra: str,
    cwd: Path | None = REPO,
    new_session: bool = False,
    prefix: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``metaquorum {role} start --config CONFIG`` as a user would, JSON logs appended to
    ``log_path``. ``new_session`` keeps a terminal's Ctrl-C away from it (``dev up`` stops its
    children itself). ``prefix`` wraps the command (the fault harness starts a node under
    ``fiu-run``); ``env`` adds environment variables."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1", **(env or {})}
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [*prefix, *METAQUORUM, role, "start", "--config", str(config), *extra],
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=new_session,
        )


def stop_node(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> int:
    """SIGTERM by PID (a graceful resignation), SIGKILL if it outlives ``timeout_s``; the exit
    code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
    return process.wait(timeout=timeout_s)


DirectoryState = dict[str, tuple[int, int, int, bytes]]


def directory_state(root: Path) -> DirectoryState:
    """(inode, size, mtime_ns, bytes) of ``root`` and of every file and directory under it, by
    relative path: equal before and after means nothing was written, moved or deleted."""
    st = root.lstat()
    state: DirectoryState = {".": (st.st_ino, st.st_size, st.st_mtime_ns, b"")}
    for directory, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(directory) / name
            st = path.lstat()
            data = path.read_bytes() if path.is_file() else b""
            state[str(path.relative_to(root))] = (st.st_ino, st.st_size, st.st_mtime_ns, data)
    return state


def wait_for_unfenced_broker(admin: Any, what: str, timeout_s: float = 30) -> None:
    """Wait until the cluster ``admin`` (an ``AdminClient``) describes has an unfenced broker."""
    wait_until(
        lambda: any(not b.is_fenced for b in admin.describe_cluster().brokers), timeout_s, what
    )


_SESSION_AUTHORITY: Authority | None = None


def session_authority() -> Authority:
    """One CA per process (test session or benchmark): EC keys are cheap, but not free."""
    global _SESSION_AUTHORITY
    if _SESSION_AUTHORITY is None:
        _SESSION_AUTHORITY = Authority.create("metaquorum test CA")
    return _SESSION_AUTHORITY


class ClusterCerts:
    """The certificates of one cluster under ``directory``: ``ca.pem``, ``node-<id>.pem`` for
    any node id (issued on first use, naming ``cluster_id`` and the node's roles),
    ``<name>.pem`` for clients.

    A node's roles are the ones ``set_roles`` recorded (the cluster's controllers and brokers);
    an id never recorded is a broker's (a made-up broker). ``node_keystore(id, roles)`` with
    other roles issues another certificate for the same id (``node-<id>-<roles>.pem``): a
    broker's certificate that claims a controller's id, say."""

    def __init__(
        self, directory: Path, cluster_id: str, authority: Authority | None = None
    ) -> None:
        self.directory = directory
        self.cluster_id = cluster_id
        self.authority = authority or session_authority()
        directory.mkdir(parents=True, exist_ok=True)
        self.ca = directory / CA_FILE
        write_private(self.ca, self.authority.cert_pem, private=False)
        self._roles: dict[int, tuple[str, ...]] = {}

    def set_roles(self, node_id: int, roles: Sequence[str]) -> None:
        self._roles[node_id] = tuple(roles)

    def roles_of(self, node_id: int) -> tuple[str, ...]:
        return self._roles.get(node_id, (ROLE_BROKER,))

    def node_keystore(self, node_id: int, roles: Sequence[str] | None = None) -> Path:
        own = self.roles_of(node_id)
        chosen = own if roles is None else tuple(roles)
        name = node_file(node_id)
        if chosen != own:
            name = name.replace(".pem", f"-{'-'.join(chosen) or 'norole'}.pem")
        path = self.directory / name
        if not path.exists():
            pem = self.authority.issue_node(self.cluster_id, node_id, chosen)
            write_private(path, pem, private=True)
        return path

    def client_keystore(self, name: str = "admin") -> Path:
        path = self.directory / f"{name}.pem"
        if not path.exists():
            write_private(path, self.authority.issue_client(name), private=True)
        return path

    def client_properties(self, name: str = "admin") -> Path:
        """A ``client.properties`` for ``--command-config`` with the client ``CN=<name>``."""
        path = self.directory / f"{name}.properties"
        if not path.exists():
            keystore = self.client_keystore(name)
            write_private(path, client_properties(keystore.name, CA_FILE).encode(), private=False)
        return path

    def kafka_client_properties(self, name: str = "admin") -> Path:
        """Client properties for Kafka's own Java tools and AdminClient (``--command-config``,
        ``--admin.config``): mTLS as ``CN=<name>`` with the PEM files by absolute path (Kafka's
        clients read ``ssl.keystore.type=PEM``: the key and certificate in one file)."""
        path = self.directory / f"{name}-kafka.properties"
        if not path.exists():
            text = client_properties(str(self.client_keystore(name)), str(self.ca))
            write_private(path, text.encode(), private=False)
        return path

    def client_security(self, name: str = "admin") -> ClientSecurity:
        return ClientSecurity.ssl(
            truststore=self.ca, keystore=KeyStore(location=self.client_keystore(name))
        )

    def node_security(self, node_id: int, roles: Sequence[str] | None = None) -> ClientSecurity:
        """A client holding node ``node_id``'s certificate (any id, e.g. a made-up broker),
        in its own roles or in ``roles``."""
        return ClientSecurity.ssl(
            truststore=self.ca, keystore=KeyStore(location=self.node_keystore(node_id, roles))
        )

    def node_settings(self, node_id: int, listener_name: str) -> dict[str, Any]:
        return {
            "listener.security.protocol.map": [f"{listener_name}:SSL"],
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.node_keystore(node_id)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.ca),
            "ssl.client.auth": "required",
        }


@dataclass
class ControllerProcess:
    """A controller or a broker process (``role``)."""

    node_id: int
    port: int
    config: Path
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    role: str = "controller"
    # A broker's Kafka listeners (docs/kafka-listener.md): listener name -> port.
    kafka_ports: dict[str, int] = field(default_factory=dict)

    def kafka_address(self, listener_name: str = "KAFKA") -> str:
        return f"127.0.0.1:{self.kafka_ports[listener_name]}"

    @property
    def metadata_dir(self) -> Path:
        base = self.data_dir / "metadata" if self.role == "broker" else self.data_dir
        return base / "__cluster_metadata-0"

    @property
    def log_dir(self) -> Path:
        """A broker's (only) log dir."""
        return self.data_dir / "logs"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class ProcessCluster:
    root: Path
    voters: int = 3
    settings: dict[str, Any] = field(default_factory=dict)
    brokers: int = 0
    broker_settings: dict[str, Any] = field(default_factory=dict)
    cluster_id: str = CLUSTER_ID
    nodes: dict[int, ControllerProcess] = field(default_factory=dict)
    # "ssl" (mTLS, the default) or "plaintext" (insecure; for tests that must speak it).
    security: str = "ssl"
    # Keys every node gets (controllers and brokers), after the security keys.
    node_settings: dict[str, Any] = field(default_factory=dict)
    certs: ClusterCerts | None = None
    # A ``quorum.faults.proxy.FaultProxy``: every node reaches every controller through a link
    # of its own (node -> controller), so the fault harness can cut, delay or reset it.
    # Clients (tests, FakeBrokers) still connect directly.
    proxy: Any = None
    # Kafka wire-protocol listeners every broker gets, listener name -> security protocol
    # ("SSL" or "PLAINTEXT"), e.g. {"KAFKA": "SSL"} (docs/kafka-listener.md).
    kafka_listeners: dict[str, str] = field(default_factory=dict)
    # KIP-853: every node gets controller.quorum.bootstrap.servers (every controller's address)
    # instead of controller.quorum.voters; format the controllers with --standalone,
    # --initial-controllers or --no-initial-controllers (``format(..., extra=...)``).
    dynamic: bool = False

    def _quorum_for(self, node_id: int, ports: dict[int, int]) -> dict[str, Any]:
        """Where node ``node_id`` finds the quorum: the static voters, or (``dynamic``) the
        bootstrap servers."""
        if self.dynamic:
            return {
                "controller.quorum.bootstrap.servers": [f"127.0.0.1:{p}" for p in ports.values()]
            }
        return {"controller.quorum.voters": self._voters_for(node_id, ports)}

    def _voters_for(self, node_id: int, ports: dict[int, int]) -> list[str]:
        """``controller.quorum.voters`` as node ``node_id`` sees it: through its proxy links."""
        if self.proxy is None:
            return [f"{n}@127.0.0.1:{p}" for n, p in ports.items()]
        return [
            f"{n}@127.0.0.1:{p if n == node_id else self.proxy.add_link(str(node_id), str(n), p)}"
            for n, p in ports.items()
        ]

    def __post_init__(self) -> None:
        # Every node's port stays bound here until all configs are written, so the proxy's
        # link ports (bound meanwhile) can never take one of them.
        held: list[socket.socket] = []
        try:
            self._write_configs(held)
        finally:
            for sock in held:
                sock.close()

    def _write_configs(self, held: list[socket.socket]) -> None:
        assert self.security in ("ssl", "plaintext"), self.security
        if self.security == "ssl":
            self.certs = ClusterCerts(self.root / "certs", self.cluster_id)
        ports = {n: hold_port(held) for n in range(1, self.voters + 1)}
        for node_id, port in ports.items():
            data_dir = self.root / f"controller-{node_id}"
            config = self.root / f"controller-{node_id}.toml"
            self.write_config(
                config,
                {
                    "node.id": node_id,
                    "process.roles": ["controller"],
                    **self._quorum_for(node_id, ports),
                    "listeners": [f"CONTROLLER://127.0.0.1:{port}"],
                    "metadata.log.dir": str(data_dir),
                },
                self.settings,
            )
            self.nodes[node_id] = ControllerProcess(
                node_id, port, config, data_dir, self.root / f"controller-{node_id}.log"
            )
        for node_id in range(101, 101 + self.brokers):
            port = hold_port(held)
            kafka_ports = {name: hold_port(held) for name in self.kafka_listeners}
            data_dir = self.root / f"broker-{node_id}"
            config = self.root / f"broker-{node_id}.toml"
            self.write_config(
                config,
                {
                    "node.id": node_id,
                    "process.roles": ["broker"],
                    **self._quorum_for(node_id, ports),
                    "listeners": [f"BROKER://127.0.0.1:{port}"]
                    + [f"{name}://127.0.0.1:{p}" for name, p in kafka_ports.items()],
                    "log.dirs": [str(data_dir / "logs")],
                    "metadata.log.dir": str(data_dir / "metadata"),
                },
                self.broker_settings,
            )
            self.nodes[node_id] = ControllerProcess(
                node_id,
                port,
                config,
                data_dir,
                self.root / f"broker-{node_id}.log",
                role="broker",
                kafka_ports=kafka_ports,
            )

    def write_config(self, path: Path, base: dict[str, Any], role_settings: dict[str, Any]) -> None:
        """The one place node configs are written: the node's own keys, then its security
        keys, then ``node_settings`` (every node), then the role's settings."""
        node_id = int(base["node.id"])
        listener_name = str(base["listeners"][0]).split(":", 1)[0]
        if self.certs is not None:
            self.certs.set_roles(node_id, base["process.roles"])
            # ACLs on (the default authorizer); the tests' admin (CN=admin) is a super user.
            security = {
                **self.certs.node_settings(node_id, listener_name),
                "super.users": [ADMIN_PRINCIPAL],
            }
        else:
            # Every PLAINTEXT caller is User:ANONYMOUS: no authorizer, as Kafka without one.
            security = {
                "listener.security.protocol.map": [f"{listener_name}:PLAINTEXT"],
                "authorizer.class.name": "",
            }
        kafka = [str(entry).split(":", 1)[0] for entry in base["listeners"][1:]]
        security["listener.security.protocol.map"] = [
            *security["listener.security.protocol.map"],
            *(f"{name}:{self.kafka_listeners[name]}" for name in kafka),
        ]
        settings = {**base, **security, **self.node_settings, **role_settings}
        lines = [f'"{k}" = {json.dumps(v)}' for k, v in settings.items()]
        path.write_text("\n".join(lines) + "\n")

    # ----- clients --------------------------------------------------------------------------

    def client_security(self, name: str = "admin") -> ClientSecurity:
        """How the tests' clients connect: as ``CN=<name>`` over mTLS, or PLAINTEXT."""
        if self.certs is None:
            return ClientSecurity.plaintext()
        return self.certs.client_security(name)

    def node_security(self, node_id: int, roles: Sequence[str] | None = None) -> ClientSecurity:
        """A client holding the certificate of node ``node_id`` (any id), in its own roles
        or in ``roles``."""
        if self.certs is None:
            return ClientSecurity.plaintext()
        return self.certs.node_security(node_id, roles)

    def channel(self, target: int | str, security: ClientSecurity | None = None) -> grpc.Channel:
        """A channel to a node (id or address) as the admin (or ``security``)."""
        address = self.nodes[target].address if isinstance(target, int) else target
        return (security or self.client_security()).channel(address)

    def admin(self, bootstrap: str | None = None, **kwargs: Any) -> Any:
        """An ``AdminClient`` on ``bootstrap`` (default: every controller) as ``CN=admin``."""
        from quorum.admin import AdminClient  # noqa: PLC0415 - the harness stays light

        kwargs.setdefault("security", self.client_security())
        return AdminClient(bootstrap or self.bootstrap, **kwargs)

    @property
    def bootstrap(self) -> str:
        return ",".join(self.nodes[n].address for n in self.controller_ids)

    def command_config(self) -> list[str]:
        """``--command-config FILE`` for CLI commands that connect (empty when plaintext)."""
        if self.certs is None:
            return []
        return ["--command-config", str(self.certs.client_properties())]

    def run_cli(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        """``run_cli`` with ``--command-config`` added to the commands that connect."""
        if args and args[0] in ("topics", "quorum", "acls", "configs"):
            args = (*args, *self.command_config())
        return run_cli(*args, **kwargs)

    # ----- lifecycle ------------------------------------------------------------------------

    def format(
        self, node_id: int | None = None, cluster_id: str | None = None, extra: Sequence[str] = ()
    ) -> None:
        """``storage format`` node ``node_id`` (default: every node); ``extra``: more flags
        (``--standalone``, ``--no-initial-controllers``, ...)."""
        for nid in [node_id] if node_id else list(self.nodes):
            node = self.nodes[nid]
            run_cli(
                "storage", "format", "--config", str(node.config),
                "--cluster-id", cluster_id or self.cluster_id, *extra,
            )  # fmt: skip

    def start(
        self,
        node_id: int,
        *extra: str,
        prefix: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> ControllerProcess:
        """Start node ``node_id``; ``prefix`` and ``env`` as ``start_node``'s."""
        node = self.nodes[node_id]
        assert not node.alive, f"controller {node_id} is already running"
        node.starts += 1
        node.process = start_node(
            node.role, node.config, node.log_path, *extra, prefix=prefix, env=env
        )
        return node

    def start_all(self) -> None:
        for node_id in self.nodes:
            self.start(node_id)

    def kill(self, node_id: int, sig: int = signal.SIGKILL, timeout_s: float = 10) -> int:
        node = self.nodes[node_id]
        assert node.process is not None
        if node.process.poll() is None:
            node.process.send_signal(sig)
        try:
            return node.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            # Say what the node was doing: the end of its log, with the signal it did not obey.
            tail = "\n".join(self.logs(node_id).splitlines()[-40:])
            raise AssertionError(
                f"node {node_id} still runs {timeout_s} s after signal {sig}; its log ends:\n{tail}"
            ) from None

    def stop_all(self) -> None:
        for node in self.nodes.values():
            if node.process is not None and node.process.poll() is None:
                node.process.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.process.wait(timeout=10)

    def logs(self, node_id: int) -> str:
        path = self.nodes[node_id].log_path
        return path.read_text(errors="replace") if path.exists() else ""

    def events(self, node_id: int, event: str | None = None) -> list[dict[str, Any]]:
        """The structured log records of a node (its JSON lines), or only those of ``event``."""
        records = []
        for line in self.logs(node_id).splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and (event is None or record.get("event") == event):
                records.append(record)
        return records

    # ----- queries --------------------------------------------------------------------------

    def describe(self, node_id: int, timeout_s: float = 2.0) -> Any:
        with self.channel(node_id) as channel:
            stub = raft_pb2_grpc.QuorumServiceStub(channel)
            return stub.DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=timeout_s)

    @property
    def controller_ids(self) -> list[int]:
        return [n for n, p in self.nodes.items() if p.role == "controller"]

    @property
    def broker_ids(self) -> list[int]:
        return [n for n, p in self.nodes.items() if p.role == "broker"]

    def leader(self, among: list[int] | None = None) -> tuple[int, int, int] | None:
        """(leader id, epoch, high watermark) as a live node reports it, if it knows one."""
        for node_id in among or [n for n in self.controller_ids if self.nodes[n].alive]:
            try:
                answer = self.describe(node_id)
            except grpc.RpcError:
                continue
            if answer.error_code == 0 and answer.leader_id >= 0:
                return answer.leader_id, answer.leader_epoch, answer.high_watermark
        return None

    def wait_for_leader(
        self, timeout_s: float = 20, among: list[int] | None = None
    ) -> tuple[int, int, int]:
        return wait_until(lambda: self.leader(among), timeout_s, "a leader")

    def wait_for_agreed_leader(self, timeout_s: float = 20) -> tuple[int, int, int]:
        """A leader every live controller names, in the same epoch: unlike ``wait_for_leader``,
        not a candidate's win that a split vote at start-up may still overtake."""

        def agreed() -> tuple[int, int, int] | None:
            seen = [self.leader([n]) for n in self.controller_ids if self.nodes[n].alive]
            first = seen[0] if seen else None
            if first is not None and all(s is not None and s[:2] == first[:2] for s in seen):
                return first
            return None

        return wait_until(agreed, timeout_s, "a leader every live controller names")

    def log_dump(self, node_id: int) -> list[dict[str, Any]]:
        result = run_cli("log", "dump", str(self.nodes[node_id].metadata_dir))
        return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@contextlib.contextmanager
def process_cluster(root: Path, **kwargs: Any) -> Iterator[ProcessCluster]:
    cluster = ProcessCluster(root, **kwargs)
    try:
        yield cluster
    except BaseException:
        for node_id, node in cluster.nodes.items():
            sys.stderr.write(f"---- {node.role} {node_id} log (tail) ----\n")
            sys.stderr.write(cluster.logs(node_id)[-4000:] + "\n")
        raise
    finally:
        cluster.stop_all()


HEARTBEAT_INTERVAL_S = 1.0


class FakeBrokers:
    """Brokers that exist only as registrations and heartbeats (no process): enough for the
    controller to place replicas. A background thread heartbeats until stopped."""

    def __init__(self, cluster: ProcessCluster, broker_ids: list[int]) -> None:
        self.cluster = cluster
        # Each made-up broker calls with a certificate naming its own id (docs/security.md).
        self.securities = {b: cluster.node_security(b) for b in broker_ids}
        self.epochs: dict[int, int] = {}
        self.incarnations = {b: Uuid.random() for b in broker_ids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._heartbeat_loop, daemon=True)

    def _call(self, method: str, request: object, broker_id: int) -> object:
        """Call the active controller (follow NOT_CONTROLLER through any node) as broker
        ``broker_id``."""

        def attempt() -> object | None:
            for node in (self.cluster.nodes[n] for n in self.cluster.controller_ids):
                if not node.alive:
                    continue
                try:
                    with self.securities[broker_id].channel(node.address) as channel:
                        stub = admin_pb2_grpc.AdminServiceStub(channel)
                        answer: object = getattr(stub, method)(request, timeout=5)
                except grpc.RpcError:
                    continue
                if getattr(answer, "error_code", None) != ErrorCode.NOT_CONTROLLER:
                    return answer
            return None

        return wait_until(attempt, 20, f"{method} answered by the active controller")

    def register(self) -> None:
        for broker_id, incarnation in self.incarnations.items():
            answer = self._call(
                "RegisterBroker",
                admin_pb2.RegisterBrokerRequest(
                    cluster_id=CLUSTER_ID,
                    broker_id=broker_id,
                    incarnation_id=incarnation.bytes,
                    listeners=[
                        admin_pb2.BrokerListener(name="PLAINTEXT", host="127.0.0.1", port=9)
                    ],
                ),
                broker_id,
            )
            assert answer.error_code == 0, answer  # type: ignore[attr-defined]
            self.epochs[broker_id] = answer.broker_epoch  # type: ignore[attr-defined]
        self.heartbeat_all()
        self._thread.start()

    def heartbeat_all(self) -> bool:
        fenced = False
        for broker_id, epoch in self.epochs.items():
            answer = self._call(
                "BrokerHeartbeat",
                admin_pb2.BrokerHeartbeatRequest(
                    broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1 << 40
                ),
                broker_id,
            )
            fenced |= bool(answer.is_fenced)  # type: ignore[attr-defined]
        return not fenced

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(HEARTBEAT_INTERVAL_S):
            with contextlib.suppress(AssertionError):
                self.heartbeat_all()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)


@contextlib.contextmanager
def cluster_with_brokers(
    tmp_path: Path, brokers: int = 3, **kwargs: Any
) -> Iterator[ProcessCluster]:
    with process_cluster(tmp_path, **kwargs) as cluster:
        cluster.format()
        cluster.start_all()
        cluster.wait_for_leader(timeout_s=30)
        test_brokers = FakeBrokers(cluster, list(range(101, 101 + brokers)))
        test_brokers.register()
        wait_until(test_brokers.heartbeat_all, 20, "every test broker unfenced")
        try:
            yield cluster
        finally:
            test_brokers.stop()


class ConcurrentFakeBrokers(FakeBrokers):
    """``FakeBrokers`` for large runs (scripts/bench/scale.py): one channel per controller kept
    open, and every heartbeat of a round in flight at once. ``FakeBrokers`` opens a channel per
    call and heartbeats one broker after another, which with a hundred brokers and a busy
    leader can take longer than ``broker.session.timeout.ms``. Rounds and their durations are
    counted so a benchmark can report whether heartbeats kept up."""

    def __init__(
        self,
        cluster: ProcessCluster,
        broker_ids: list[int],
        interval_s: float = HEARTBEAT_INTERVAL_S,
        round_timeout_s: float = 20,
        call_timeout_s: float = 5.0,
    ) -> None:
        super().__init__(cluster, broker_ids)
        self.interval_s = interval_s
        self.round_timeout_s = round_timeout_s
        self.call_timeout_s = call_timeout_s  # a real broker's (broker/controller_client.py)
        # One channel per controller and broker: each broker calls with its own certificate.
        self._channels: dict[tuple[str, int], grpc.Channel] = {}
        self._leader_address: str | None = None
        self.rounds = 0
        self.failed_rounds = 0
        self.slowest_round_s = 0.0
        self.fenced_answers = 0

    def _stub(self, address: str, broker_id: int) -> admin_pb2_grpc.AdminServiceStub:
        channel = self._channels.get((address, broker_id))
        if channel is None:
            channel = self._channels[(address, broker_id)] = self.securities[broker_id].channel(
                address
            )
        return admin_pb2_grpc.AdminServiceStub(channel)

    def _candidates(self) -> list[str]:
        alive = [
            self.cluster.nodes[n].address
            for n in self.cluster.controller_ids
            if self.cluster.nodes[n].alive
        ]
        if self._leader_address in alive:
            alive.remove(self._leader_address)
            alive.insert(0, self._leader_address)
        return alive

    def _send_round(
        self, addresses: list[str], pending: dict[int, int], timeout_s: float
    ) -> tuple[dict[int, Any], str | None]:
        """Every pending heartbeat to every address at once; the first answer per broker that
        is not NOT_CONTROLLER wins. Returns those answers and the address that gave them."""
        futures = [
            (
                address,
                broker_id,
                self._stub(address, broker_id).BrokerHeartbeat.future(
                    admin_pb2.BrokerHeartbeatRequest(
                        broker_id=broker_id, broker_epoch=epoch, current_metadata_offset=1 << 40
                    ),
                    timeout=timeout_s,
                ),
            )
            for address in addresses
            for broker_id, epoch in pending.items()
        ]
        answers: dict[int, Any] = {}
        leader: str | None = None
        for address, broker_id, future in futures:
            try:
                answer = future.result()
            except grpc.RpcError:
                continue
            if answer.error_code == ErrorCode.NOT_CONTROLLER or broker_id in answers:
                continue
            answers[broker_id] = answer
            leader = address
        return answers, leader

    def heartbeat_all(self) -> bool:
        """One round: to the controller that answered last time; whatever it did not answer
        goes to every live controller at once, until the round times out."""
        started = time.monotonic()
        pending = dict(self.epochs)
        fenced = False
        targets = [self._leader_address] if self._leader_address else []
        while pending and time.monotonic() - started < self.round_timeout_s:
            alive = self._candidates()
            addresses = [a for a in targets if a in alive] or alive
            answers, leader = self._send_round(addresses, pending, self.call_timeout_s)
            if leader is not None:
                self._leader_address = leader
            for broker_id, answer in answers.items():
                del pending[broker_id]
                fenced |= bool(answer.is_fenced)
            targets = []  # next attempt: every live controller
            if pending and not answers:
                time.sleep(0.05)
        took = time.monotonic() - started
        self.rounds += 1
        self.slowest_round_s = max(self.slowest_round_s, took)
        if pending:
            self.failed_rounds += 1
            return False
        self.fenced_answers += int(fenced)
        return not fenced

    def _heartbeat_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            with contextlib.suppress(AssertionError):
                self.heartbeat_all()

    def stop(self) -> None:
        super().stop()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
