# Bounded FIFO of reports not yet acknowledged by the broker. When full the
# oldest is dropped and counted: fresh readings matter more than stale ones
# and a board has little RAM.


class Outbox:
    def __init__(self, capacity):
        if capacity < 1:
            raise ValueError("outbox capacity must be >= 1, got %r" % (capacity,))
        self.capacity = capacity
        self._items = []
        self.dropped = 0

    def __len__(self):
        return len(self._items)

    def put(self, item):
        if len(self._items) >= self.capacity:
            self._items.pop(0)
            self.dropped += 1
        self._items.append(item)

    def peek(self):
        return self._items[0] if self._items else None

    def pop(self):
        return self._items.pop(0)

    def push_front(self, item):
        """Return an item that could not be sent to the head of the queue."""
        if len(self._items) >= self.capacity:
            self.dropped += 1
            return
        self._items.insert(0, item)
