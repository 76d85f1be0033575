#!/bin/sh
# Plays Claude Code in stream-json mode that is stopped mid-task: it announces its
# session on the first line, then works until killed (a timeout, Ctrl-C). With
# `--resume ID` it finishes at once, answering in that session.
session="sess-$$"
resumed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) session="$2"; resumed="yes"; shift 2 ;;
    *) shift ;;
  esac
done
prompt=$(cat)
if [ -n "$resumed" ]; then
  printf '{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"resumed %s: %s","session_id":"%s","total_cost_usd":0.001}\n' \
    "$session" "$prompt" "$session"
  exit 0
fi
printf '{"type":"system","subtype":"init","session_id":"%s","tools":[]}\n' "$session"
exec sleep 600
