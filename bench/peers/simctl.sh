#!/usr/bin/env bash
# simctl.sh start|stop|restart ROLE
#
# A stand-in for `systemctl` for the peers of the overhead benchmark on the local simulator
# (--target sim), where there is no systemd: it starts and stops one simulated server the way a
# unit would. Files in $SIMCTL_DIR:
#   ROLE.cmd  the server's argv, one word per line (ExecStart=)
#   ROLE.env  KEY=VALUE lines, read at every start (EnvironmentFile=)
#   ROLE.pid  the running server's PID;  ROLE.log  its output, appended (the journal)
# stop sends SIGTERM to the server's process group and waits until it is gone, as systemd does.
set -euo pipefail
export LC_ALL=C
dir=${SIMCTL_DIR:?set SIMCTL_DIR}
action=${1:?usage: simctl.sh start|stop|restart ROLE}
role=${2:?usage: simctl.sh start|stop|restart ROLE}
pidf=$dir/$role.pid

alive() {  # a zombie (exited, not yet reaped by whoever adopted it) is not alive
  local st
  [ -r "/proc/$1/stat" ] || return 1
  read -r _ _ st _ < "/proc/$1/stat" || return 1
  [ "$st" != Z ]
}

stop() {
  [ -f "$pidf" ] || return 0
  local pid i
  pid=$(cat "$pidf")
  if alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 1000; i++)); do alive "$pid" || break; sleep 0.005; done
    if alive "$pid"; then kill -KILL -- "-$pid" 2>/dev/null || true; fi
  fi
  rm -f "$pidf"
}

start() {
  local argv
  mapfile -t argv < "$dir/$role.cmd"
  # setsid: the server leads its own process group, so stop() reaches its children too
  ( set -a; . "$dir/$role.env"; set +a; exec setsid "${argv[@]}" >> "$dir/$role.log" 2>&1 < /dev/null ) &
  echo "$!" > "$pidf"
}

case $action in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  *) echo "simctl.sh: unknown action $action (start|stop|restart)" >&2; exit 2 ;;
esac
