"""Run one fault scenario on a real cluster and check everything its clients saw.

``run_scenario(scenario, seed, root)``:

1. starts 3 controllers (mTLS, the harness's defaults) with every node-to-controller link
   through a ``FaultProxy``, plus the scenario's real brokers or registered test brokers;
2. starts the workload (``quorum.faults.workload``) and waits until it completed operations;
3. runs the scenario's faults (``Scenario.inject``), which undoes them all before it returns;
4. lets the workload run on, stops it, waits until every controller has caught up;
5. reads every controller's committed log (the witness) and checks the history:
   linearizability of controller operations (``check_linearizable``), every ``ListTopics`` and
   offset-carrying read against the log, monotonic reads per node, and that every
   acknowledged write is in every controller's committed log exactly once.

Everything random comes from ``seed`` (the fault schedule, the proxy's jitter, the clients'
choices), so a failure names the seed that replays it (README: "Fault scenarios"); timing on a
real machine still differs from run to run, so a replay repeats the schedule, not the exact
interleaving. The report carries the figures the docs ask for (docs/faults.md).
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from quorum.faults.checker import (
    WitnessRecord,
    check_linearizable,
    check_lists,
    check_monotonic_reads,
    check_witness,
    describe_violation,
)
from quorum.faults.disks import FSYNC_POINTS, fill, fiu_enable, fiu_prefix, release, tmpfs
from quorum.faults.history import Kind, Operation, Status, to_jsonl
from quorum.faults.proxy import FaultProxy
from quorum.faults.workload import Endpoint, Workload, WorkloadConfig, first_ack_after
from quorum.harness import FakeBrokers, ProcessCluster, wait_until
from quorum.metadata.records import LeaderChangeMessage, RemoveTopicRecord, TopicRecord
from quorum.tools.log_dump import iter_records

# Faster than Kafka's defaults (2 s fetch timeout) so a scenario spends seconds, not tens of
# seconds, on each failover; the ratios between the timeouts are Kafka's.
FAULT_SETTINGS: dict[str, Any] = {
    "controller.quorum.fetch.timeout.ms": 1000,
    "controller.quorum.election.timeout.ms": 500,
    "controller.quorum.election.backoff.max.ms": 500,
    "controller.quorum.request.timeout.ms": 1000,
}
CAUGHT_UP_TIMEOUT_S = 30.0
TMPFS_BYTES = 16 * 1024 * 1024


@dataclass
class FaultContext:
    """What a scenario's ``inject`` works with: the cluster, its proxy, a seeded random source
    and the fault timeline (for reports)."""

    cluster: ProcessCluster
    proxy: FaultProxy
    rng: random.Random
    started: float = field(default_factory=time.monotonic)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    fault_times_ns: list[int] = field(default_factory=list)  # when each fault began
    paused: set[int] = field(default_factory=set)
    disk: tuple[int, Path] | None = None  # the node whose data sits on a small tmpfs
    exits: dict[int, int] = field(default_factory=dict)  # exit codes of nodes that stopped
    start_epoch: int | None = None  # the leader's epoch once the workload runs

    def note(self, what: str, fault: bool = True) -> None:
        self.timeline.append((round(time.monotonic() - self.started, 3), what))
        if fault:
            self.fault_times_ns.append(time.monotonic_ns())

    def hold(self, seconds: float) -> None:
        """Let the fault last ``seconds`` (the schedule, not a synchronisation)."""
        time.sleep(seconds)

    def leader(self) -> int:
        leader_id, _, _ = self.cluster.wait_for_leader(
            timeout_s=20, among=[n for n in self.cluster.controller_ids if n not in self.paused]
        )
        return leader_id

    def followers(self, leader: int) -> list[int]:
        return [n for n in self.cluster.controller_ids if n != leader]

    def kill(self, node_id: int) -> None:
        self.note(f"kill -9 {node_id}")
        self.cluster.kill(node_id, signal.SIGKILL)

    def restart(self, node_id: int, **kwargs: Any) -> None:
        self.note(f"restart {node_id}", fault=False)
        self.cluster.start(node_id, **kwargs)

    def pause(self, node_id: int) -> None:
        self.note(f"SIGSTOP {node_id}")
        process = self.cluster.nodes[node_id].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        self.note(f"SIGCONT {node_id}", fault=False)
        process = self.cluster.nodes[node_id].process
        assert process is not None
        process.send_signal(signal.SIGCONT)
        self.paused.discard(node_id)

    def broker_fenced(self, broker_id: int) -> bool | None:
        """Whether the controllers see broker ``broker_id`` as fenced (None: not registered)."""
        with self.cluster.admin(timeout_s=5) as admin:
            for broker in admin.describe_cluster().brokers:
                if broker.broker_id == broker_id:
                    return bool(broker.is_fenced)
        return None

    def wait_exit(self, node_id: int, timeout_s: float = 15) -> int:
        """Wait until node ``node_id`` exits by itself (a failed fsync, a full disk)."""
        process = self.cluster.nodes[node_id].process
        assert process is not None
        wait_until(lambda: process.poll() is not None, timeout_s, f"node {node_id} to exit")
        code = process.returncode
        self.exits[node_id] = code
        self.note(f"node {node_id} exited with {code}", fault=False)
        return code

    def fail_fsync(self, node_id: int) -> None:
        """From now on every fsync of node ``node_id`` fails with EIO (libfiu)."""
        self.note(f"fsync fails with EIO on {node_id}")
        process = self.cluster.nodes[node_id].process
        assert process is not None
        for point in FSYNC_POINTS:
            fiu_enable(process.pid, point)

    def fill_disk(self) -> None:
        assert self.disk is not None
        self.note(f"disk of {self.disk[0]} full")
        fill(self.disk[1])

    def release_disk(self) -> None:
        assert self.disk is not None
        self.note(f"disk of {self.disk[0]} has room again", fault=False)
        release(self.disk[1])

    def partition(self, *groups: list[int]) -> None:
        self.note(f"partition {' | '.join(','.join(map(str, g)) for g in groups)}")
        self.proxy.partition(*[[str(n) for n in g] for g in groups])

    def isolate(self, node_id: int) -> None:
        self.note(f"isolate {node_id}")
        self.proxy.isolate(str(node_id))

    def one_way(self, src: int, dst: int) -> None:
        self.note(f"drop {src} -> {dst}")
        self.proxy.one_way(str(src), str(dst))

    def heal(self) -> None:
        self.note("heal", fault=False)
        self.proxy.heal()

    def heal_all(self) -> None:
        """Undo every fault: network healed, paused nodes resumed, a full disk emptied, dead
        nodes restarted (without fault injection)."""
        self.heal()
        if self.disk is not None:
            release(self.disk[1])
        for node_id in sorted(self.paused):
            self.resume(node_id)
        for node_id, node in self.cluster.nodes.items():
            if not node.alive:
                self.restart(node_id)


@dataclass(frozen=True)
class Scenario:
    """A named fault schedule. ``inject`` runs the faults and returns once it undid them."""

    name: str
    inject: Callable[[FaultContext], None]
    checks: str  # the invariant it puts under pressure (docs/faults.md lists them)
    settings: dict[str, Any] = field(default_factory=dict)
    brokers: int = 0  # real broker processes (0: registered test brokers)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    # Environment for the controllers (negative controls, fault switches).
    env: dict[str, str] = field(default_factory=dict)
    # Extra checks after the run (e.g. a broker's directories); return problems.
    after: Callable[[FaultContext], list[str]] | None = None
    # Controllers started under libfiu (``quorum.faults.disks``), to fail their fsyncs later.
    fiu: bool = False
    # "controller" / "broker": one such node (chosen by the seed) keeps its data on a small
    # tmpfs, to fill up later.
    disk: str | None = None
    # The fault must not cost the leader its epoch (leader stickiness, pre-vote: I14).
    no_election: bool = False


@dataclass
class Report:
    scenario: str
    seed: int
    operations: int = 0  # completed: ok or a definite error
    unknown: int = 0
    acknowledged_writes: int = 0
    lost_writes: int = 0
    violations: int = 0
    # From a fault to the next acknowledged write, the longest over the run's faults.
    fault_to_leader_s: float | None = None
    heal_to_caught_up_s: float | None = None
    elections: int = 0
    problems: list[str] = field(default_factory=list)
    timeline: list[tuple[float, str]] = field(default_factory=list)
    history_file: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        def seconds(value: float | None) -> str:
            return "-" if value is None else f"{value:.2f} s"

        return (
            f"{self.scenario} seed={self.seed}: {'PASS' if self.ok else 'FAIL'}; "
            f"{self.operations} ops completed ({self.unknown} unknown), "
            f"{self.acknowledged_writes} acknowledged writes, {self.lost_writes} lost, "
            f"{self.violations} linearizability violations, fault->serving leader "
            f"{seconds(self.fault_to_leader_s)}, heal->caught up "
            f"{seconds(self.heal_to_caught_up_s)}, {self.elections} elections"
        )

    def failure_text(self) -> str:
        lines = [self.summary(), f"replay: FAULT_SCENARIO={self.scenario} FAULT_SEED={self.seed}"]
        lines.append("fault timeline (s since start):")
        lines.extend(f"  {t:8.3f}  {what}" for t, what in self.timeline)
        lines.append("problems:")
        lines.extend(f"  {p}" for p in self.problems)
        if self.history_file:
            lines.append(f"history: {self.history_file}")
        return "\n".join(lines)


# ----- the witness ----------------------------------------------------------------------------


def committed_log(cluster: ProcessCluster, node_id: int, high_watermark: int) -> list[Any]:
    """The records of controller ``node_id``'s log below ``high_watermark``, in order."""
    directory = cluster.nodes[node_id].metadata_dir
    return [
        r
        for r in iter_records([directory], warn=lambda _message: None)
        if r.offset < high_watermark
    ]


