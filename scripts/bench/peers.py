#!/usr/bin/env python3
"""metaquorum side by side with etcd (``--peer etcd``, the default: the same Python gRPC client
pattern against each) or with Apache Kafka's own KRaft (``--peer kafka``: the same Kafka client
against both clusters' brokers; see ``kafka_main`` below and docs/benchmarks.md).

How the numbers are taken. Both systems run on this machine, one after the other (never both at
once), each as three members on 127.0.0.1 with fsync on and data in a temporary directory, both
over mutual TLS with certificates from one throw-away CA (``--security plaintext``: both
without). etcd is Debian's ``etcd-server`` (``etcd`` on the PATH; nothing is installed here):
if it is missing, only metaquorum's figures are printed. The client is this process:

1. sequential: a synchronous stub on one channel to the leader, one request at a time
   (``--sequential`` requests after 50 of warm-up). metaquorum: CreateTopics of one topic (1
   partition, replication factor 3, three brokers registered by the harness); etcd: a Put of a
   new key with a 16-byte value.
2. throughput: ``grpc.aio`` with ``--in-flight`` requests in flight on one channel to the
   leader for ``--seconds``; every answer is checked. Elections during the window are counted
   (metaquorum: the leader epoch before and after; etcd: the Raft term), and for metaquorum the
   loop turns any controller logged as longer than a tenth of the fetch timeout
   (``loop_turn_slow``, 200 ms at Kafka's defaults). CPU per write: the user and system time
   of each member (all its threads, from /proc/PID/stat) and of this client process over the
   window, divided by the writes acknowledged in it.
3. failover: ``--failover-runs`` times, kill -9 of the leader; the clock runs from the signal
   until a write is acknowledged by a survivor (each tried in turn with a 200 ms deadline; a
   metaquorum follower answers NOT_CONTROLLER and the next one is tried). The killed member is
   restarted and the cluster settles before the next run.
4. idle RSS: VmRSS of each member after 5 s without client traffic, from /proc.

Each figure is printed with the metaquorum/etcd ratio (for latencies and failover, lower is
better; for throughput, higher is better). ``--repeat N`` runs the whole comparison N times and
prints min/median/max of every figure.

Usage: .venv/bin/python scripts/bench/peers.py [--sequential 2000] [--in-flight 64]
       [--seconds 15] [--failover-runs 5] [--repeat 3] [--security ssl|plaintext] [--only etcd|mq]
       .venv/bin/python scripts/bench/peers.py --peer kafka [--sequential 1000] [--seconds 15]
       [--warm-up-seconds 60] [--propagation 200] [--failover-runs 5] [--idle-seconds 10]
       [--scale-partitions 100000] [--data | --data-only] [--data-records 300000]
       [--data-warm-up 100000]
       [--repeat 1] [--security ssl|plaintext] [--only kafka|mq]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from quorum.harness import cluster_with_brokers, cpu_seconds, free_port, resident_mib, wait_until
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc
from quorum.security.certs import Authority

WARM_UP = 50
FAILOVER_CALL_TIMEOUT_S = 0.2

# ----- etcd's v3 API, just the messages this benchmark sends ------------------------------------
# Built at run time from field numbers of etcd's rpc.proto (etcdserverpb), so no generated
# etcd code is needed: Put (KV) and Status (Maintenance, to find the leader and the Raft term).


def _etcd_messages() -> dict[str, Any]:
    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(
        name="bench_etcd_rpc.proto", package="etcdserverpb", syntax="proto3"
    )

    def message(name: str, *fields: tuple[str, int, int, str | None]) -> None:
        m = file.message_type.add(name=name)
        for field_name, number, kind, type_name in fields:
            added = m.field.add(name=field_name, number=number, type=kind, label=f.LABEL_OPTIONAL)
            if type_name:
                added.type_name = type_name

    message(
        "ResponseHeader",
        ("cluster_id", 1, f.TYPE_UINT64, None),
        ("member_id", 2, f.TYPE_UINT64, None),
        ("revision", 3, f.TYPE_INT64, None),
        ("raft_term", 4, f.TYPE_UINT64, None),
    )
    message("PutRequest", ("key", 1, f.TYPE_BYTES, None), ("value", 2, f.TYPE_BYTES, None))
    message("PutResponse", ("header", 1, f.TYPE_MESSAGE, ".etcdserverpb.ResponseHeader"))
    message("StatusRequest")
    message(
        "StatusResponse",
        ("header", 1, f.TYPE_MESSAGE, ".etcdserverpb.ResponseHeader"),
        ("version", 2, f.TYPE_STRING, None),
        ("leader", 4, f.TYPE_UINT64, None),
        ("raft_term", 6, f.TYPE_UINT64, None),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"etcdserverpb.{name}"))
        for name in ("PutRequest", "PutResponse", "StatusRequest", "StatusResponse")
    }


ETCD = _etcd_messages()


def _etcd_put(channel: grpc.Channel | grpc.aio.Channel) -> Callable[..., Any]:
    return channel.unary_unary(
        "/etcdserverpb.KV/Put",
        request_serializer=ETCD["PutRequest"].SerializeToString,
        response_deserializer=ETCD["PutResponse"].FromString,
    )


def _etcd_status(channel: grpc.Channel) -> Callable[..., Any]:
    return channel.unary_unary(
        "/etcdserverpb.Maintenance/Status",
        request_serializer=ETCD["StatusRequest"].SerializeToString,
        response_deserializer=ETCD["StatusResponse"].FromString,
    )


# ----- the two systems behind one interface -----------------------------------------------------


@dataclass
class Security:
    """Either mTLS from one CA (files under ``directory``) or plaintext."""

    directory: Path
    tls: bool
    authority: Authority | None = None

    def __post_init__(self) -> None:
        if self.tls:
            self.authority = Authority.create("peers benchmark CA")
            (self.directory / "ca.pem").write_bytes(self.authority.cert_pem)
            (self.directory / "client.pem").write_bytes(self.authority.issue_client("admin"))

    def server_pem(self, name: str) -> Path:
        assert self.authority is not None
        path = self.directory / f"{name}.pem"
        path.write_bytes(self.authority.issue(name, dns_names=["localhost"],
                                              ip_addresses=["127.0.0.1"]))  # fmt: skip
        return path

    def credentials(self) -> grpc.ChannelCredentials:
        pem = (self.directory / "client.pem").read_bytes()
        key, _, cert = pem.partition(b"-----BEGIN CERTIFICATE-----")
        return grpc.ssl_channel_credentials(
            root_certificates=(self.directory / "ca.pem").read_bytes(),
            private_key=key,
            certificate_chain=b"-----BEGIN CERTIFICATE-----" + cert,
        )

    def channel(self, address: str) -> grpc.Channel:
        if self.tls:
            return grpc.secure_channel(address, self.credentials())
        return grpc.insecure_channel(address)

    def aio_channel(self, address: str) -> grpc.aio.Channel:
        if self.tls:
            return grpc.aio.secure_channel(address, self.credentials())
        return grpc.aio.insecure_channel(address)


class System:
    """What the benchmark needs of a running three-member cluster."""

    name: str

    def leader_address(self) -> str:
        raise NotImplementedError

    def elections_marker(self) -> int:
        """A number that grows with each election (a leader epoch, a Raft term)."""
        raise NotImplementedError

    def slow_turns(self) -> int:
        """metaquorum: loop turns logged as longer than a tenth of the fetch timeout
        (``loop_turn_slow``) by any member so far; -1 where there is no such measure."""
        return -1

    def writer(self, channel: grpc.Channel) -> Callable[[str, float], None]:
        """One write of a new key; the callable is built once per channel, as a client keeps
        its stub."""
        raise NotImplementedError

    def aio_writer(self, channel: grpc.aio.Channel) -> Callable[[str], Awaitable[None]]:
        raise NotImplementedError

    def member_pids(self) -> dict[str, int]:
        raise NotImplementedError

    def kill_leader(self) -> tuple[str, list[str]]:
        """kill -9 the leader; returns it and the survivors' addresses."""
        raise NotImplementedError

    def restart(self, member: str) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        raise NotImplementedError


