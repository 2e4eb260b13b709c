# What the shell tests of shardctl share (sourced; POSIX sh).  The sourcing
# script sets CTL (the shardctl binary) first; this makes DIR (removed at
# exit, with the daemon PID names if it started one), the pass and fail
# counters and the checks below, and `finish` ends the script with the
# tally: failure when any check failed or none ran.
DIR=$(mktemp -d)
PID=
cleanup() {
    if [ -n "$PID" ]; then
        kill "$PID" 2>/dev/null
        wait "$PID" 2>/dev/null
    fi
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# expect_fail CODE WORDS ARGS...: shardctl exits CODE, prints nothing on
# stdout and one line on stderr that contains WORDS (never empty).
expect_fail() {
    code=$1 words=$2
    shift 2
    if [ -z "$words" ]; then
        bad "expect_fail without the words to look for: shardctl $*"
        return
    fi
    "$CTL" "$@" >"$DIR/out" 2>"$DIR/err"
    rc=$?
    if [ "$rc" -ne "$code" ]; then
        bad "exit $rc, want $code: shardctl $* ($(cat "$DIR/err"))"
    elif [ -s "$DIR/out" ]; then
        bad "stdout not empty: shardctl $*"
    elif [ "$(wc -l <"$DIR/err")" -ne 1 ]; then
        bad "want one message: shardctl $*: $(cat "$DIR/err")"
    elif ! grep -qF -- "$words" "$DIR/err"; then
        bad "message lacks '$words': $(cat "$DIR/err")"
    else
        ok
    fi
}

# json_check FILE PYTHON-EXPRESSION: the file is JSON and the expression on
# it (bound to d) is true.
json_check() {
    if python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if ($2) else 1)" "$1"; then
        ok
    else
        bad "json check failed on $1: $2"
    fi
}

finish() {
    echo "$pass passed, $fail failed"
    [ "$fail" -eq 0 ] && [ "$pass" -gt 0 ]
}
