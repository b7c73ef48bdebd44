#!/usr/bin/env bash
# bash_loop.sh: the hand-written sweep loop of DESIGN.md section 1, as the overhead benchmark's
# second peer. Per trial: set the overlap flag in decode's env file with sed over ssh, restart the
# unit (a new ssh per command, as typed by hand), poll decode /health and the router /readiness
# with curl and sleep, then run the repro through timed_repro.sh.
#
# Settings (environment):
#   TRIALS          trials to run; trial i writes SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=i%2
#   ENV_FILE        decode's env file (on the decode host)
#   RESTART         command that restarts decode on its host, e.g. systemctl restart sglang-dsv4-decode
#   SSH_CONFIG      ssh -F file for DECODE_HOST; empty: decode is this machine (no ssh)
#   DECODE_HOST     host name in SSH_CONFIG
#   DECODE_HEALTH   ROUTER_READY  ROUTER_URL   URLs
#   POLL            seconds to sleep between health polls
#   HEALTH_TIMEOUT  give up after this many seconds of polling (a hand loop would wait forever)
#   PYTHON SESSIONS ROUNDS TIMES OUT   the repro: interpreter, its size, times file, output folder
set -u
here=$(cd "$(dirname "$0")" && pwd)

on_decode() {
  if [ -n "${SSH_CONFIG:-}" ]; then ssh -F "$SSH_CONFIG" "$DECODE_HOST" "$1"; else bash -c "$1"; fi
}

for ((i = 0; i < TRIALS; i++)); do
  v=$((i % 2))
  on_decode "sed -i 's/^SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=.*/SGLANG_OPT_USE_MULTI_STREAM_OVERLAP=$v/' $ENV_FILE" \
    || { echo "trial $i: sed failed" >&2; exit 1; }
  on_decode "$RESTART" || { echo "trial $i: restart failed" >&2; exit 1; }
  deadline=$((SECONDS + ${HEALTH_TIMEOUT%.*}))
  until curl -sf -o /dev/null "$DECODE_HEALTH" && curl -sf -o /dev/null "$ROUTER_READY"; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "trial $i: not healthy after $HEALTH_TIMEOUT s" >&2; exit 1; }
    sleep "$POLL"
  done
  bash "$here/timed_repro.sh" "$TIMES" "$i" "$PYTHON" -m orchestrator.sim.repro --router "$ROUTER_URL" \
    --sessions "$SESSIONS" --rounds "$ROUNDS" --seed "$i" > "$OUT/repro-$i.out" \
    || { echo "trial $i: repro failed" >&2; exit 1; }
done
