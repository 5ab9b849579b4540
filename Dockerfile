# The RASE services (fog, fusion, agents, replay) in one image.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY edge_agent edge_agent
COPY fog_shuffler fog_shuffler
COPY fusion_center fusion_center
COPY simulators simulators
COPY rase_common rase_common
COPY rase rase
COPY configs configs
RUN pip install --no-cache-dir .
ENTRYPOINT ["rase"]
