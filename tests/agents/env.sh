#!/bin/sh
# Prints what the worker handed it.
cat >/dev/null
echo "worker=$CONDUCTOR_WORKER"
echo "task=$CONDUCTOR_TASK_ID"
echo "home=$CONDUCTOR_HOME"
echo "context=$CONDUCTOR_CONTEXT"
echo "cwd=$(pwd)"
