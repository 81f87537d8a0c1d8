"""gRPC core's TLS lines (quorum/server/grpc_log.py): parsed, counted, throttled; other INFO
lines dropped, everything else passed on unchanged."""

from __future__ import annotations

import io

from structlog.testing import capture_logs

from quorum.security.events import SECURITY_EVENTS
from quorum.server.grpc_log import GrpcCoreLog, parse_core_line

PLAINTEXT = (
    "I1127 13:35:59.656732    9646 ssl_transport_security.cc:2563] Handshake failed with error "
    "SSL_ERROR_SSL: error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER: "
    "Invalid certificate verification context\n"
)
NO_CERTIFICATE = (
    "I1127 13:35:59.986706    9646 ssl_transport_security.cc:2563] Handshake failed with error "
    "SSL_ERROR_SSL: error:100000c0:SSL routines:OPENSSL_internal:"
    "PEER_DID_NOT_RETURN_A_CERTIFICATE: Invalid certificate verification context\n"
)
MISMATCH = (
    "E1127 13:36:27.372276    9876 ssl_transport_security.cc:3238] No match found for server "
    "name: controller-2.41414141.metaquorum\n"
)
OTHER_INFO = "I1127 13:36:27.372276    9876 subchannel.cc:806] subchannel 0x1 connect failed\n"
ERROR = "E1127 13:36:27.372276    9876 chttp2_transport.cc:1] something went wrong\n"


def test_core_lines_about_tls_are_recognised() -> None:
    assert parse_core_line(PLAINTEXT)[:2] == ("tls_handshake_failed", "WRONG_VERSION_NUMBER")  # type: ignore[index]
    assert parse_core_line(NO_CERTIFICATE)[:2] == (  # type: ignore[index]
        "tls_handshake_failed",
        "PEER_DID_NOT_RETURN_A_CERTIFICATE",
    )
    assert parse_core_line(MISMATCH) == (
        "peer_identity_mismatch",
        "PEER_NAME_MISMATCH",
        "controller-2.41414141.metaquorum",
    )
    for line in (OTHER_INFO, ERROR, "Handshake failed with error x\n", "", "\x00\xff"):
        assert parse_core_line(line) is None


def test_failures_are_counted_every_time_and_logged_once_per_thousand() -> None:
    out = io.BytesIO()
    reader = GrpcCoreLog("TESTLISTENER", out, pass_info=False)
    before = SECURITY_EVENTS.handshake_failures()
    with capture_logs() as logs:
        for _ in range(2_500):
            reader.handle(PLAINTEXT.encode())
        reader.handle(MISMATCH.encode())
        reader.handle(OTHER_INFO.encode())
        reader.handle(ERROR.encode())
    after = SECURITY_EVENTS.handshake_failures()
    key = ("TESTLISTENER", "WRONG_VERSION_NUMBER")
    assert after[key] - before.get(key, 0) == 2_500
    assert after[("TESTLISTENER", "PEER_NAME_MISMATCH")] >= 1
    events = [(e["event"], e["count"]) for e in logs]
    assert events == [
        ("tls_handshake_failed", 1),
        ("tls_handshake_failed", 1_000),
        ("tls_handshake_failed", 2_000),
        ("peer_identity_mismatch", 1),
    ]
    # The raised level's other INFO lines are dropped; errors are passed on as they came.
    assert out.getvalue() == ERROR.encode()


def test_everything_is_passed_on_when_the_operator_asked_for_info() -> None:
    out = io.BytesIO()
    reader = GrpcCoreLog("TESTLISTENER", out, pass_info=True)
    with capture_logs():
        for line in (PLAINTEXT, OTHER_INFO, ERROR):
            reader.handle(line.encode())
    assert out.getvalue() == (PLAINTEXT + OTHER_INFO + ERROR).encode()
