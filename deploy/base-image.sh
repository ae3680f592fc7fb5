#!/usr/bin/env bash
# Build a local Docker base image (Debian bookworm: python3 + venv, Java 17) from Debian's packages,
# for machines that have a Docker engine but no image registry:
#   deploy/base-image.sh [TAG]          # default tag: millstream-base:bookworm
#   docker compose build --build-arg BASE_IMAGE=millstream-base:bookworm
# The image is kept by the engine: a second run with the tag present does nothing.
# Needs root and debootstrap (installed with apt-get when missing). MIRROR overrides the mirror.
set -euo pipefail
TAG=${1:-millstream-base:bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
PACKAGES=python3,python3-venv,openjdk-17-jre-headless,procps,ca-certificates

if docker image inspect "$TAG" >/dev/null 2>&1; then
  echo "base image $TAG: present"
  exit 0
fi
if ! command -v debootstrap >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi
rootfs=$(mktemp -d /tmp/millstream-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "base image $TAG: debootstrap bookworm ($PACKAGES) into $rootfs"
started=$(date +%s)
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$rootfs" "$MIRROR" >"$rootfs.log" 2>&1 \
  || { tail -20 "$rootfs.log"; rm -f "$rootfs.log"; echo "debootstrap failed" >&2; exit 1; }
rm -f "$rootfs.log"
# A smaller image: no apt lists, docs or caches.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
       "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/*
tar -C "$rootfs" -c . | docker import \
  --change 'ENV LANG=C.UTF-8' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["/bin/bash"]' - "$TAG" >/dev/null
echo "base image $TAG: built in $(( $(date +%s) - started )) s"
