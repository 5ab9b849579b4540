# MicroPython transport over umqtt.simple (micropython-lib).
#
# umqtt's QoS 1 publish blocks for the PUBACK but never resends and has no
# timeout of its own, so: a socket timeout is set after connect, a report
# leaves the core's outbox only once publish() returned (PUBACK seen), and any
# OSError drops the connection and retries later with exponential backoff.

from edge_agent import wire


def _b(s):
    # umqtt computes lengths with len(); bytes keep them right for any text.
    return s.encode() if isinstance(s, str) else s


class UmqttTransport:
    def __init__(self, core, make_client, backoff_min_s=1, backoff_max_s=60, socket_timeout_s=10):
        self.core = core
        self.make_client = make_client
        self.backoff_min_s = backoff_min_s
        self.backoff_max_s = backoff_max_s
        self.socket_timeout_s = socket_timeout_s
        self.client = None
        self.backoff_s = backoff_min_s
        self.next_try = 0
        self.control_errors = 0
        self.disconnects = 0

    def _on_message(self, topic, msg):
        if topic == wire.CONTROL_TOPIC.encode() or topic == wire.CONTROL_TOPIC:
            try:
                self.core.apply_control(msg)
            except ValueError:
                self.control_errors += 1

    def connect(self):
        c = self.make_client()
        c.set_last_will(_b(wire.status_topic(self.core.device)), _b(wire.encode_status("offline")), retain=True, qos=1)
        c.set_callback(self._on_message)
        c.connect()
        if self.socket_timeout_s and hasattr(c, "sock"):
            c.sock.settimeout(self.socket_timeout_s)
        self.client = c
        c.subscribe(_b(wire.CONTROL_TOPIC), qos=1)
        self.core.status_changed = True
        self.backoff_s = self.backoff_min_s

    def _drop(self, now):
        try:
            self.client.sock.close()
        except Exception:  # already broken; nothing more to release
            pass
        self.client = None
        self.disconnects += 1
        self.next_try = now + self.backoff_s
        self.backoff_s = min(self.backoff_s * 2, self.backoff_max_s)

    def flush(self):
        c = self.client
        core = self.core
        if core.status_changed:
            c.publish(_b(wire.status_topic(core.device)), _b(wire.encode_status(core.status)), retain=True, qos=1)
            core.status_changed = False
        box = core.outbox
        while len(box):
            topic, payload = box.peek()
            c.publish(_b(topic), _b(payload), qos=1)
            box.pop()

    def poll(self, now):
        """Connect if due, take control messages, send what is queued."""
        if self.client is None:
            if now < self.next_try:
                return False
            try:
                self.connect()
            except OSError:
                self.client = None
                self.next_try = now + self.backoff_s
                self.backoff_s = min(self.backoff_s * 2, self.backoff_max_s)
                return False
        try:
            self.client.check_msg()
            self.flush()
            return True
        except OSError:
            self._drop(now)
            return False
