#!/usr/bin/env bash
# timed_repro.sh TIMES_FILE TAG COMMAND...
#
# Runs the repro COMMAND and appends "TAG START END EXIT" (epoch seconds on this machine's clock)
# to TIMES_FILE. Every tool in the overhead benchmark (orch, Ansible, the bash loop) runs its repro
# through this same wrapper, so the repro time is measured the same way for all three, and the
# end of one repro is the boundary between one trial and the next. $EPOCHREALTIME is a bash
# builtin: no process is forked to read the clock.
set -u
export LC_ALL=C   # a '.' as the decimal point of $EPOCHREALTIME
times=$1 tag=$2
shift 2
start=$EPOCHREALTIME
"$@"
rc=$?
end=$EPOCHREALTIME
printf '%s %s %s %s\n' "$tag" "$start" "$end" "$rc" >> "$times"
exit "$rc"
