# Sourced by the benches that print a median: the median of the numbers on standard input, one
# a line (the mean of the middle two when there is an even count).
median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
