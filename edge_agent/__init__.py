"""RASE edge agent: budget-aware randomizer BR that runs on sensors.

The device core (entropy, dlaplace, randomizer, binary_rr, categorical, ledger, wire, outbox, core,
umqtt_transport, board) imports only what MicroPython has. CPython-only
modules (config, schema, paho_transport, service, sources, flash) sit beside it.
Nothing is imported here so that a board loads only the modules it uses.
"""
