# MicroPython manifest: freeze the device core into firmware with
#   include("path/to/edge_agent/manifest.py")
# A board then installs only these modules (plus umqtt.simple).
metadata(description="RASE edge agent: budget-aware LDP randomizer", version="0.1.0")
require("umqtt.simple")
package(
    "edge_agent",
    files=(
        "__init__.py",
        "entropy.py",
        "dlaplace.py",
        "randomizer.py",
        "ldp_rational.py",
        "duchi.py",
        "piecewise.py",
        "mechanisms.py",
        "binary_rr.py",
        "categorical.py",
        "ledger.py",
        "wire.py",
        "policy.py",
        "outbox.py",
        "core.py",
        "dns.py",
        "board_net.py",
        "umqtt_transport.py",
        "board.py",
    ),
    base_path="..",
)
