"""The `rase` command line and the configuration loader shared by its services."""
