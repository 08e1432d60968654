set terminal pngcairo size 900,500
set termoption noenhanced
set output "ms_per_step.png"
set datafile separator ","
set title "dcps.torch step, 8.4M parameters, 1 worker, 2 shards on loopback (2 vCPU, load 6-7)"
set xlabel "repetition (each configuration a fresh job, in turn)"
set ylabel "ms per step"
set key outside right
set yrange [0:*]
plot for [c in "compute comm whole whole_c buckets ordered"] \
     "< grep -v '^#' run-20reps.csv | grep ,".c."," using 1:4 with linespoints title c
