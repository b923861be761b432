#!/bin/bash
# make-journal.sh PBFS OUT: a journal of every op kind, made by the pbfs binary PBFS, as
# OUT/journal.tar.gz, and the volume it leaves listed as OUT/tree.txt (README.md says more).
# Run it as root with /dev/fuse; it works in a directory of its own under /var/tmp.
set -e
BIN=$1; OUT=$2; W=$(mktemp -d /var/tmp/mkj.XXXX)
mkdir -p $W/vol
$BIN mount --journal $W/j $W/vol > $W/log 2>&1 & P=$!
trap 'kill -INT $P 2>/dev/null || true; wait $P 2>/dev/null || true; umount -l $W/vol 2>/dev/null || true; rm -rf $W' EXIT
for i in $(seq 100); do grep -q " $W/vol fuse" /proc/mounts && break; sleep 0.05; done
V=$W/vol
b() { $BIN barrier --journal $W/j > /dev/null; }
mkdir -p $V/dir/sub; echo hello > $V/dir/a.txt; printf 'x%.0s' $(seq 1 3000) > $V/small; b
python3 -c "open('$V/big','w').write('line of a log that compresses well\n'*2000)"; b
echo more >> $V/dir/a.txt; truncate -s 100 $V/small; truncate -s 20000 $V/big; b
ln -s dir/a.txt $V/link; ln $V/dir/a.txt $V/hard; b
mv $V/dir/sub $V/moved; mkdir $V/moved/deeper; echo x > $V/moved/deeper/f; b
chmod 0600 $V/dir/a.txt; chown 1234:5678 $V/small; b
setfattr -n user.color -v blue $V/big; setfattr -n user.gone -v x $V/big; setfattr -x user.gone $V/big; b
fallocate -l 65536 $V/prealloc; fallocate -n -o 65536 -l 8192 $V/prealloc; b
touch -d '2020-01-02 03:04:05' $V/moved/deeper/f; b
rm $V/hard; mkdir $V/empty; rmdir $V/empty; b
dd if=/dev/urandom of=$V/random bs=4096 count=3 2>/dev/null; dd if=/dev/zero of=$V/random bs=4096 count=1 seek=1 conv=notrunc 2>/dev/null; b
kill -INT $P; wait $P || true
rm -f $W/j/control.sock $W/j/*.lock
mkdir -p $OUT; tar -C $W -czf $OUT/journal.tar.gz j
(cd $V && find . -mindepth 1 | sort | while read p; do
  if [ -L "$p" ]; then echo "$p link $(readlink "$p")";
  elif [ -d "$p" ]; then echo "$p dir $(stat -c %a "$p")";
  else echo "$p file $(stat -c '%a %s %u:%g' "$p") $(sha256sum < "$p" | cut -c1-16) $(getfattr -d --absolute-names "$p" 2>/dev/null | grep -v '^#' | grep . | tr '\n' ' ')"; fi; done) > $OUT/tree.txt
tail -2 $W/log
