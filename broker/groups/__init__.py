"""Consumer groups with Kafka's classic group protocol, pure (docs/groups.md): the group state
machine (``group.py``), one coordinator partition's groups and committed offsets
(``shard.py``), the records they are stored as in ``__consumer_offsets`` in Kafka's own formats
(``records.py``), and which partition coordinates a group (``partitioning.py``). No sockets,
threads, clocks or files: time comes in as ``now_ms``; the shell is ``broker/kafka/groups.py``."""
