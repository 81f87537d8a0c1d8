"""Client quotas in the metadata image (quorum.metadata.client_quotas, ClientQuotaRecord replay,
snapshots): replay and removal, the snapshot round trip, DescribeClientQuotas' filters, and
Kafka's precedence of which quota applies to a request."""

from __future__ import annotations

import io
import random

import pytest

from quorum.metadata.client_quotas import (
    MATCH_TYPE_DEFAULT,
    MATCH_TYPE_EXACT,
    MATCH_TYPE_SPECIFIED,
    ClientQuotaEntity,
    DescribeFilterError,
    describe_client_quotas,
    quota_for,
)
from quorum.metadata.delta import MetadataDelta, MetadataReplayError, replay_records
from quorum.metadata.image import MetadataImage
from quorum.metadata.records import (
    ClientQuotaEntityData,
    ClientQuotaRecord,
    decode_record,
    encode_record,
    record_kafka_json,
)
from quorum.metadata.snapshot_records import (
    image_from_records,
    image_to_records,
    snapshot_end_offset,
)
from quorum.tools.metadata_shell import LoadedImage, cat_paths, ls_paths


def entity(**names: str | None) -> tuple[ClientQuotaEntityData, ...]:
    return tuple(
        ClientQuotaEntityData(kind.replace("_", "-"), name) for kind, name in names.items()
    )


def set_quota(key: str, value: float, **names: str | None) -> ClientQuotaRecord:
    return ClientQuotaRecord(entity(**names), key, value, remove=False)


def remove_quota(key: str, **names: str | None) -> ClientQuotaRecord:
    return ClientQuotaRecord(entity(**names), key, 0.0, remove=True)


def image_with(*records: ClientQuotaRecord) -> MetadataImage:
    return replay_records(MetadataImage.EMPTY, enumerate(records))


def test_replay_sets_replaces_and_removes_keys() -> None:
    image = image_with(
        set_quota("producer_byte_rate", 1024.0, user="alice"),
        set_quota("consumer_byte_rate", 2048.0, user="alice"),
        set_quota("producer_byte_rate", 4096.0, user="alice"),
        set_quota("request_percentage", 25.0, client_id=None),
    )
    assert dict(image.client_quotas[(("user", "alice"),)]) == {
        "producer_byte_rate": 4096.0,
        "consumer_byte_rate": 2048.0,
    }
    assert dict(image.client_quotas[(("client-id", None),)]) == {"request_percentage": 25.0}
    delta = MetadataDelta(image)
    delta.replay(remove_quota("producer_byte_rate", user="alice"), image.offset + 1)
    delta.replay(remove_quota("consumer_byte_rate", user="alice"), image.offset + 2)
    after = delta.apply()
    # An entity with no key left is gone, the other is untouched.
    assert (("user", "alice"),) not in after.client_quotas
    assert (
        after.client_quotas[(("client-id", None),)] == image.client_quotas[(("client-id", None),)]
    )


def test_replay_refuses_what_the_controller_never_writes() -> None:
    with pytest.raises(MetadataReplayError, match="no quota 'producer_byte_rate' to remove"):
        image_with(remove_quota("producer_byte_rate", user="alice"))
    with pytest.raises(MetadataReplayError, match="Unhandled client quota entity type: group"):
        image_with(ClientQuotaRecord(entity(group="g"), "producer_byte_rate", 1.0, remove=False))
    with pytest.raises(MetadataReplayError, match="Invalid empty client quota entity"):
        image_with(ClientQuotaRecord((), "producer_byte_rate", 1.0, remove=False))


def test_entity_order_in_the_record_does_not_matter() -> None:
    one = image_with(set_quota("producer_byte_rate", 10.0, user="u", client_id="c"))
    two = image_with(set_quota("producer_byte_rate", 10.0, client_id="c", user="u"))
    assert one == two
    assert list(one.client_quotas) == [(("client-id", "c"), ("user", "u"))]