def witness_of(records: list[Any]) -> list[WitnessRecord]:
    names: dict[str, str] = {}
    witness: list[WitnessRecord] = []
    for dumped in records:
        record = dumped.record
        if isinstance(record, TopicRecord):
            names[str(record.topic_id)] = record.name
            witness.append(
                WitnessRecord(dumped.offset, "create", record.name, str(record.topic_id))
            )
        elif isinstance(record, RemoveTopicRecord):
            topic_id = str(record.topic_id)
            witness.append(
                WitnessRecord(dumped.offset, "delete", names.get(topic_id, ""), topic_id)
            )
    return witness


def elections_in(records: list[Any], after_epoch: int | None = None) -> int:
    """Leaders elected after the first (one committed LeaderChangeMessage each), or, with
    ``after_epoch``, the leaders of later epochs than that one."""
    epochs = [r.epoch for r in records if isinstance(r.record, LeaderChangeMessage)]
    if after_epoch is None:
        return max(0, len(epochs) - 1)
    return sum(epoch > after_epoch for epoch in epochs)


def _leader_view(cluster: ProcessCluster) -> tuple[int, Any, dict[int, int]] | None:
    """The leader, its DescribeQuorum answer and every voter's log end offset in it (a
    follower forwards DescribeQuorum to the leader, and a voter's log end offset is what its
    last Fetch asked for: durable on that voter); None without a leader."""
    found = cluster.leader()
    if found is None:
        return None
    answer = cluster.describe(found[0])
    return found[0], answer, {v.replica_id: v.log_end_offset for v in answer.current_voters}


