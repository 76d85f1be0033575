#!/bin/sh
# Plays Gemini CLI (`--output-format stream-json`) refused by the API's quota every
# time: its init, then the error result it prints on a 429 whose RetryInfo says 1 s.
cat >/dev/null
echo run >> quota-runs.txt
printf '%s\n' '{"type":"init","session_id":"gq-'"$$"'","model":"gemini-fake"}'
printf '%s\n' '{"type":"result","status":"error","error":{"type":"unknown","message":"[API Error: You exceeded your current quota, please check your plan and billing details.\nSuggested retry after 1s.]\nPlease wait and try again later. To increase your limits, request a quota increase through AI Studio, or switch to another /auth method"},"stats":{"total_tokens":0,"input_tokens":0,"output_tokens":0,"tool_calls":0}}'
exit 1
