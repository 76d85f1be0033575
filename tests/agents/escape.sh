#!/bin/sh
# Leaves a descendant in a session of its own (outside the agent's process group)
# that keeps stdout open, then exits. Its pid goes to $AGENT_PIDFILE once it has left.
cat >/dev/null
perl -e 'use POSIX; POSIX::setsid(); open(my $f, ">", "$ARGV[0].tmp") or die; print $f $$; close $f; rename("$ARGV[0].tmp", $ARGV[0]); sleep 60' "$AGENT_PIDFILE" &
while [ ! -s "$AGENT_PIDFILE" ]; do :; done
echo done
