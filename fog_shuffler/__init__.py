"""RASE fog shuffler: event-time windows and the robust shuffler RS."""
