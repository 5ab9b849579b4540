"""The `rase` command line: one entry point on top of every RASE package."""
