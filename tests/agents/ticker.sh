#!/bin/sh
# A slow talker: reads its prompt, then prints "tick N" every 0.2 s, TICKS times
# (default 1500, i.e. about five minutes: until cancelled, in practice).
cat >/dev/null
n=1
while [ "$n" -le "${TICKS:-1500}" ]; do
    echo "tick $n"
    n=$((n + 1))
    sleep 0.2
done
echo "ticker done"
