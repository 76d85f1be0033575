#!/bin/sh
# Multi-host agent. The prompt is `KEY NAP [HOLD]`. Each run writes its own record
# $AGENT_LOG_DIR/<task>.<host>.<pid>.run (one writer per file: appends from two
# mounts to one file would not be atomic): "start <task> <key> <ns> <host>", then,
# after waiting for the file HOLD (if given) and sleeping NAP seconds, "end <task> <key> <ns>".
prompt=$(cat)
set -- $prompt
key=${1:-none}
nap=${2:-0}
hold=$3
host=$(hostname)
rec="${AGENT_LOG_DIR:-/tmp}/$CONDUCTOR_TASK_ID.$host.$$.run"
echo "start $CONDUCTOR_TASK_ID $key $(date +%s%N) $host" >> "$rec"
if [ -n "$hold" ]; then
    while [ ! -e "$hold" ]; do sleep 0.05; done
fi
[ "$nap" != 0 ] && sleep "$nap"
echo "end $CONDUCTOR_TASK_ID $key $(date +%s%N)" >> "$rec"
echo "done $CONDUCTOR_TASK_ID on $host"
