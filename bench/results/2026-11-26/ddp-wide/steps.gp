# gnuplot steps.gp: steps.csv (python3 steps.py) -> steps.png
set terminal pngcairo size 1000,600 noenhanced
set output "steps.png"
set title "seconds per step, FashionWide (7.4M parameters), bench/netem.sh links, 2 cores shared (log scale)"
set datafile separator ","
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set logscale y
set yrange [0.02:20]
set ylabel "s per step"
set xtics rotate by -30
set key outside right top
set grid ytics
plot "< grep -v '^system,' steps.csv" using 2:xtic(1) title "1 Gbit/s, P = 4", \
     "" using 3 title "1 Gbit/s, P = 2", "" using 4 title "100 Mbit/s, P = 4", \
     "" using 5 title "100 Mbit/s, P = 2"
