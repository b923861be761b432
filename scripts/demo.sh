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
port=$((20000 + RANDOM % 20000))

"$bin" backup --listen "127.0.0.1:$port" --journal "$bjdir" "$bvol" 2>"$work/backup.log" &
bpid=$!
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
seq=$("$bin" barrier --journal "$jdir")
echo "== pbfs barrier returned seq $seq: durable on the backup"
"$bin" journal ls --journal "$jdir"
for _ in $(seq 100); do diff -r "$vol" "$bvol" >/dev/null 2>&1 && break; sleep 0.05; done
diff -r "$vol" "$bvol" && echo "== the backup's volume equals the primary's"
cleanup
trap - EXIT
"$bin" journal verify --journal "$bjdir"
echo "(logs and volumes in $work)"