class Etcd(System):
    name = "etcd"

    def __init__(self, root: Path, security: Security) -> None:
        self.root = root
        self.security = security
        scheme = "https" if security.tls else "http"
        self.members = {
            f"e{i}": (free_port(), free_port()) for i in range(1, 4)
        }  # name -> (client port, peer port)
        self.initial = ",".join(
            f"{n}={scheme}://127.0.0.1:{peer}" for n, (_, peer) in self.members.items()
        )
        self.scheme = scheme
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.ids: dict[str, int] = {}

    def _args(self, name: str, state: str) -> list[str]:
        client, peer = self.members[name]
        args = [
            "etcd",
            f"--name={name}",
            f"--data-dir={self.root / name}",
            f"--listen-client-urls={self.scheme}://127.0.0.1:{client}",
            f"--advertise-client-urls={self.scheme}://127.0.0.1:{client}",
            f"--listen-peer-urls={self.scheme}://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls={self.scheme}://127.0.0.1:{peer}",
            f"--initial-cluster={self.initial}",
            "--initial-cluster-token=peers-bench",
            f"--initial-cluster-state={state}",
            "--log-level=error",
            "--logger=zap",
        ]
        if self.security.tls:
            pem = self.security.server_pem(name)
            ca = self.security.directory / "ca.pem"
            args += [
                f"--cert-file={pem}", f"--key-file={pem}", "--client-cert-auth",
                f"--trusted-ca-file={ca}", f"--peer-cert-file={pem}", f"--peer-key-file={pem}",
                "--peer-client-cert-auth", f"--peer-trusted-ca-file={ca}",
            ]  # fmt: skip
        return args

    def start(self, name: str, state: str = "new") -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.processes[name] = subprocess.Popen(
            self._args(name, state), stdout=log, stderr=subprocess.STDOUT
        )

    def address(self, name: str) -> str:
        return f"127.0.0.1:{self.members[name][0]}"

    def status(self, name: str) -> Any:
        with self.security.channel(self.address(name)) as channel:
            return _etcd_status(channel)(ETCD["StatusRequest"](), timeout=1)

    def _leader(self) -> str | None:
        for name in self.members:
            if self.processes[name].poll() is not None:
                continue
            try:
                answer = self.status(name)
            except grpc.RpcError:
                continue
            self.ids[name] = answer.header.member_id
            if answer.leader and answer.leader == answer.header.member_id:
                return name
        return None

    def leader(self) -> str:
        found: str = wait_until(self._leader, 30, "an etcd leader")
        return found

    def leader_address(self) -> str:
        return self.address(self.leader())

    def elections_marker(self) -> int:
        return int(self.status(self.leader()).raft_term)

    def writer(self, channel: grpc.Channel) -> Callable[[str, float], None]:
        put, request = _etcd_put(channel), ETCD["PutRequest"]

        def write(key: str, timeout_s: float) -> None:
            put(request(key=key.encode(), value=b"v" * 16), timeout=timeout_s)

        return write

    def aio_writer(self, channel: grpc.aio.Channel) -> Callable[[str], Awaitable[None]]:
        put, request = _etcd_put(channel), ETCD["PutRequest"]

        async def write(key: str) -> None:
            await put(request(key=key.encode(), value=b"v" * 16), timeout=10)

        return write

    def member_pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.processes.items()}

    def kill_leader(self) -> tuple[str, list[str]]:
        leader = self.leader()
        self.processes[leader].send_signal(signal.SIGKILL)
        return leader, [self.address(n) for n in self.members if n != leader]

    def restart(self, member: str) -> None:
        self.processes[member].wait(timeout=15)
        self.start(member, state="existing")

    def settle(self) -> None:
        def caught_up() -> bool:
            try:
                indexes = [self.status(n).header.revision for n in self.members]
            except grpc.RpcError:
                return False
            return self._leader() is not None and len(set(indexes)) == 1

        wait_until(caught_up, 60, "etcd members caught up")

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def etcd_cluster(root: Path, security: Security) -> Iterator[Etcd]:
    etcd = Etcd(root, security)
    try:
        for name in etcd.members:
            etcd.start(name)
        etcd.leader()
        etcd.settle()
        yield etcd
    finally:
        etcd.stop()