def test_snapshot_round_trip_keeps_every_quota() -> None:
    rng = random.Random(20261128)
    records = []
    for _ in range(60):
        names: dict[str, str | None] = {}
        if rng.random() < 0.7:
            names["user"] = rng.choice(["alice", "bob", None])
        if not names or rng.random() < 0.5:
            names["client_id"] = rng.choice(["app", "cli", None])
        key = rng.choice(["producer_byte_rate", "consumer_byte_rate", "request_percentage"])
        records.append(set_quota(key, float(rng.randint(1, 10**6)), **names))
    image = image_with(*records)
    snapshot = list(image_to_records(image))
    assert all(isinstance(r, ClientQuotaRecord) and not r.remove for r in snapshot)
    assert len(snapshot) == sum(len(v) for v in image.client_quotas.values())
    loaded = image_from_records(snapshot, end_offset=snapshot_end_offset(image))
    assert loaded == image
    assert {k: dict(v) for k, v in loaded.client_quotas.items()} == {
        k: dict(v) for k, v in image.client_quotas.items()
    }
    # Deterministic: equal images write equal snapshots.
    assert list(image_to_records(loaded)) == snapshot


def test_record_codec_and_kafka_json() -> None:
    record = set_quota("producer_byte_rate", 102400.0, user="CN=alice", client_id=None)
    assert decode_record(encode_record(record)) == record
    assert record_kafka_json(record) == {
        "entity": [
            {"entityType": "user", "entityName": "CN=alice"},
            {"entityType": "client-id", "entityName": None},
        ],
        "key": "producer_byte_rate",
        "value": 102400.0,
        "remove": False,
    }


# ----- DescribeClientQuotas ------------------------------------------------------------------

QUOTAS: dict[ClientQuotaEntity, dict[str, float]] = {
    (("user", "alice"),): {"producer_byte_rate": 1.0},
    (("user", None),): {"producer_byte_rate": 2.0},
    (("client-id", "app"), ("user", "alice")): {"consumer_byte_rate": 3.0},
    (("client-id", "app"),): {"request_percentage": 4.0},
}


def described(components: list[tuple[str, int, str | None]], *, strict: bool) -> list[object]:
    return [e for e, _ in describe_client_quotas(QUOTAS, components, strict=strict)]


def test_describe_filters_as_kafka() -> None:
    everything = described([], strict=False)
    assert sorted(map(str, everything)) == sorted(map(str, QUOTAS))
    assert described([], strict=True) == []
    assert described([("user", MATCH_TYPE_EXACT, "alice")], strict=False) == [
        (("client-id", "app"), ("user", "alice")),
        (("user", "alice"),),
    ]
    assert described([("user", MATCH_TYPE_EXACT, "alice")], strict=True) == [(("user", "alice"),)]
    assert described([("user", MATCH_TYPE_DEFAULT, None)], strict=True) == [(("user", None),)]
    assert described([("client-id", MATCH_TYPE_SPECIFIED, None)], strict=True) == [
        (("client-id", "app"),)
    ]
    assert described(
        [("user", MATCH_TYPE_SPECIFIED, None), ("client-id", MATCH_TYPE_EXACT, "app")],
        strict=True,
    ) == [(("client-id", "app"), ("user", "alice"))]
    (found,) = describe_client_quotas(QUOTAS, [("user", MATCH_TYPE_DEFAULT, None)], strict=True)
    assert found[1] == {"producer_byte_rate": 2.0}


@pytest.mark.parametrize(
    ("components", "message", "unsupported"),
    [
        ([("", 0, "x")], "Invalid empty entity type.", False),
        ([("user", 0, "a"), ("user", 2, None)], "cannot appear more than once", False),
        ([("group", 0, "g")], "Unsupported entity type group", True),
        ([("user", 0, None)], "MATCH_TYPE_EXACT, but set match string to null", False),
        ([("user", 1, "a")], "MATCH_TYPE_DEFAULT, but also specified a match", False),
        ([("user", 2, "a")], "MATCH_TYPE_SPECIFIED, but also specified a match", False),
        ([("user", 7, None)], "Unknown match type 7", False),
        ([("ip", 2, None), ("user", 2, None)], "IP filter component should not be", False),
    ],
)
def test_describe_refuses_bad_filters_with_kafkas_messages(
    components: list[tuple[str, int, str | None]], message: str, unsupported: bool
) -> None:
    with pytest.raises(DescribeFilterError, match=message) as info:
        describe_client_quotas(QUOTAS, components, strict=False)
    assert info.value.unsupported is unsupported


