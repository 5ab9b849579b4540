# MicroPython transport over umqtt.simple (micropython-lib).
#
# umqtt's QoS 1 publish blocks for the PUBACK but never resends and has no
# timeout of its own: the sockets it gets (rase_device.board_net) bound every
# blocking step, and a report leaves the core's outbox for good only once
# publish() returned (PUBACK seen); on any failure it goes back to the front.
#
# umqtt fails in many ways: OSError from the socket, MQTTException for a
# refused CONNACK or SUBACK, AssertionError/IndexError/TypeError on a broken
# or truncated stream, ValueError from a TLS certificate check. Every one of
# them means the same thing here: drop the connection, keep the reason in
# last_error, back off exponentially, reconnect. Nothing queued is lost.
#
# A report the broker acknowledged waits in the outbox for the fog's receipt
# on the device's feedback topic (rase_device.outbox): sent again after a
# reconnect or its timeout, so a broker crash loses nothing either.

from rase_device import wire


# CONNACK return codes (MQTT 3.1.1, 3.2.2.3), for the console.
REFUSED = {1: "unacceptable protocol version", 2: "client id rejected", 3: "server unavailable",
           4: "bad user name or password", 5: "not authorized"}


# Socket errors worth a word (MicroPython uses Linux errno numbers on every
# port; -1 is umqtt's own for a connection closed by the broker).
ERRNO = {-1: "connection closed by the broker", 103: "connection aborted", 104: "connection reset",
         110: "timed out", 111: "connection refused", 113: "host unreachable", 12: "out of memory"}


def describe(exc):
    """One line for the board's console: what failed and why."""
    name = type(exc).__name__
    arg = exc.args[0] if exc.args else ""
    if name == "MQTTException" and arg in REFUSED:
        return "broker refused the connection: %s (CONNACK %d)" % (REFUSED[arg], arg)
    if isinstance(exc, OSError) and arg in ERRNO:
        return "OSError %d: %s" % (arg, ERRNO[arg])
    text = " ".join(" ".join(str(a) for a in exc.args).split())   # mbedTLS messages span lines
    return "%s: %s" % (name, text) if text else name


def _b(s):
    # umqtt computes lengths with len(); bytes keep them right for any text.
    return s.encode() if isinstance(s, str) else s


class UmqttTransport:
    def __init__(self, core, make_client, backoff_min_s=1, backoff_max_s=60, keepalive_s=60):
        self.core = core
        self.make_client = make_client
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.keepalive_s = keepalive_s
        self.client = None
        self.backoff_s = backoff_min_s
        self.next_try = 0
        self.last_io = 0
        self.control_errors = 0
        self.disconnects = 0
        self.delivered = 0        # reports the broker acknowledged (umqtt publish returns after the PUBACK)
        self.failures = 0            # consecutive failed connects or sends
        self.last_error = None
        self.feedback_topic = _b(wire.feedback_topic(core.region, core.device))

    def _on_message(self, topic, msg):
        if topic == self.feedback_topic or topic == self.feedback_topic.decode():
            self.core.on_feedback(msg)      # a receipt confirms reports; other feedback is for the console
            return
        if topic == wire.CONTROL_TOPIC.encode() or topic == wire.CONTROL_TOPIC:
            try:
                self.core.apply_control(msg)
            except Exception:  # a bad control message must not look like a broken link
                self.control_errors += 1

    def connect(self, now):
        c = self.make_client()
        self.client = c  # so _fail closes its socket if connect breaks half-way
        c.set_last_will(_b(wire.status_topic(self.core.device)), _b(wire.encode_status("offline")), retain=True, qos=1)
        c.set_callback(self._on_message)
        c.connect()
        c.subscribe(_b(wire.CONTROL_TOPIC), qos=1)
        c.subscribe(self.feedback_topic, qos=1)
        self.core.outbox.resend_due(now, True)   # what the broker may have lost while the link was down
        self.core.status_changed = True
        self.last_io = now
        return c

    def _fail(self, now, exc):
        c = self.client
        if c is not None:
            try:
                c.sock.close()
            except Exception:  # already broken; nothing more to release
                pass
            self.disconnects += 1
        self.client = None
        self.back_off(now, describe(exc))

    def back_off(self, now, error):
        """A failed connect, send or network join: the one backoff of the device's link."""
        self.failures += 1
        self.last_error = error
        self.next_try = now + self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, self.backoff_max_s)

    def flush(self, c, now):
        core = self.core
        if core.status_changed:
            counts = {"made": core.sent, "delivered": self.delivered, "late_by_fog": core.late_by_fog}
            c.publish(_b(wire.status_topic(core.device)), _b(core.status_payload(counts)), retain=True, qos=1)
            core.status_changed = False
            self.last_io = now
        box = core.outbox
        box.resend_due(now)          # acknowledged by the broker, but no receipt from the fog in time
        while len(box):
            # Off the queue while in flight: a reading taken meanwhile (the
            # sockets' between() hook) may fill the queue without dropping it.
            item = box.pop()
            try:
                c.publish(_b(item[0]), _b(item[1]), qos=1)   # returns once the PUBACK came
            except Exception:
                box.push_front(item)   # not acknowledged: sent again after the reconnect
                raise
            self.delivered += 1
            box.handed(item, now)    # kept until the fog's receipt
            self.last_io = now
        if self.keepalive_s and now - self.last_io >= self.keepalive_s / 2:
            c.ping()  # umqtt never pings by itself; an idle link would be dropped
            self.last_io = now

    def poll(self, now):
        """Connect if due, take control messages, send what is queued.
        Returns True when the link is up and the outbox was drained."""
        c = self.client
        if c is None:
            if now < self.next_try:
                return False
            try:
                c = self.connect(now)
            except Exception as exc:
                self._fail(now, exc)
                return False
        try:
            for _ in range(8):       # check_msg takes one message: the receipts and a control message
                c.check_msg()
            self.flush(c, now)
        except Exception as exc:
            self._fail(now, exc)
            return False
        self.failures = 0
        self.backoff_s = self.backoff_min_s
        return True
