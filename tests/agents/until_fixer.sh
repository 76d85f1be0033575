#!/bin/sh
# A fake agent for `--until` (issue 37.9), run in its task's worktree: counts its runs
# in .rounds, keeps each prompt as prompt-<run>.txt, and writes answer.txt: "right" when
# its prompt carries WANT-RIGHT (what the tests' checks print when they fail), else
# "wrong". `HANG2 MARKER` in its prompt: its second run creates MARKER and waits to be
# killed.
prompt=$(cat)
n=$(( $(cat .rounds 2>/dev/null || echo 0) + 1 ))
echo "$n" > .rounds
printf '%s\n' "$prompt" > "prompt-$n.txt"
case "$prompt" in
  *WANT-RIGHT*) echo right > answer.txt ;;
  *) echo wrong > answer.txt ;;
esac
case "$prompt" in
  *"HANG2 "*) hang=$(printf '%s\n' "$prompt" | sed -n 's/.*HANG2 \([^ ]*\).*/\1/p' | head -n 1) ;;
  *) hang= ;;
esac
if [ "$n" = 2 ] && [ -n "$hang" ]; then : > "$hang"; exec sleep 300; fi
echo "round $n done"