# ----- which quota applies --------------------------------------------------------------------

# Kafka's ClientQuotaManager order, most specific first.
ORDER: list[ClientQuotaEntity] = [
    (("client-id", "app"), ("user", "alice")),
    (("client-id", None), ("user", "alice")),
    (("user", "alice"),),
    (("client-id", "app"), ("user", None)),
    (("client-id", None), ("user", None)),
    (("user", None),),
    (("client-id", "app"),),
    (("client-id", None),),
]


def test_precedence_is_kafkas_for_every_subset() -> None:
    """For every non-empty subset of the eight entities, the most specific one present wins."""
    for mask in range(1, 1 << len(ORDER)):
        present = [e for bit, e in enumerate(ORDER) if mask >> bit & 1]
        quotas = {e: {"producer_byte_rate": float(ORDER.index(e) + 1)} for e in present}
        match = quota_for(quotas, "alice", "app", "producer_byte_rate")
        assert match is not None
        assert match.entity == present[0], (mask, match)
        assert match.value == float(ORDER.index(present[0]) + 1)


def test_no_quota_for_other_keys_users_or_clients() -> None:
    quotas: dict[ClientQuotaEntity, dict[str, float]] = {
        (("user", "alice"),): {"producer_byte_rate": 5.0}
    }
    assert quota_for(quotas, "alice", "app", "consumer_byte_rate") is None
    assert quota_for(quotas, "bob", "app", "producer_byte_rate") is None
    assert quota_for({}, "alice", "app", "producer_byte_rate") is None


def test_buckets_share_a_user_quota_and_split_a_default_one() -> None:
    user_level = {(("user", "alice"),): {"producer_byte_rate": 5.0}}
    one = quota_for(user_level, "alice", "app", "producer_byte_rate")
    two = quota_for(user_level, "alice", "cli", "producer_byte_rate")
    assert one is not None and two is not None
    assert one.bucket == two.bucket == ("alice", "")  # one quota for all of alice's clients
    default_user = {(("user", None),): {"producer_byte_rate": 5.0}}
    alice = quota_for(default_user, "alice", "app", "producer_byte_rate")
    bob = quota_for(default_user, "bob", "app", "producer_byte_rate")
    assert alice is not None and bob is not None
    assert alice.bucket == ("alice", "") and bob.bucket == ("bob", "")  # one each
    per_client = {(("client-id", None), ("user", "alice")): {"producer_byte_rate": 5.0}}
    match = quota_for(per_client, "alice", "app", "producer_byte_rate")
    assert match is not None and match.bucket == ("alice", "app")


def test_the_metadata_shell_shows_client_quotas() -> None:
    """``metaquorum metadata ls|cat /image/clientQuotas``: Kafka's shell's entity names."""
    image = image_with(
        set_quota("producer_byte_rate", 1024.0, user="CN=alice", client_id=None),
        set_quota("request_percentage", 25.0, user=None),
    )
    loaded = LoadedImage(image, None, None, 0)
    out, err = io.StringIO(), io.StringIO()
    assert ls_paths(loaded, ["/image/clientQuotas"], out, err) == 0, err.getvalue()
    assert out.getvalue().split() == [
        "clientId(<default>)_user(CN=alice)",
        "user(<default>)",
    ]
    out = io.StringIO()
    path = "/image/clientQuotas/clientId(<default>)_user(CN=alice)/producer_byte_rate"
    assert cat_paths(loaded, [path], out, err) == 0, err.getvalue()
    assert out.getvalue() == "1024.0\n"
    assert ls_paths(loaded, ["/image/clientQuotas/user(bob)"], io.StringIO(), err) == 1
