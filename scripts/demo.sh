#!/usr/bin/env bash
# A two-minute tour on embedded defaults: mount pbfs over a scratch volume,
# change it, take a barrier, replay the journal onto a copy of the starting
# state and show that the copy equals the volume.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${PBFS:-bin/pbfs}
work=$(mktemp -d /var/tmp/pbfs-demo.XXXXXX)
vol=$work/volume start=$work/copy jdir=$work/journal
mkdir -p "$vol" "$start"
echo "hello from before the mount" >"$vol/existing"
cp -a "$vol/." "$start/"

"$bin" mount --journal "$jdir" "$vol" 2>"$work/mount.log" &
pid=$!
cleanup() { kill -INT "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq 100); do grep -q " $vol fuse.pbfs " /proc/mounts && break; sleep 0.05; done

echo "== a service changes its volume"
mkdir -p "$vol/db"
for i in $(seq 20); do echo "row $i" >>"$vol/db/table"; done
mv "$vol/existing" "$vol/db/renamed"
ln "$vol/db/table" "$vol/table-link"
echo "== pbfs barrier: everything so far is journaled at seq $("$bin" barrier --journal "$jdir")"
"$bin" journal ls --journal "$jdir"
cleanup
trap - EXIT
echo "== replaying the journal onto a copy of the starting state"
"$bin" journal verify --journal "$jdir"
"$bin" journal replay --journal "$jdir" "$start"
diff -r "$vol" "$start" && echo "== the copy equals the volume"
echo "(work files in $work)"
