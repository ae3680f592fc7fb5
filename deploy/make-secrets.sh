#!/usr/bin/env bash
# Certificates and tokens for the TLS + token variant of the compose cluster:
#   deploy/make-secrets.sh [DIR]     # default deploy/secrets; files already there are kept
#   docker compose -f docker-compose.yml -f docker-compose.secure.yml up --build -d
#   MILLSTREAM_JOBMANAGER=localhost:6123 millstream list --config deploy/secrets/client.yaml
# One CA; a "node" certificate for the JobManager and the TaskManagers naming every address of the
# compose network (TaskManagers advertise their container address) and localhost; a "client"
# certificate for the host; the two role tokens. MILLSTREAM_SUBNET_PREFIX must match the
# network's subnet in docker-compose.secure.yml (default 172.29.77).
set -euo pipefail
DIR=${1:-deploy/secrets}
PREFIX=${MILLSTREAM_SUBNET_PREFIX:-172.29.77}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
cd "$DIR"
umask 077

if [ ! -f ca.pem ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 365 \
    -subj "/CN=millstream-compose-ca" -keyout ca.key -out ca.pem 2>/dev/null
fi
sign() {  # name subjectAltName
  [ -f "$1.pem" ] && return
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$2" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 365 \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
node_names="DNS:localhost,DNS:jobmanager,DNS:jobmanager-standby,IP:127.0.0.1"
for i in $(seq 1 254); do node_names="$node_names,IP:$PREFIX.$i"; done
sign node "$node_names"
sign client "DNS:localhost,IP:127.0.0.1"
for role in client cluster; do
  [ -f "$role-token" ] || openssl rand -hex 24 > "$role-token"
done
cat > client.yaml <<YAML
# A client of the secure compose cluster on this machine: millstream ... --config $DIR/client.yaml
security.ssl.enabled: true
security.ssl.key: $DIR/client.key
security.ssl.cert: $DIR/client.pem
security.ssl.truststore: $DIR/ca.pem
security.auth.client-token-file: $DIR/client-token
YAML
chmod a+r ca.pem node.pem node.key client-token cluster-token  # read by the containers' processes
echo "secrets in $DIR"
