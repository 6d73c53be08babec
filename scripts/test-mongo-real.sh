#!/usr/bin/env bash
# Run the real-server MongoDB suite against a local Atlas deployment in Docker:
#   scripts/test-mongo-real.sh [pytest args…]
# Starts scripts/atlas-local/compose.yaml (image mongodb/mongodb-atlas-local), waits until
# it is healthy, runs tests/contract/test_mongo_real.py with VANCETOPE_RAG_TEST_MONGODB_URI
# pointing at it, and removes the container and its volumes (KEEP=1 keeps them running).
# ATLAS_LOCAL_PORT (default 27217) and ATLAS_LOCAL_TAG (default latest) choose the port and
# image tag; PYTHON the interpreter (default: python3 on PATH, with the package installed).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
compose=(docker compose -f "$here/atlas-local/compose.yaml")
port="${ATLAS_LOCAL_PORT:-27217}"
cleanup() {
    if [ "${KEEP:-0}" != "1" ]; then "${compose[@]}" down -v >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
"${compose[@]}" up -d --wait --wait-timeout 300
export VANCETOPE_RAG_TEST_MONGODB_URI="mongodb://127.0.0.1:${port}/?directConnection=true"
cd "$root"
PYTHONPATH="$root/src${PYTHONPATH:+:$PYTHONPATH}" "${PYTHON:-python3}" -m pytest -p no:cacheprovider \
    -n 0 -m "mongodb or not mongodb" tests/contract/test_mongo_real.py "$@"
