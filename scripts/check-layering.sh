#!/bin/sh
# Architecture rules: each third-party header family is included by one
# module only, and the planning library includes none of them.
set -eu
cd "$(dirname "$0")/.."
status=0
check() { # PATTERN ALLOWED-PATH-REGEX WHAT
    bad=$(git grep -lE "#[[:space:]]*include[[:space:]]*<$1" -- '*.c' '*.h' \
        '*.cu' | grep -vE "$2" || true)
    if [ -n "$bad" ]; then
        echo "layering: $3 included outside its module:" $bad >&2
        status=1
    fi
}
check 'sqlite3\.h' '^store/' 'sqlite3.h'
check 'grpc/' '^(daemon/rpc\.c|client/rpc|tests/daemon/)' 'grpc headers'
check 'uv\.h' '^daemon/(rpc\.[ch]|shardd\.c)$' 'uv.h'
check '(cuda|cublas|nccl|nvml)[a-z_]*\.h' '^kernels/cuda/' 'CUDA headers'
check '(jansson|protobuf-c/)' '^(planner/formats/json\.c|tests/|fuzz/|proto/|wire/|daemon/|client/rpc)' 'jansson/protobuf-c'
exit $status