def _create(name: str) -> admin_pb2.CreateTopicsRequest:
    return admin_pb2.CreateTopicsRequest(
        topics=[admin_pb2.CreatableTopic(name=name, num_partitions=1, replication_factor=3)]
    )


def _check(answer: admin_pb2.CreateTopicsResponse) -> None:
    if answer.error_code:
        raise RuntimeError(f"CreateTopics: {answer.error_code} {answer.error_message}")
    for topic in answer.topics:
        if topic.error_code:
            raise RuntimeError(f"CreateTopics {topic.name}: {topic.error_code} "
                               f"{topic.error_message}")  # fmt: skip


class Metaquorum(System):
    name = "metaquorum"

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self.security = cluster.client_security()

    def leader_address(self) -> str:
        leader, _, _ = self.cluster.wait_for_leader()
        return str(self.cluster.nodes[leader].address)

    def elections_marker(self) -> int:
        _, epoch, _ = self.cluster.wait_for_leader()
        return int(epoch)

    def slow_turns(self) -> int:
        return sum(
            self.cluster.logs(n).count('"loop_turn_slow"') for n in self.cluster.controller_ids
        )

    def writer(self, channel: grpc.Channel) -> Callable[[str, float], None]:
        create = admin_pb2_grpc.AdminServiceStub(channel).CreateTopics

        def write(key: str, timeout_s: float) -> None:
            _check(create(_create(key), timeout=timeout_s))

        return write

    def aio_writer(self, channel: grpc.aio.Channel) -> Callable[[str], Awaitable[None]]:
        create = admin_pb2_grpc.AdminServiceStub(channel).CreateTopics

        async def write(key: str) -> None:
            _check(await create(_create(key), timeout=10))

        return write

    def member_pids(self) -> dict[str, int]:
        return {
            f"controller-{n}": self.cluster.nodes[n].process.pid
            for n in self.cluster.controller_ids
        }

    def kill_leader(self) -> tuple[str, list[str]]:
        leader, _, _ = self.cluster.wait_for_leader()
        self.cluster.nodes[leader].process.send_signal(signal.SIGKILL)
        survivors = [self.cluster.nodes[n].address for n in self.cluster.controller_ids
                     if n != leader]  # fmt: skip
        return str(leader), survivors

    def restart(self, member: str) -> None:
        node = self.cluster.nodes[int(member)]
        node.process.wait(timeout=15)
        self.cluster.start(int(member))

    def settle(self) -> None:
        def settled() -> bool:
            found = self.cluster.leader()
            if found is None:
                return False
            answer = self.cluster.describe(found[0])
            high_watermark = answer.high_watermark
            if high_watermark <= 0 or any(
                v.log_end_offset < high_watermark for v in answer.current_voters
            ):
                return False
            # Every member has applied the committed log too, as etcd's members agree on the
            # revision they answer Status with: a member restarted a moment ago has its whole
            # log on disk but is still loading it.
            return all(self._applied(n, high_watermark - 1) for n in self.cluster.controller_ids)

        wait_until(settled, 60, "a settled quorum")

    def _applied(self, node_id: int, offset: int) -> bool:
        request = admin_pb2.DescribeClusterRequest(min_metadata_offset=offset)
        with self.cluster.channel(node_id) as channel:
            try:
                answer = admin_pb2_grpc.AdminServiceStub(channel).DescribeCluster(
                    request, timeout=1
                )
            except grpc.RpcError:
                return False
        return not answer.error_code


