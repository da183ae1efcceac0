#!/usr/bin/env bash
# Kaldi's utils/best_wer.sh: of the "%WER ..." lines on stdin (grep output), print the lowest.
awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^%WER$/ || $i ~ /:%WER$/) { w = $(i+1); if (best == "" || w + 0 < bw + 0) { best = $0; bw = w } } }
     END { if (best != "") print best }'
