#!/bin/sh
# Builds shardd (warnings are errors) and runs every test with ctest.
#   BUILD_DIR   build folder (default: build)
#   SANITIZE    e.g. "address;undefined" for a sanitizer build
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
# Sanitizer builds leave CUDA out: nvcc code is not instrumented.
CUDA=AUTO
[ -n "${SANITIZE:-}" ] && CUDA=OFF
cmake -S . -B "$BUILD_DIR" -DSHARDD_WERROR=ON -DSHARDD_CUDA=$CUDA \
    -DSHARDD_SANITIZE="${SANITIZE:-}" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)"
