"""The harness's ports (quorum/harness.py, ``PORT_RANGE``): each pytest-xdist worker picks from a
slice of its own, outside the kernel's ephemeral range, and a port found bound is skipped, so
two test processes running at once never hand a node the same port (docs/testing.md#layout)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from quorum import harness


def slice_for(monkeypatch: pytest.MonkeyPatch, worker: str | None, count: int) -> range:
    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
    ports = harness._PortSlice()
    return range(ports.low, ports.low + ports.size)


def test_workers_pick_from_disjoint_slices_below_the_ephemeral_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    low, high = harness.PORT_RANGE
    alone = slice_for(monkeypatch, None, 1)
    assert (alone.start, alone.stop) == (low, high)
    slices = [slice_for(monkeypatch, f"gw{i}", 2) for i in range(2)]
    assert not set(slices[0]) & set(slices[1])
    assert all(low <= s.start and s.stop <= high for s in slices)
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    if ephemeral.exists():
        first_ephemeral = int(ephemeral.read_text().split()[0])
        assert high <= first_ephemeral, "the range overlaps the kernel's ephemeral ports"
    assert high <= 65_536 and low > 19_999  # deploy/local's fixed ports are 19xxx


def test_ports_come_in_turn_and_a_bound_one_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    slice_for(monkeypatch, "gw0", 2)
    ports = harness._PortSlice()
    in_turn = [ports.low + (ports.offset + step) % ports.size for step in range(4)]
    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held: list[socket.socket] = [taken]
    try:
        try:
            taken.bind(("127.0.0.1", in_turn[1]))
        except OSError:
            pytest.skip(f"port {in_turn[1]} is in use by another program")
        got = []
        for _ in range(3):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            got.append(ports.bind(sock))
        assert got == [in_turn[0], in_turn[2], in_turn[3]], (got, in_turn)
    finally:
        for sock in held:
            sock.close()
