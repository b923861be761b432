#!/usr/bin/env bash
# A two-minute tour on embedded defaults: a primary and a backup on this
# machine replicate a scratch volume. A "service" changes the volume through
# the pbfs mount, a barrier returns once the change is durable on the
# backup, and the backup's copy of the volume ends equal to the primary's.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PBFS:-bin/pbfs}
# PBFS_DEMO_DIR: where the scratch directory goes (kept afterwards, for its logs).
work=$(mktemp -d "${PBFS_DEMO_DIR:-/var/tmp}/pbfs-demo.XXXXXX")
vol=$work/primary/volume jdir=$work/primary/journal
bvol=$work/backup/volume bjdir=$work/backup/journal
mkdir -p "$vol" "$bvol"
echo "hello from before the mount" >"$vol/existing"
# The backup starts empty: the primary resyncs it from the live volume.
export PBFS_TOKEN=demo-$RANDOM$RANDOM

# The backup listens on a port below the kernel's ephemeral range (which
# other programs' connections and listeners take from), another one if
# that port is taken all the same.
low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
[ "$low" -gt 11000 ] || low=32768
for try in 1 2 3 4 5; do
	port=$((10000 + RANDOM % (low - 10000)))
	"$bin" backup --listen "127.0.0.1:$port" --journal "$bjdir" "$bvol" 2>"$work/backup.log" &
	bpid=$!
	for _ in $(seq 200); do
		kill -0 "$bpid" 2>/dev/null || break
		grep -q "backup serving" "$work/backup.log" && break
		sleep 0.05
	done
	kill -0 "$bpid" 2>/dev/null && break
	echo "(the backup could not start on port $port: $(tail -n 1 "$work/backup.log"))"
	[ "$try" -lt 5 ] || exit 1
done
"$bin" mount --journal "$jdir" --backup "127.0.0.1:$port" --ack all "$vol" 2>"$work/primary.log" &
pid=$!
cleanup() {
	kill -INT "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
	kill -INT "$bpid" 2>/dev/null && wait "$bpid" 2>/dev/null || true
}
trap cleanup EXIT
for _ in $(seq 100); do grep -q " $vol fuse.pbfs " /proc/mounts && break; sleep 0.05; done

echo "== a service changes its volume through the pbfs mount"
mkdir -p "$vol/db"
for i in $(seq 20); do echo "row $i" >>"$vol/db/table"; done
mv "$vol/existing" "$vol/db/renamed"
ln "$vol/db/table" "$vol/table-link"
seq=$("$bin" barrier --journal "$jdir") || {
	echo "the barrier failed; the end of the logs:"
	tail -n 15 "$work/backup.log" "$work/primary.log"
	exit 1
}
echo "== pbfs barrier returned seq $seq: durable on the backup"
"$bin" journal ls --journal "$jdir"
for _ in $(seq 100); do diff -r "$vol" "$bvol" >/dev/null 2>&1 && break; sleep 0.05; done
diff -r "$vol" "$bvol" && echo "== the backup's volume equals the primary's"
cleanup
trap - EXIT
"$bin" journal verify --journal "$bjdir"
echo "(logs and volumes in $work)"
