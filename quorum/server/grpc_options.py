"""The gRPC options of a node: its server (``SERVER_OPTIONS``, quorum/server/grpc_server.py)
and the channels it opens to other nodes (``NODE_CHANNEL_OPTIONS``: a controller's peer
clients, a broker's controller client). Shared by controllers and brokers, so neither imports
the other's services to get them."""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "MESSAGE_BYTES_MAX",
    "NODE_CHANNEL_OPTIONS",
    "RECONNECT_BACKOFF_MAX_MS",
    "RECONNECT_BACKOFF_MS",
    "REQUEST_BYTES_MAX",
    "SERVER_OPTIONS",
]

MESSAGE_BYTES_MAX: Final = 16 * 1024 * 1024  # a full 8 MiB fetch plus framing, with room

# Requests a node accepts are small (Fetch is pull: the large messages are responses); an admin
# request above this is refused by gRPC with RESOURCE_EXHAUSTED before it is parsed.
REQUEST_BYTES_MAX: Final = 4 * 1024 * 1024

# A channel to a peer whose connection failed retries after a backoff, and a request made
# meanwhile fails at once with the last error (UNAVAILABLE, connection refused) even if the
# peer is back: with gRPC's default backoff (1 s, growing 1.6x) a controller restarted a
# moment ago looked dead to its peers for up to seconds, and a follower of it as a new leader
# took that for its leader's death (``peer_gone``) and ran a needless pre-vote. Kafka's
# reconnect.backoff.ms (50) and reconnect.backoff.max.ms (1,000) instead; and a channel
# waiting out its backoff is replaced by a fresh one before a request (``AioChannels``).
RECONNECT_BACKOFF_MS: Final = 50
RECONNECT_BACKOFF_MAX_MS: Final = 1_000
NODE_CHANNEL_OPTIONS: Final[list[tuple[str, Any]]] = [
    ("grpc.max_receive_message_length", MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.min_reconnect_backoff_ms", RECONNECT_BACKOFF_MS),
    ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MAX_MS),
    # Subchannels of its own: a channel that replaces one waiting out a backoff
    # (``AioChannels``) then really connects anew instead of sharing the waiting subchannel.
    ("grpc.use_local_subchannel_pool", 1),
]
# gRPC binds a server's port with SO_REUSEPORT unless told not to: a second node (or any gRPC
# server) started on a port a live node listens on then bound it too and took a share of its
# connections, silently. Without it that start fails with "the port is in use" (StartupError).
SERVER_OPTIONS: Final[list[tuple[str, Any]]] = [
    ("grpc.so_reuseport", 0),
    ("grpc.max_receive_message_length", REQUEST_BYTES_MAX),
    ("grpc.max_send_message_length", MESSAGE_BYTES_MAX),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.max_concurrent_streams", 1_000),
]
