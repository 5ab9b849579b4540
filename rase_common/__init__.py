"""What the RASE services share: config loading (TOML + RASE_... overrides),
MQTT and Kafka settings, clocks, the asyncio wait helper, SQLite in WAL mode,
privacy accounting over time. It imports no service and not the CLI; the
services import it, and the `rase` CLI sits on top of everything."""
