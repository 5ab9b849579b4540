# Host name lookups with a timeout, for boards (RFC 1035: one A question,
# recursion desired, over UDP). A board's socket.getaddrinfo waits inside
# lwIP for as long as its retries take, several seconds per DNS server, and
# no caller can shorten that; this asks the network's DNS server itself and
# gives up after timeout_s per try.

import os
import struct


class DnsError(OSError):
    """No usable answer: timed out, refused, or no such name."""


def is_ipv4(host):
    parts = host.split(".")
    return len(parts) == 4 and all(p.isdigit() and int(p) < 256 for p in parts)


def build_query(name, qid):
    q = struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        if not 0 < len(label) < 64:
            raise DnsError("dns: %r is not a host name" % (name,))
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack("!HH", 1, 1)   # type A, class IN


def _skip_name(msg, i):
    while True:
        n = msg[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:   # a pointer ends the name
            return i + 2
        i += n + 1


def parse_answer(msg, qid):
    """The first IPv4 address of an answer to query qid; None if the
    datagram answers something else; DnsError if the server says no."""
    if len(msg) < 12:
        return None
    rid, flags, qd, an = struct.unpack("!HHHH", msg[:8])
    if rid != qid or not flags & 0x8000:
        return None
    if flags & 0x000F:
        raise DnsError("dns: server answered rcode %d" % (flags & 0x000F))
    i = 12
    for _ in range(qd):
        i = _skip_name(msg, i) + 4
    for _ in range(an):
        i = _skip_name(msg, i)
        rtype, rclass, _ttl, rdlen = struct.unpack("!HHIH", msg[i:i + 10])
        i += 10
        if rtype == 1 and rclass == 1 and rdlen == 4:
            return "%d.%d.%d.%d" % (msg[i], msg[i + 1], msg[i + 2], msg[i + 3])
        i += rdlen
    raise DnsError("dns: no address in the answer")


def lookup(socket_mod, name, server, timeout_s, port=53, tries=2, between=None):
    """name -> IPv4 address string, asking `server` (an IPv4 address); each
    wait is at most timeout_s, and between() is called before each."""
    qid = struct.unpack("!H", os.urandom(2))[0]
    query = build_query(name, qid)
    s = socket_mod.socket(socket_mod.AF_INET, socket_mod.SOCK_DGRAM)
    try:
        s.settimeout(timeout_s)
        addr = socket_mod.getaddrinfo(server, port)[0][-1]   # numeric: no lookup
        for _ in range(tries):
            s.sendto(query, addr)
            try:
                for _ in range(4):         # stray datagrams are skipped, not taken
                    if between is not None:
                        between()
                    ip = parse_answer(s.recv(512), qid)
                    if ip is not None:
                        return ip
            except OSError as err:
                if isinstance(err, DnsError):
                    raise
    finally:
        s.close()
    raise DnsError("dns: no answer from %s:%d for %r within %g s (%d tries)" % (server, port, name, timeout_s,
                                                                              tries))
