#!/bin/sh
# Architecture rules: each third-party header family is included by one
# module only, and the planning library includes none of them; the
# planner's rooms depend one way; no #include cycles (include-cycles.py).
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
check 'grpc/' '^(daemon/rpc(_int\.h|_call\.c|_client\.c|\.c)|client/rpc\.c|tests/daemon/)' 'grpc headers'
check 'uv\.h' '^daemon/(rpc(\.h|_int\.h|\.c|_call\.c)|shardd\.c)$' 'uv.h'
check '(cuda|cublas|nccl|nvml)[a-z_]*\.h' '^kernels/cuda/' 'CUDA headers'
check '(jansson|protobuf-c/)' '^(planner/formats/(json[a-z_]*\.c|formats_int\.h)|tests/|fuzz/|proto/|wire/|daemon/|client/rpc)' 'jansson/protobuf-c'
check 'microhttpd\.h' '^daemon/http\.c$' 'microhttpd.h'
check 'zlib\.h' '^planner/models/(netfile|ensemble|policy)\.c' 'zlib.h'
check 'cblas\.h' '^planner/models/' 'cblas.h'
check 'zip\.h' '^planner/models/torch\.c$' 'zip.h'

# The planner's rooms (planner/planner.h): a file of a room includes only
# its own room's header and its private headers (ROOM_int.h, and a part's
# own, such as search/neuroshard_int.h), the headers of the rooms
# below it (search -> models -> problem, formats -> problem) and
# include/shardd/; no room includes planner.h, the umbrella for the modules
# outside; every source is in a room.
room() { # ROOM ALLOWED-ROOM-HEADERS
    bad=$(git grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' -- \
        "planner/$1/" | grep -vE "\"(($2)/\2|$1/[a-z_]+_int|shardd/[a-z0-9_]+)\.h\"" || true)
    if [ -n "$bad" ]; then
        echo "layering: planner/$1/ may include only" \
            "$(echo "$2" | tr '|' ' ') and shardd/:" >&2
        echo "$bad" >&2
        status=1
    fi
}
room problem 'problem'
room models 'problem|models'
room search 'problem|models|search'
room formats 'problem|formats'
bad=$(git grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' -- \
    planner/planner.h | grep -vE '"(problem|models|search|formats)/\1\.h"' ||
    true)
if [ -n "$bad" ]; then
    echo "layering: planner/planner.h includes only the rooms' headers:" >&2
    echo "$bad" >&2
    status=1
fi
bad=$(git ls-files 'planner/*.c' 'planner/*.h' |
    grep -vE '^planner/((problem|models|search|formats)/[a-z_]+\.[ch]|planner\.h)$' ||
    true)
if [ -n "$bad" ]; then
    echo "layering: planner/ sources outside a room:" $bad >&2
    status=1
fi

# No #include cycles between modules, nor between the files of a module
# listed here; the others' file cycles are printed, not failed: daemon/ and
# client/ are being restructured (on main, daemon/service.c and
# daemon/svc_int.h include each other), wire/ is new.
CYCLES_ENFORCED="common include planner kernels store profiler proto wire daemon client"
python3 scripts/include-cycles.py --enforce "$CYCLES_ENFORCED" >&2 || status=1
exit $status
