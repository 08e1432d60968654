# gnuplot plot.gp: torch_1gbit.csv -> torch_1gbit_P2.png
set terminal pngcairo size 900,560 noenhanced
set output "torch_1gbit_P2.png"
set title "FashionWide (7.4M parameters), P = 2, 1 Gbit/s links (bench/netem.sh), 2 cores shared\ntest accuracy on 2,000 test images after each pass over 7,500 training images"
set xlabel "elapsed s (rank 0, evaluations included)"; set ylabel "test accuracy (rank 0)"
set key bottom right; set datafile separator ","; set grid
set yrange [0.58:0.87]
plot for [s in "ddp_linear ddp_powersgd dcps_fp16_ordered dcps_topk_ordered"] \
     "< grep '^".s.",' torch_1gbit.csv" using 4:5 with linespoints lw 2 title s, \
     0.82 with lines dt 2 lc rgb "black" title "0.82, the stated accuracy"
