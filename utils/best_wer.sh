#!/usr/bin/env bash
# Kaldi's utils/best_wer.sh: of the "%WER ..." lines on stdin (grep output, "file:%WER ..."), print
# the lowest, as Kaldi's does: "%WER 1.23 [ 12 / 975, 3 ins, 4 del, 5 sub ] exp/mono/decode_test/wer_10_0.0"
# (the file last, where scoring reads it: awk '{print $NF}'). Of equal WERs, the first.
awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^%WER$/ || $i ~ /:%WER$/) { w = $(i+1); if (best == "" || w + 0 < bw + 0) { best = $0; bw = w } break } }
     END { if (best == "") exit
           n = index(best, "%WER"); file = substr(best, 1, n - 1); sub(/:$/, "", file); sub(/[ \t]+$/, "", file)
           line = substr(best, n); gsub(/[ \t]+/, " ", line); sub(/ $/, "", line)
           print line (file == "" ? "" : " " file) }'