def wait_caught_up(
    cluster: ProcessCluster, timeout_s: float = CAUGHT_UP_TIMEOUT_S, at_least: int = 0
) -> int:
    """Wait until the leader's high watermark is at least ``at_least`` and every voter's log
    reaches it, as the leader reports them (``_leader_view``). Returns that high watermark."""

    def caught_up() -> int | None:
        view = _leader_view(cluster)
        if view is None:
            return None
        _, answer, voters = view
        if answer.error_code != 0 or answer.high_watermark < at_least:
            return None
        target = int(answer.high_watermark)
        if set(voters) != set(cluster.controller_ids):
            return None
        if any(end < target for end in voters.values()):
            return None
        return target

    return wait_until(caught_up, timeout_s, f"every controller caught up (to {at_least} or more)")


# ----- one run --------------------------------------------------------------------------------

# How often a controller started under libfiu that never came up is restarted before the run
# fails (``_every_controller_up``).
FIU_START_ATTEMPTS = 3


def _lagging_controllers(cluster: ProcessCluster) -> list[int]:
    """Controllers the leader does not report at its high watermark (all, with no leader)."""
    view = _leader_view(cluster)
    if view is None:
        return list(cluster.controller_ids)
    leader, answer, voters = view
    return [
        n
        for n in cluster.controller_ids
        if n != leader and voters.get(n, -1) < answer.high_watermark
    ]


