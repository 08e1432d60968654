#!/bin/bash
# bench/inside.sh — where the time of a dense push-then-pull goes, measured inside
# the processes while bench/pushpull runs (1 shard, 1 worker).
#
# Puts Linux uprobes (perf probe) on the entries and returns of the worker's
# dcps_client_push_dense, dcps_client_pull and dcps_codec_dense_to (its checked copy
# of a reply into the caller's array) in bench/pushpull, and on the shard's
# on_push, dcps_sgd_dense_to (the update) and on_pull in dcps-server, records them
# with `perf record -a` for one bench/pushpull run per size, and splits every
# dense round trip into:
#   push_transfer  push called -> the shard starts on it (send, wire, receive)
#   update         the SGD pass out of place, in the shard, as it runs there
#   push_shard     the rest of the shard's handling of the push
#   ack            the shard done -> the push returns (acknowledgement, settle)
#   pull_request   pull called -> the shard starts on it
#   pull_shard     the shard's handling of the pull (the reply is not copied)
#   reply_transfer the shard done -> the worker starts copying the reply
#   copy           the worker's checked copy into its array
#   pull_rest      the copy done -> the pull returns
#   trip           push called -> pull returned
# Writes OUT/inside.csv (size,segment,median_us,p10_us,p90_us,n), each size's
# bench/pushpull CSV as OUT/pushpull-SIZE.csv, and prints inside.csv (the perf
# data, which names the binaries' paths, is not kept). The probes cost a few
# microseconds each; the quantiles are of every dense round trip of the run,
# warm-up included.
#
# Needs root (uprobes) and perf; a build with symbols ($BUILD, default build/,
# and `make bench/pushpull` there).
#
# usage: bench/inside.sh [-s "SIZES"] [-o OUT]   (SIZES default "1M 4M")
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
SIZES="1M 4M"
OUT=$root/bench/results/$(date +%F)/inside
while getopts s:o: opt; do
    case $opt in
    s) SIZES=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n 2,30p "$0" >&2; exit 2 ;;
    esac
done
server=$BUILD/dcps-server bench=$BUILD/bench/pushpull
for p in "$server" "$bench"; do
    [ -x "$p" ] || { echo "inside.sh: no $p (build it, or set BUILD)" >&2; exit 2; }
done
command -v perf >/dev/null || { echo "inside.sh: perf is not installed (linux-perf)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "inside.sh: uprobes need root" >&2; exit 2; }

group=dcpsin$$ # its own, so that two runs do not share probes
probe() { # probe BINARY NAME FUNCTION [ARG]: an event at its entry (with ARG) and its return
    perf probe -q -x "$1" -a "$group:$2=$3 ${4:-}" -a "$group:${2}_end=$3%return" ||
        { echo "inside.sh: cannot probe $3 in $1 (built without symbols, or inlined?)" >&2; exit 1; }
}
tmp=$(mktemp -d)
trap 'perf probe -q -d "$group:*" 2>/dev/null || true; rm -rf "$tmp"' EXIT
perf probe -q -d "$group:*" 2>/dev/null || true
probe "$bench" push dcps_client_push_dense
probe "$bench" pull dcps_client_pull
probe "$bench" copy dcps_codec_dense_to
probe "$server" on_push on_push
probe "$server" update dcps_sgd_dense_to n=n:u64
probe "$server" on_pull on_pull

mkdir -p "$OUT"
echo "size,segment,median_us,p10_us,p90_us,n" >"$OUT/inside.csv"
for size in $SIZES; do
    # From the build directory, so that the CSV names ./dcps-server, not a path here.
    (cd "$BUILD" && perf record -q -e "$group:*" -a -o "$tmp/perf-$size.data" -- \
        bench/pushpull --server ./dcps-server --sizes "$size" --shards 1 --workers 1) \
        >"$OUT/pushpull-$size.csv"
    # One dense round trip is the events from a push's entry to the next pull's
    # return, in this order; a sequence broken by anything else is dropped, and
    # so is one whose update is not of this size (bench/pushpull's headline row
    # is 1M floats whatever --sizes says).
    case $size in
    *K) floats=$((${size%K} * 1024)) ;;
    *M) floats=$((${size%M} * 1048576)) ;;
    *) floats=$size ;;
    esac
    perf script -i "$tmp/perf-$size.data" -F time,event,trace 2>/dev/null |
        awk -v size="$size" -v floats="$floats" '
        BEGIN {
            n = split("push on_push update update_end__return on_push_end__return " \
                      "push_end__return pull on_pull on_pull_end__return copy " \
                      "copy_end__return pull_end__return", order, " ")
        }
        {
            t = $1; sub(/:$/, "", t); ev = $2; sub(/:$/, "", ev); sub(/^[^:]*:/, "", ev)
            if (ev == "push") at = 0
            if (ev == "update" && $NF != "n=" floats) at = n + 1
            if (at < n && ev == order[at + 1]) { ts[++at] = t * 1e6 } else if (ev != "push") at = n + 1
            if (at == n) { trips++; record() ; at = n + 1 }
        }
        function record() {
            add("push_transfer", ts[2] - ts[1]); add("update", ts[4] - ts[3])
            add("push_shard", ts[5] - ts[2] - (ts[4] - ts[3])); add("ack", ts[6] - ts[5])
            add("pull_request", ts[8] - ts[7]); add("pull_shard", ts[9] - ts[8])
            add("reply_transfer", ts[10] - ts[9]); add("copy", ts[11] - ts[10])
            add("pull_rest", ts[12] - ts[11]); add("trip", ts[12] - ts[1])
        }
        function add(seg, v) { if (!(seg in cnt)) segs[++nsegs] = seg; d[seg, ++cnt[seg]] = v }
        function sorted(seg,   m, i, j, x) { # the values of seg into a[1..m], ascending
            m = cnt[seg]
            for (i = 1; i <= m; i++) a[i] = d[seg, i]
            for (i = 2; i <= m; i++) { x = a[i]; for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]; a[j + 1] = x }
            return m
        }
        function q(m, p) { return a[int((m - 1) * p + 0.5) + 1] }
        END {
            if (!trips) { print "inside.sh: no complete dense round trip recorded" > "/dev/stderr"; exit 1 }
            for (i = 1; i <= nsegs; i++) {
                m = sorted(segs[i])
                printf "%s,%s,%.1f,%.1f,%.1f,%d\n", size, segs[i], q(m, 0.5), q(m, 0.1), q(m, 0.9), m
            }
        }' >>"$OUT/inside.csv"
done
if command -v column >/dev/null; then column -s, -t "$OUT/inside.csv"; else cat "$OUT/inside.csv"; fi
