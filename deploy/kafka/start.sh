#!/usr/bin/env bash
# The kafka service's processes. tansu has one advertised address per listener, and clients connect
# to what the metadata advertises, not to the address they bootstrapped from; so two listeners:
#   the broker on :9092, advertised as $KAFKA_ADVERTISED (kafka:9092: the compose network's name);
#   tansu's proxy on :9093, which forwards to the broker and rewrites the metadata to advertise
#   localhost:$KAFKA_HOST_PORT, the port published on the host.
# Data is in memory: it lives as long as the container. Either process exiting ends the container.
set -euo pipefail
advertised=${KAFKA_ADVERTISED:-kafka:9092}
host_port=${KAFKA_HOST_PORT:-9092}

tansu broker --listener-url tcp://0.0.0.0:9092 --advertised-listener-url "tcp://$advertised" \
  --storage-engine memory://tansu/ --cluster-id "${KAFKA_CLUSTER_ID:-millstream}" &
broker=$!
tansu proxy --listener-url tcp://0.0.0.0:9093 --advertised-listener-url "tcp://localhost:$host_port" \
  --origin-url tcp://localhost:9092 &
proxy=$!
# PID 1 gets no default signal handling: pass `docker stop`'s SIGTERM on
trap 'kill -TERM $broker $proxy 2>/dev/null' TERM INT
echo "kafka: broker on :9092 advertised as $advertised; proxy on :9093 advertised as localhost:$host_port"
set +e
wait -n $broker $proxy
status=$?
kill -TERM $broker $proxy 2>/dev/null
wait
exit $status
