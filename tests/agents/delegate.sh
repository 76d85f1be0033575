#!/bin/sh
# Given the prompt "delegate", hands half of its work to the queue of its own root
# ($CONDUCTOR_HOME) and waits for it, as an orchestrating agent would; any other
# prompt is done at once.
prompt=$(cat)
if [ "$prompt" = "delegate" ]; then
    out=$("$CONDUCTOR_BIN" submit --wait half 2>/dev/null)
    echo "got: $out"
else
    echo "done $prompt"
fi
