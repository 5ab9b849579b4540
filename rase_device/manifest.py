# MicroPython manifest: freeze the device core into firmware with
#   include("path/to/rase_device/manifest.py")
# A board then installs only these modules (plus umqtt.simple).
metadata(description="RASE edge agent: budget-aware LDP randomizer", version="0.1.0")
require("umqtt.simple")
package(
    "rase_device",
    files=(
        "__init__.py",
        "entropy.py",
        "dlaplace.py",
        "randomizer.py",
        "ldp_rational.py",
        "duchi.py",
        "piecewise.py",
        "mechanisms.py",
        "interval.py",
        "report_kind.py",
        "binary_rr.py",
        "categorical.py",
        "ledger.py",
        "wire.py",
        "policy.py",
        "outbox.py",
        "schedule.py",
        "core.py",
        "dns.py",
        "board_net.py",
        "umqtt_transport.py",
        "board.py",
        "vdaf_field.py",
        "turboshake.py",
        "flp.py",
        "prio3.py",
        "x25519.py",
        "chacha20poly1305.py",
        "hpke.py",
        "prio3_report.py",
        "secagg.py",
        "prio3_binary.py",
    ),
    base_path="..",
)
