#!/bin/bash
# Real systemd (PID 1) + OpenSSH test hosts in namespaces, for orch's `testbed` tests.
# The host filesystem is never written: each host's root is overlay(lower=/, upper=tmpfs).
#
#   net-up                 claim bridge $OTB_BR with $OTB_NET.1/24 (fails if taken: pick another),
#                          and create the lab's SSH key
#   up NAME ADDR           boot host NAME at ADDR (inside $OTB_NET.0/24) on the bridge; several
#                          `up`s may run at once after net-up
#   wait NAME [SECONDS]    until `ssh NAME true` works
#   ssh NAME CMD..         run a command on NAME (OpenSSH client, per-host ssh_config)
#   status | down NAME | down-all   (down-all also removes the bridge and the cgroup parent)
#   reaper PID             background guard: when PID (the test process) is gone, down-all
#
# Environment: OTB_LAB (required: a lab folder of the caller, e.g. pytest's tmp area),
# OTB_BR (bridge, ^otb[0-9]{1,2}$), OTB_NET (e.g. 10.231.0), OTB_STAGE_EXTRA (a folder whose
# tree is copied over every host's root: units, env files), OTB_WANTS (units started at boot),
# OTB_BINDS (space-separated absolute paths bind-mounted READ-ONLY at the same place inside,
# e.g. a venv under /root, which is otherwise hidden under a fresh tmpfs).
# Derived from the project's tested recipe (systemd 252, OpenSSH 9.2, Debian 12).
set -euo pipefail
SELF=$(readlink -f "$0")
LAB=${OTB_LAB:?set OTB_LAB to a lab folder}; ST=$LAB/state; KEY=$LAB/keys/id_ed25519
BR=${OTB_BR:-otb0}; NET=${OTB_NET:-10.231.0}; WANTS=${OTB_WANTS:-}; BINDS=${OTB_BINDS:-}
export TMPDIR=$LAB/tmp   # helper tools (ssh-keygen, sort, mktemp) must not write the host /tmp
MASK="systemd-tmpfiles-setup.service systemd-tmpfiles-setup-dev.service systemd-tmpfiles-clean.timer
 systemd-journald-audit.socket postgresql.service getty@.service console-getty.service ssh.service ssh.socket"
