# path.sh: the environment every job of a recipe runs in (Kaldi's path.sh). run.sh sources it,
# and so does every job of Kaldi's queue.pl, slurm.pl and run.pl (". ./path.sh" in the recipe
# dir): without it their jobs do not find the nnet-* programs. nnet-queue's tasks inherit the
# submitting shell's environment and need none, but source it too when it is there.
# recipes/<name>/path.sh links here; to edit it for your site, replace the link with a copy.

# The toolkit the recipe belongs to (recipes/<name>/../.., as Kaldi's KALDI_ROOT): its own
# nnet_tools comes first on PYTHONPATH, so every job runs the recipe's code.
nnet_tools_root=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]:-./path.sh}")")/.." && pwd)
if [ -d "$nnet_tools_root/nnet_tools" ]; then
  export PYTHONPATH="$nnet_tools_root${PYTHONPATH:+:$PYTHONPATH}"
fi
# The nnet-* programs: the scripts dir of the python3 that has nnet-tools installed (set
# NNET_TOOLS_PYTHON to use another, e.g. a venv's), ahead of version-manager shims.
export PATH="$("${NNET_TOOLS_PYTHON:-python3}" -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
unset nnet_tools_root
