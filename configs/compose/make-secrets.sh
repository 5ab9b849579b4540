#!/bin/bash
# Make everything docker-compose.yml takes as a secret, in one directory
# (default ./secrets, mode 700; never committed, never in the image):
#   ca.crt, ca.key                 a CA for the deployment (devices and services trust ca.crt)
#   mqtt-server.crt/.key           Mosquitto's certificate (names: mosquitto, localhost, 127.0.0.1)
#   kafka-server.pem               Kafka's key and certificate (names: kafka, localhost)
#   passwords/<user>               a random password for every user of the ACL
#   mosquitto_passwd               Mosquitto's password file for those users
#   grafana-admin-password         Grafana's admin password
# Files that exist are kept: run it again after `rase acl` adds devices and
# only the new users get passwords. The files are readable by the services'
# container users (mode 644); the directory (700) keeps them private on the host.
#   usage: bash configs/compose/make-secrets.sh [ACL] [DIR]
set -euo pipefail
acl=${1:-configs/compose/mosquitto.acl}
out=${2:-secrets}
command -v openssl >/dev/null || { echo "make-secrets: openssl is needed" >&2; exit 1; }
command -v mosquitto_passwd >/dev/null || {
  echo "make-secrets: mosquitto_passwd is needed (Debian/Ubuntu: apt install mosquitto)" >&2; exit 1; }
[ -f "$acl" ] || { echo "make-secrets: no ACL at $acl (make it with rase acl)" >&2; exit 1; }
mkdir -p "$out/passwords"
chmod 700 "$out"

if [ ! -f "$out/ca.crt" ]; then
  openssl req -x509 -newkey rsa:3072 -nodes -days 3650 -subj "/CN=RASE deployment CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout "$out/ca.key" -out "$out/ca.crt" 2>/dev/null
  chmod 600 "$out/ca.key"
fi

server_cert() {  # name file-stem host-names...
  local cn=$1 stem=$2; shift 2
  [ -f "$out/$stem.crt" ] && return
  local san="IP:127.0.0.1" ext
  for host in "$cn" "$@"; do san="$san,DNS:$host"; done
  ext=$(mktemp)
  printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' "$san" > "$ext"
  openssl req -new -newkey rsa:3072 -nodes -subj "/CN=$cn" -keyout "$out/$stem.key" -out "$out/$stem.csr" 2>/dev/null
  openssl x509 -req -in "$out/$stem.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" -CAcreateserial -days 825 \
    -extfile "$ext" -out "$out/$stem.crt" 2>/dev/null
  rm -f "$ext" "$out/$stem.csr"
}
server_cert mosquitto mqtt-server localhost
server_cert kafka kafka-server localhost
cat "$out/kafka-server.key" "$out/kafka-server.crt" > "$out/kafka-server.pem"

new_password() { [ -f "$1" ] || openssl rand -hex 24 > "$1"; }
users=$(awk '$1 == "user" { print $2 }' "$acl")
: > "$out/mosquitto_passwd.new"
for user in $users; do
  new_password "$out/passwords/$user"
  mosquitto_passwd -b "$out/mosquitto_passwd.new" "$user" "$(cat "$out/passwords/$user")"
done
mv "$out/mosquitto_passwd.new" "$out/mosquitto_passwd"
new_password "$out/grafana-admin-password"
chmod 644 "$out"/*.crt "$out"/*.pem "$out/mqtt-server.key" "$out/kafka-server.key" "$out/mosquitto_passwd" \
  "$out/grafana-admin-password" "$out"/passwords/*
echo "make-secrets: $(echo "$users" | wc -w) users, certificates and passwords in $out/"
