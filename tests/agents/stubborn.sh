#!/bin/sh
# Ignores SIGTERM: only SIGKILL stops it.
trap '' TERM
cat >/dev/null
echo "$$" > "${AGENT_PIDFILE:-/dev/null}"
while :; do sleep 1; done
