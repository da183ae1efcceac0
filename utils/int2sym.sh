#!/usr/bin/env bash
# Kaldi's utils/int2sym.pl -f 2-: "utt 3 5 7" -> "utt three five seven" with a symbol table.
[ $# -eq 1 ] || { echo "Usage: utils/int2sym.sh <words.txt>  < in > out" 1>&2; exit 1; }
awk 'NR == FNR { sym[$2] = $1; next }
     { out = $1; for (i = 2; i <= NF; i++) { if (!($i in sym)) { print "int2sym: " FILENAME ": no symbol for " $i > "/dev/stderr"; exit 1 } out = out " " sym[$i] } print out }' $1 -
