"""The fault scenarios (docs/faults.md lists each with the invariant it checks).

Each ``inject`` takes a ``FaultContext`` (``quorum.faults.runner``), picks its victims and its
timing from the context's seeded ``rng``, and returns with every fault undone (the runner
also heals whatever is left). Fault lengths are set against the fault settings' 1 s fetch
timeout: "long" faults outlast it (an election follows), "short" ones do not.
"""

from __future__ import annotations

from pathlib import Path

from broker.partition_metadata import PARTITION_METADATA_FILE
from broker.partition_metadata import parse as parse_partition_metadata
from broker.reconcile import parse_partition_dir
from quorum.faults.history import Kind
from quorum.faults.proxy import LinkFaults, LinkMode
from quorum.faults.runner import FaultContext, Scenario
from quorum.faults.workload import WorkloadConfig
from quorum.harness import wait_until
from quorum.ids import Uuid
from quorum.rpc.v1 import admin_pb2, admin_pb2_grpc

LONG_S = (1.8, 2.6)  # outlasts the 1 s fetch timeout: an election follows
SHORT_S = (0.3, 0.8)


def _long(ctx: FaultContext) -> float:
    return ctx.rng.uniform(*LONG_S)


def _short(ctx: FaultContext) -> float:
    return ctx.rng.uniform(*SHORT_S)


# ----- network --------------------------------------------------------------------------------


def leader_isolated(ctx: FaultContext) -> None:
    ctx.isolate(ctx.leader())
    ctx.hold(_long(ctx))
    ctx.heal()


def follower_isolated(ctx: FaultContext) -> None:
    leader = ctx.leader()
    ctx.isolate(ctx.rng.choice(ctx.followers(leader)))
    ctx.hold(_long(ctx))
    ctx.heal()


def rolling_split(ctx: FaultContext) -> None:
    """First a follower alone in the minority, then the leader alone."""
    leader = ctx.leader()
    first, second = ctx.rng.sample(ctx.followers(leader), 2)
    ctx.partition([leader, first], [second])
    ctx.hold(_long(ctx))
    ctx.partition([leader], [first, second])
    ctx.hold(_long(ctx))
    ctx.heal()


def _cut(ctx: FaultContext, a: int, b: int) -> None:
    ctx.note(f"cut {a} <-> {b}")
    ctx.proxy.one_way(str(a), str(b))
    ctx.proxy.one_way(str(b), str(a))


def bridge_leader_in_the_middle(ctx: FaultContext) -> None:
    """A-B and B-C work, A-C does not; the leader is B."""
    leader = ctx.leader()
    a, c = ctx.followers(leader)
    _cut(ctx, a, c)
    ctx.hold(_long(ctx))
    ctx.heal()


def bridge_leader_at_one_end(ctx: FaultContext) -> None:
    """A-B and B-C work, A-C does not; the leader is A, so C hears from nobody that leads."""
    leader = ctx.leader()
    far = ctx.rng.choice(ctx.followers(leader))
    _cut(ctx, leader, far)
    ctx.hold(_long(ctx))
    ctx.heal()


def one_way_follower_to_leader(ctx: FaultContext) -> None:
    """A follower's requests to the leader vanish; the leader's to it still arrive."""
    leader = ctx.leader()
    ctx.one_way(ctx.rng.choice(ctx.followers(leader)), leader)
    ctx.hold(_long(ctx))
    ctx.heal()


def one_way_leader_out(ctx: FaultContext) -> None:
    """Every request the leader sends vanishes; the followers' Fetches still reach it."""
    leader = ctx.leader()
    for follower in ctx.followers(leader):
        ctx.one_way(leader, follower)
    ctx.hold(_long(ctx))
    ctx.heal()


def slow_network(ctx: FaultContext) -> None:
    """Every link delayed 20-60 ms each way, with jitter."""
    ctx.note("delay every link 20-60 ms")
    nodes = [str(n) for n in ctx.cluster.nodes]
    for src in nodes:
        for dst in [str(n) for n in ctx.cluster.controller_ids if str(n) != src]:
            delay = ctx.rng.randint(20, 60)
            ctx.proxy.set(src, dst, LinkFaults(LinkMode.PASS, delay_ms=delay, jitter_ms=10))
    ctx.hold(3.0)
    ctx.heal()


