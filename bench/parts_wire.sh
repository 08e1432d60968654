#!/bin/bash
# bench/parts_wire.sh — bench/pushpull's dense round trip, whole and in parts
# (docs/protocol.md, section 17), in the same run: ROUNDS rounds, each running
# bench/pushpull once per parts count of PARTS in turn (1 shard, 1 worker,
# SIZES), so that a slow spell of a shared machine falls on every count alike.
#
# Writes OUT/round-R-parts-P.csv (bench/pushpull's output as it printed it),
# OUT/parts.csv (round,parts,n,push_median_ms,pull_median_ms,trip_ms,zmq_ms,
# ratio_zmq,cpu_ratio_zmq: the dense rows), OUT/summary.csv (parts,n, the median
# over the rounds of trip_ms, ratio_zmq and cpu_ratio_zmq, and the lowest and
# highest ratio_zmq), OUT/command (how it was run), and with gnuplot
# OUT/ratio_zmq.png (ratio_zmq of every round by parts count, one panel per size).
# Prints summary.csv. PARTS: --parts values of bench/pushpull (1: whole, 0: by size).
#
# Needs a build ($BUILD, default build/) with `make bench/pushpull` done.
#
# usage: bench/parts_wire.sh [-r ROUNDS] [-p "PARTS"] [-s SIZES] [-o OUT]
#        (defaults: 5, "1 0 8", 1M,4M, bench/results/DATE/parts-wire)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$root/build}
ROUNDS=5 PARTS="1 0 8" SIZES=1M,4M
OUT=$root/bench/results/$(date +%F)/parts-wire
while getopts r:p:s:o: opt; do
    case $opt in
    r) ROUNDS=$OPTARG ;;
    p) PARTS=$OPTARG ;;
    s) SIZES=$OPTARG ;;
    o) OUT=$OPTARG ;;
    *) sed -n 2,19p "$0" >&2; exit 2 ;;
    esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "parts_wire.sh: -r: \"$ROUNDS\" is not a count" >&2; exit 2; }
for p in $PARTS; do
    [[ $p =~ ^[0-9]+$ ]] && [ "$p" -le 64 ] ||
        { echo "parts_wire.sh: -p: \"$p\" is not a parts count from 0 to 64" >&2; exit 2; }
done
bench=$BUILD/bench/pushpull
[ -x "$bench" ] && [ -x "$BUILD/dcps-server" ] ||
    { echo "parts_wire.sh: no $bench or dcps-server (build them, or set BUILD)" >&2; exit 2; }

mkdir -p "$OUT"
echo "bench/parts_wire.sh -r $ROUNDS -p \"$PARTS\" -s $SIZES  # $(date -u +%FT%TZ)" >"$OUT/command"
echo "round,parts,n,push_median_ms,pull_median_ms,trip_ms,zmq_ms,ratio_zmq,cpu_ratio_zmq" \
    >"$OUT/parts.csv"
for round in $(seq "$ROUNDS"); do
    for p in $PARTS; do
        csv=$OUT/round-$round-parts-$p.csv
        # From the build directory, so that the CSV names ./dcps-server, not a path here.
        (cd "$BUILD" && bench/pushpull --server ./dcps-server --sizes "$SIZES" --shards 1 \
            --workers 1 --parts "$p") >"$csv"
        # The columns by name, wherever bench/pushpull puts them.
        awk -F, -v round="$round" -v parts="$p" '
            /^kind,/ { for (i = 1; i <= NF; i++) col[$i] = i; next }
            $1 == "dense" {
                printf "%s,%s,%s,%s,%s,%.4f,%s,%s,%s\n", round, parts, $col["n"],
                    $col["push_median_ms"], $col["pull_median_ms"],
                    $col["push_median_ms"] + $col["pull_median_ms"], $col["zmq_ms"],
                    $col["ratio_zmq"], $col["cpu_ratio_zmq"]
            }' "$csv" >>"$OUT/parts.csv"
    done
done

# Medians over the rounds, per parts count and size.
median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "parts,n,trip_ms,ratio_zmq,cpu_ratio_zmq,ratio_zmq_min,ratio_zmq_max" >"$OUT/summary.csv"
for p in $PARTS; do
    for n in $(awk -F, 'NR > 1 { print $3 }' "$OUT/parts.csv" | sort -un); do
        rows=$(awk -F, -v p="$p" -v n="$n" 'NR > 1 && $2 == p && $3 == n' "$OUT/parts.csv")
        trip=$(cut -d, -f6 <<<"$rows" | median)
        ratio=$(cut -d, -f8 <<<"$rows" | median)
        cpu=$(cut -d, -f9 <<<"$rows" | median)
        lo=$(cut -d, -f8 <<<"$rows" | sort -g | head -n1)
        hi=$(cut -d, -f8 <<<"$rows" | sort -g | tail -n1)
        echo "$p,$n,$trip,$ratio,$cpu,$lo,$hi" >>"$OUT/summary.csv"
    done
done

if command -v gnuplot >/dev/null; then
    sizes=$(awk -F, 'NR > 1 { print $3 }' "$OUT/parts.csv" | sort -un)
    panels=$(wc -w <<<"$sizes")
    {
        echo "set terminal pngcairo size $((520 * panels)),400"
        echo "set output '$OUT/ratio_zmq.png'"
        echo "set datafile separator ','"
        echo "set multiplot layout 1,$panels"
        echo "set xlabel 'round'; set ylabel 'ratio_zmq (round trip / bare ZeroMQ)'"
        echo "set key outside bottom center horizontal; set yrange [0:*]; set grid; set xtics 1"
        echo "set xrange [0.5:$ROUNDS + 0.5]; set termoption noenhanced"
        for n in $sizes; do
            echo "set title 'n = $n floats, 1 shard, 1 worker'"
            plot=""
            for p in $PARTS; do
                label="parts $p"; [ "$p" = 1 ] && label="whole"; [ "$p" = 0 ] && label="parts by size"
                plot+="'$OUT/parts.csv' using (\$2 == $p && \$3 == $n ? \$1 : 1/0):8 with points pt 7 title '$label', "
            done
            echo "plot ${plot%, }"
        done
        echo "unset multiplot"
    } | gnuplot
fi
cat "$OUT/summary.csv"
