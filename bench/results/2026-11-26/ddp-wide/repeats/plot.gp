# gnuplot plot.gp -> repeats.png: the repeated P = 4 runs (README.md beside ../)
set terminal pngcairo size 1100,480
set output "repeats.png"
set datafile separator ","
set multiplot layout 1,2 title "FashionWide, P = 4, 4 passes over 15,000 images: repeated on 2026-11-26, a slower VM than the first runs"
set xlabel "seconds from the start of training"
set ylabel "test accuracy (2,000 images)"
set yrange [0.5:1.0]
set key top left font ",9"
set grid
set title "1 Gbit/s"
plot "p4-1gbit-topk-rep2/torch_1gbit.csv" using 4:5 skip 1 with linespoints lw 2 title "dcps.torch Top-k 1% + buckets + ordered, run 2", \
     "p4-1gbit-topk-rep3/torch_1gbit.csv" using 4:5 skip 1 with linespoints lw 2 title "the same, run 3", \
     "p4-1gbit-powersgd-r1-rep2/torch_1gbit.csv" using 4:5 skip 1 with linespoints lw 2 title "DDP PowerSGD rank 1 from update 2, run 2", \
     0.82 with lines dt 2 lc rgb "black" title "0.82"
set title "100 Mbit/s"
plot "p4-100mbit-topk-rep2/torch_100mbit.csv" using 4:5 skip 1 with linespoints lw 2 title "dcps.torch Top-k 1% + buckets + ordered, run 2", \
     "p4-100mbit-powersgd-r1/torch_100mbit.csv" using 4:5 skip 1 with linespoints lw 2 title "DDP PowerSGD rank 1 from update 2", \
     0.82 with lines dt 2 lc rgb "black" title "0.82"
unset multiplot
