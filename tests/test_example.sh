#!/usr/bin/env bash
# The C example of README.md is a program that builds and runs.
#
# The test takes the ```c block that follows the line "<!-- example: ... -->" in
# README.md, builds it against this build's libdcps twice: against the shared
# library, as `cc client.c $(pkg-config --cflags --libs dcps)` does, and against
# the static one with the dependencies' flags of the working alternative to
# `pkg-config --static` that docs/operating.md gives (Debian 12's libzmq.pc
# chain breaks that). Both programs then run as the one worker of a job on two
# real shards and must print the parameters that ten SGD steps of a gradient of
# ones give.
set -uo pipefail
: "${DCPS_BUILDDIR:?run through make check}" "${DCPS_SRCDIR:?run through make check}"
: "${CC:=cc}" "${PKG_CONFIG:=pkg-config}"

# shellcheck source=tests/scratch.sh
. "$(dirname "${BASH_SOURCE[0]}")/scratch.sh" # $tmp, removed when the test passes
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok: $*"; }

awk '/^<!-- example:/ { on = 1; next } on && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit } inside { print }' "$DCPS_SRCDIR/README.md" >"$tmp/client.c"
if [ ! -s "$tmp/client.c" ]; then
    echo "FAIL: README.md has no \`\`\`c block after a line \"<!-- example: ... -->\""
    exit 1
fi
# <dcps/...> as an installation has it: the installed headers of the source tree.
mkdir -p "$tmp/include/dcps"
for h in worker/dcps.h worker/step.h common/error.h; do
    cp "$DCPS_SRCDIR/$h" "$tmp/include/dcps/" || exit 1
done
libs=$DCPS_BUILDDIR/.libs
cflags="${CFLAGS:-} -std=c11 -Wall -Wextra -Werror -I$tmp/include"
built=()
if [ -f "$libs/libdcps.so" ]; then
    if $CC $cflags -o "$tmp/client-shared" "$tmp/client.c" -L"$libs" -Wl,-rpath,"$libs" -ldcps \
        2>"$tmp/cc.err"; then
        pass "README's example builds against libdcps.so"
        built+=(client-shared)
    else
        fail "README's example does not build against libdcps.so:"; cat "$tmp/cc.err"
    fi
fi
if [ -f "$libs/libdcps.a" ]; then
    # The alternative to `pkg-config --static --libs dcps` (docs/operating.md).
    if ! deps=$(PKG_CONFIG_PATH=$DCPS_BUILDDIR $PKG_CONFIG --print-requires-private dcps); then
        fail "pkg-config --print-requires-private dcps"
    elif ! deplibs=$($PKG_CONFIG --libs $deps); then
        fail "pkg-config --libs $(echo $deps)"
    elif $CC $cflags -o "$tmp/client-static" "$tmp/client.c" "$libs/libdcps.a" $deplibs -lm \
        2>"$tmp/cc.err"; then
        pass "README's example builds against libdcps.a and \$(pkg-config --libs $(echo $deps)) -lm"
        built+=(client-static)
    else
        fail "README's example does not build against libdcps.a:"; cat "$tmp/cc.err"
    fi
fi
[ ${#built[@]} -gt 0 ] || { echo "FAIL: no libdcps in $libs"; exit 1; }

# Two shards on ephemeral ports; the worker's job names the ports they bound.
job() {
    printf '[job]\nname = readme-example\nworkers = 1\n[servers]\nshards = %s\n' "$1"
    printf '[model]\nparams = 1000\n[optimizer]\nlr = 0.05\n[worker]\ntimeout_ms = 2000\nretries = 2\n'
}
job 'tcp://127.0.0.1:*, tcp://127.0.0.1:*' >"$tmp/server.ini"
for s in 0 1; do
    "$DCPS_BUILDDIR/dcps-server" --config "$tmp/server.ini" --shard $s \
        --endpoint-file "$tmp/shard$s.endpoint" 2>"$tmp/shard$s.log" &
    pids+=($!)
done
for _ in $(seq 100); do
    [ -s "$tmp/shard0.endpoint" ] && [ -s "$tmp/shard1.endpoint" ] && break
    sleep 0.1
done
[ -s "$tmp/shard0.endpoint" ] && [ -s "$tmp/shard1.endpoint" ] || {
    echo "FAIL: the shards did not start"; cat "$tmp"/shard*.log; exit 1; }
job "$(cat "$tmp/shard0.endpoint"), $(cat "$tmp/shard1.endpoint")" >"$tmp/job.ini"

# Each program is a new session of rank 0: the previous one said BYE, so the
# shards admit it at once, and it goes on from the parameters the last one left.
want=-0.5
for prog in "${built[@]}"; do
    if ! out=$(timeout 60 "$tmp/$prog" "$tmp/job.ini" 0 2>&1); then
        fail "$prog exited non-zero: $out"
    elif [ "$out" = "rank 0: w[0] = $want" ]; then
        pass "$prog ran 10 steps on 2 shards: $out"
    else
        fail "$prog printed \"$out\", not \"rank 0: w[0] = $want\""
    fi
    want=-1
done
exit $((fails > 0))
