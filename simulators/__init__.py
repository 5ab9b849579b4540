"""Simulators: REFIT replay through the real pipeline, evaluation, stand-in boards."""
