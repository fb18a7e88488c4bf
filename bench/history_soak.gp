# The history soak's samples (bench/soak.sh HISTORY=1) as one PNG of four panels, against
# minutes: jobs served and offered a second; claim and enqueue→start p99; the completed
# jobs' records kept; table and index sizes. Columns, as soak.sh writes them: minute,
# served/s, offered/s, claim p99 ms, wait p99 ms, records, jobs MiB, processed_jobs table
# MiB, its indexes MiB, jobs dead tuples, processed_jobs dead tuples, RSS MiB.
#   gnuplot -e "data='samples.dat'; out='history-soak.png'" bench/history_soak.gp
set terminal pngcairo size 1200,900 font ",10"
set output out
set multiplot layout 2,2 title "oncely: completed-job records at a steady offered rate"
set xlabel "minute"
set grid
set key top left

set title "throughput"
set ylabel "jobs/s"
set yrange [0:*]
plot data using 1:3 with lines lw 2 title "offered", data using 1:2 with linespoints pt 7 ps 0.5 title "served"

set title "latency (p99 over each minute)"
set ylabel "ms"
plot data using 1:4 with linespoints pt 7 ps 0.5 title "claim", data using 1:5 with linespoints pt 7 ps 0.5 title "enqueue -> start"

set title "completed-job records kept"
set ylabel "rows"
plot data using 1:6 with linespoints pt 7 ps 0.5 title "processed_jobs rows", data using 1:11 with lines title "its dead tuples"

set title "sizes"
set ylabel "MiB"
plot data using 1:8 with linespoints pt 7 ps 0.5 title "processed_jobs table", \
     data using 1:9 with linespoints pt 7 ps 0.5 title "its indexes", \
     data using 1:7 with linespoints pt 7 ps 0.5 title "jobs (with indexes)", \
     data using 1:12 with lines title "process RSS"
unset multiplot
