#!/usr/bin/env bash
# Pins every image docker-compose.yml and the Dockerfile pull to the digest
# its tag names today, in place: `${VAR:-repo:tag}  # pin with
# deploy/pin-images.sh` becomes `${VAR:-repo:tag@sha256:...}`, and each
# Dockerfile FROM gets its @sha256. Run it where the registries are
# reachable, review the diff, commit it; rerun it to move to newer digests.
#
#   deploy/pin-images.sh            # pin (needs docker buildx)
#   deploy/pin-images.sh --check    # exit 1 while any image is not pinned
#
# The digest is the one of the multi-platform index (what `docker pull
# repo:tag` resolves), from `docker buildx imagetools inspect`.
set -euo pipefail
cd "$(dirname "$0")/.."
files=(docker-compose.yml Dockerfile)
marker='# pin with deploy/pin-images.sh'

unpinned() {
  grep -nE "(image: .*\\\$\{[A-Z_]+_IMAGE:-[^}@]+\}|^FROM [^ @]+( |$))" "${files[@]}" | grep -v '@sha256:' || true
}

if [ "${1:-}" = "--check" ]; then
  left=$(unpinned)
  if [ -n "$left" ]; then
    echo "not pinned by digest:"; echo "$left"; exit 1
  fi
  echo "every image is pinned by digest"; exit 0
fi

command -v docker >/dev/null || { echo "pin-images: docker is not installed" >&2; exit 1; }
digest() {
  docker buildx imagetools inspect "$1" --format '{{json .Manifest}}' \
    | sed -n 's/.*"digest":"\(sha256:[0-9a-f]\{64\}\)".*/\1/p' | head -n1
}
# compose: image: ${NAME_IMAGE:-repo:tag}
for ref in $(sed -nE 's/^[[:space:]]*image:[[:space:]]*\$\{[A-Z_]+_IMAGE:-([^}@]+)\}.*/\1/p' docker-compose.yml | sort -u); do
  d=$(digest "$ref"); [ -n "$d" ] || { echo "pin-images: no digest for $ref" >&2; exit 1; }
  echo "$ref -> $d"
  esc=$(printf '%s' "$ref" | sed 's/[.[\/*^$]/\\&/g')
  sed -i -E "/^[[:space:]]*image:/ s|(\\\$\{[A-Z_]+_IMAGE:-)${esc}\}( *${marker})?|\1${ref}@${d}}|" docker-compose.yml
done
# Dockerfile: FROM repo:tag [AS name]
for ref in $(sed -nE 's/^FROM ([^ @]+).*/\1/p' Dockerfile | sort -u); do
  d=$(digest "$ref"); [ -n "$d" ] || { echo "pin-images: no digest for $ref" >&2; exit 1; }
  echo "$ref -> $d"
  esc=$(printf '%s' "$ref" | sed 's/[.[\/*^$]/\\&/g')
  sed -i -E "s#^FROM ${esc}( |\$)#FROM ${ref}@${d}\1#" Dockerfile
done
"$0" --check