def flaky_network(ctx: FaultContext) -> None:
    """For about 4 s, random links drop everything for a short while, then recover."""
    controllers = ctx.cluster.controller_ids
    for _ in range(6):
        src, dst = ctx.rng.sample(controllers, 2)
        ctx.one_way(src, dst)
        ctx.hold(_short(ctx))
        ctx.heal()
        ctx.hold(ctx.rng.uniform(0.1, 0.3))


# ----- processes ------------------------------------------------------------------------------


def kill_leader(ctx: FaultContext) -> None:
    leader = ctx.leader()
    ctx.kill(leader)
    ctx.hold(_long(ctx))
    ctx.restart(leader)


def kill_follower(ctx: FaultContext) -> None:
    leader = ctx.leader()
    follower = ctx.rng.choice(ctx.followers(leader))
    ctx.kill(follower)
    ctx.hold(_short(ctx))
    ctx.restart(follower)


def kill_random_repeatedly(ctx: FaultContext) -> None:
    for _ in range(3):
        victim = ctx.rng.choice(ctx.cluster.controller_ids)
        ctx.kill(victim)
        ctx.hold(ctx.rng.uniform(0.2, 1.5))
        ctx.restart(victim)
        ctx.leader()
        ctx.hold(ctx.rng.uniform(0.3, 0.8))


def crash_all(ctx: FaultContext) -> None:
    """Every controller killed at once (a power cut), then restarted."""
    for node_id in ctx.cluster.controller_ids:
        ctx.kill(node_id)
    ctx.hold(_short(ctx))
    for node_id in ctx.cluster.controller_ids:
        ctx.restart(node_id)


def pause_leader(ctx: FaultContext) -> None:
    """SIGSTOP the leader for longer than the fetch timeout: a new leader is elected while it
    sleeps; once resumed, it must not answer anything from its stale state."""
    leader = ctx.leader()
    ctx.pause(leader)
    ctx.hold(_long(ctx))
    ctx.resume(leader)


def pause_follower(ctx: FaultContext) -> None:
    leader = ctx.leader()
    follower = ctx.rng.choice(ctx.followers(leader))
    ctx.pause(follower)
    ctx.hold(_long(ctx))
    ctx.resume(follower)


def isolate_then_kill(ctx: FaultContext) -> None:
    """A follower cut off, then the leader killed: no majority is left until the heal."""
    leader = ctx.leader()
    ctx.isolate(ctx.rng.choice(ctx.followers(leader)))
    ctx.hold(_short(ctx))
    ctx.kill(leader)
    ctx.hold(_long(ctx))
    ctx.heal()
    ctx.restart(leader)


def kill_at_random_points(ctx: FaultContext) -> None:
    """Kill -9 at random moments (with tiny segments and frequent snapshots configured, most
    land during a segment roll or a snapshot write), each node restarted after."""
    for _ in range(4):
        ctx.hold(ctx.rng.uniform(0.1, 0.6))
        victim = ctx.rng.choice(ctx.cluster.controller_ids)
        ctx.kill(victim)
        ctx.hold(ctx.rng.uniform(0.1, 0.5))
        ctx.restart(victim)
    ctx.leader()


# ----- disks ----------------------------------------------------------------------------------


def slow_fsync(ctx: FaultContext) -> None:
    """Every fsync takes 150 ms more (METAQUORUM_TEST_FSYNC_DELAY_MS, set at start): the leader
    commits slower but is not deposed; nothing to undo but time."""
    ctx.note("every fsync slowed by 150 ms (since start)")
    ctx.hold(3.0)


