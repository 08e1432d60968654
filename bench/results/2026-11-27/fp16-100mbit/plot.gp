# gnuplot plot.gp -> fp16.png: DDP's fp16 hook on 100 Mbit/s beside the systems run there
# on 2026-11-26 (README.md)
set terminal pngcairo size 800,480
set output "fp16.png"
set datafile separator ","
set title "FashionWide, P = 4, 100 Mbit/s, passes over 15,000 images"
set xlabel "seconds from the start of training"
set ylabel "test accuracy (2,000 images)"
set yrange [0.5:0.9]
set logscale x
set key bottom right font ",9"
set grid
plot "torch_100mbit.csv" using 4:5 skip 1 with linespoints lw 2 title "DDP lr 0.4, fp16 hook (2026-11-27)", \
     "../../2026-11-26/ddp-wide/repeats/p4-100mbit-powersgd-r1/torch_100mbit.csv" using 4:5 skip 1 with linespoints lw 2 title "DDP lr 0.4, PowerSGD rank 1 from update 2 (2026-11-26)", \
     "../../2026-11-26/ddp-wide/repeats/p4-100mbit-topk-rep2/torch_100mbit.csv" using 4:5 skip 1 with linespoints lw 2 title "dcps.torch Top-k 1% + buckets + ordered (2026-11-26)", \
     0.82 with lines dt 2 lc rgb "black" title "0.82"
