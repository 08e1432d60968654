# gnuplot plot.gp -> worst_off.png: each run's largest distance of a rank's final test
# accuracy from its undisturbed twin (runs.csv's worst_off), by fault (README.md)
set terminal pngcairo size 800,420
set output "worst_off.png"
set datafile separator ","
set title "dcps.torch buckets, faults at random moments, checkpoints on (2026-11-27): 24 runs"
set xlabel "run"
set ylabel "|accuracy - twin| (points of 1)"
set yrange [0:0.012]
set key top right font ",9"
set grid
plot "runs.csv" using 1:(strcol(3) eq "kill_shard" ? $16 : 1/0) skip 1 with points pt 7 ps 1.3 title "shard killed and restarted", \
     "runs.csv" using 1:(strcol(3) eq "stop_shard" ? $16 : 1/0) skip 1 with points pt 5 ps 1.2 title "shard stopped", \
     "runs.csv" using 1:(strcol(3) eq "kill_worker" ? $16 : 1/0) skip 1 with points pt 9 ps 1.3 title "worker killed and restarted", \
     "runs.csv" using 1:(strcol(3) eq "stop_worker" ? $16 : 1/0) skip 1 with points pt 11 ps 1.3 title "worker stopped", \
     0.01 with lines dt 2 lc rgb "black" title "1 point: the campaign's bound"
