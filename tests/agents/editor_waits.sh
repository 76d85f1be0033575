#!/bin/sh
# An editor that is slow to close: writes "$NEW_PROMPT" into the file it was given,
# then stays open until $WAIT_FOR exists (bounded: about 60 s), as a person would
# while a worker takes the task.
printf '%s\n' "$NEW_PROMPT" > "$1"
i=0
while [ ! -e "$WAIT_FOR" ] && [ $i -lt 1200 ]; do
  sleep 0.05
  i=$((i + 1))
done
