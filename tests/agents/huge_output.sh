#!/bin/sh
# Writes 10,000,000 bytes of 'x' to stdout (and a little to stderr meanwhile).
cat >/dev/null
echo "starting" >&2
head -c 10000000 /dev/zero | tr '\0' 'x'
