# The RASE services (fog, fusion, agents, replay, acl) in one image.
# RASE_EXTRAS picks the optional dependencies: "deploy" (the default: every
# service's runtime, Kafka included) or "deploy,eval" to add what `rase demo`
# and `rase eval` need for their plots and models:
#   docker build --build-arg RASE_EXTRAS=deploy,eval -t rase:0.1.0-eval .
# tests/integration/test_compose_services.py builds a venv with this file's
# own pip command and starts each compose service's command from it.
FROM python:3.11.10-slim-bookworm
ARG RASE_EXTRAS=deploy
WORKDIR /app
COPY pyproject.toml README.md ./
COPY rase_device rase_device
COPY edge_agent edge_agent
COPY fog_shuffler fog_shuffler
COPY fusion_center fusion_center
COPY simulators simulators
COPY rase_common rase_common
COPY rase rase
COPY configs configs
RUN pip install --no-cache-dir ".[${RASE_EXTRAS}]"
# The services' state (fog journal, fusion store) lives on a volume, written
# by an unprivileged user.
RUN useradd --system --uid 10001 --home-dir /var/lib/rase rase && mkdir -p /var/lib/rase \
    && chown rase /var/lib/rase
USER rase
VOLUME ["/var/lib/rase"]
# Exec form: `rase` is PID 1 and receives SIGTERM from `docker stop` itself;
# every service handles it (rase_common.service.run_service) and exits within
# 2 s with nothing lost (tests/integration/test_sigterm.py).
STOPSIGNAL SIGTERM
ENTRYPOINT ["rase"]