def _fsync_fails_on(ctx: FaultContext, node_id: int) -> None:
    ctx.fail_fsync(node_id)
    ctx.wait_exit(node_id)  # fsyncgate: no retry of a failed fsync, the process stops
    ctx.hold(_short(ctx))
    ctx.restart(node_id)  # without libfiu: recovery rereads what is really on disk


def leader_fsync_fails(ctx: FaultContext) -> None:
    _fsync_fails_on(ctx, ctx.leader())


def follower_fsync_fails(ctx: FaultContext) -> None:
    leader = ctx.leader()
    _fsync_fails_on(ctx, ctx.rng.choice(ctx.followers(leader)))


def controller_disk_full(ctx: FaultContext) -> None:
    """The disk of one controller fills up: it stops (it cannot append, so it acknowledges
    nothing it could not write) and comes back once there is room."""
    assert ctx.disk is not None
    node_id = ctx.disk[0]
    ctx.fill_disk()
    ctx.wait_exit(node_id, timeout_s=20)
    ctx.hold(_short(ctx))
    ctx.release_disk()
    ctx.restart(node_id)


def stopped_on_purpose(ctx: FaultContext) -> list[str]:
    """Each node that stopped by itself exited non-zero and said why in its log."""
    problems: list[str] = []
    for node_id, code in ctx.exits.items():
        log = ctx.cluster.logs(node_id)
        if code == 0:
            problems.append(f"node {node_id} exited 0 after a disk fault: it should fail")
        if not any(word in log for word in ("Input/output error", "EIO", "No space left")):
            problems.append(f"node {node_id}'s log does not name the disk error")
    return problems


# ----- brokers --------------------------------------------------------------------------------


def broker_partitioned(ctx: FaultContext) -> None:
    """A broker cut off from every controller while topics are deleted and recreated."""
    broker = ctx.cluster.broker_ids[0]
    ctx.isolate(broker)
    ctx.hold(_long(ctx))
    ctx.heal()


def broker_paused(ctx: FaultContext) -> None:
    """A broker paused past its session timeout: fenced, then back, unfenced and caught up."""
    broker = ctx.cluster.broker_ids[0]
    ctx.pause(broker)
    wait_until(lambda: ctx.broker_fenced(broker), 15, f"broker {broker} fenced while paused")
    ctx.note(f"broker {broker} fenced", fault=False)
    ctx.hold(1.0)
    ctx.resume(broker)
    wait_until(lambda: ctx.broker_fenced(broker) is False, 15, f"broker {broker} unfenced")
    ctx.note(f"broker {broker} unfenced", fault=False)


def kill_broker_during_moves(ctx: FaultContext) -> None:
    """kill -9 of a real broker at random moments while topics are deleted and recreated
    (partitions being moved to ``deleting/``, created, removed), restarted each time."""
    broker = ctx.cluster.broker_ids[0]
    for _ in range(3):
        ctx.hold(ctx.rng.uniform(0.2, 0.8))
        ctx.kill(broker)
        ctx.hold(_short(ctx))
        ctx.restart(broker)


def broker_disk_full(ctx: FaultContext) -> None:
    """The broker's log dir fills up while topics are deleted (moved to ``deleting/``) and
    recreated; room comes back after 3 s (a broker that stopped is restarted by the heal)."""
    ctx.fill_disk()
    ctx.hold(3.0)
    ctx.release_disk()


def broker_survived_a_full_disk(ctx: FaultContext) -> list[str]:
    return stopped_on_purpose(ctx) + broker_directories_match(ctx)


