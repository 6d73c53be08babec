"""`vancetope-rag worker` on PostgreSQL whose server stops under it: SIGTERM still ends it
promptly, and it says why it stopped (the scenario: ``tests/worker_outage.py``).

Before, SIGTERM during the outage took about two minutes: the stop gave the claims of the
batch in hand back through the pool (each call waiting the pool's 15 s for a connection
that never came), and the app's close did it all again. ``bench/worker_stop.py`` prints the
precise figure (the docs' under 10 s); the bound here is generous for a busy machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

STOP_BOUND_S = 30.0


@pytest.mark.slow  # 11-20 s of a core: `make test-all`
@pytest.mark.timeout(240)
def test_sigterm_during_a_postgres_outage_ends_the_worker_promptly(tmp_path: Path) -> None:
    pytest.importorskip("pgserver")
    from worker_outage import stop_during_outage

    stopped = stop_during_outage(tmp_path, bound_s=STOP_BOUND_S)
    assert stopped.took is not None, f"no exit within {STOP_BOUND_S:g} s: {stopped.stderr}"
    assert stopped.returncode == 0, stopped.stderr
    assert "stopped (SIGTERM)" in stopped.stderr, stopped.stderr
    # the store could not take the claims of the batch in hand: the log says where they went
    assert "claims left to their lease" in stopped.stderr, stopped.stderr
