#!/bin/sh
# Shared-queue agent. The prompt is `KEY NAP [HOLD]`: log "start <taskid> <key> <ns>",
# wait until the file HOLD exists (if given), sleep NAP seconds, log "end <taskid> <key>
# <ns>" (to $AGENT_LOG) and print "done <taskid>". NAP `fail` exits 3 instead.
prompt=$(cat)
set -- $prompt
key=${1:-none}
nap=${2:-0}
hold=$3
log=${AGENT_LOG:-/dev/null}
echo "start $CONDUCTOR_TASK_ID $key $(date +%s%N)" >> "$log"
if [ -n "$hold" ]; then
    while [ ! -e "$hold" ]; do sleep 0.02; done
fi
if [ "$nap" = fail ]; then
    echo "end $CONDUCTOR_TASK_ID $key $(date +%s%N)" >> "$log"
    echo "failing on purpose" >&2
    exit 3
fi
[ "$nap" != 0 ] && sleep "$nap"
echo "end $CONDUCTOR_TASK_ID $key $(date +%s%N)" >> "$log"
echo "done $CONDUCTOR_TASK_ID"
