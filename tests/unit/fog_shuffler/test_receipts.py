"""The fog's end-to-end receipts (fog_shuffler.receipts, issue 29 items 3 and 7):
what a committed batch took, per registered device, on its own feedback topic;
the device's parser (rase_device.wire.parse_receipt) reads what the model writes
and refuses what the model refuses."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from fog_shuffler.receipts import MAX_KEPT, Receipts, encode_receipt
from rase_common.protocol.report import Receipt
from rase_device import wire

TOPIC = "rase/v1/reports/r1/d1"


def test_receipts_go_to_each_registered_device_on_its_own_topic_once():
    r = Receipts({"d1": "r1", "d2": "r1", "e1": "r2"})
    r.note(TOPIC, 5)
    r.note(TOPIC, 6, late=True)
    r.note("rase/v1/reports/r1/d2", 5)
    r.note("rase/v1/reports/r2/d1", 5)           # d1 is not registered in r2: told nothing
    r.note("rase/v1/reports/r1/zz", 5)           # nor a device nobody registered
    r.note(TOPIC, None)                          # a report without a t
    r.note_rejected(TOPIC, b'{"v":1,"t":7,"y":1e999}')   # rejected, but its t is receipted (decided)
    r.note_rejected(TOPIC, b"{not json")
    out = dict(r.take())
    assert out == {"rase/v1/feedback/r1/d1": '{"v":1,"kept":[5,6,7],"late":1}',
                   "rase/v1/feedback/r1/d2": '{"v":1,"kept":[5],"late":0}'}
    assert r.take() == [] and r.sent == 2 and r.late_told == 1


def test_a_backlog_is_receipted_in_small_messages_with_the_late_ones_counted_where_they_are():
    r = Receipts({"d1": "r1"})
    for t in range(MAX_KEPT + 10):
        r.note(TOPIC, t, late=t >= MAX_KEPT)
    parts = [Receipt.model_validate_json(p) for _, p in r.take()]
    assert [len(p.kept) for p in parts] == [MAX_KEPT, 10] and [p.late for p in parts] == [0, 10]
    assert [t for p in parts for t in p.kept] == list(range(MAX_KEPT + 10))


@pytest.mark.parametrize("payload", [
    {"v": 1, "kept": [3, 4], "late": 1},
    {"v": 1, "kept": [0]},
])
def test_the_fogs_fast_encoding_is_the_models(payload):
    model = Receipt.model_validate(payload)
    assert encode_receipt(model.kept, model.late) == model.model_dump_json()


@pytest.mark.parametrize("payload", [
    {"v": 1, "kept": [3, 4], "late": 1},
    {"v": 1, "kept": [0]},
])
def test_the_device_reads_what_the_model_writes(payload):
    model = Receipt.model_validate(payload)
    assert wire.parse_receipt(model.model_dump_json().encode()) == (model.kept, model.late)


@pytest.mark.parametrize("payload", [
    {"v": 1, "kept": "all"},
    {"v": 1, "kept": [1.5]},
    {"v": 1, "kept": [True]},
    {"v": 1, "kept": [1], "late": 2},
    {"v": 1, "kept": [1], "late": -1},
    {"v": 2, "kept": [1]},
])
def test_the_device_refuses_what_the_model_refuses(payload):
    with pytest.raises(ValidationError):
        Receipt.model_validate(payload)
    with pytest.raises(ValueError):
        wire.parse_receipt(json.dumps(payload).encode())


def test_other_feedback_is_not_a_receipt():
    assert wire.parse_receipt(b'{"v":1,"reason":"unknown_device","detail":"","rejected":1}') is None


# -- windows the fusion center has not confirmed (fog_shuffler.window_receipts) -------------

def test_an_unconfirmed_window_goes_out_again_waiting_twice_as_long_each_time():
    from fog_shuffler.window_receipts import Unconfirmed
    u = Unconfirmed(10.0, max_s=25.0)
    u.sent(("r1", 5, 0), 100.0)
    u.sent(("r1", 6, 0), 101.0)
    assert u.confirm([("r1", 6, 0), ("r1", 9, 0)]) == 1
    assert u.due(109.9) == [] and u.next_due_s(109.0) == 1.0
    assert u.due(110.0) == [("r1", 5, 0)] and len(u) == 0
    u.sent(("r1", 5, 0), 111.0)                   # its PUBACK again
    assert u.due(130.9) == [] and u.due(131.0) == [("r1", 5, 0)]
    u.sent(("r1", 5, 0), 131.0)
    assert u.due(155.9) == [] and u.due(156.0) == [("r1", 5, 0)]      # capped at 25 s
    u.forget([("r1", 5, 0)])
    assert len(u) == 0 and u.next_due_s(0.0) is None and u.resent == 3 and u.confirmed == 1


def test_the_journal_keeps_a_window_unconfirmed_until_the_receipt(tmp_path):
    from fog_shuffler.journal import Journal
    j = Journal(tmp_path / "fog.sqlite")
    for t in (1, 2, 3):
        j.close_window("r1", t, f'{{"t":{t}}}')
    for t in (1, 2, 3):
        j.mark_sent("r1", t)
    j.mark_confirmed([("r1", 2, 0)])
    assert j.unsent() == [] and j.unconfirmed() == [("r1", 1, 0), ("r1", 3, 0)]
    assert j.mark_unsent([("r1", 1, 0), ("r1", 2, 0)]) == [("r1", 1, 0)]   # a confirmed one stays confirmed
    assert [row[1] for row in j.unsent()] == [1]
    j.mark_confirmed([("r1", 1, 0)])                   # confirmed while it was being sent again
    j.mark_sent("r1", 1)
    assert j.unconfirmed() == [("r1", 3, 0)]
    j.prune(10)
    assert j.unconfirmed() == [] and j.unsent() == []


def test_a_report_in_a_roles_own_encoding_is_receipted_by_its_t():
    """Issue 30: a binary Prio3 report has no JSON to read t from; the report
    role that reads it gives its t (the Prio3 leader role: from the header)."""
    from rase_device import prio3_binary

    r = Receipts({"d1": "r1"}, t_readers=[lambda payload: None, prio3_binary.report_t])
    report = (bytes(16), b"", bytes(352), bytes(80))
    r.note_payload(TOPIC, prio3_binary.encode(41, 3, "ab" * 16, report))
    r.note_payload(TOPIC, b'{"v":1,"t":42}')                  # JSON still read by the host
    r.note_payload(TOPIC, b"R3\x01\x00")                      # a truncated header: no t, nothing to receipt
    assert dict(r.take()) == {"rase/v1/feedback/r1/d1": '{"v":1,"kept":[41,42],"late":0}'}
