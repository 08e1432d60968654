# gnuplot plot.gp -> p4_1gbit.png, p2_1gbit.png: every system's run to accuracy on
# 1 Gbit/s links, 2026-11-26's (../../2026-11-26/ddp-wide/) and this folder's
set terminal pngcairo size 1000,600 noenhanced
set datafile separator ","; set grid; set key outside right top
set xlabel "elapsed s (rank 0, evaluations included)"; set ylabel "test accuracy (rank 0)"
all = "ddp_linear ddp_fp16 ddp_powersgd dcps_dense dcps_dense_buckets dcps_dense_ordered dcps_fp16 dcps_fp16_buckets dcps_fp16_ordered dcps_topk dcps_topk_buckets dcps_topk_ordered"
old = "../../2026-11-26/ddp-wide/"
# a colour per family (DDP's three their own), a dash and point per variant
colour(i) = word("#7b3294 #2c7bb6 #00a6ca #e69f00 #e69f00 #e69f00 #d7191c #d7191c #d7191c #1a9641 #1a9641 #1a9641", i)
dash(i) = i <= 3 ? 1 : (i - 4) % 3 + 1

set output "p4_1gbit.png"
set title "FashionWide (7.4M parameters), P = 4, 1 Gbit/s links, 2 cores shared\naccuracy on 2,000 test images after each pass over 15,000 training images (log x)"
set logscale x; set yrange [0.6:0.88]
plot for [i=1:words(all)] "< cat ".old."p4-1gbit/torch_1gbit.csv p4-1gbit/torch_1gbit.csv | grep '^".word(all, i).",'" \
     using 4:5 with linespoints lw 2 lc rgb colour(i) dt dash(i) pt i title word(all, i), 0.82 with lines dt 2 lc rgb "black" title "0.82"

set output "p2_1gbit.png"
set title "FashionWide, P = 2, 1 Gbit/s links, 2 cores shared\naccuracy on 2,000 test images after each pass over 7,500 training images (log x)"
plot for [i=1:words(all)] "< cat ".old."p2-1gbit/torch_1gbit.csv p2-1gbit/torch_1gbit.csv | grep '^".word(all, i).",'" \
     using 4:5 with linespoints lw 2 lc rgb colour(i) dt dash(i) pt i title word(all, i), 0.82 with lines dt 2 lc rgb "black" title "0.82"
