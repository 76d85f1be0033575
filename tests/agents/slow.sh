#!/bin/sh
# Logs its start, then runs for a long time (until signalled).
cat >/dev/null
[ -n "$AGENT_LOG" ] && echo "start $CONDUCTOR_TASK_ID $$" >> "$AGENT_LOG"
echo "working"
sleep 300
echo "finished"
