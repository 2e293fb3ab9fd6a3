#!/usr/bin/env bash
# Open MPI's launcher agent for "hosts" that are network namespaces of this
# machine, in place of ssh (tests/cli/two_hosts.sh): mpirun starts its
# daemon on a host by running
#
#   netns_agent.sh [OPTIONS] HOST COMMAND...
#
# as it would run ssh; this runs COMMAND (one shell command line, as ssh's
# remote shell gets it) inside the namespace named HOST, with this
# process's environment (Open MPI's variables and the user's pass through,
# as on a machine that shares the file system).  ssh's options are skipped.
#
#   mpirun --mca plm_rsh_agent tools/netns_agent.sh --hostfile HOSTS ...
#
# HOSTS names the namespaces; mpirun, run inside one of them, must resolve
# the others' names (/etc/netns/NAME/hosts is that namespace's /etc/hosts).
set -u
case "${1:-}" in
-h | --help | "")
	echo "usage: netns_agent.sh [OPTIONS] NAMESPACE COMMAND...   (Open MPI's plm_rsh_agent)"
	exit 0 ;;
esac
while [ $# -gt 0 ] && [ "${1#-}" != "$1" ]; do shift; done
[ $# -ge 2 ] || { echo "netns_agent.sh: need a namespace and a command" >&2; exit 255; }
host=$1
shift
ip netns list | awk '{ print $1 }' | grep -qxF -- "$host" ||
	{ echo "netns_agent.sh: no network namespace named '$host' (ip netns list)" >&2; exit 255; }
exec ip netns exec "$host" sh -c "$*"
