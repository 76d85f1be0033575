#!/bin/sh
# Says whether status.json already named this process as the task's agent when it
# started (recovery can only kill an agent it finds there).
cat >/dev/null
status="$CONDUCTOR_HOME/workers/$CONDUCTOR_WORKER/status.json"
if tr -d ' \n' <"$status" | grep -q "\"agentPid\":$$[,}]"; then
  echo recorded
else
  echo unrecorded
fi
