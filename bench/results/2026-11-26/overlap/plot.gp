# gnuplot plot.gp (async run), or with -e 'csv="..."; out="..."; mode="..."'
if (!exists("csv")) csv = "run-20reps.csv"
if (!exists("out")) out = "ms_per_step.png"
if (!exists("mode")) mode = "async, load 6-7"
set terminal pngcairo size 900,500
set termoption noenhanced
set output out
set datafile separator ","
set title "dcps.torch step, 8.4M parameters, 1 worker, 2 shards on loopback (2 vCPU; ".mode.")"
set xlabel "repetition (each configuration a fresh job, in turn)"
set ylabel "ms per step"
set key outside right
set yrange [0:*]
plot for [c in "compute comm whole whole_c buckets ordered"] \
     "< grep -v '^#' ".csv." | grep ,".c."," using 1:4 with linespoints title c