# ----- the measurements -------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def sequential(system: System, channel_of: Callable[[str], grpc.Channel], count: int,
               run: int) -> list[float]:  # fmt: skip
    latencies = []
    with channel_of(system.leader_address()) as channel:
        write = system.writer(channel)
        for i in range(WARM_UP):
            write(f"warm-{run}-{i}", 10)
        for i in range(count):
            started = time.perf_counter()
            write(f"seq-{run}-{i}", 10)
            latencies.append(time.perf_counter() - started)
    return latencies


async def in_flight(system: System, channel_of: Callable[[str], grpc.aio.Channel],
                    depth: int, seconds: float, run: int) -> list[float]:  # fmt: skip
    latencies: list[float] = []
    address = system.leader_address()
    async with channel_of(address) as channel:
        write = system.aio_writer(channel)
        deadline = time.perf_counter() + seconds

        async def worker(number: int) -> None:
            i = 0
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                await write(f"load-{run}-{number}-{i}")
                latencies.append(time.perf_counter() - started)
                i += 1

        await asyncio.gather(*(worker(n) for n in range(depth)))
    return latencies


def failovers(system: System, channel_of: Callable[[str], grpc.Channel], runs: int,
              run: int) -> list[float]:  # fmt: skip
    results = []
    for attempt in range(runs):
        system.settle()
        member, survivors = system.kill_leader()
        started = time.monotonic()
        channels = [channel_of(a) for a in survivors]
        writers = [system.writer(channel) for channel in channels]
        try:
            number = 0
            done = False
            while not done:
                if time.monotonic() - started > 30:
                    raise RuntimeError(f"{system.name}: no write acknowledged 30 s after kill -9")
                for write in writers:
                    number += 1
                    try:
                        write(f"fo-{run}-{attempt}-{number}", FAILOVER_CALL_TIMEOUT_S)
                    except (grpc.RpcError, RuntimeError):
                        continue
                    done = True
                    break
            results.append(time.monotonic() - started)
        finally:
            for channel in channels:
                channel.close()
        system.restart(member)
    system.settle()
    return results


