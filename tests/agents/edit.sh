#!/bin/sh
# Edits files in its working directory as the prompt says, one command a line:
#   WRITE FILE TEXT   FILE holds just the line TEXT
#   APPEND FILE TEXT  TEXT added as FILE's last line
#   HANG MARKER       create MARKER (an absolute path), then wait to be killed
# then prints the directory it ran in.
while IFS= read -r line || [ -n "$line" ]; do
  set -- $line
  case "$1" in
    WRITE) f=$2; shift 2; mkdir -p "$(dirname "$f")"; printf '%s\n' "$*" > "$f" ;;
    APPEND) f=$2; shift 2; printf '%s\n' "$*" >> "$f" ;;
    HANG) pwd; : > "$2"; exec sleep 300 ;;
  esac
done
pwd
