#!/bin/sh
# Says what a readied worktree gave it: its port, the copied .env, the linked deps/, the
# setup command's mark; writes the prompt to out.txt (so its branch has a change).
# With `HANG MARKER` as the prompt: starts a child that outlives it (a dev server on its
# port, say), writes its port to MARKER, then waits to be killed.
prompt=$(cat)
echo "port=$CONDUCTOR_PORT"
echo "env=$(cat .env 2>/dev/null)"
[ -L deps ] && echo "deps=link:$(cat deps/lib.txt)"
echo "setup=$(cat setup-mark 2>/dev/null)"
printf '%s\n' "$prompt" > out.txt
case "$prompt" in
  HANG*) set -- $prompt; sleep 300 & echo "$CONDUCTOR_PORT" > "$2.tmp"; mv "$2.tmp" "$2"; exec sleep 300 ;;
esac
