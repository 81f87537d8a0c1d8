"""The README's run command end to end: `metaquorum dev up` on deploy/local/ (what scripts/run
does after installing), with the real config files, ports and CLI commands a user types."""

from __future__ import annotations

import subprocess
import sys

import pytest

from quorum.harness import REPO

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(600)
def test_dev_up_tells_the_kip516_story() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "quorum.cli", "dev", "up"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    assert "LeaderId:" in out
    # mTLS is on: the certificates were generated (or kept) and the admin commands use them.
    assert "== mTLS: certificates in" in out
    assert "--command-config" in out
    assert "Created topic orders." in out
    assert "the name 'orders' now has a new id" in out
    assert "moved the stale ones aside: deleting/ = [" in out
    assert "deleting/ is empty" in out
    assert "UNKNOWN_TOPIC_ID" in out
    # Records: the first 'orders' got three, the new one serves only its own from offset 0, and
    # a Fetch by the old id is UNKNOWN_TOPIC_ID.
    assert "order-1@0, order-2@1, order-3@2" in out
    assert "the new orders-0 from the beginning: order-4@0 (only its own records)" in out
    assert "Fetch v13 by it -> UNKNOWN_TOPIC_ID" in out
    assert "audit-trail" in out
    # ACLs on: alice is refused, granted DESCRIBE on orders, then gets in.
    assert "== ACLs: alice has a certificate but no ACL yet" in out
    assert "TOPIC_AUTHORIZATION_FAILED" in out
    assert "principal=User:CN=alice, host=*, operation=DESCRIBE, permissionType=ALLOW" in out
    assert "alice may now describe 'orders'" in out
    # The Spark replay's name-reuse table shows 'orders' with its two ids.
    assert "| orders | 2 |" in out
    # Spark's and Py4J's own start-up lines stay in .data/replay/spark.log (--verbose shows them).
    for chatter in ("log4j", "NativeCodeLoader", "Setting default log level", "incubator"):
        assert chatter not in out + result.stderr, chatter
    # Every process was stopped cleanly.
    stopped = [line for line in out.splitlines() if line.strip().startswith("stopped ")]
    assert len(stopped) >= 5
    assert all("exit code 0" in line for line in stopped[-5:])
