# A fake `ntptime` for the WebAssembly port (no UDP there): the first two
# syncs fail as an unreachable NTP server does, then it answers.
host = "pool.ntp.org"
CALLS = []


def settime():
    CALLS.append(host)
    if len(CALLS) <= 2:
        raise OSError(110)  # ETIMEDOUT
