"""ElectionStore: the quorum-state file round trip, atomic replacement and every corruption."""

from __future__ import annotations

import json
import os
from pathlib import Path

import crc32c
import pytest
from structlog.testing import capture_logs

from quorum.raft.election import ElectionState
from quorum.storage import fsutil
from quorum.storage.election_store import (
    QUORUM_STATE_BYTES_MAX,
    QUORUM_STATE_FILE_NAME,
    ElectionStore,
    encode_election_state,
)
from quorum.storage.errors import CorruptElectionStateError, StorageInvariantError

VOTERS = frozenset({1, 2, 3})


def store_in(tmp_path: Path) -> ElectionStore:
    return ElectionStore(tmp_path / QUORUM_STATE_FILE_NAME)


def with_checksum(fields: dict[str, object]) -> bytes:
    """A file content whose checksum matches ``fields`` (to reach the checks after the CRC)."""
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":")).encode("ascii")
    return json.dumps({**fields, "crc32c": crc32c.crc32c(canonical)}).encode("ascii")


def valid_fields() -> dict[str, object]:
    return {
        "leaderId": 2,
        "leaderEpoch": 7,
        "votedId": -1,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }


def test_read_without_file_is_none(tmp_path: Path) -> None:
    assert store_in(tmp_path).read() is None


@pytest.mark.parametrize(
    "state",
    [
        ElectionState.unattached(0, VOTERS),
        ElectionState(epoch=3, leader_id=None, voted_id=2, voters=VOTERS),
        ElectionState(epoch=4, leader_id=1, voted_id=None, voters=VOTERS),
        ElectionState(epoch=5, leader_id=3, voted_id=3, voters=frozenset({3})),
        ElectionState(epoch=2**31 - 1, leader_id=0, voted_id=0, voters=frozenset()),
    ],
)
def test_round_trip(tmp_path: Path, state: ElectionState) -> None:
    store_in(tmp_path).write(state)
    assert store_in(tmp_path).read() == state  # a fresh store: read from disk
    assert not fsutil.tmp_path_for(tmp_path / QUORUM_STATE_FILE_NAME).exists()


def test_file_uses_kafka_field_names(tmp_path: Path) -> None:
    store_in(tmp_path).write(ElectionState(epoch=9, leader_id=None, voted_id=3, voters=VOTERS))
    document = json.loads((tmp_path / QUORUM_STATE_FILE_NAME).read_text())
    crc = document.pop("crc32c")
    assert document == {
        "leaderId": -1,
        "leaderEpoch": 9,
        "votedId": 3,
        "currentVoters": [{"voterId": 1}, {"voterId": 2}, {"voterId": 3}],
        "data_version": 0,
    }
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
    assert crc == crc32c.crc32c(canonical)


def test_write_replaces_atomically_with_fsync_before_rename_and_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = store_in(tmp_path)
    store.write(ElectionState.unattached(1, VOTERS))
    calls: list[str] = []
    real_fdatasync, real_replace, real_fsync_directory = (
        os.fdatasync,
        os.replace,
        fsutil.fsync_directory,
    )

    def fdatasync(fd: int) -> None:
        calls.append("fsync tmp")
        real_fdatasync(fd)

    def replace(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        calls.append(f"rename {Path(source).name} -> {Path(target).name}")
        real_replace(source, target)

    def fsync_directory(directory: Path) -> bool:
        calls.append(f"fsync dir {directory == tmp_path}")
        return real_fsync_directory(directory)

    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(fsutil, "fsync_directory", fsync_directory)
    store.write(ElectionState(epoch=2, leader_id=None, voted_id=1, voters=VOTERS))
    assert calls == [
        "fsync tmp",
        "rename quorum-state.tmp -> quorum-state",
        "fsync dir True",
    ]


def test_crash_before_rename_keeps_old_state_and_leftover_tmp_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = ElectionState(epoch=4, leader_id=2, voted_id=None, voters=VOTERS)
    store_in(tmp_path).write(old)

    def crash(*args: object) -> None:
        raise KeyboardInterrupt("crash before rename")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        store_in(tmp_path).write(ElectionState.unattached(5, VOTERS))
    monkeypatch.undo()
    tmp = fsutil.tmp_path_for(tmp_path / QUORUM_STATE_FILE_NAME)
    assert tmp.exists()
    with capture_logs() as logs:
        assert store_in(tmp_path).read() == old
    assert not tmp.exists()
    assert [entry["event"] for entry in logs] == ["election_state_tmp_removed"]


def test_leftover_tmp_without_state_file(tmp_path: Path) -> None:
    tmp = fsutil.tmp_path_for(tmp_path / QUORUM_STATE_FILE_NAME)
    tmp.write_bytes(b"{half a json")
    assert store_in(tmp_path).read() is None
    assert not tmp.exists()


CORRUPTIONS: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty"),
    "whitespace": (b"  \n", "empty"),
    "invalid json": (b'{"leaderEpoch": 3,', "not valid JSON"),
    "not utf-8": (b"\xff\xfe{}", "not valid JSON"),
    "NaN constant": (b'{"leaderEpoch": NaN}', "not valid JSON"),
    "not an object": (b"[1, 2]", "expected a JSON object"),
    "no data_version": (b'{"leaderEpoch": 3}', "unknown data_version None"),
    "unknown data_version": (
        with_checksum({**valid_fields(), "data_version": 1}),
        "unknown data_version 1",
    ),
    "bool data_version": (
        with_checksum({**valid_fields(), "data_version": False}),
        "unknown data_version False",
    ),
    "no checksum": (json.dumps(valid_fields()).encode(), "missing or invalid crc32c"),
    "bad checksum": (
        with_checksum(valid_fields()).replace(b'"leaderEpoch": 7', b'"leaderEpoch": 8'),
        "checksum mismatch",
    ),
    "negative epoch": (with_checksum({**valid_fields(), "leaderEpoch": -1}), "leaderEpoch -1"),
    "epoch too large": (
        with_checksum({**valid_fields(), "leaderEpoch": 2**31}),
        "leaderEpoch 2147483648",
    ),
    "string epoch": (with_checksum({**valid_fields(), "leaderEpoch": "7"}), "leaderEpoch '7'"),
    "bad leader id": (with_checksum({**valid_fields(), "leaderId": -2}), "leaderId -2"),
    "bool voted id": (with_checksum({**valid_fields(), "votedId": True}), "votedId True"),
    "missing field": (
        with_checksum({k: v for k, v in valid_fields().items() if k != "votedId"}),
        "missing ['votedId']",
    ),
    "unexpected field": (
        with_checksum({**valid_fields(), "extra": 1}),
        "unexpected ['extra']",
    ),
    "voters not a list": (
        with_checksum({**valid_fields(), "currentVoters": {"voterId": 1}}),
        "currentVoters is not a list",
    ),
    "voter entry shape": (
        with_checksum({**valid_fields(), "currentVoters": [{"id": 1}]}),
        "is not {'voterId': n}",
    ),
    "duplicate voter": (
        with_checksum({**valid_fields(), "currentVoters": [{"voterId": 1}, {"voterId": 1}]}),
        "bad or duplicate voter id",
    ),
    "too large": (b" " * (QUORUM_STATE_BYTES_MAX + 1), "larger than"),
}


