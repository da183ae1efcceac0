#!/usr/bin/env bash
# Run COMMAND with its standard output going to FILE, all or nothing: into a temp file beside
# FILE, renamed over it only if COMMAND succeeded, so that a step stopped or failed midway
# (Ctrl-C, a full disk) never leaves FILE half-written under its name, as nnet-* programs never
# do. The temp file is named as theirs (.tmp.<host>.<pid>.*), so that after a kill -9 the next
# nnet-* program writing into that dir removes it.
#   e.g.  utils/atomic_write.sh exp/mono_ali/final.mdl cat exp/mono/final.mdl
set -uo pipefail
[ $# -ge 2 ] || { echo "Usage: utils/atomic_write.sh <file> <command> [<arg>...]" 1>&2; exit 1; }
file=$1; shift
host=$(printf %s "${HOSTNAME%%.*}" | tr -c 'A-Za-z0-9_-' _)
tmp=$(mktemp "$(dirname "$file")/.tmp.${host:-host}.$$.XXXXXXXX.$(basename "$file")") || exit 1
trap 'rm -f "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# The command's stderr is held until it ends: on a full disk, what cat, sort and the like say
# (no file, or the file read) gives way to one line naming FILE.
said=$("$@" 2>&1 > "$tmp")
rc=$?
if [ $rc -ne 0 ]; then
  avail=$(df -Pk "$(dirname "$file")" 2>/dev/null | awk 'NR == 2 { print $4 }')
  if [ -n "$avail" ] && [ "$avail" -lt 64 ]; then echo "No space left on device: $file" 1>&2; exit $rc; fi
fi
[ -z "$said" ] || printf '%s\n' "$said" 1>&2
[ $rc -eq 0 ] || exit $rc
# A replaced file keeps its mode (a private model stays private); a new one gets the umask's.
if [ -e "$file" ]; then chmod --reference="$file" "$tmp"; else chmod "$(printf %o $((0666 & ~0$(umask))))" "$tmp"; fi &&
  mv -f "$tmp" "$file"
