#!/usr/bin/env perl
# Kaldi's utils/spk2utt_to_utt2spk.pl: spk2utt on stdin or in the files named, utt2spk on stdout.
#   e.g.  utils/spk2utt_to_utt2spk.pl data/train/spk2utt > data/train/utt2spk
use strict;
use warnings;
while (my $line = <>) {
  my ($spk, @utts) = split(' ', $line);
  next unless defined $spk;
  if (!@utts) { print STDERR "$0: " . ($ARGV eq "-" ? "standard input" : $ARGV) . ":$.: speaker '$spk' has no utterances\n"; exit 1; }
  print "$_ $spk\n" for @utts;
}
