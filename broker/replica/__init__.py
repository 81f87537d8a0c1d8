"""Replication of partition data between brokers (docs/replication.md): the leader's view of its
followers and in-sync replicas (``leader.py``), the followers' fetchers (``fetcher.py``) and
the replica manager that turns metadata images into roles (``manager.py``)."""
