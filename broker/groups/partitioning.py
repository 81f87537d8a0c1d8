"""Which partition of ``__consumer_offsets`` coordinates a group (Kafka's
``GroupCoordinatorService.partitionFor``): ``Utils.abs(groupId.hashCode()) % partitions``."""

from __future__ import annotations

from typing import Final

__all__ = ["java_string_hash", "partition_for"]

_INT32_MASK: Final = 0xFFFFFFFF


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over the UTF-16 code
    units, in 32-bit two's complement arithmetic (a signed int32)."""
    value = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for index in range(0, len(units), 2):
        value = (value * 31 + ((units[index] << 8) | units[index + 1])) & _INT32_MASK
    return value - (1 << 32) if value >= 1 << 31 else value


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(hash) % partitions``; ``Utils.abs`` is ``Math.abs`` except that
    Integer.MIN_VALUE gives 0 (``Math.abs`` would give MIN_VALUE itself)."""
    assert partitions > 0
    value = java_string_hash(group_id)
    return (0 if value == -(2**31) else abs(value)) % partitions