@pytest.mark.parametrize("case", sorted(CORRUPTIONS))
def test_corruption_is_refused_with_file_and_reason(tmp_path: Path, case: str) -> None:
    content, reason = CORRUPTIONS[case]
    path = tmp_path / QUORUM_STATE_FILE_NAME
    path.write_bytes(content)
    with pytest.raises(CorruptElectionStateError) as raised:
        store_in(tmp_path).read()
    assert raised.value.path == path
    assert reason in raised.value.problem
    assert str(path) in str(raised.value)
    assert path.read_bytes() == content  # evidence is left in place


def test_valid_helper_content_is_accepted(tmp_path: Path) -> None:
    """The corruption cases are one change away from this valid file."""
    (tmp_path / QUORUM_STATE_FILE_NAME).write_bytes(with_checksum(valid_fields()))
    assert store_in(tmp_path).read() == ElectionState(
        epoch=7, leader_id=2, voted_id=None, voters=VOTERS
    )


def test_every_single_bit_flip_is_detected(tmp_path: Path) -> None:
    content = encode_election_state(
        ElectionState(epoch=12, leader_id=None, voted_id=2, voters=VOTERS)
    )
    path = tmp_path / QUORUM_STATE_FILE_NAME
    for position in range(len(content) - 1):  # the final newline is insignificant whitespace
        for bit in range(8):
            damaged = bytearray(content)
            damaged[position] ^= 1 << bit
            path.write_bytes(bytes(damaged))
            try:
                store_in(tmp_path).read()
            except CorruptElectionStateError:
                continue
            pytest.fail(f"bit {bit} of byte {position} flipped and the file still parsed")


def test_store_refuses_to_go_back_or_vote_twice(tmp_path: Path) -> None:
    store = store_in(tmp_path)
    store.write(ElectionState(epoch=5, leader_id=None, voted_id=2, voters=VOTERS))
    with pytest.raises(StorageInvariantError, match="going back"):
        store.write(ElectionState.unattached(4, VOTERS))
    with pytest.raises(StorageInvariantError, match="second vote"):
        store.write(ElectionState(epoch=5, leader_id=None, voted_id=3, voters=VOTERS))
    store.write(ElectionState(epoch=5, leader_id=2, voted_id=2, voters=VOTERS))
    with pytest.raises(StorageInvariantError, match="second leader"):
        store.write(ElectionState(epoch=5, leader_id=3, voted_id=None, voters=VOTERS))
    store.write(ElectionState(epoch=6, leader_id=None, voted_id=3, voters=VOTERS))
    # The checks also apply to the state read at startup.
    restarted = store_in(tmp_path)
    assert restarted.read() == ElectionState(epoch=6, leader_id=None, voted_id=3, voters=VOTERS)
    with pytest.raises(StorageInvariantError, match="second vote"):
        restarted.write(ElectionState(epoch=6, leader_id=None, voted_id=1, voters=VOTERS))
    assert restarted.read() == ElectionState(epoch=6, leader_id=None, voted_id=3, voters=VOTERS)
