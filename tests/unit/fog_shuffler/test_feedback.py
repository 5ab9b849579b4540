"""The fog's feedback to a device whose reports it rejects: its own topic
only, about its own reports only, and bounded however hostile the input."""

import json

from fog_shuffler.feedback import RejectionFeedback
from rase_common.protocol.report import Feedback


def test_a_device_is_told_once_a_minute_per_reason_with_the_count_since():
    fb = RejectionFeedback({"r1"})
    topic, payload = fb.note("rase/v1/reports/r1/d1", "unknown_device", "unknown_device: r1/d1", now=0.0)
    assert topic == "rase/v1/feedback/r1/d1"
    assert Feedback.model_validate_json(payload) == Feedback(reason="unknown_device", detail="r1/d1", rejected=1)
    for s in range(1, 60):
        assert fb.note("rase/v1/reports/r1/d1", "unknown_device", "", now=float(s)) is None
    _, again = fb.note("rase/v1/reports/r1/d1", "unknown_device", "", now=60.0)
    assert json.loads(again)["rejected"] == 60           # every rejection since the last message
    # Another reason is told at once.
    assert fb.note("rase/v1/reports/r1/d1", "t_out_of_range", "t_out_of_range: t=5 now=9", now=61.0)[0] \
        == "rase/v1/feedback/r1/d1"


def test_nothing_for_other_regions_bad_topics_or_the_fogs_own_errors():
    fb = RejectionFeedback({"r1"})
    assert fb.note("rase/v1/reports/r2/d1", "unknown_device", "", now=0.0) is None     # not this fog's region
    assert fb.note("rase/v1/reports/r1", "bad_topic", "", now=0.0) is None
    assert fb.note("rase/v1/reports/r1/d1", "internal", "", now=0.0) is None


def test_a_flood_of_made_up_devices_is_bounded():
    fb = RejectionFeedback({"r1"}, per_minute=50, max_tracked=1000)
    told = [fb.note(f"rase/v1/reports/r1/fake{i}", "unknown_device", "", now=i / 1000) for i in range(5000)]
    assert sum(t is not None for t in told) == 50 and fb.withheld == 4950
    assert len(fb._seen) == 1000                        # memory bounded too
    # The next minute, telling resumes.
    assert fb.note("rase/v1/reports/r1/late", "unknown_device", "", now=70.0) is not None


def test_the_detail_is_cut_and_says_nothing_but_the_reports_own_fields():
    fb = RejectionFeedback({"r1"})
    _, payload = fb.note("rase/v1/reports/r1/d1", "implausible_y", "implausible_y: y=" + "9" * 200, now=0.0)
    msg = json.loads(payload)
    assert set(msg) == {"v", "reason", "detail", "rejected"} and len(msg["detail"]) == 80
