"""One home per message type of the protocol (SPEC 3). Each module defines a
message once, as a frozen, self-validating pydantic model; producers build it
and consumers validate with it:

- control:   ControlMessage, rase/v1/control/precision (fusion center -> agents, fog)
- report:    Report and Status, rase/v1/reports/... and rase/v1/status/... (agent -> fog)
- window:    WindowMessage, rase/v1/windows/{region} or Kafka (fog -> fusion center)
- aggregate: Aggregate, rase/v1/aggregates/... (fusion center -> subscribers)
- topics:    every topic string

The device core cannot import pydantic: it writes reports and reads control
messages with rase_device.wire, and tests check wire against these models.
Import the submodules directly; nothing is imported here."""
