#!/bin/sh
# Reads its prompt, complains on stderr and exits 3.
cat >/dev/null
echo "some progress"
echo "warming up" >&2
echo "something broke" >&2
exit 3
