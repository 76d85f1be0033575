#!/bin/sh
# Prints a line, waits until the file named by its prompt exists, prints another.
hold=$(cat)
echo "working on it"
while [ ! -e "$hold" ]; do sleep 0.02; done
echo "finished"
