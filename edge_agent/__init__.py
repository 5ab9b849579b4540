"""RASE edge agent: the device side of the pipeline.

The device core imports only what MicroPython has; `edge_agent.flash.DEVICE_CORE`
lists its modules (and `manifest.py` the same files), and tests/unit/test_layering.py
checks it. CPython-only modules (config, paho_transport, service, sources,
flash, board_deps) sit beside it. Nothing is imported here, so that a board
loads only the modules it uses.
"""
