#!/bin/bash
# BEFORE_BUILD and AFTER_BUILD: the two build directories (set them before running).
# Alternating before/after rounds of bench/pushpull and bench/apply.
out=$(cd "${OUT:-.}" && pwd)
for k in 1 2 3 4 5; do
  for b in before after; do
    if [ $b = before ]; then d=$BEFORE_BUILD; else d=$AFTER_BUILD; fi
    (cd $d && ./bench/pushpull --server ./dcps-server --sizes 1M,4M --shards 1 --workers 1,2,4 > $out/pushpull-$b-$k.csv 2>$out/pushpull-$b-$k.err)
    (cd $d && ./bench/apply 1048576 21 > $out/apply-$b-$k.csv 2>$out/apply-$b-$k.err)
  done
done
echo done > $out/DONE