def idle_rss_mib(system: System) -> list[float]:
    system.settle()
    time.sleep(5)  # a measurement window, not synchronisation: nothing happens meanwhile
    return [resident_mib(pid) for pid in system.member_pids().values()]


@dataclass
class Figures:
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, name: str, value: float) -> None:
        self.values.setdefault(name, []).append(value)


def measure(system: System, security: Security, args: argparse.Namespace, run: int,
            figures: Figures) -> None:  # fmt: skip
    channel_of: Callable[[str], Any] = (
        system.security.channel if isinstance(system, Metaquorum) else security.channel
    )
    aio_channel_of: Callable[[str], Any] = (
        system.security.aio_channel if isinstance(system, Metaquorum) else security.aio_channel
    )
    if args.sequential:
        lat = sequential(system, channel_of, args.sequential, run)
        figures.add("sequential p50 ms", statistics.median(lat) * 1000)
        figures.add("sequential p99 ms", percentile(lat, 0.99) * 1000)
        print(f"  {system.name}: sequential p50 {statistics.median(lat) * 1000:.2f} ms, "
              f"p99 {percentile(lat, 0.99) * 1000:.2f} ms", flush=True)  # fmt: skip
    before = system.elections_marker()
    slow_before = system.slow_turns()
    pids = system.member_pids()
    cpu_before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    client_before = sum(os.times()[:2])
    lat = asyncio.run(in_flight(system, aio_channel_of, args.in_flight, args.seconds, run))
    client_us = (sum(os.times()[:2]) - client_before) / len(lat) * 1e6
    member_us = sorted(((cpu_seconds(pid) - cpu_before[name]) / len(lat) * 1e6
                        for name, pid in pids.items()), reverse=True)  # fmt: skip
    elections = system.elections_marker() - before
    if slow_before >= 0:
        figures.add("loop turns > fetch timeout/10", system.slow_turns() - slow_before)
    rate = len(lat) / args.seconds
    figures.add("throughput /s", rate)
    figures.add("in-flight p50 ms", statistics.median(lat) * 1000)
    figures.add("in-flight p99 ms", percentile(lat, 0.99) * 1000)
    figures.add("elections under load", elections)
    print(f"  {system.name}: {args.in_flight} in flight: {rate:,.0f}/s, p50 "
          f"{statistics.median(lat) * 1000:.1f} ms, p99 {percentile(lat, 0.99) * 1000:.1f} ms, "
          f"{elections} elections", flush=True)  # fmt: skip
    figures.add("CPU us/write, all members", sum(member_us))
    figures.add("CPU us/write, busiest member", member_us[0])
    figures.add("CPU us/write, client", client_us)
    print(
        f"  {system.name}: CPU per write under load (us): members "
        f"{', '.join(f'{v:.0f}' for v in member_us)}, client {client_us:.0f}",
        flush=True,
    )
    rss = idle_rss_mib(system)
    figures.add("idle RSS MiB (max member)", max(rss))
    print(f"  {system.name}: idle RSS {', '.join(f'{v:.0f}' for v in rss)} MiB", flush=True)
    if args.failover_runs:
        times = failovers(system, channel_of, args.failover_runs, run)
        figures.add("kill -9 failover median ms", statistics.median(times) * 1000)
        print(f"  {system.name}: kill -9 to next acknowledged write (ms): "
              f"{', '.join(f'{t * 1000:.0f}' for t in times)}", flush=True)  # fmt: skip


