# gnuplot tuned.gp -> tuned.png: test accuracy against time of the runs with both sides'
# warm-ups shortened (tuned-p4-1gbit/, p4-100mbit/, tuned-p2/); the line at 0.82
set terminal pngcairo size 1500,500 noenhanced
set output "tuned.png"
set datafile separator ","
set key bottom right
set grid
set xlabel "elapsed s (evaluations included)"
set ylabel "rank 0's test accuracy (2,000 images)"
set yrange [0.35:0.9]
set multiplot layout 1,3
set title "P = 4, 1 Gbit/s"
plot 0.82 notitle dt 2 lc "black", \
     "tuned-p4-1gbit/powersgd/torch_1gbit.csv" every ::1 using (strcol(1) eq "ddp_powersgd_r1_s2" ? $4 : NaN):5 with linespoints title "DDP PowerSGD r1 from 2", \
     "" every ::1 using (strcol(1) eq "ddp_powersgd_s2" ? $4 : NaN):5 with linespoints title "DDP PowerSGD r2 from 2", \
     "p4-1gbit/torch_1gbit.csv" every ::1 using (strcol(1) eq "ddp_linear" ? $4 : NaN):5 with linespoints title "DDP lr 0.4", \
     "tuned-p4-1gbit/topk-nowarmup/torch_1gbit.csv" every ::1 using 4:5 with linespoints title "dcps.torch Top-k + buckets + ordered"
set title "P = 4, 100 Mbit/s"
plot 0.82 notitle dt 2 lc "black", \
     "p4-100mbit/powersgd/torch_100mbit.csv" every ::1 using (strcol(1) eq "ddp_powersgd_s2" ? $4 : NaN):5 with linespoints title "DDP PowerSGD r2 from 2", \
     "" every ::1 using (strcol(1) eq "ddp_powersgd" ? $4 : NaN):5 with linespoints title "DDP PowerSGD r2 from 46", \
     "p4-100mbit/topk-nowarmup/torch_100mbit.csv" every ::1 using 4:5 with linespoints title "dcps.torch Top-k + buckets + ordered"
set title "P = 2, 1 Gbit/s and 100 Mbit/s"
plot 0.82 notitle dt 2 lc "black", \
     "tuned-p2/1gbit-powersgd/torch_1gbit.csv" every ::1 using (strcol(1) eq "ddp_powersgd_r1_s2" ? $4 : NaN):5 with linespoints title "DDP PowerSGD r1, 1 Gbit/s", \
     "tuned-p2/100mbit-powersgd/torch_100mbit.csv" every ::1 using (strcol(1) eq "ddp_powersgd_r1_s2" ? $4 : NaN):5 with linespoints title "DDP PowerSGD r1, 100 Mbit/s", \
     "tuned-p2/1gbit-topk-nowarmup/torch_1gbit.csv" every ::1 using 4:5 with linespoints title "dcps.torch Top-k, 1 Gbit/s", \
     "tuned-p2/100mbit-topk-nowarmup/torch_100mbit.csv" every ::1 using 4:5 with linespoints title "dcps.torch Top-k, 100 Mbit/s"
unset multiplot
