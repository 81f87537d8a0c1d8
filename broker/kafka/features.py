"""The features a broker advertises in ApiVersions (KIP-584), so ``kafka-features describe``
and the Java AdminClient's ``describeFeatures`` see what this cluster is.

Two features are true of a metaquorum cluster, and only those are advertised:

- ``kraft.version`` (KIP-853): 0 for a static quorum (``controller.quorum.voters``), 1 for a
  dynamic one (the voters are in the log). A node supports both; the finalized level is the
  one the broker's Raft observer has in force: its bootstrap level, replaced by the log's
  latest ``KRaftVersionRecord``.
- ``metadata.version``: the level of the metadata this cluster serves. Its metadata log holds
  no ``FeatureLevelRecord`` and no node can change the level (there is no UpdateFeatures):
  the records, the image and the listener's API ranges are those of Kafka 3.9, whose release
  level is 3.9-IV0 (21), the level Kafka requires for ``kraft.version`` 1 too. Every node of
  this version speaks that level and no other, so it is both the whole supported range and
  the finalized level. The log is not Kafka's record format: the level says which
  protocol the cluster answers as, not that Kafka's tools can read ``__cluster_metadata``.

Kafka omits a finalized feature whose level is 0 (KIP-584: level 0 is "not enabled"), so a
static quorum's ``kraft.version`` is supported but not finalized, as on Kafka's brokers. The
finalized features' epoch is the offset of the image they were read from, as Kafka's KRaft
brokers answer it.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "KRAFT_VERSION",
    "METADATA_VERSION",
    "METADATA_VERSION_LEVEL",
    "SUPPORTED_FEATURES",
    "api_versions_features",
]

METADATA_VERSION: Final = "metadata.version"
KRAFT_VERSION: Final = "kraft.version"
METADATA_VERSION_LEVEL: Final = 21  # 3.9-IV0: Kafka 3.9's level, the schemas the codec has.

# Feature name -> (min, max) level this broker supports.
SUPPORTED_FEATURES: Final[dict[str, tuple[int, int]]] = {
    METADATA_VERSION: (METADATA_VERSION_LEVEL, METADATA_VERSION_LEVEL),
    KRAFT_VERSION: (0, 1),
}


def api_versions_features(image_offset: int, kraft_version: int) -> dict[str, Any]:
    """ApiVersions' feature fields (v3+, tagged): what is supported, what is finalized (a level
    above 0 only) and the epoch of the finalized set (the image's offset; -1 before any)."""
    finalized = {METADATA_VERSION: METADATA_VERSION_LEVEL, KRAFT_VERSION: kraft_version}
    return {
        "supported_features": [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in sorted(SUPPORTED_FEATURES.items())
        ],
        "finalized_features_epoch": max(image_offset, -1),
        "finalized_features": [
            {"name": name, "min_version_level": level, "max_version_level": level}
            for name, level in sorted(finalized.items())
            if level > 0
        ],
    }
