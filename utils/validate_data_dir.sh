#!/usr/bin/env bash
# Kaldi's utils/validate_data_dir.sh: check a data dir before a stage reads it (sorted files,
# utt2spk / spk2utt, the keys of text, wav.scp, segments, feats.scp, cmvn.scp); with --lang DIR,
# also the text's words against DIR/words.txt. The checks are nnet_tools/speech/corpus/datadir.py.
#   e.g.  utils/validate_data_dir.sh --no-feats data/train
exec "${NNET_TOOLS_PYTHON:-python3}" -m nnet_tools.cli.validate_data_dir "$@"
