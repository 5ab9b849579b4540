# A Prio3 report's binary encoding (issue 30), in the TLS presentation
# language of draft-irtf-cfrg-vdaf and DAP. MicroPython builtins only (struct).
#
#   struct {
#       uint8 magic[2];                /* "R3": a JSON report starts with "{" */
#       uint8 version;                 /* VERSION */
#       uint64 t;                      /* the report's timestamp: its window */
#       uint32 seq;                    /* the device's report counter */
#       opaque params_id[16];          /* the params id of its context (docs/api.md), raw */
#       opaque nonce[16];
#       opaque public_share<0..2^16-1>;
#       opaque leader_input_share<0..2^16-1>;
#       HpkeCiphertext helper_encrypted_input_share;
#   } Prio3Report;
#
#   struct {
#       opaque enc<0..2^16-1>;         /* HPKE's encapsulated key (32 bytes, X25519) */
#       opaque payload<0..2^16-1>;     /* the helper's input share, sealed (ciphertext || tag) */
#   } HpkeCiphertext;
#
# Integers are big endian; opaque x<0..2^16-1> is a 2-byte length, then x.
# The region is the topic's; the report's context is
# rase_device.secagg.report_ctx(region, t, params_id), unchanged. No eps: the
# params id commits to dp_eps, which is what a release costs. A Prio3Sum(4000)
# report is 487 bytes (its JSON about 720).

import struct

MAGIC = b"R3"
VERSION = 1
PARAMS_ID_SIZE = 16
NONCE_SIZE = 16
ENC_SIZE = 32
_HEAD = ">2sBIII"          # magic, version, t (as two uint32: MicroPython may lack "Q"), seq
HEAD_SIZE = struct.calcsize(_HEAD)                  # 15
FIXED_SIZE = HEAD_SIZE + PARAMS_ID_SIZE + NONCE_SIZE  # 47: where the public share's length is


def _opaque16(data):
    if len(data) > 0xFFFF:
        raise ValueError("a field of %d bytes does not fit opaque<0..2^16-1>" % len(data))
    return struct.pack(">H", len(data)) + data


def params_id_bytes(pid):
    """The 16 raw bytes of a params id (32 lowercase hex digits)."""
    if len(pid) != 2 * PARAMS_ID_SIZE:
        raise ValueError("a params id is %d hex digits, got %r" % (2 * PARAMS_ID_SIZE, pid))
    return bytes(int(pid[i:i + 2], 16) for i in range(0, len(pid), 2))


def encode(t, seq, pid, report):
    """The binary report of (nonce, public share, leader share, sealed helper
    share) made for timestamp t under params id pid, as bytes."""
    nonce, public, leader, sealed = report
    if t < 0 or t >= 1 << 64 or seq < 0 or seq >= 1 << 32:
        raise ValueError("t must fit a uint64 and seq a uint32")
    if len(nonce) != NONCE_SIZE or len(sealed) < ENC_SIZE:
        raise ValueError("a report has a %d-byte nonce and a sealed share of at least %d bytes"
                         % (NONCE_SIZE, ENC_SIZE))
    return b"".join((struct.pack(_HEAD, MAGIC, VERSION, t >> 32, t & 0xFFFFFFFF, seq), params_id_bytes(pid),
                     nonce, _opaque16(public), _opaque16(leader), _opaque16(sealed[:ENC_SIZE]),
                     _opaque16(sealed[ENC_SIZE:])))


def size(public_size, leader_size, sealed_size):
    """Bytes of a binary report with shares of these sizes (sealed: enc || payload)."""
    return FIXED_SIZE + 8 + public_size + leader_size + sealed_size


def is_binary(payload):
    return payload[:2] == MAGIC


def report_t(payload):
    """The t of a binary report (None when the header is not there)."""
    if len(payload) < HEAD_SIZE or payload[:2] != MAGIC:
        return None
    _, _, hi, lo, _ = struct.unpack_from(_HEAD, payload, 0)
    return (hi << 32) | lo


def decode(payload):
    """(version, t, seq, params id hex, nonce, public share, leader share,
    sealed helper share = enc || payload) of a binary report; ValueError
    ("malformed_report: ...", "unknown_version: ...") when it is not one."""
    n = len(payload)
    if n < FIXED_SIZE or payload[:2] != MAGIC:
        raise ValueError("malformed_report: not a binary Prio3 report")
    magic, version, hi, lo, seq = struct.unpack_from(_HEAD, payload, 0)
    if version != VERSION:
        raise ValueError("unknown_version: binary report version %d (this reads %d)" % (version, VERSION))
    pid = "".join("%02x" % b for b in payload[HEAD_SIZE:HEAD_SIZE + PARAMS_ID_SIZE])
    pos = FIXED_SIZE
    fields = []
    for _ in range(4):
        if pos + 2 > n:
            raise ValueError("malformed_report: truncated at byte %d" % pos)
        k = (payload[pos] << 8) | payload[pos + 1]
        pos += 2
        if pos + k > n:
            raise ValueError("malformed_report: a field of %d bytes runs past the end (%d)" % (k, n))
        fields.append(bytes(payload[pos:pos + k]))
        pos += k
    if pos != n:
        raise ValueError("malformed_report: %d bytes after the report" % (n - pos))
    if len(fields[2]) != ENC_SIZE:
        raise ValueError("malformed_report: enc has %d bytes, expected %d" % (len(fields[2]), ENC_SIZE))
    nonce = bytes(payload[FIXED_SIZE - NONCE_SIZE:FIXED_SIZE])
    return version, (hi << 32) | lo, seq, pid, nonce, fields[0], fields[1], fields[2] + fields[3]
