#!/bin/bash
# Kafka's entrypoint in docker-compose.yml: on the first start, format the
# data directory (KRaft) with a SCRAM-SHA-512 credential for each user in
# RASE_KAFKA_USERS, whose password is the secret /run/secrets/password-<user>;
# then run the broker. Users added later: kafka-configs.sh --bootstrap-server
# localhost:9094 --alter --add-config 'SCRAM-SHA-512=[password=...]'
# --entity-type users --entity-name <user> inside the container.
set -euo pipefail
props=/etc/rase/kafka.properties
if [ ! -f /var/lib/kafka/data/meta.properties ]; then
  scram=()
  for user in ${RASE_KAFKA_USERS:?set RASE_KAFKA_USERS}; do
    scram+=(--add-scram "SCRAM-SHA-512=[name=$user,password=$(cat "/run/secrets/password-$user")]")
  done
  /opt/kafka/bin/kafka-storage.sh format --cluster-id "${CLUSTER_ID:?set CLUSTER_ID}" --config "$props" "${scram[@]}"
fi
exec /opt/kafka/bin/kafka-server-start.sh "$props"
