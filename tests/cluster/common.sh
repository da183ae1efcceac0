# Shared by the start-*.sh and stop-*.sh scripts here (sourced; they run as root).

alive() {  # alive PIDFILE: the pid in it is a live process
  [[ -s $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null
}

stop_daemon() {  # stop_daemon NAME PIDFILE SECONDS: SIGTERM, wait up to SECONDS, then SIGKILL
  local name=$1 pidfile=$2 seconds=$3 pid i
  if ! alive "$pidfile"; then echo "$name: not running"; rm -f "$pidfile"; return 0; fi
  pid=$(cat "$pidfile")
  kill -TERM "$pid"
  for (( i = 0; i < seconds * 5; i++ )); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"; echo "$name ($pid): killed after ${seconds}s"
  else
    echo "$name ($pid): stopped"
  fi
  rm -f "$pidfile"
}

apt_install() {  # apt_install PACKAGE...: without letting their init scripts start daemons
  local made_policy= status=0
  export DEBIAN_FRONTEND=noninteractive
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then   # Docker images have one already
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
    made_policy=1
  fi
  compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null || apt-get update -q || status=$?
  (( status )) || apt-get install -y -q --no-install-recommends "$@" || status=$?
  [[ -z $made_policy ]] || rm -f /usr/sbin/policy-rc.d
  return $status
}
