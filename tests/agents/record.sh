#!/bin/sh
# Echoes its prompt and records the task id it ran, one line per run.
prompt=$(cat)
[ -n "$AGENT_LOG" ] && echo "$CONDUCTOR_TASK_ID" >> "$AGENT_LOG"
printf '%s' "$prompt"
