# gnuplot plot.gp -> sync.png: dcps.torch in sync mode against async and DDP's best (README.md)
set terminal pngcairo size 800,480
set output "sync.png"
set datafile separator ","
set title "FashionWide, P = 4, 1 Gbit/s, 4 passes over 15,000 images (2026-11-27)"
set xlabel "seconds from the start of training"
set ylabel "test accuracy (2,000 images)"
set yrange [0.5:0.9]
set key bottom right font ",9"
set grid
plot "sync-async-ref/torch_1gbit.csv" using 4:5 skip 1 with linespoints lw 2 title "dcps.torch Top-k 1% + buckets + ordered, async DC-ASGD-a lr 0.1", \
     "sync-lr0.4/torch_1gbit.csv" using 4:5 skip 1 with linespoints lw 2 title "the same in sync mode, SGD lr 0.4", \
     "sync-lr0.2/torch_1gbit.csv" using 4:5 skip 1 with linespoints lw 2 title "the same in sync mode, SGD lr 0.2", \
     "sync-powersgd-r1/torch_1gbit.csv" using 4:5 skip 1 with linespoints lw 2 title "DDP lr 0.4, PowerSGD rank 1 from update 2", \
     0.82 with lines dt 2 lc rgb "black" title "0.82"
