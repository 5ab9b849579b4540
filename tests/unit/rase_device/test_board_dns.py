"""rase_device.dns: the boards' bounded lookups, against a real DNS server
(dnsmasq) on loopback, on CPython (the same module runs under MicroPython in
integration/test_board_unix_port.py)."""

import socket
import subprocess
import time

import pytest

from rase_device import dns
from simulators.brokers import free_port
from tests.integration.test_board_unix_port import dnsmasq_binary


@pytest.fixture(scope="module")
def dnsmasq():
    port = free_port()
    proc = subprocess.Popen([dnsmasq_binary(), "--keep-in-foreground", "--no-resolv", "--no-hosts",
                             f"--port={port}", "--listen-address=127.0.0.1", "--bind-interfaces",
                             "--address=/broker.test/10.1.2.3", "--user=root", "--pid-file="],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(0.3)
    yield port
    proc.terminate()
    proc.wait(10)


def test_lookup_answers_refusals_and_silence(dnsmasq):
    assert dns.lookup(socket, "broker.test", "127.0.0.1", 2.0, dnsmasq) == "10.1.2.3"
    with pytest.raises(dns.DnsError, match="rcode 5"):       # dnsmasq refuses names it does not serve
        dns.lookup(socket, "other.test", "127.0.0.1", 2.0, dnsmasq)
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind(("127.0.0.1", 0))
    t0 = time.monotonic()
    with pytest.raises(dns.DnsError, match="no answer .* within 0.2 s"):
        dns.lookup(socket, "broker.test", "127.0.0.1", 0.2, silent.getsockname()[1])
    assert time.monotonic() - t0 < 5     # two tries of 0.2 s, not lwIP's retries
    silent.close()


def test_an_answer_to_another_query_is_not_taken(dnsmasq):
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(dns.build_query("broker.test", 4242), ("127.0.0.1", dnsmasq))
        answer = s.recv(512)
    assert dns.parse_answer(answer, 4242) == "10.1.2.3"
    assert dns.parse_answer(answer, 4243) is None and dns.parse_answer(answer[:11], 4242) is None


@pytest.mark.parametrize("name", ["", "a..b", "x" * 64 + ".test"])
def test_a_name_that_is_no_host_name_is_refused(name):
    with pytest.raises(dns.DnsError, match="not a host name"):
        dns.build_query(name, 1)


def test_ip_addresses_need_no_lookup():
    assert dns.is_ipv4("192.168.1.10") and not dns.is_ipv4("broker.lan") and not dns.is_ipv4("1.2.3.256")
