#!/bin/sh
# Install every Debian package shardd needs to build and test (the tests'
# tools too: promtool from prometheus, headless chromium for the status
# page, valgrind for scripts/memcheck.sh).  Idempotent:
# packages already present are left alone.  Needs root (or sudo).
set -eu

PKGS="build-essential cmake pkg-config clang-format \
libgrpc-dev libprotobuf-c-dev protobuf-c-compiler grpc-proto libprotobuf-dev \
libuv1-dev libsqlite3-dev libjansson-dev libblas-dev libsystemd-dev zlib1g-dev python3 \
libzip-dev \
libmicrohttpd-dev \
python3-grpcio python3-grpc-tools python3-protobuf \
python3-venv python3-pip python3-setuptools python3-wheel valgrind \
prometheus chromium"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing
