#!/bin/sh
# Says whether the slot's agent record (.agent.json, where recovery looks) already
# named this process when it started: recovery can only kill an agent it finds there.
cat >/dev/null
record="$CONDUCTOR_HOME/workers/$CONDUCTOR_WORKER/.agent.json"
if tr -d ' \n' <"$record" | grep -q "\"agentPid\":$$[,}]"; then
  echo recorded
else
  echo unrecorded
fi
