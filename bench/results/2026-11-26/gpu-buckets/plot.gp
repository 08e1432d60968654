# gnuplot plot.gp: means.csv (python3 summarize.py) -> ratio_to_max.png
set terminal pngcairo size 900,560
set output "ratio_to_max.png"
set datafile separator ","
set title "dcps.torch on an NVIDIA H200, dense fp32, 2 shards on 127.0.0.1 (33.6M parameters)\nmeans of 2 repetitions; 1 = max(compute alone, communication alone)"
set xlabel "compute alone / communication alone (batch 4096, 16384, 32768, 65536)"
set ylabel "time per step / max(compute, communication)"
set key top right
set yrange [0.6:2.3]
set grid
plot "< grep '^final,' means.csv" using 3:4 with linespoints lw 2 title "whole step (device path)", \
     "< grep '^before-subparts,' means.csv" using 3:5 with linespoints lw 1 dt 4 title "buckets, one part a bucket (before)", \
     "< grep '^final,' means.csv" using 3:5 with linespoints lw 2 title "buckets (25 MiB), parts by size", \
     "< grep '^final,' means.csv" using 3:6 with linespoints lw 2 title "buckets + ordered pull", \
     1.2 with lines dt 2 lc rgb "black" title "issue 30's bound, 1.2"
