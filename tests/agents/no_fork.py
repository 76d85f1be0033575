#!/usr/bin/python3
# An agent that never forks: reads its prompt, waits a moment, answers. Under a process
# limit only its own start can fail, never a child of it.
import sys
import time

prompt = sys.stdin.read()
time.sleep(1.0)
print("done " + prompt.strip())