DROP=-sys_module,-sys_time,-sys_rawio,-sys_pacct,-syslog,-wake_alarm,-block_suspend,-audit_control,-audit_read,-mac_admin,-mac_override
die() { echo "testbed: $*" >&2; exit 1; }
dt() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2f", b-a}'; }
[[ $BR =~ ^otb[0-9]{1,2}$ ]] || die "bad OTB_BR '$BR' (otb0..otb99)"
[[ $NET =~ ^[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "bad OTB_NET '$NET' (three octets)"
CG=$(findmnt -no TARGET -t cgroup2 | head -1)/orch-testbed-$BR; [ "$CG" != "/orch-testbed-$BR" ] || die "no cgroup2 mount"
mkdir -p "$TMPDIR"
procs() { cat $(find "$CG/$1" -name cgroup.procs 2>/dev/null) /dev/null; }
init_pid() { local p; for p in $(procs "$1"); do   # ns PID 1, found via its cgroup
  [ "$(awk '/^NSpid:/{print NF,$NF}' /proc/$p/status 2>/dev/null)" = "3 1" ] && echo "$p" && return; done; return 1; }

stage() {  # NAME ADDR -> files copied into the overlay root at boot
  local s=$ST/$1/stage; local u=$s/etc/systemd/system o=$s/etc/orch-testbed
  mkdir -p "$u" "$o"
  [ -z "${OTB_STAGE_EXTRA:-}" ] || cp -a "$OTB_STAGE_EXTRA/." "$s/"
  echo "$1" > "$s/etc/hostname"; tr -d - </proc/sys/kernel/random/uuid > "$s/etc/machine-id"
  ssh-keygen -q -t ed25519 -N '' -C "$1" -f "$o/host_key"; cp "$KEY.pub" "$o/authorized_keys"
  for m in $MASK; do ln -s /dev/null "$u/$m"; done
  # AuthorizedKeysFile is shared by every account, so a user added inside (useradd -p '*')
  # can log in with the lab key too: the tests use that for permission checks.
  printf '%s\n' "Port 22" "ListenAddress 0.0.0.0" "HostKey /etc/orch-testbed/host_key" \
    "AuthorizedKeysFile /etc/orch-testbed/authorized_keys" "UsePAM no" "PermitRootLogin prohibit-password" \
    "PasswordAuthentication no" "MaxStartups 100:30:200" "Subsystem sftp /usr/lib/openssh/sftp-server" > "$o/sshd_config"
  printf '[Unit]\nWants=systemd-journald.service orch-sshd.service %s\n' "$WANTS" > "$u/orch-testbed.target"
  printf '%s\n' [Unit] DefaultDependencies=no After=systemd-journald.socket [Service] Type=notify RuntimeDirectory=sshd \
    KillMode=process "ExecStart=/usr/sbin/sshd -D -f /etc/orch-testbed/sshd_config" > "$u/orch-sshd.service"
  local pub; pub=$(cut -d' ' -f1,2 "$o/host_key.pub")
  echo "$1 $pub" > "$ST/$1/known_hosts_alias"; echo "$2 $pub" > "$ST/$1/known_hosts"
  printf '%s\n' "Host $1" "HostName $2" "User root" "IdentityFile $KEY" "IdentitiesOnly yes" "BatchMode yes" \
    "HostKeyAlias $1" "UserKnownHostsFile $ST/$1/known_hosts_alias" "LogLevel ERROR" > "$ST/$1/ssh_config"
}

net_free() {  # nothing on this machine uses $NET.0/24 yet (addresses or routes)
  ! ip -4 -o addr show | grep -q " $NET\." && [ -z "$(ip -4 route show match "$NET.1" | grep -v '^default')" ]; }

cmd_net-up() {
  ! ip link show "$BR" &>/dev/null || die "bridge $BR exists (another lab?)"
  net_free || die "$NET.0/24 is already in use on this machine (pick another OTB_NET)"
  ip link add "$BR" type bridge || die "cannot create bridge $BR"   # atomic claim
  ip addr add "$NET.1/24" dev "$BR"; ip link set "$BR" up; mkdir -p "$ST" "$LAB/keys"; echo "$BR $NET" > "$ST/.net"
  [ -f "$KEY" ] || ssh-keygen -q -t ed25519 -N '' -C orch-lab -f "$KEY"   # here, so `up`s may run in parallel
}

cmd_up() {
  local n=$1 addr=$2 d=$ST/$1 netns=$ST/$1/netns
  [[ $n =~ ^[a-z][a-z0-9-]{0,8}$ ]] || die "bad name '$n' (<= 9 chars: the veth is $BR-$n)"
  [[ $addr == "$NET".* ]] || die "$addr is not in $NET.0/24"
  [ -f "$ST/.net" ] || die "no network: run net-up first"; [ ! -e "$d" ] || die "$n exists"
  mkdir -p "$d/mnt"
  printf 'addr=%s\n' "$addr" > "$d/meta"
  stage "$n" "$addr"
  touch "$netns"; unshare --net="$netns" true   # netns pinned on a lab file, not /run/netns
  ip link add "$BR-$n" type veth peer name eth0 netns "$netns"; ip link set "$BR-$n" master "$BR" up
  nsenter --net="$netns" sh -c "ip link set lo up && ip addr add $addr/24 dev eth0 && ip link set eth0 up"
  mkdir -p "$CG/$n"; echo "$EPOCHREALTIME" > "$d/t_launch"
  ( exec setsid nsenter --net="$netns" unshare --pid --fork --kill-child --mount --uts --ipc --propagation private \
      -- "$SELF" _inner "$n" ) </dev/null >>"$d/console.log" 2>&1 &
  for _ in $(seq 100); do init_pid "$n" > "$d/init.pid" && break; sleep 0.05; done
  [ -s "$d/init.pid" ] || { tail "$d/console.log"; die "$n did not start"; }; echo "$n: init pid $(<"$d/init.pid")"
}

cmd__inner() {  # runs as PID 1 of the new namespaces
  local n=$1 d=$ST/$1; local m=$d/mnt R=$d/mnt/root p; [ $$ = 1 ] || die "not PID 1"
  if [ "${OTB_CGNS:-}" != 1 ]; then  # own cgroup, then cgroupns
    echo 0 > "$CG/$n/cgroup.procs"; OTB_CGNS=1 exec unshare --cgroup -- "$SELF" _inner "$n"; fi
  set -x
  mount -t tmpfs -o mode=755,size=2g otb "$m"; mkdir "$m/upper" "$m/work" "$R"
  mount -t overlay otb -o lowerdir=/,upperdir="$m/upper",workdir="$m/work" "$R"
  mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
  for p in sys sysrq-trigger; do [ -e "$R/proc/$p" ] || continue; mount --bind "$R/proc/$p" "$R/proc/$p"; mount -o remount,bind,ro "$R/proc/$p"; done
  mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"; mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"
  mount -t tmpfs -o mode=755,nosuid,size=8m dev "$R/dev"; mkdir "$R/dev/pts" "$R/dev/shm"
  for x in "null 1 3" "zero 1 5" "full 1 7" "random 1 8" "urandom 1 9" "tty 5 0"; do set -- $x; mknod -m 666 "$R/dev/$1" c $2 $3; done
  mount -t devpts -o newinstance,ptmxmode=0666,mode=620,gid=5 devpts "$R/dev/pts"; ln -s pts/ptmx "$R/dev/ptmx"
  ln -s /proc/self/fd "$R/dev/fd"; touch "$R/dev/console"; mount --bind "$d/console.log" "$R/dev/console"
  for p in dev/shm:1777 run:755 tmp:1777 var/tmp:1777 var/log/journal:755 root:700 "${LAB#/}:755"; do
    mkdir -p "$R/${p%:*}"; mount -t tmpfs -o "mode=${p##*:},nosuid,nodev" otb "$R/${p%:*}"; done
  for p in $BINDS; do  # read-only views of what the units run (venv, checkout), after the tmpfs
    [ -d "$p" ] || continue; mkdir -p "$R$p"; mount --bind "$p" "$R$p"; mount -o remount,bind,ro "$R$p"; done
  cp -a "$d/stage/." "$R/"; hostname "$n"
  cd "$R"; mkdir .old; pivot_root . .old; cd /; umount -l /.old; rmdir /.old   # host tree gone
  exec setpriv --bounding-set $DROP,-net_admin env -i container=orch-testbed PATH=/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 /usr/lib/systemd/systemd --system --unit=orch-testbed.target --show-status=no --log-target=journal-or-kmsg
}

cmd_wait() { local end=$((SECONDS + ${2:-30}))
  until cmd_ssh "$1" -o ConnectTimeout=1 true 2>/dev/null; do [ $SECONDS -lt $end ] || die "$1: no ssh"; sleep 0.05; done
  echo "$1: sshd ready $(dt "$(<"$ST/$1/t_launch")") s after launch"; }
cmd_ssh() { local n=$1; shift; ssh -F "$ST/$n/ssh_config" "$n" "$@"; }
cmd_status() { local n; for n in $(ls "$ST" 2>/dev/null); do echo "$n pid=$(init_pid "$n" || echo DEAD)"; done; }
cmd_down() { local n=$1 d=$ST/$1 pid; [ -d "$d" ] || return 0
  if pid=$(init_pid "$n"); then kill -9 "$pid"; fi   # kills the whole PID namespace
  for _ in $(seq 100); do [ -z "$(procs "$n")" ] && break; sleep 0.05; done
  for _ in $(seq 50); do [ -d "$CG/$n" ] || break; find "$CG/$n" -depth -type d -exec rmdir {} + 2>/dev/null || sleep 0.1; done
  if [ -e "$d/netns" ]; then umount "$d/netns" 2>/dev/null || true; rm -f "$d/netns"; fi   # veth pair goes too
  ip link del "$BR-$n" 2>/dev/null || true
  ! findmnt -rno TARGET | grep -q -e "^$d/" -e "^$d\$" || die "mounts left under $d"; rm -rf "$d"; echo "$n: down"; }   # not $d2's
cmd_down-all() { local n
  for n in $(ls "$ST" 2>/dev/null); do cmd_down "$n"; done
  ip link del "$BR" 2>/dev/null || true; rmdir "$CG" 2>/dev/null || true; rm -f "$ST/.net"; rmdir "$ST" 2>/dev/null || true; }
cmd_reaper() { local pid=$1   # outlives a SIGKILLed test run and cleans up after it
  while kill -0 "$pid" 2>/dev/null; do sleep 0.5; done; cmd_down-all; }
c=${1:-}; shift || true; declare -F "cmd_$c" >/dev/null || { sed -n 2,12p "$SELF"; exit 2; }; "cmd_$c" "$@"