def _every_controller_up(
    cluster: ProcessCluster, context: FaultContext, env: dict[str, str]
) -> None:
    """Before the workload of a scenario whose controllers run under libfiu's preload: every
    controller caught up. Rarely (once in 324 soak runs) such a node never comes up: its main
    thread stays inside the dynamic loader (loading a C extension module) from its first second,
    a hang of the preload, not of the node (none in thousands of runs without it). A majority
    elects a leader regardless, so that node would go unnoticed until the fault could not be
    injected into it. It is restarted (kill -9, noted in the timeline, thread dump in its log),
    at most ``FIU_START_ATTEMPTS - 1`` times."""
    for attempt in range(FIU_START_ATTEMPTS):
        try:
            wait_caught_up(cluster, timeout_s=15, at_least=1)
            return
        except AssertionError:
            if attempt == FIU_START_ATTEMPTS - 1:
                raise
        _dump_stacks(cluster)
        for node_id in _lagging_controllers(cluster):
            context.note(f"node {node_id} did not come up under libfiu: restarted", fault=False)
            cluster.kill(node_id)
            cluster.start(node_id, env=env, prefix=fiu_prefix())


def _dump_stacks(cluster: ProcessCluster) -> None:
    """Ask every live node for a thread dump (SIGUSR1, faulthandler) into its log, and wait
    (bounded) until the dumps are written."""
    sizes = {}
    for node_id, node in cluster.nodes.items():
        if node.alive and node.process is not None:
            sizes[node_id] = len(cluster.logs(node_id))
            with contextlib.suppress(OSError):
                node.process.send_signal(signal.SIGUSR1)
    with contextlib.suppress(AssertionError):
        wait_until(
            lambda: all("Thread 0x" in cluster.logs(n)[size:] for n, size in sizes.items()),
            5,
            "thread dumps written",
        )


def _endpoints(cluster: ProcessCluster) -> tuple[list[Endpoint], list[Endpoint]]:
    controllers = [
        Endpoint(f"controller-{n}", cluster.nodes[n].address, n) for n in cluster.controller_ids
    ]
    brokers = [
        Endpoint(f"broker-{n}", cluster.nodes[n].address, n, is_broker=True)
        for n in cluster.broker_ids
    ]
    return controllers, brokers


@contextlib.contextmanager
def _brokers_for(cluster: ProcessCluster, scenario: Scenario) -> Iterator[None]:
    if scenario.brokers:
        from quorum.harness import wait_for_unfenced_broker  # noqa: PLC0415

        with cluster.admin() as admin:
            wait_for_unfenced_broker(admin, "a real broker unfenced", timeout_s=40)
        yield
        return
    test_brokers = FakeBrokers(cluster, [101, 102, 103])
    test_brokers.register()
    try:
        wait_until(test_brokers.heartbeat_all, 20, "every test broker unfenced")
        yield
    finally:
        test_brokers.stop()


def run_scenario(scenario: Scenario, seed: int, root: Path) -> Report:
    """Run ``scenario`` from ``seed`` under ``root``; the report says whether it passed."""
    report = Report(scenario.name, seed)
    rng = random.Random(seed)
    with FaultProxy(seed) as proxy, contextlib.ExitStack() as mounts:
        cluster = ProcessCluster(
            root,
            settings={**FAULT_SETTINGS, **scenario.settings},
            brokers=scenario.brokers,
            broker_settings={**FAULT_SETTINGS, **scenario.settings},
            proxy=proxy,
        )
        context = FaultContext(cluster, proxy, rng)
        try:
            if scenario.disk is not None:
                # A small tmpfs under one node's data (before it is formatted), to fill later.
                ids = cluster.broker_ids if scenario.disk == "broker" else cluster.controller_ids
                node_id = rng.choice(ids)
                node = cluster.nodes[node_id]
                path = node.log_dir if scenario.disk == "broker" else node.data_dir
                mounts.enter_context(tmpfs(path, TMPFS_BYTES))
                context.disk = (node_id, path)
            cluster.format()
            for node_id in cluster.nodes:
                is_controller = node_id in cluster.controller_ids
                cluster.start(
                    node_id,
                    env=scenario.env if is_controller else {},
                    prefix=fiu_prefix() if scenario.fiu and is_controller else (),
                )
            cluster.wait_for_leader(timeout_s=30)
            if scenario.fiu:
                _every_controller_up(cluster, context, scenario.env)
            with _brokers_for(cluster, scenario):
                _run_with_brokers(
                    cluster=cluster,
                    context=context,
                    scenario=scenario,
                    seed=seed,
                    report=report,
                    root=root,
                )
        except Exception as exc:  # the report says it failed, with the logs to see why
            report.timeline = context.timeline
            report.problems.append(f"the run failed before its checks: {exc}")
            _dump_stacks(cluster)
            for node_id, node in cluster.nodes.items():
                tail = cluster.logs(node_id)[-12000:]
                report.problems.append(f"---- {node.role} {node_id} log tail ----\n{tail}")
        finally:
            cluster.stop_all()
    return report


