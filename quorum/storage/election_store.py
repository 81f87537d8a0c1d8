"""The election-state file ``quorum-state``: epoch, vote and leader, persisted before use.

Format: one JSON object with Kafka's ``quorum-state`` field names, plus a checksum::

    {"crc32c":123,"currentVoters":[{"voterId":1},{"voterId":2}],"data_version":0,
     "leaderEpoch":5,"leaderId":-1,"votedId":2}

``leaderId`` and ``votedId`` are -1 for "none", as in Kafka. ``crc32c`` is the CRC32C of the
canonical JSON (sorted keys, no spaces, ASCII) of every other field. Kafka's ``clusterId`` and
``appliedOffset`` are not written (the cluster id lives in ``meta.properties``).

``write`` replaces the file atomically: ``quorum-state.tmp``, fsync, rename over
``quorum-state``, fsync the directory. A crash leaves the old or the new file, and perhaps a
``.tmp`` that ``read`` removes: its rename never happened, so ``write`` never returned and
nothing was ever decided on its content.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypeGuard

import crc32c
import structlog

from quorum.limits import INT32_MAX
from quorum.raft.election import ElectionState
from quorum.storage import fsutil
from quorum.storage.errors import CorruptElectionStateError, StorageInvariantError

_log = structlog.get_logger("quorum.storage.election_store")

QUORUM_STATE_FILE_NAME = "quorum-state"
DATA_VERSION = 0
# A state with seven voters is about 200 bytes; anything much larger is not ours, and
# reading it whole could be an allocation bomb.
QUORUM_STATE_BYTES_MAX = 64 * 1024
_NONE_ID = -1
_FIELDS = frozenset({"leaderId", "leaderEpoch", "votedId", "currentVoters", "data_version"})


class ElectionStore:
    """Reads and durably writes one node's ``quorum-state`` file.

    As a last line of defence for election safety (I1, I2) the store also refuses, with
    ``StorageInvariantError``, a write that moves the epoch back, or that changes the vote or
    the leader to a different node within one epoch, relative to the last state it read or
    wrote. The Raft layer must never attempt either.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._last: ElectionState | None = None

    @property
    def path(self) -> Path:
        return self._path

    def read(self) -> ElectionState | None:
        """The persisted state, or None if the file does not exist (a new node).

        Removes a leftover ``quorum-state.tmp`` first. Raises ``CorruptElectionStateError`` for
        an empty or oversized file, invalid JSON, an unknown ``data_version``, a checksum
        mismatch, or fields that are missing, of the wrong type or out of range.
        """
        tmp_path = fsutil.tmp_path_for(self._path)
        if tmp_path.exists():
            tmp_path.unlink()
            fsutil.fsync_directory(self._path.parent)
            _log.warning("election_state_tmp_removed", file=str(tmp_path))
        try:
            with self._path.open("rb") as file:
                raw = file.read(QUORUM_STATE_BYTES_MAX + 1)
        except FileNotFoundError:
            return None
        state = decode_election_state(self._path, raw)
        self._last = state
        return state

    def write(self, state: ElectionState) -> None:
        """Persist ``state`` durably; when this returns a crash can no longer lose it."""
        _check_transition(self._last, state)
        fsutil.write_file_atomically(self._path, encode_election_state(state))
        self._last = state


def _check_transition(last: ElectionState | None, state: ElectionState) -> None:
    if state.epoch > INT32_MAX:
        raise StorageInvariantError(f"epoch of {state} does not fit in an i32")
    if last is None:
        return
    if state.epoch < last.epoch:
        raise StorageInvariantError(f"election state epoch going back: {last} -> {state}")
    if state.epoch != last.epoch:
        return
    if None not in (last.voted_id, state.voted_id) and last.voted_id != state.voted_id:
        raise StorageInvariantError(f"second vote in one epoch: {last} -> {state}")
    if None not in (last.leader_id, state.leader_id) and last.leader_id != state.leader_id:
        raise StorageInvariantError(f"second leader in one epoch: {last} -> {state}")


