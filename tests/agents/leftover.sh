#!/bin/sh
# Keyed agent whose work runs in a child that outlives it. The prompt is `KEY NAP`.
# At start it logs "overlap <taskid> <key>" if work of another task of KEY still runs
# (a process named `leftover-work LOG KEY`), "overcap <taskid> <n>" if $MAX_RUNNING or more
# tasks' work already runs, then "start <taskid> <key>"; its child
# `leftover-work LOG KEY NAP` sleeps NAP seconds and logs "end <taskid> <key>" (all to
# $AGENT_LOG). Killed with its worker, the agent dies (parent-death signal) but the
# child goes on: what a real agent's tool processes do.
set -- $(cat)
key=${1:-none}
nap=${2:-0}
log=${AGENT_LOG:-/dev/null}
# The work is named by the log too: tests running side by side do not see each other's.
if pgrep -f "leftover-work $log $key " >/dev/null 2>&1; then
    echo "overlap $CONDUCTOR_TASK_ID $key" >> "$log"
fi
if [ -n "$MAX_RUNNING" ]; then
    running=$(pgrep -fc "leftover-work $log ")
    if [ "$running" -ge "$MAX_RUNNING" ]; then
        echo "overcap $CONDUCTOR_TASK_ID $running" >> "$log"
    fi
fi
echo "start $CONDUCTOR_TASK_ID $key" >> "$log"
sh -c 'sleep "$3"; echo "end $CONDUCTOR_TASK_ID $2" >> "$1"' leftover-work "$log" "$key" "$nap"
echo "done $CONDUCTOR_TASK_ID"
