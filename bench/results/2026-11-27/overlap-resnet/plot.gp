# gnuplot plot.gp: summary.csv (python3 summarize.py) -> ratio_to_max.png
set terminal pngcairo size 900,560
set output "ratio_to_max.png"
set datafile separator ","
set title "dcps.torch step on 1 Gbit/s links, ResNet-18 for 1x28x28 (11.2M parameters, 1 worker, 2 shards)\nmedians of 4 repetitions; 1 = max(compute alone, communication alone)"
set xlabel "compute alone / communication alone (batch 8 to 48)"
set ylabel "time per step / max(compute, communication)"
set key top right
set yrange [0.8:2.4]
set grid
plot "summary.csv" using 2:8 skip 1 with linespoints lw 2 title "whole step", \
     "" using 2:13 skip 1 with linespoints lw 2 title "buckets (4 MiB)", \
     "" using 2:16 skip 1 with linespoints lw 2 title "buckets + ordered pull", \
     1.2 with lines dt 2 lc rgb "black" title "issue 30's bound, 1.2", \
     "" using 2:($2 < 1 ? 1 + $2 : (1 + $2) / $2) skip 1 with lines dt 3 lc rgb "grey" title "compute + communication (no overlap)"
