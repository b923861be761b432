#!/usr/bin/env bash
# benchmarks/fs/run.sh: filesystem microbenchmarks, side by side.
#
# Runs the same jobs on a plain directory, on pbfs (capture on, capture on
# with --no-xattrs, capture off) and on bindfs (a C passthrough, when
# installed), each in its own directory under one work dir, and prints a
# markdown table with each result's ratio to the plain directory. The table
# is also written to benchmarks/results/fs-<date>.md (made by
# benchmarks/fs/report.py).
#
# Configurations (BENCH_CONFIGS):
#   plain           a plain directory, the baseline of every ratio
#   pbfs            pbfs mount, capture on, journal in the configuration's
#                   directory beside the volume (on the file system under test)
#   pbfs-noxattrs   the same with --no-xattrs
#   pbfs-nocapture  the same with --no-capture: pbfs as a plain passthrough
#   pbfs-jsep       the same as pbfs, but its journal is $WORK/pbfs-jsep-journal
#                   on the work dir's own file system; with BENCH_FS=ext4 the
#                   journal's writes and fsyncs then go to another file system
#                   than the volume's (not in the default list)
#   bindfs          bindfs -f, skipped when bindfs is not installed
#
# Jobs (each one runs for every configuration before the next job starts,
# so the configurations of one job see the same machine load; with
# BENCH_ROUNDS=R it runs R rounds of every configuration first):
#   seqwrite    fio: 1 MiB sequential writes, end_fsync=1            MiB/s
#   randwrite   fio: 4 KiB random writes, fdatasync after each write  IOPS
#   randread    fio: 4 KiB random reads, buffered, invalidate=1       IOPS
#   smallfiles  python3: create+write 4 KiB+close N files, unlink N   files/s
#   sqlite      sqlite3 CLI: WAL, N single-row INSERT transactions    tx/s
#
# Environment (all optional):
#   BENCH_SECONDS=10        runtime of the time-based fio jobs (randwrite, randread)
#   BENCH_SEQ_MB=256        size of the sequential write
#   BENCH_RW_MB=64          file size for the random writes
#   BENCH_READ_MB=64        file size for the random reads
#   BENCH_FILES=20000       files in the small-file job
#   BENCH_SMALL_SECONDS     stop the small-file job's create phase after this
#                           long (default 3 x BENCH_SECONDS); the rate is over
#                           the files actually done
#   BENCH_SQLITE_TX=2000    INSERT transactions in the SQLite job
#   BENCH_SQLITE_SYNC=FULL  PRAGMA synchronous (FULL fsyncs the WAL at each commit)
#   BENCH_SETTLE=1          seconds to rest after each job, once its writes are synced
#   BENCH_ROUNDS=1          rounds per job. Round r (from 0) runs the configurations in
#                           BENCH_CONFIGS's order rotated left by r, so each one runs
#                           first, second, ... in turn. The rotation removes order
#                           effects, where a configuration always inherits the leftovers
#                           of the ones before it (on the host ext4, which has no
#                           journal, small-file creates are slower right after another
#                           configuration freed many inodes). With R > 1
#                           the report gives medians over the rounds and ratios paired
#                           within a round (to plain; pbfs to bindfs, with how many
#                           rounds pbfs won). Use a multiple of the number of
#                           configurations to share the positions evenly. The run
#                           takes R times as long
#   BENCH_CONFIGS="plain pbfs pbfs-noxattrs pbfs-nocapture bindfs"
#                           any of those, plus pbfs-jsep (above), in the order given
#   BENCH_JOBS="seqwrite randwrite randread smallfiles sqlite"
#   BENCH_FS=host           where the configurations' directories live: "host" is the
#                           work dir's own file system; "ext4" gives every configuration
#                           a fresh ext4 of its own (with its journal, mkfs defaults) in
#                           an image file inside the work dir, on a direct-I/O loop
#                           device (needs root); "ext4-nojournal" the same without a
#                           journal (-O ^has_journal), as the host's own ext4 here is.
#                           Images of their own make small files comparable: without a
#                           journal ext4 skips inodes freed in the last 60-360 s, so on
#                           one shared file system every configuration's creates paid
#                           for the files the one before it deleted (docs/PERFORMANCE.md)
#   BENCH_FS_SIZE           size of each image (sparse; default 8G per round, since
#                           without backups the pbfs journals keep every write)
#   BENCH_WORKDIR=/var/tmp  where the run's own pbfs-bench.XXXXXX dir is made (never inside the repository)
#   BENCH_KEEP=0            1 keeps that dir (fio JSON, mount logs, journals); it is
#                           also kept when the run fails
#   BENCH_RESULTS_DIR       where fs-<date>.md goes (default benchmarks/results)
#   BENCH_NO_RESULTS=0      1 prints the table without writing a results file
#   BENCH_PERF_DIR          when set, run `perf record -a` around every job on every
#                           mounted configuration into DIR/<config>-<job>.data
#                           (<config>-<job>-r<round>.data with BENCH_ROUNDS > 1); read
#                           them with benchmarks/fs/perf-summary.py (see
#                           benchmarks/README.md, "Profiling"). The recording spans
#                           the whole job, including the file layout before a fio run.
#   BENCH_PERF_EVENTS       perf record's event flags (default: CPU profile,
#                           "-g -e cpu-clock -F 999"; for FUSE round trips use
#                           "-e fuse:fuse_request_send -e fuse:fuse_request_end")
#   PBFS_BIN                pbfs binary (default bin/pbfs, built if missing)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PBFS=${PBFS_BIN:-$ROOT/bin/pbfs}
BENCH_SECONDS=${BENCH_SECONDS:-10}
SEQ_MB=${BENCH_SEQ_MB:-256}
RW_MB=${BENCH_RW_MB:-64}
READ_MB=${BENCH_READ_MB:-64}
FILES=${BENCH_FILES:-20000}
SMALL_SECONDS=${BENCH_SMALL_SECONDS:-$((3 * BENCH_SECONDS))}
SQL_TX=${BENCH_SQLITE_TX:-2000}
SQL_SYNC=${BENCH_SQLITE_SYNC:-FULL}
CONFIGS=${BENCH_CONFIGS:-plain pbfs pbfs-noxattrs pbfs-nocapture bindfs}
JOBS=${BENCH_JOBS:-seqwrite randwrite randread smallfiles sqlite}
RESULTS_DIR=${BENCH_RESULTS_DIR:-$ROOT/benchmarks/results}
PERF_DIR=${BENCH_PERF_DIR:-}
PERF_EVENTS=${BENCH_PERF_EVENTS:--g -e cpu-clock -F 999}
KEEP=${BENCH_KEEP:-0}
SETTLE=${BENCH_SETTLE:-1}
ROUNDS=${BENCH_ROUNDS:-1}
FS=${BENCH_FS:-host}
REPORT_PY=$ROOT/benchmarks/fs/report.py

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

