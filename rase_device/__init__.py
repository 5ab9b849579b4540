"""RASE's device core (layer 0): what runs on a sensor board.

MicroPython's builtins only (math, os, struct, json, time); the randomizers
and their exact samplers, the ledger, schedule, outbox, wire format, the
board's loop and umqtt transport, and Prio3 with HPKE for the secure mode.
`edge_agent.flash.DEVICE_CORE` lists the modules a board gets (manifest.py
the same files); tests/unit/test_layering.py holds the import rules. Nothing
is imported here, so that a board loads only the modules it uses.
"""
