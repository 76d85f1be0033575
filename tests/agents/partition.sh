#!/bin/sh
# Partition agent: works on local files only, never on the shared root, so a frozen
# filesystem client does not stop it. The prompt is `KEY SECS`. Its record
# $AGENT_LOCAL_DIR/<task>.<host>.<pid>.run gets "start <task> <key> <ns> <host>", then
# "alive <ns>" about every 50 ms while it works for SECS seconds, then
# "end <task> <key> <ns>"; on SIGTERM, "term <ns>", and it exits.
prompt=$(cat)
set -- $prompt
key=${1:-none}
secs=${2:-0}
host=$(hostname)
rec="$AGENT_LOCAL_DIR/$CONDUCTOR_TASK_ID.$host.$$.run"
echo "start $CONDUCTOR_TASK_ID $key $(date +%s%N) $host" >> "$rec"
trap 'echo "term $(date +%s%N)" >> "$rec"; exit 143' TERM
end=$(( $(date +%s) + secs ))
while [ "$(date +%s)" -lt "$end" ]; do
    echo "alive $(date +%s%N)" >> "$rec"
    sleep 0.05
done
echo "end $CONDUCTOR_TASK_ID $key $(date +%s%N)" >> "$rec"
echo "done $CONDUCTOR_TASK_ID on $host"