case $ROUNDS in
'' | *[!0-9]* | 0*) die "BENCH_ROUNDS is a positive whole number, not '$ROUNDS'" ;;
esac
# Without backups nothing trims a journal, so every round adds its writes to
# the pbfs journals on the image.
FS_SIZE=${BENCH_FS_SIZE:-$((8 * ROUNDS))G}

[ -f "$REPORT_PY" ] || die "$REPORT_PY is missing"
for tool in fio python3 sqlite3; do
	command -v "$tool" >/dev/null || die "$tool is not installed (apt-get install -y fio sqlite3 python3)"
done
FUSERMOUNT=$(command -v fusermount3 || command -v fusermount || true)
[ -z "${BENCH_PERF_DIR:-}" ] || command -v perf >/dev/null || die "BENCH_PERF_DIR needs perf (apt-get install -y linux-perf)"
[ -n "$FUSERMOUNT" ] || die "fusermount3 is not installed (apt-get install -y fuse3)"

# --- work dir -----------------------------------------------------------------
# A fresh directory of our own, so the cleanup's rm -rf never reaches
# anything else.
PARENT=$(realpath -m "${BENCH_WORKDIR:-/var/tmp}")
case "$PARENT/" in
"$ROOT"/*) die "work dir $PARENT is inside the repository; pick another BENCH_WORKDIR" ;;
esac
mkdir -p "$PARENT"
WORK=$(mktemp -d "$PARENT/pbfs-bench.XXXXXX")
# Every configuration's directories live in dir_of CFG: under the work dir
# itself, or on the configuration's own fresh file system mounted in it.
LOOPDEVS=()
IMAGES=()
dir_of() {
	case $FS in
	host) echo "$WORK/$1" ;;
	*) echo "$WORK/img/$1" ;;
	esac
}
FS_DESC="host: $(findmnt -n -o SOURCE,FSTYPE,OPTIONS -T "$WORK" 2>/dev/null || echo unknown)"

# --- mounts and cleanup -------------------------------------------------------
declare -A MP=() PID=()
MOUNTED=()

is_mounted() { awk -v m="$1" '$2 == m { f = 1 } END { exit !f }' /proc/mounts; }

# unmount_one CFG: ask nicely (SIGINT for pbfs, fusermount -u for bindfs),
# then lazily unmount and kill whatever is left.
unmount_one() {
	local cfg=$1 mp=${MP[$1]} pid=${PID[$1]:-} i
	[ -n "$pid" ] || return 0
	case $cfg in
	pbfs*) kill -INT "$pid" 2>/dev/null || true ;;
	*) "$FUSERMOUNT" -u "$mp" 2>/dev/null || true ;;
	esac
	for i in $(seq 1 100); do
		if ! kill -0 "$pid" 2>/dev/null && ! is_mounted "$mp"; then break; fi
		sleep 0.1
	done
	if is_mounted "$mp"; then
		log "$cfg: still mounted after 10 s; lazy unmount"
		"$FUSERMOUNT" -u -z "$mp" 2>/dev/null || umount -l "$mp" 2>/dev/null || true
	fi
	if kill -0 "$pid" 2>/dev/null; then
		log "$cfg: pid $pid still running; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	fi
	local rc=0
	wait "$pid" 2>/dev/null || rc=$?
	[ "$rc" -eq 0 ] || log "$cfg: mount process exited with status $rc (see $(dir_of "$cfg")/mount.log)"
	echo "$rc" >"$WORK/$cfg.mount.rc"
	cp "$(dir_of "$cfg")/mount.log" "$WORK/$cfg.mount.log" 2>/dev/null || true
	PID[$cfg]=
}

PERF_PID=
cleanup() {
	local status=$?
	set +e
	trap - EXIT
	if [ -n "$PERF_PID" ]; then kill -INT "$PERF_PID" 2>/dev/null; wait "$PERF_PID" 2>/dev/null; fi
	local cfg
	for cfg in "${MOUNTED[@]}"; do unmount_one "$cfg"; done
	local img dev
	for img in "${IMAGES[@]}"; do umount "$img" 2>/dev/null || umount -l "$img"; done
	for dev in "${LOOPDEVS[@]}"; do losetup -d "$dev" 2>/dev/null; done
	# Belt and braces: nothing under the work dir may stay mounted.
	local left
	left=$(awk -v w="$WORK/" 'index($2, w) == 1 { print $2 }' /proc/mounts)
	if [ -n "$left" ]; then
		log "lazily unmounting leftovers: $left"
		for mp in $left; do "$FUSERMOUNT" -u -z "$mp" 2>/dev/null || umount -l "$mp"; done
	fi
	if [ "$KEEP" = 1 ] || [ "$status" != 0 ] || [ -n "$(awk -v w="$WORK/" 'index($2, w) == 1' /proc/mounts)" ]; then
		log "work dir kept: $WORK"
	else
		rm -rf "$WORK"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_mounted() { # CFG
	local cfg=$1 i
	for i in $(seq 1 100); do
		is_mounted "${MP[$cfg]}" && return 0
		if ! kill -0 "${PID[$cfg]}" 2>/dev/null; then
			log "$cfg: mount process exited before mounting:"
			cat "$(dir_of "$cfg")/mount.log" >&2
			return 1
		fi
		sleep 0.1
	done
	log "$cfg: not mounted after 10 s"
	return 1
}

# journal_of CFG: a pbfs configuration's journal directory. pbfs-jsep's is
# on the work dir's own file system, outside its image, so that with
# BENCH_FS=ext4 the journal's appends and fsyncs do not share the volume's
# file system (and its ext4 journal); the others keep theirs beside the volume.
journal_of() {
	case $1 in
	pbfs-jsep) echo "$WORK/$1-journal" ;;
	*) echo "$(dir_of "$1")/journal" ;;
	esac
}

mount_cfg() { # CFG
	local cfg=$1 d
	d=$(dir_of "$1")
	mkdir -p "$d/vol"
	MP[$cfg]=$d/vol
	case $cfg in
	plain) return 0 ;;
	pbfs | pbfs-noxattrs | pbfs-nocapture | pbfs-jsep)
		local extra=()
		[ "$cfg" = pbfs-noxattrs ] && extra=(--no-xattrs)
		[ "$cfg" = pbfs-nocapture ] && extra=(--no-capture)
		"$PBFS" mount --journal "$(journal_of "$cfg")" "${extra[@]}" "$d/vol" >"$d/mount.log" 2>&1 &
		;;
	bindfs)
		mkdir -p "$d/src"
		bindfs -f "$d/src" "$d/vol" >"$d/mount.log" 2>&1 &
		;;
	*) die "unknown configuration $cfg" ;;
	esac
	PID[$cfg]=$!
	MOUNTED+=("$cfg")
	wait_mounted "$cfg"
}

# --- jobs ---------------------------------------------------------------------
# Each job function takes CFG DIR OUTPREFIX and prints "VALUE" on success.

fio_run() { # OUT.json fio-args...
	local out=$1
	shift
	fio --output-format=json --output="$out" --ioengine=psync --numjobs=1 "$@" >/dev/null
}

json_get() { # FILE PYTHON-EXPR over j (first job)
	python3 - "$1" "$2" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
j = json.loads(text[text.index('{'):])["jobs"][0]
print(eval(sys.argv[2], {"j": j}))
EOF
}

layout() { # FILE MB
	fio --output-format=json --output=/dev/null --ioengine=psync --name=layout --filename="$1" \
		--rw=write --bs=1M --size="$2M" --end_fsync=1 >/dev/null
}

job_seqwrite() {
	local dir=$2 out=$3
	rm -f "$dir/seq.dat"
	fio_run "$out.json" --name=seqwrite --filename="$dir/seq.dat" --rw=write --bs=1M --size="${SEQ_MB}M" --end_fsync=1 || return
	rm -f "$dir/seq.dat"
	# bw over the job's runtime, which includes the final fsync.
	json_get "$out.json" 'round(j["write"]["io_bytes"] / 2**20 / (j["job_runtime"] / 1000), 1)'
}

job_randwrite() {
	local dir=$2 out=$3
	layout "$dir/rw.dat" "$RW_MB" || return
	fio_run "$out.json" --name=randwrite --filename="$dir/rw.dat" --rw=randwrite --bs=4k --size="${RW_MB}M" \
		--fdatasync=1 --time_based --runtime="$BENCH_SECONDS" --randrepeat=1 || return
	rm -f "$dir/rw.dat"
	json_get "$out.json" 'round(j["write"]["iops"], 1)'
}

job_randread() {
	local dir=$2 out=$3
	layout "$dir/rd.dat" "$READ_MB" || return
	fio_run "$out.json" --name=randread --filename="$dir/rd.dat" --rw=randread --bs=4k --size="${READ_MB}M" \
		--direct=0 --invalidate=1 --time_based --runtime="$BENCH_SECONDS" --randrepeat=1 || return
	rm -f "$dir/rd.dat"
	json_get "$out.json" 'round(j["read"]["iops"], 1)'
}

job_smallfiles() {
	local dir=$2 out=$3
	python3 - "$dir/small" "$FILES" "$SMALL_SECONDS" >"$out.json" <<'EOF' || return 1
import json, os, sys, time
d, n, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
os.mkdir(d)
buf = b"x" * 4096
names = [f"{d}/f{i:06d}" for i in range(n)]
done = 0
t0 = time.perf_counter()
for p in names:
    fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    os.write(fd, buf)
    os.close(fd)
    done += 1
    if done % 256 == 0 and time.perf_counter() - t0 > limit:
        break
t1 = time.perf_counter()
for p in names[:done]:
    os.unlink(p)
t2 = time.perf_counter()
os.rmdir(d)
print(json.dumps({"files": done, "create_s": t1 - t0, "unlink_s": t2 - t1,
                  "files_per_s": done / (t2 - t0), "creates_per_s": done / (t1 - t0),
                  "unlinks_per_s": done / (t2 - t1)}))
EOF
	python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["files_per_s"], 1))' "$out.json"
}

job_sqlite() {
	local dir=$2 out=$3 db=$2/bench.db
	rm -f "$db" "$db-wal" "$db-shm"
	local mode
	mode=$(sqlite3 "$db" 'PRAGMA journal_mode=WAL; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT NOT NULL);') || return
	[ "$mode" = wal ] || { log "sqlite: journal_mode is '$mode', not wal"; return 1; }
	local start end
	start=$(date +%s%N)
	sqlite3 "$db" <"$SQL_FILE" >/dev/null || return
	end=$(date +%s%N)
	local rows
	rows=$(sqlite3 "$db" 'SELECT count(*) FROM t;') || return
	[ "$rows" = "$SQL_TX" ] || { log "sqlite: $rows rows, want $SQL_TX"; return 1; }
	rm -f "$db" "$db-wal" "$db-shm"
	printf '{"tx": %d, "seconds": %s}\n' "$SQL_TX" "$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.6f", (e - s) / 1e9 }')" >"$out.json"
	awk -v n="$SQL_TX" -v s="$start" -v e="$end" 'BEGIN { printf "%.1f\n", n / ((e - s) / 1e9) }'
}

# --- perf ---------------------------------------------------------------------
perf_start() { # CFG NAME (run_name's)
	[ -n "$PERF_DIR" ] || return 0
	[ "$1" != plain ] || return 0
	mkdir -p "$PERF_DIR"
	# shellcheck disable=SC2086 # PERF_EVENTS is a list of flags
	perf record -q -a $PERF_EVENTS -o "$PERF_DIR/$2.data" >"$PERF_DIR/$2.log" 2>&1 &
	PERF_PID=$!
	echo "${PID[$1]}" >"$PERF_DIR/$2.pid"
	sleep 1
}
perf_stop() {
	[ -n "$PERF_PID" ] || return 0
	kill -INT "$PERF_PID" 2>/dev/null || true
	wait "$PERF_PID" 2>/dev/null || true
	PERF_PID=
}

# --- one run ------------------------------------------------------------------
# run_name CFG JOB ROUND: the name of a run's files in $WORK/out (and
# BENCH_PERF_DIR). report.py finds the JSON by the same rule.
run_name() {
	if [ "$ROUNDS" = 1 ]; then echo "$1-$2"; else echo "$1-$2-r$3"; fi
}

# barrier_after CFG NAME WHAT: on pbfs, wait for what capture still owes the
# journal and print how long that took (ms). The journal appends
# asynchronously, so without it that backlog would neither be accounted for
# nor stay out of the next configuration's run.
barrier_after() {
	local cfg=$1 name=$2 what=$3 b0
	case $cfg in pbfs*) ;; *) return 0 ;; esac
	b0=$(date +%s%N)
	if "$PBFS" barrier --journal "$(journal_of "$cfg")" >/dev/null 2>"$WORK/out/$name.barrier.err"; then
		echo $((($(date +%s%N) - b0) / 1000000))
	else
		{
			echo "$what: barrier after the job failed:"
			sed 's/^/    /' "$WORK/out/$name.barrier.err"
		} >>"$ERRORS"
	fi
}

# run_one JOB CFG ROUND: one configuration's run of one job, its barrier,
# and the sync and rest that keep its writeback out of the next run.
run_one() {
	local job=$1 cfg=$2 round=$3 name rtag='' what val t0 t1 drain
	name=$(run_name "$cfg" "$job" "$round")
	[ "$ROUNDS" = 1 ] || rtag=" (round $round)"
	what="$cfg / $job$rtag"
	mkdir -p "$WORK/out"
	perf_start "$cfg" "$name"
	t0=$(date +%s%N)
	if ! val=$("job_$job" "$cfg" "${MP[$cfg]}" "$WORK/out/$name" 2>"$WORK/out/$name.err"); then
		val=ERR
		{
			echo "$what failed:"
			sed 's/^/    /' "$WORK/out/$name.err"
		} >>"$ERRORS"
	fi
	t1=$(date +%s%N)
	drain=$(barrier_after "$cfg" "$name" "$what")
	[ -z "$drain" ] || printf '%s\t%s\t%s\t%s\n' "$cfg" "$job" "$round" "$drain" >>"$WORK/barrier.tsv"
	perf_stop
	printf '%s\t%s\t%s\t%s\n' "$cfg" "$job" "$round" "$val" >>"$RESULTS"
	log "$(printf '%-11s %-15s %12s   (%.1f s%s)%s' "$job" "$cfg" "$val" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) / 1e9 }')" \
		"${drain:+, barrier after it ${drain} ms}" "$rtag")"
	if [ "${PID[$cfg]:-}" ] && ! is_mounted "${MP[$cfg]}"; then
		echo "$cfg: the mount went away during $job$rtag" >>"$ERRORS"
	fi
	# Write back this job's dirty pages (and the journal's) before the
	# next configuration runs, so no run pays for another's writeback.
	sync
	sleep "$SETTLE"
}

# --- main ---------------------------------------------------------------------
if [ ! -x "$PBFS" ]; then
	log "building $PBFS"
	# -buildvcs=auto stamps the commit into the binary (read back below)
	# even where GOFLAGS turns stamping off.
	(cd "$ROOT" && go build -buildvcs=auto -o "$PBFS" ./cmd/pbfs)
fi

for job in $JOBS; do
	declare -F "job_$job" >/dev/null || die "unknown job $job (have: seqwrite randwrite randread smallfiles sqlite)"
done
cfgs=()
for cfg in $CONFIGS; do
	if [ "$cfg" = bindfs ] && ! command -v bindfs >/dev/null; then
		log "bindfs is not installed; skipping it (apt-get install -y bindfs)"
		continue
	fi
	cfgs+=("$cfg")
done
[ "${#cfgs[@]}" -gt 0 ] || die "no configuration to run"

SQL_FILE=$WORK/inserts.sql
{
	echo "PRAGMA synchronous=$SQL_SYNC;"
	for ((i = 0; i < SQL_TX; i++)); do
		echo "INSERT INTO t(v) VALUES('row $i: the quick brown fox jumps over the lazy dog');"
	done
} >"$SQL_FILE"

# Which source the binary was built from (go embeds it), read before any
# mount starts; the checkout may move on while the benchmark runs.
PBFS_IDENT=$(go version -m "$PBFS" 2>/dev/null | awk '
	$1 == "build" && split($2, kv, "=") == 2 {
		if (kv[1] == "vcs.revision") rev = substr(kv[2], 1, 12)
		if (kv[1] == "vcs.modified" && kv[2] == "true") mod = " with uncommitted changes"
		if (kv[1] == "vcs.time") t = kv[2]
	}
	END { if (rev) print "built from " rev mod " (commit time " t ")" }' || true)
if [ -z "$PBFS_IDENT" ]; then # built with -buildvcs=false: say what the checkout was
	PBFS_IDENT="checkout at start: $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	if (cd "$ROOT" && git status --porcelain --untracked-files=no 2>/dev/null | grep -q .); then
		PBFS_IDENT+=" with uncommitted changes"
	fi
fi
# The report names the binary relative to the checkout, or by its base
# name: it carries no paths of the machine it ran on.
case $PBFS in
"$ROOT"/*) PBFS_SHOWN=${PBFS#"$ROOT"/} ;;
/*) PBFS_SHOWN=$(basename "$PBFS") ;;
*) PBFS_SHOWN=$PBFS ;;
esac
PBFS_IDENT="$PBFS_SHOWN (sha256 $(sha256sum "$PBFS" | cut -c1-12), built $(date -u -r "$PBFS" '+%Y-%m-%d %H:%M:%S UTC')), $PBFS_IDENT"

# make_image CFG: a fresh file system of the configuration's own, mounted
# where dir_of CFG points.
make_image() {
	local img=$WORK/$1.img mnt dev
	mnt=$(dir_of "$1")
	truncate -s "$FS_SIZE" "$img"
	case $FS in
	ext4) mkfs.ext4 -q -F "$img" ;;
	ext4-nojournal) mkfs.ext4 -q -F -O ^has_journal "$img" ;;
	esac
	dev=$(losetup -f --show --direct-io=on "$img")
	LOOPDEVS+=("$dev")
	mkdir -p "$mnt"
	mount "$dev" "$mnt"
	IMAGES+=("$mnt")
}

case $FS in
host) ;;
ext4 | ext4-nojournal)
	[ "$(id -u)" = 0 ] || die "BENCH_FS=$FS needs root (losetup, mount)"
	for cfg in "${cfgs[@]}"; do make_image "$cfg"; done
	journal=with
	[ "$FS" = ext4-nojournal ] && journal=without
	FS_DESC="a fresh ext4 image per configuration ($FS_SIZE each, $journal a journal, $(findmnt -n -o OPTIONS -T "${IMAGES[0]}")), each on a loop device (direct I/O) of its own, in $(findmnt -n -o FSTYPE -T "$WORK") on $(findmnt -n -o SOURCE -T "$WORK")"
	;;
*) die "BENCH_FS is host, ext4 or ext4-nojournal, not $FS" ;;
esac

START=$(date +%s)
LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
log "work dir $WORK; configurations: ${cfgs[*]}; jobs: $JOBS; rounds: $ROUNDS"
for cfg in "${cfgs[@]}"; do
	mount_cfg "$cfg"
done

RESULTS=$WORK/results.tsv
ERRORS=$WORK/errors.txt
: >"$RESULTS"
: >"$ERRORS"
: >"$WORK/barrier.tsv"
sync
for job in $JOBS; do
	for ((round = 0; round < ROUNDS; round++)); do
		# Rotate the order by one each round (see BENCH_ROUNDS above).
		k=$((round % ${#cfgs[@]}))
		for cfg in "${cfgs[@]:k}" "${cfgs[@]:0:k}"; do
			run_one "$job" "$cfg" "$round"
		done
	done
done

for cfg in "${MOUNTED[@]}"; do unmount_one "$cfg"; done
MOUNTED=()
ELAPSED=$(($(date +%s) - START))
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# Anything a mount process said above INFO, or a non-zero exit, is reported verbatim.
for cfg in "${cfgs[@]}"; do
	f=$WORK/$cfg.mount.log
	[ -f "$f" ] || continue
	rc=$(cat "$WORK/$cfg.mount.rc" 2>/dev/null || echo 0)
	noisy=$(grep -v -E 'level=INFO|^$' "$f" || true)
	if [ "$rc" != 0 ] || [ -n "$noisy" ]; then
		{
			echo "$cfg mount process (exit status $rc) logged:"
			# shellcheck disable=SC2001 # indents every line, not just the first
			sed 's/^/    /' <<<"$noisy"
		} >>"$ERRORS"
	fi
done

DATE=$(date -u +%Y-%m-%d-%H%M%S)
# report.py reads these (and counts the rounds in the results file).
BENCH_META_DATE=$DATE BENCH_META_ELAPSED=$ELAPSED BENCH_META_LOAD_BEFORE=$LOAD_BEFORE BENCH_META_LOAD_AFTER=$LOAD_AFTER
BENCH_META_BINARY=$PBFS_IDENT
BENCH_META_KERNEL=$(uname -r) BENCH_META_NPROC=$(nproc)
BENCH_META_CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
BENCH_META_MEM=$(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)
BENCH_META_FS=$FS_DESC
BENCH_META_PARAMS="BENCH_FS=$FS BENCH_SECONDS=$BENCH_SECONDS BENCH_SEQ_MB=$SEQ_MB BENCH_RW_MB=$RW_MB BENCH_READ_MB=$READ_MB BENCH_FILES=$FILES BENCH_SMALL_SECONDS=$SMALL_SECONDS BENCH_SQLITE_TX=$SQL_TX BENCH_SQLITE_SYNC=$SQL_SYNC"
[ "$ROUNDS" = 1 ] || BENCH_META_PARAMS+=" BENCH_ROUNDS=$ROUNDS"
BENCH_META_VERSIONS="$(fio --version), sqlite3 $(sqlite3 --version | cut -d' ' -f1), $(command -v bindfs >/dev/null && bindfs --version 2>&1 | head -1 || echo 'no bindfs'), $(go version 2>/dev/null | cut -d' ' -f3)"
BENCH_META_JSEP=
if [[ " ${cfgs[*]} " == *" pbfs-jsep "* ]]; then
	BENCH_META_JSEP="$(journal_of pbfs-jsep) on $(findmnt -n -o SOURCE,FSTYPE -T "$WORK" 2>/dev/null || echo 'an unknown file system')"
fi
export BENCH_META_DATE BENCH_META_ELAPSED BENCH_META_LOAD_BEFORE BENCH_META_LOAD_AFTER BENCH_META_BINARY BENCH_META_KERNEL \
	BENCH_META_NPROC BENCH_META_CPU BENCH_META_MEM BENCH_META_FS BENCH_META_PARAMS BENCH_META_VERSIONS BENCH_META_JSEP

REPORT=$WORK/report.md
python3 "$ROOT/benchmarks/fs/report.py" "$RESULTS" "$ERRORS" "$WORK/out" "$WORK/barrier.tsv" >"$REPORT"

cat "$REPORT"
if [ "${BENCH_NO_RESULTS:-0}" != 1 ]; then
	mkdir -p "$RESULTS_DIR"
	cp "$REPORT" "$RESULTS_DIR/fs-$DATE.md"
	python3 "$ROOT/benchmarks/fs/summary.py" "$RESULTS" "$RESULTS_DIR/summary.json"
	log "results written to $RESULTS_DIR/fs-$DATE.md and merged into $RESULTS_DIR/summary.json"
fi
