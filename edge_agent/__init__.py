"""RASE's CPython edge agent: `rase agent`, board bundles and the agent's
diagnostics, over the device core in `rase_device` (which boards run).

CPython-only: config, paho_transport, service, sources, flash, board_deps,
diagnostics. Nothing is imported here.
"""
