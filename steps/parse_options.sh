# Kaldi's utils/parse_options.sh, trimmed: source it after setting defaults.
# "--foo-bar value" (or "--foo-bar=value") sets the existing variable foo_bar; "--config FILE"
# sources FILE first. Unknown options are an error, so typos do not pass silently.
while true; do
  [ -z "${1:-}" ] && break
  case "$1" in
    --help|-h) echo "${help_message:-no help message}" 1>&2; exit 0 ;;
    --) break ;;   # the end of the script's options: what follows is passed on (train_hybrid_dnn.sh)
    --*=*) name=$(echo "${1%%=*}" | sed 's/^--//; s/-/_/g'); value="${1#*=}"; shift ;;
    --*) name=$(echo "$1" | sed 's/^--//; s/-/_/g'); [ $# -ge 2 ] || { echo "$0: option $1 needs a value" 1>&2; exit 1; }
         value="$2"; shift 2 ;;
    *) break ;;
  esac
  if [ "$name" = config ]; then . "$value" || exit 1; continue; fi
  # Only the script's own lower-case settings: not PATH, help_message or a name bash cannot hold.
  if ! [[ "$name" =~ ^[a-z][a-z0-9_]*$ ]] || [ "$name" = help_message ] || ! eval "[ -n \"\${$name+x}\" ]"; then
    echo "$0: invalid option --${name//_/-}" 1>&2; exit 1
  fi
  eval "$name=\"\$value\""
done
unset name value
