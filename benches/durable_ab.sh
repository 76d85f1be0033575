#!/bin/bash
# Interleaved A/B of builds on a fresh loop-mounted journaled ext4 (mkfs.ext4 defaults,
# 1 GiB; needs root, mkfs.ext4, tsp): N `cat` tasks at parallel 2, each row once a round,
# the rows rotated. Each line printed: ROW MILLISECONDS JOURNAL_COMMITS (from
# /proc/fs/jbd2/<loop>-8/info). Put builds' `conductor` and `conductor-worker` in
# $M/main-bins, $M/new-bins (rows `main`, `new`: `run --root R`) and $M/rel-bins (rows
# `rel`, `private` — `run` on its private root —, `sub` — N `submit`s to 2 workers —,
# `batch` — one `submit --batch`). Issue 39 (BENCHMARKS.md); the loaded-machine stand-in
# for `cargo bench --bench versus -- --ext4` when no second release build fits.
#   M=/var/tmp/ab N=200 ROUNDS=5 ROWS="floor tsp main new rel private sub batch" benches/durable_ab.sh
set -u
M=${M:-/var/tmp/durable-ab}; N=${N:-200}; ROUNDS=${ROUNDS:-5}
IMG=$M/ab.img; MNT=$M/abmnt
truncate -s 1G $IMG; mkfs.ext4 -q -F $IMG; mkdir -p $MNT; mount -o loop $IMG $MNT
dev=$(basename $(findmnt -n -o SOURCE $MNT)); info=/proc/fs/jbd2/$dev-8/info
mkdir -p $MNT/p; for i in $(seq 1 $N); do echo "task $i" > $MNT/p/$i.txt; done
seq 1 $N | sed 's/^/task /' > $MNT/list.txt
ms() { echo "$(( ($2 - $1) / 1000000 ))"; }
row() { # row NAME -> prints NAME ms commits
  local name=$1 t0 t1 j0 j1; rm -rf $MNT/r; sync
  case $name in
    floor) j0=$(awk 'NR==1{print $1}' $info); t0=$(date +%s%N); ls $MNT/p/*.txt | xargs -P2 -n1 cat >/dev/null; t1=$(date +%s%N);;
    tsp) export TS_SOCKET=$MNT/tsp.sock; tsp -S 2 >/dev/null; j0=$(awk 'NR==1{print $1}' $info); t0=$(date +%s%N)
         for f in $MNT/p/*.txt; do tsp cat $f >/dev/null; done; tsp -w >/dev/null 2>&1; while [ -n "$(tsp | awk 'NR>1 && $2!="finished"')" ]; do tsp -w >/dev/null 2>&1; done; t1=$(date +%s%N); tsp -K >/dev/null 2>&1; unset TS_SOCKET;;
    sub|batch) $M/rel-bins/conductor init 2 --root $MNT/r >/dev/null 2>&1
         for s in 0 1; do $M/rel-bins/conductor-worker $s $MNT --agent cat --root $MNT/r >/dev/null 2>&1 & done
         while [ "$(ls $MNT/r/workers/*/status.json 2>/dev/null | wc -l)" -lt 2 ]; do sleep 0.05; done; sleep 0.3; sync
         j0=$(awk 'NR==1{print $1}' $info); t0=$(date +%s%N)
         if [ $name = sub ]; then for i in $(seq 1 $N); do $M/rel-bins/conductor submit "task $i" --root $MNT/r >/dev/null; done
         else $M/rel-bins/conductor submit --batch -f $MNT/list.txt --root $MNT/r >/dev/null; fi
         while [ "$(ls $MNT/r/queue/results | wc -l)" -lt $N ]; do sleep 0.005; done; t1=$(date +%s%N)
         kill $(jobs -p) 2>/dev/null; wait 2>/dev/null;;
    main|new|rel) $M/$name-bins/conductor init 2 --root $MNT/r >/dev/null 2>&1; sync
         j0=$(awk 'NR==1{print $1}' $info); t0=$(date +%s%N)
         $M/$name-bins/conductor run --root $MNT/r --workers 2 --agent cat --json -f $MNT/list.txt > $MNT/out.json || echo "FAILED $name" >&2; t1=$(date +%s%N);;
    private) j0=$(awk 'NR==1{print $1}' $info); t0=$(date +%s%N)
         (cd $MNT && TMPDIR=$MNT $M/rel-bins/conductor run --workers 2 --agent cat --json -f $MNT/list.txt > $MNT/out.json); t1=$(date +%s%N);;
  esac
  j1=$(awk 'NR==1{print $1}' $info)
  echo "$name $(ms $t0 $t1) $((j1-j0))"
}
rows=(${ROWS:-floor tsp main new rel private sub batch})
for r in $(seq 0 $((ROUNDS-1))); do
  for k in $(seq 0 $((${#rows[@]}-1))); do row ${rows[$(( (k + r) % ${#rows[@]} ))]}; done
done
umount $MNT; rm -f $IMG