def _run_with_brokers(
    *,
    cluster: ProcessCluster,
    context: FaultContext,
    scenario: Scenario,
    seed: int,
    report: Report,
    root: Path,
) -> None:
    controllers, brokers = _endpoints(cluster)
    workload = Workload(
        controllers,
        cluster.client_security(),
        seed,
        scenario.workload,
        brokers=brokers,
    )
    workload.start()
    try:
        wait_until(
            lambda: sum(o.status is Status.OK for o in workload.history()) >= 20,
            30,
            "the workload under way (20 operations acknowledged)",
        )
        context.note("workload running", fault=False)
        # The epoch the faults start from: a slow start-up may elect several leaders before
        # the workload runs, which no fault caused (``Scenario.no_election``).
        context.start_epoch = cluster.wait_for_leader()[1]
        try:
            scenario.inject(context)
        finally:
            context.heal_all()
        heal_ns = time.monotonic_ns()
        wait_caught_up(cluster)
        report.heal_to_caught_up_s = round((time.monotonic_ns() - heal_ns) / 1e9, 3)
        wait_until(
            lambda: first_ack_after(workload.history(), heal_ns),
            30,
            "a write acknowledged after the faults were undone",
        )
    finally:
        workload.stop()
    acknowledged = [
        o.offset for o in workload.history() if o.status is Status.OK and o.offset is not None
    ]
    high_watermark = wait_caught_up(cluster, at_least=max(acknowledged, default=-1) + 1)
    # The worst fault: the longest wait from a fault to the next acknowledged write.
    waits = [
        (acked - began) / 1e9
        for began in context.fault_times_ns
        if (acked := first_ack_after(workload.history(), began)) is not None
    ]
    if waits:
        report.fault_to_leader_s = round(max(waits), 3)
    report.timeline = context.timeline
    _check(
        cluster=cluster,
        scenario=scenario,
        history=workload.history(),
        high_watermark=high_watermark,
        context=context,
        report=report,
        root=root,
    )


def _check(
    *,
    cluster: ProcessCluster,
    scenario: Scenario,
    history: list[Operation],
    high_watermark: int,
    context: FaultContext,
    report: Report,
    root: Path,
) -> None:
    logs = {n: committed_log(cluster, n, high_watermark) for n in cluster.controller_ids}
    witnesses = {f"controller-{n}": witness_of(records) for n, records in logs.items()}
    # Where each log begins: a node that loaded a snapshot keeps no log before it.
    starts = {
        f"controller-{n}": records[0].offset if records else high_watermark
        for n, records in logs.items()
    }
    fullest = min(starts, key=lambda node: starts[node])
    first = witnesses[fullest]
    fullest_log = logs[int(fullest.split("-")[1])]
    report.elections = elections_in(fullest_log)
    during_faults = elections_in(fullest_log, after_epoch=context.start_epoch)
    on_controllers = [o for o in history if not (o.node or "").startswith("broker-")]
    on_brokers = [o for o in history if (o.node or "").startswith("broker-")]
    report.operations = sum(o.status is not Status.UNKNOWN for o in history)
    report.unknown = sum(o.status is Status.UNKNOWN for o in history)
    writes = (Kind.CREATE, Kind.DELETE_NAME, Kind.DELETE_ID)
    report.acknowledged_writes = sum(o.status is Status.OK and o.kind in writes for o in history)
    result = check_linearizable(on_controllers)
    if not result.ok:
        report.violations = 1
        report.problems.append(describe_violation(result))
    lost = check_witness(on_controllers, witnesses, starts)
    report.lost_writes = len(lost)
    report.problems.extend(lost)
    report.problems.extend(check_lists(on_controllers, first, starts[fullest]))
    report.problems.extend(check_lists(on_brokers, first, starts[fullest]))
    report.problems.extend(check_monotonic_reads(history))
    if scenario.no_election and during_faults:
        report.problems.append(
            f"{during_faults} election(s) after the workload started (epoch "
            f"{context.start_epoch}): this fault must not depose a live leader (I14)"
        )
    if scenario.after is not None:
        report.problems.extend(scenario.after(context))
    history_file = root / "history.jsonl"
    history_file.write_text(to_jsonl(history))
    report.history_file = str(history_file)
    (root / "report.json").write_text(
        json.dumps(
            {
                "summary": report.summary(),
                "timeline": report.timeline,
                "problems": report.problems,
            },
            indent=2,
        )
    )
