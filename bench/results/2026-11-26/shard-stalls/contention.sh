#!/bin/bash
# shardcap's Top-k 0.1% + delta shard (12.67M, DC-ASGD-a, 8 sessions) alone, beside two
# memory-streaming processes, and beside two CPU-only processes: the shard's CPU per message.
# usage: contention.sh BUILD_DIR OUT.csv
OUT=$(realpath -m "$2")
cd "$1" # the build directory
args="--params 12665216 --density 0.001 --rules dcasgd_a --encodings topk_delta --sessions 8 --seconds 4"
hog_mem='import numpy as np
a = np.ones(25_000_000, np.float32); b = np.empty_like(a)
while True:
    np.copyto(b, a); a += 1e-7'
hog_cpu='x = 0
while True:
    x += 1'
for rep in 1 2; do
  for kind in alone mem cpu; do
    pids=()
    if [ $kind != alone ]; then
      code=$hog_mem; [ $kind = cpu ] && code=$hog_cpu
      for i in 1 2; do /usr/bin/python3 -c "$code" & pids+=($!); done
      sleep 2
    fi
    echo "# $kind rep $rep, load $(cut -d' ' -f1-3 /proc/loadavg)"
    ./bench/shardcap $args | grep -v '^#' | sed "s/^/$kind,/"
    for p in "${pids[@]}"; do kill $p; wait $p 2>/dev/null; done
  done
done > "$OUT" 2>&1
