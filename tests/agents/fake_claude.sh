#!/bin/sh
# Plays `claude -p --output-format json`: reads the prompt, prints Claude Code's result
# object. With `--resume ID` it continues that session; a prompt starting with "fail"
# produces an error result.
session="sess-$$"
resumed=""
while [ $# -gt 0 ]; do
  case "$1" in
    --resume) session="$2"; resumed="resumed "; shift 2 ;;
    *) shift ;;
  esac
done
prompt=$(cat)
case "$prompt" in
  fail*) is_error=true; subtype=error_during_execution ;;
  *) is_error=false; subtype=success ;;
esac
printf '{"type":"result","subtype":"%s","is_error":%s,"duration_ms":12,"num_turns":2,"result":"%sanswer to: %s","session_id":"%s","total_cost_usd":0.0042}\n' \
  "$subtype" "$is_error" "$resumed" "$prompt" "$session"
