"""The wire: protobuf <-> core codecs (docs/conventions.md#wire).

One module per message family, each pure (no channels, clocks or I/O) and shared by whoever
speaks it, so the client and the tools import no server:

- ``scalars``: ids, Uuids, error codes and ``MalformedMessageError``, the conventions every
  codec shares;
- ``raft``: the Raft core's messages (``QuorumService``) and voter changes;
- ``quorum_description``: a DescribeQuorum answer as tools and the AdminClient see it;
- ``admin``: the ``AdminService`` requests as the controller's requests, and its results back;
- ``acls``: ACL bindings and filters.
"""
