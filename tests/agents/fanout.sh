#!/bin/sh
# Reports its fan-out depth; given the prompt "fan", submits "fan" again as a sub-task
# (with $CONDUCTOR_BIN), as an orchestrating agent decomposing its work would.
prompt=$(cat)
echo "depth=$CONDUCTOR_DEPTH"
if [ "$prompt" = "fan" ]; then
    out=$("$CONDUCTOR_BIN" submit --id "sub-$CONDUCTOR_DEPTH" fan 2>&1)
    echo "submit exit=$? $out"
fi
