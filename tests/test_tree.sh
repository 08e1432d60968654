#!/usr/bin/env bash
# The tree's shape (docs/internals.md). Its layers: every #include of a dcps header points
# down, never up or sideways into another room, so the folders draw as a graph
# with no arrow back up and no circle. A file's room is its folder, except in
# worker/, which holds two: libdcps's client (client, compress, step, job, the
# headers) and the built-in trainer (trainer.c, main.c).
#
#   rank 0  common/                      errors, logs, the job file, io, clock
#   rank 1  proto/  kernels/             the protocol; generic kernels (CPU and GPU)
#   rank 2  worker/ (client)  server/  model/
#   rank 3  worker/ (trainer)  python/   the programs' users of rank 2
#
# A file may include its own room's headers and those of a lower rank, so the
# rooms of rank 2 (the client, the server, the model) include none of each
# other. Two more arrows are wrong though they point down: the Python extension
# carries libdcps only (no model, no server), and the trainer is a worker (no
# server). Prints the graph (room -> room: count), then PASS or FAIL lines
# naming each wrong include with file and line.
#
# Its functions: none in server/, worker/, common/, model/, proto/ or kernels/
# is longer than MAX_LINES (80) lines from its first line to its closing brace.
# A function is a definition that starts at column 0 with a lowercase word and
# has "(" on that line, and ends at the next "}" at column 0; data tables
# (initialisers, no "(" on their first line) are not functions.
set -uo pipefail
src=${DCPS_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$src" || exit 1

room() {
    case $1 in
    common/*) echo common ;;
    proto/*) echo proto ;;
    kernels/*) echo kernels ;;
    model/*) echo model ;;
    server/*) echo server ;;
    worker/trainer.* | worker/main.c) echo trainer ;;
    worker/*) echo client ;;
    python/*) echo python ;;
    *) echo other ;;
    esac
}
rank() {
    case $1 in
    common) echo 0 ;; proto | kernels) echo 1 ;;
    client | server | model) echo 2 ;; trainer | python) echo 3 ;;
    *) echo 9 ;;
    esac
}

# Rooms that may not include each other whatever their ranks.
apart() {
    case "$1 $2" in
    "python model" | "python server" | "trainer server") return 0 ;;
    *) return 1 ;;
    esac
}

status=0 edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
for f in common/*.[ch] proto/*.[ch] kernels/*.[ch] kernels/*.cu model/*.[ch] model/*.cu \
    server/*.[ch] worker/*.[ch] python/*.c; do
    [ -f "$f" ] || continue
    from=$(room "$f")
    # Only the project's own headers: "folder/name.h" (config.h and the
    # generated dcps.pb-c.h are build outputs of no room).
    grep -n '^#include "[a-z]*/[a-z0-9_]*\.h"' "$f" | while IFS= read -r line; do
        hdr=${line#*\"}
        hdr=${hdr%\"*}
        to=$(room "$hdr")
        [ "$to" = "$from" ] && continue
        echo "$from -> $to" >>"$edges"
        if [ "$(rank "$to")" -ge "$(rank "$from")" ] || apart "$from" "$to"; then
            echo "FAIL: $f:${line%%:*} includes $hdr: $from (rank $(rank "$from")) may not include $to (rank $(rank "$to"))"
            echo x >>"$edges.bad"
        fi
    done
done
sort "$edges" | uniq -c | awk '{printf "  %-8s -> %-8s %d\n", $2, $4, $1}'
if [ -e "$edges.bad" ]; then
    rm -f "$edges.bad"
    status=1
else
    echo "PASS: every include points down: no arrow back up, no circle"
fi

MAX_LINES=${MAX_LINES:-80}
long=$(awk -v max="$MAX_LINES" 'FNR == 1 { start = 0 }
    /^[a-z].*\(/ && !/;[[:space:]]*$/ { name = $0; start = FNR }
    /^}/ { if (start && FNR - start > max) printf "%s:%d: %d lines: %s\n", FILENAME, start, FNR - start, name; start = 0 }' \
    server/*.c worker/*.c common/*.c model/*.c proto/*.c kernels/*.c)
if [ -z "$long" ]; then
    echo "PASS: no function in server/, worker/, common/, model/, proto/ or kernels/ is longer than $MAX_LINES lines"
else
    echo "$long" | sed 's/^/FAIL: /'
    status=1
fi
exit $status
