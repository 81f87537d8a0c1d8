"""What gRPC's C core says about TLS, made visible (docs/security.md#what-a-node-logs).

gRPC's core writes its own log lines to file descriptor 2, in absl's format
(``I1127 13:35:59.656732 9646 ssl_transport_security.cc:2563] Handshake failed with error ...``),
and only at INFO does it say that a TLS handshake failed: a client without a certificate, one
signed by another CA, a plaintext client on the TLS port. At the default level (ERROR) a failed
handshake leaves no trace at all. ``GrpcCoreLog`` routes those lines through a pipe that a
thread of its own reads:

- a failed handshake is counted (``SECURITY_EVENTS.handshake_failed``, rendered as
  ``metaquorum_tls_handshake_failures_total``) and logged as ``tls_handshake_failed`` with the
  TLS library's reason, the first of each reason in full, then one line per 1,000;
- ``No match found for server name: X`` (this node reached a peer whose certificate does not
  name the node and role it meant, docs/security.md#whom-a-node-connects-to) likewise, as
  ``peer_identity_mismatch``;
- other INFO lines of the core are dropped (the level was raised only for the lines above; set
  ``GRPC_VERBOSITY`` yourself to see them all), and everything else is passed on unchanged.

gRPC's line does not say which side of the connection failed: the count includes the node's
own outbound connections (a follower whose leader's certificate expired, say).

Python's own ``sys.stderr`` (the structured log) keeps writing to the original stderr directly:
only what C code writes to descriptor 2 goes through the pipe.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
from typing import IO, Any, Final

import structlog

from quorum.logs import LogThrottle
from quorum.security.events import SECURITY_EVENTS

__all__ = ["GrpcCoreLog", "parse_core_line"]

GRPC_VERBOSITY_ENV: Final = "GRPC_VERBOSITY"
# absl's prefix: severity letter, MMDD, time, thread id, file:line]
_PREFIX: Final = re.compile(r"^([IWEF])\d{4} [\d:.]+\s+\d+ ([\w.]+):\d+\] ")
_HANDSHAKE: Final = "Handshake failed with error "
_NAME_MISMATCH: Final = "No match found for server name: "
_OPENSSL_REASON: Final = re.compile(r"OPENSSL_internal:([A-Z0-9_]+)")
# A core log line longer than this is passed on in pieces (a reader never holds more).
LINE_BYTES_MAX: Final = 16 * 1024


def parse_core_line(line: str) -> tuple[str, str, str] | None:
    """(event, reason, detail) of a core line about TLS: ``("tls_handshake_failed",
    "WRONG_VERSION_NUMBER", <the line's text>)`` or ``("peer_identity_mismatch",
    "PEER_NAME_MISMATCH", <the name expected>)``; None for any other line."""
    match = _PREFIX.match(line)
    if match is None:
        return None
    text = line[match.end() :].strip()
    if text.startswith(_HANDSHAKE):
        reason_match = _OPENSSL_REASON.search(text)
        if reason_match is not None:
            reason = reason_match.group(1)
        else:
            reason = text[len(_HANDSHAKE) :].split(":", 1)[0].strip() or "UNKNOWN"
        return "tls_handshake_failed", reason, text
    if text.startswith(_NAME_MISMATCH):
        return "peer_identity_mismatch", "PEER_NAME_MISMATCH", text[len(_NAME_MISMATCH) :]
    return None


class GrpcCoreLog:
    """Reads what gRPC's core writes to descriptor 2 (``install``); one per process."""

    def __init__(self, listener: str, original: IO[bytes], *, pass_info: bool) -> None:
        self.listener = listener
        self._original = original
        self._pass_info = pass_info
        self._throttle = LogThrottle()
        self._log = structlog.get_logger("quorum.security")

    @classmethod
    def install(cls, listener: str) -> GrpcCoreLog:
        """Route descriptor 2 through a pipe read by a daemon thread, point ``sys.stderr`` at
        the original stderr, and raise gRPC's log level to INFO unless ``GRPC_VERBOSITY`` is
        set. Call before gRPC's first channel or server (the level is read then) and before
        logging is configured (it writes to ``sys.stderr``)."""
        original_fd = os.dup(2)
        sys.stderr.flush()
        sys.stderr = open(  # noqa: SIM115 - the process's stderr from now on
            original_fd, "w", buffering=1, errors="backslashreplace", closefd=False
        )
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        asked = os.environ.get(GRPC_VERBOSITY_ENV)
        if asked is None:
            os.environ[GRPC_VERBOSITY_ENV] = "INFO"
        reader = cls(
            listener,
            open(original_fd, "wb", buffering=0, closefd=False),  # noqa: SIM115
            pass_info=asked is not None and asked.upper() in ("INFO", "DEBUG"),
        )
        threading.Thread(
            target=reader._pump, args=(read_fd,), name="grpc-core-log", daemon=True
        ).start()
        return reader

    def _pump(self, read_fd: int) -> None:
        with open(read_fd, "rb", buffering=0) as pipe:
            pending = b""
            while chunk := pipe.read(LINE_BYTES_MAX):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if len(pending) > LINE_BYTES_MAX:
                    lines.append(pending)
                    pending = b""
                for raw in lines:
                    self.handle(raw + b"\n")

    def handle(self, raw: bytes) -> None:
        """One line the core wrote: counted and logged, dropped, or passed on."""
        line = raw.decode(errors="backslashreplace")
        parsed = parse_core_line(line)
        if parsed is not None:
            self._record(*parsed)
            if self._pass_info:
                self._write(raw)
            return
        if line.startswith("I") and _PREFIX.match(line) and not self._pass_info:
            return  # INFO was raised only for the lines above
        self._write(raw)

    def _write(self, raw: bytes) -> None:
        with contextlib.suppress(OSError):
            self._original.write(raw)

    def _record(self, event: str, reason: str, detail: str) -> None:
        SECURITY_EVENTS.handshake_failed(self.listener, reason)
        count = self._throttle.count((event, reason))
        if count is None:
            return
        fields: dict[str, Any] = {"listener": self.listener, "reason": reason, "count": count}
        if event == "peer_identity_mismatch":
            fields["expected_name"] = repr(detail[:256])
        else:
            fields["detail"] = repr(detail[:512])
        self._log.warning(event, **fields)