def _canonical_json(fields: dict[str, object]) -> bytes:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode(
        "ascii"
    )


def encode_election_state(state: ElectionState) -> bytes:
    """The file content for ``state`` (canonical JSON plus its checksum, one line)."""
    fields: dict[str, object] = {
        "leaderId": _NONE_ID if state.leader_id is None else state.leader_id,
        "leaderEpoch": state.epoch,
        "votedId": _NONE_ID if state.voted_id is None else state.voted_id,
        "currentVoters": [{"voterId": voter_id} for voter_id in sorted(state.voters)],
        "data_version": DATA_VERSION,
    }
    fields["crc32c"] = crc32c.crc32c(_canonical_json(fields))
    return _canonical_json(fields) + b"\n"


def decode_election_state(path: Path, raw: bytes) -> ElectionState:
    """Parse and check the content ``raw`` of the file ``path`` (named in errors)."""

    def corrupt(problem: str) -> CorruptElectionStateError:
        return CorruptElectionStateError(path, problem)

    if len(raw) > QUORUM_STATE_BYTES_MAX:
        raise corrupt(f"larger than {QUORUM_STATE_BYTES_MAX} bytes")
    if not raw.strip():
        raise corrupt("the file is empty")
    try:
        document = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise corrupt(f"not valid JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise corrupt(f"expected a JSON object, found {type(document).__name__}")
    data_version = document.get("data_version")
    if not _is_int(data_version) or data_version != DATA_VERSION:
        raise corrupt(f"unknown data_version {data_version!r} (this version reads {DATA_VERSION})")
    crc_stored = document.pop("crc32c", None)
    if not _is_int(crc_stored):
        raise corrupt(f"missing or invalid crc32c field ({crc_stored!r})")
    crc_computed = crc32c.crc32c(_canonical_json(document))
    if crc_stored != crc_computed:
        raise corrupt(f"checksum mismatch (stored {crc_stored}, computed {crc_computed})")
    if document.keys() != _FIELDS:
        missing = sorted(_FIELDS - document.keys())
        unexpected = sorted(document.keys() - _FIELDS)
        raise corrupt(f"wrong fields (missing {missing}, unexpected {unexpected})")
    epoch = document["leaderEpoch"]
    if not _is_int(epoch) or not 0 <= epoch <= INT32_MAX:
        raise corrupt(f"leaderEpoch {epoch!r} is not an epoch (0 <= epoch < 2^31)")
    leader_id = _optional_id(path, document["leaderId"], "leaderId")
    voted_id = _optional_id(path, document["votedId"], "votedId")
    voters_field = document["currentVoters"]
    if not isinstance(voters_field, list):
        raise corrupt(f"currentVoters is not a list ({voters_field!r})")
    voters: set[int] = set()
    for entry in voters_field:
        if not isinstance(entry, dict) or entry.keys() != {"voterId"}:
            raise corrupt(f"currentVoters entry {entry!r} is not {{'voterId': n}}")
        voter_id = entry["voterId"]
        if not _is_int(voter_id) or voter_id < 0 or voter_id in voters:
            raise corrupt(f"currentVoters entry {entry!r}: bad or duplicate voter id")
        voters.add(voter_id)
    return ElectionState(
        epoch=epoch, leader_id=leader_id, voted_id=voted_id, voters=frozenset(voters)
    )


def _reject_constant(name: str) -> object:
    raise ValueError(f"non-standard JSON constant {name}")


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _optional_id(path: Path, value: object, name: str) -> int | None:
    """A node id field: -1 means none."""
    if not _is_int(value) or not _NONE_ID <= value <= INT32_MAX:
        raise CorruptElectionStateError(path, f"{name} {value!r} is not a node id or -1")
    return None if value == _NONE_ID else value
