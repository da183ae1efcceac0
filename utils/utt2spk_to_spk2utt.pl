#!/usr/bin/env perl
# Kaldi's utils/utt2spk_to_spk2utt.pl: utt2spk ('utt spk' lines) on stdin or in the files named,
# spk2utt ('spk utt1 utt2 ...') on stdout, speakers in the order of their first utterance.
#   e.g.  utils/utt2spk_to_spk2utt.pl data/train/utt2spk > data/train/spk2utt
use strict;
use warnings;
my (@speakers, %utts);
while (my $line = <>) {
  my @fields = split(' ', $line);
  next unless @fields;
  if (@fields != 2) { print STDERR "$0: " . ($ARGV eq "-" ? "standard input" : $ARGV) . ":$.: expected 'utt spk', got '@fields'\n"; exit 1; }
  my ($utt, $spk) = @fields;
  push @speakers, $spk unless exists $utts{$spk};
  push @{$utts{$spk}}, $utt;
}
print "$_ @{$utts{$_}}\n" for @speakers;
