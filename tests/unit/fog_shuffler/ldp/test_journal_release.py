"""`rase fog release` writes into a journal the running fog keeps writing:
the request waits for the fog's transaction instead of failing, and the
fog's next read sees it."""

import threading
import time

from fog_shuffler.journal import DetectionWrite, Journal, quarantined_in, release_pending, request_release


def test_a_release_request_waits_for_the_fogs_open_transaction(tmp_path):
    path = tmp_path / "fog.sqlite"
    fog = Journal(path)
    fog.add_reports([], [], DetectionWrite([], [("dev1", 7, 100.0, "above (largest output)")]))
    assert quarantined_in(path) == [("dev1", 7, 100.0, "above (largest output)")]
    fog.db.execute("BEGIN IMMEDIATE")                     # the fog mid-batch holds the write lock ...
    fog.db.execute("INSERT INTO duplicates VALUES ('r1', 1, 1)")
    release = threading.Timer(0.5, lambda: fog.db.execute("COMMIT"))    # ... and commits half a second later
    release.start()
    t0 = time.monotonic()
    assert request_release(path, "dev1", 200.0)
    assert time.monotonic() - t0 >= 0.4
    release.join()
    assert fog.release_requests() == ["dev1"] and release_pending(path, "dev1")
    fog.release("dev1")
    assert fog.release_requests() == [] and quarantined_in(path) == [] and not release_pending(path, "dev1")
    assert not request_release(path, "dev1", 300.0)        # no longer quarantined
    fog.close()
