#!/usr/bin/env bash
# Build the Cython kernels in place for development. Serialised with flock so that several
# developers (or helpers) working in one tree never run two builds over the same files at once.
set -euo pipefail
cd "$(dirname "$0")/.."
exec flock /tmp/fpstore-build.lock python3 setup.py -q build_ext --inplace