def broker_directories_match(ctx: FaultContext) -> list[str]:
    """After the run, the broker's partition directories are exactly the live partitions
    placed on it, each with its topic's id (stale ones were moved to ``deleting/``)."""
    cluster = ctx.cluster
    broker = cluster.broker_ids[0]
    log_dir = cluster.nodes[broker].log_dir
    problems: list[str] = []

    def wanted() -> dict[str, str]:
        leader_id = cluster.wait_for_leader()[0]
        with cluster.channel(leader_id) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            listing = stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
            names = [t.name for t in listing.topics if not t.is_internal]
            described = stub.DescribeTopics(
                admin_pb2.DescribeTopicsRequest(topics=[admin_pb2.TopicRef(name=n) for n in names]),
                timeout=5,
            )
        expected: dict[str, str] = {}
        for topic in described.topics:
            for partition in topic.partitions:
                if broker in partition.replica_nodes:
                    expected[f"{topic.name}-{partition.partition_index}"] = str(
                        Uuid.from_bytes(topic.topic_id)
                    )
        return expected

    def on_disk() -> dict[str, str]:
        found: dict[str, str] = {}
        for entry in sorted(Path(log_dir).iterdir()):
            if parse_partition_dir(entry.name) is None:
                continue
            metadata = entry / PARTITION_METADATA_FILE
            topic_id = (
                parse_partition_metadata(metadata.read_bytes()) if metadata.exists() else None
            )
            found[entry.name] = str(topic_id)
        return found

    try:
        wait_until(lambda: wanted() == on_disk(), 30, "the broker's directories reconciled")
    except AssertionError as exc:
        problems.append(f"broker {broker}: {exc}; wanted {wanted()}, on disk {on_disk()}")
    return problems


# ----- the catalogue --------------------------------------------------------------------------

_BROKER_WORKLOAD = WorkloadConfig(broker_read_ratio=0.25, partitions=2, replication_factor=1)

SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "leader-isolated",
        leader_isolated,
        "reads and writes stay linearizable across a failover; the cut-off leader answers "
        "nothing stale",
    ),
    Scenario(
        "follower-isolated",
        follower_isolated,
        "the majority keeps serving; the follower catches up after the heal",
        no_election=True,
    ),
    Scenario(
        "rolling-split",
        rolling_split,
        "a follower, then the leader, alone in the minority: only a majority commits",
    ),
    Scenario(
        "bridge-leader-in-middle",
        bridge_leader_in_the_middle,
        "A-B, B-C but not A-C with the leader B: nothing is disturbed",
        no_election=True,
    ),
    Scenario(
        "bridge-leader-at-end",
        bridge_leader_at_one_end,
        "A-B, B-C but not A-C with the leader A: C cannot depose it (pre-vote, stickiness)",
        no_election=True,
    ),
    Scenario(
        "one-way-follower-to-leader",
        one_way_follower_to_leader,
        "one-way loss: a follower whose Fetches vanish does not disrupt the leader",
        no_election=True,
    ),
    Scenario(
        "one-way-leader-out",
        one_way_leader_out,
        "one-way loss: a leader whose own requests vanish keeps leading through Fetches",
        no_election=True,
    ),
    Scenario("slow-network", slow_network, "20-60 ms of delay on every link: correct, slower"),
    Scenario(
        "flaky-network",
        flaky_network,
        "short drops on random links: no acknowledged write lost",
    ),
    Scenario(
        "kill-leader",
        kill_leader,
        "kill -9 of the leader: no acknowledged write lost, a new leader serves",
    ),
    Scenario(
        "kill-follower",
        kill_follower,
        "kill -9 of a follower: the majority serves; the follower recovers its log",
        no_election=True,
    ),
    Scenario(
        "kill-random-repeatedly",
        kill_random_repeatedly,
        "three kill -9 / restart rounds on random nodes",
    ),
    Scenario(
        "crash-all",
        crash_all,
        "every controller killed at once: everything acknowledged survives the restart",
    ),
    Scenario(
        "pause-leader",
        pause_leader,
        "SIGSTOP of the leader past the fetch timeout: resumed, it acknowledges nothing (reads "
        "included) after a new leader exists",
    ),
    Scenario(
        "pause-follower",
        pause_follower,
        "SIGSTOP of a follower: it resumes and catches up",
        no_election=True,
    ),
    Scenario(
        "isolate-then-kill",
        isolate_then_kill,
        "no majority for a while: writes time out (unknown outcome), none is lost",
    ),
    Scenario(
        "kill-during-segment-rolls",
        kill_at_random_points,
        "kill -9 at random points with 4 KiB segments: recovery across segment rolls",
        settings={"metadata.log.segment.bytes": 4096},
    ),
    Scenario(
        "kill-during-snapshots",
        kill_at_random_points,
        "kill -9 at random points with a snapshot every ~2 KiB of records",
        settings={
            "metadata.log.max.record.bytes.between.snapshots": 2048,
            "metadata.log.segment.bytes": 8192,
        },
    ),
    Scenario(
        "slow-fsync",
        slow_fsync,
        "fsync 150 ms slower on every controller: commits slow down, no election",
        env={"METAQUORUM_TEST_FSYNC_DELAY_MS": "150"},
        no_election=True,
    ),
    Scenario(
        "leader-fsync-eio",
        leader_fsync_fails,
        "fsync fails (EIO, libfiu) on the leader: it exits without retrying the fsync and "
        "never acknowledges what was not durable; a new leader serves",
        fiu=True,
        after=stopped_on_purpose,
    ),
    Scenario(
        "follower-fsync-eio",
        follower_fsync_fails,
        "fsync fails on a follower: it exits, the majority serves, it recovers after restart",
        fiu=True,
        after=stopped_on_purpose,
        no_election=True,
    ),
    Scenario(
        "controller-disk-full",
        controller_disk_full,
        "ENOSPC (a 16 MiB tmpfs filled) on one controller: it stops, nothing acknowledged is "
        "lost, it recovers once there is room",
        disk="controller",
        after=stopped_on_purpose,
    ),
    Scenario(
        "broker-partitioned",
        broker_partitioned,
        "a broker cut off during delete/recreate: its reads stay monotonic prefixes of the "
        "log; its directories reconcile after the heal",
        brokers=1,
        workload=_BROKER_WORKLOAD,
        after=broker_directories_match,
    ),
    Scenario(
        "broker-paused",
        broker_paused,
        "a broker paused past its session timeout is fenced, then catches up and reconciles",
        brokers=1,
        workload=_BROKER_WORKLOAD,
        settings={"broker.session.timeout.ms": 2500, "broker.heartbeat.interval.ms": 500},
        after=broker_directories_match,
    ),
    Scenario(
        "kill-broker-during-moves",
        kill_broker_during_moves,
        "kill -9 of a broker while it moves partitions to deleting/: after restarts its "
        "directories match the image (recovery of interrupted moves, I11)",
        brokers=1,
        workload=_BROKER_WORKLOAD,
        settings={"delete.topic.delay.ms": 200},
        after=broker_directories_match,
    ),
    Scenario(
        "broker-disk-full",
        broker_disk_full,
        "a broker's log dir full (ENOSPC) while it moves partitions to deleting/ and creates "
        "new ones: no live partition lost, the directories reconcile once there is room",
        brokers=1,
        workload=_BROKER_WORKLOAD,
        disk="broker",
        after=broker_survived_a_full_disk,
    ),
)

# Negative controls: each must make the checker report a violation.
NEGATIVE_CONTROLS: tuple[Scenario, ...] = (
    Scenario(
        "unsafe-stale-reads",
        follower_isolated,
        "followers answer reads from their own image: an isolated follower serves stale reads",
        env={"METAQUORUM_UNSAFE_STALE_READS": "1"},
        workload=WorkloadConfig(follower_read_ratio=0.6),
    ),
    Scenario(
        "unsafe-ack-before-commit",
        leader_isolated,
        "the leader answers writes once appended: a cut-off leader acknowledges writes that "
        "are then lost",
        env={"METAQUORUM_UNSAFE_ACK_BEFORE_COMMIT": "1"},
        # Writes only: reads on the cut-off leader wait for a read fence until their deadline
        # and send clients elsewhere, which would leave few writes for it to acknowledge.
        workload=WorkloadConfig(
            mix=((Kind.CREATE, 3), (Kind.DELETE_NAME, 1), (Kind.DESCRIBE_NAME, 1))
        ),
    ),
)

BY_NAME = {s.name: s for s in SCENARIOS + NEGATIVE_CONTROLS}