HIGHER_IS_BETTER = {"throughput /s"}


def spread(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:,.2f}"
    return f"{min(values):,.2f} / {statistics.median(values):,.2f} / {max(values):,.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer", choices=("etcd", "kafka"), default="etcd")
    parser.add_argument("--sequential", type=int, default=None, help="2000 (etcd), 1000 (kafka)")
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--failover-runs", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--security", choices=("ssl", "plaintext"), default="ssl")
    parser.add_argument("--only", choices=("etcd", "kafka", "mq"))
    parser.add_argument("--propagation", type=int, default=200, help="kafka: topics probed")
    parser.add_argument("--idle-seconds", type=float, default=10, help="kafka: idle window")
    parser.add_argument(
        "--warm-up-seconds",
        type=float,
        default=60,
        help="kafka: the in-flight load, unmeasured, before the measurements",
    )
    parser.add_argument(
        "--warm-up-topics",
        type=int,
        default=None,
        help="kafka: end the warm-up once this many topics were created (the same cluster size "
        "on both sides: our brokers' cost per create grows with the partitions they hold)",
    )
    parser.add_argument(
        "--scale-partitions",
        type=int,
        default=0,
        help="kafka: also create this many partitions (e.g. 100000)",
    )
    parser.add_argument(
        "--data",
        action="store_true",
        help="kafka: then the data half (produce / consume MB/s, kill -9 of a leader broker)",
    )
    parser.add_argument("--data-only", action="store_true", help="kafka: the data half alone")
    parser.add_argument(
        "--data-records", type=int, default=300_000, help="kafka: records per produce run"
    )
    parser.add_argument(
        "--data-warm-up", type=int, default=100_000, help="kafka: records, not measured"
    )
    args = parser.parse_args()
    # SIGTERM (and SIGINT, which a background job ignores) unwind the clusters' context
    # managers, which stop every node by PID.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.peer == "kafka":
        from peers_kafka import kafka_main  # noqa: PLC0415 - only this mode needs it

        args.sequential = 1000 if args.sequential is None else args.sequential
        return kafka_main(args)
    args.sequential = 2000 if args.sequential is None else args.sequential
    has_etcd = shutil.which("etcd") is not None
    version = ""
    if has_etcd:
        version = subprocess.run(["etcd", "--version"], capture_output=True, text=True,
                                 check=False).stdout.splitlines()[0]  # fmt: skip
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}; python "
          f"{sys.version.split()[0]}; grpcio {grpc.__version__}; {version or 'etcd: not found'}; "
          f"security {args.security}", flush=True)  # fmt: skip
    results = {"metaquorum": Figures(), "etcd": Figures()}
    for run in range(args.repeat):
        print(f"run {run + 1} of {args.repeat}", flush=True)
        if has_etcd and args.only != "mq":
            with tempfile.TemporaryDirectory(prefix="peers-etcd-") as tmp:
                security = Security(Path(tmp), tls=args.security == "ssl")
                with etcd_cluster(Path(tmp), security) as etcd:
                    measure(etcd, security, args, run, results["etcd"])
        if args.only != "etcd":
            with tempfile.TemporaryDirectory(prefix="peers-mq-") as tmp:
                security = Security(Path(tmp), tls=False)  # metaquorum brings its own CA
                with cluster_with_brokers(Path(tmp) / "mq", security=args.security) as cluster:
                    measure(Metaquorum(cluster), security, args, run, results["metaquorum"])
    print()
    print(f"{'figure':32} {'metaquorum (min/med/max)':>28} {'etcd (min/med/max)':>28} "
          f"{'ratio (medians)':>16}")  # fmt: skip
    for name, values in results["metaquorum"].values.items() or results["etcd"].values.items():
        theirs = results["etcd"].values.get(name, [])
        ratio = ""
        if theirs and statistics.median(theirs):
            ratio = f"{statistics.median(values) / statistics.median(theirs):.2f}x"
        print(f"{name:32} {spread(values):>28} {spread(theirs) if theirs else '-':>28} "
              f"{ratio:>16}")  # fmt: skip
    print("ratio = metaquorum / etcd; higher is better only for throughput")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
