#!/bin/sh
# SPDX-License-Identifier: MIT
# redis-cluster.sh - a real Redis Cluster on loopback for the remote tier's
# tests, from Debian's redis-server and redis-cli.
#
#   redis-cluster.sh start DIR PORT [MASTERS [REPLICAS [MAXMEMORY]]]
#       MASTERS (3) masters with REPLICAS (1) replicas each on PORT,
#       PORT+1, ...; no persistence; MAXMEMORY (e.g. 8mb) with allkeys-lru.
#       Returns once the cluster says cluster_state:ok and every node
#       agrees on the slots.
#   redis-cluster.sh single DIR PORT   one plain server (no cluster)
#   redis-cluster.sh kill DIR PORT     kill -9 the node on PORT
#   redis-cluster.sh stop DIR          kill every node started in DIR
# REDIS_HOST: the address the nodes listen on beside loopback and announce
# to the cluster's clients (default 127.0.0.1 alone): another network
# namespace's machines reach them there (examples/machines.py).
# Exit 77 when redis-server or redis-cli is missing (the tests skip).
set -eu

need() {
	command -v "$1" >/dev/null 2>&1 || {
		echo "redis-cluster.sh: $1 not found (Debian: apt-get install redis-server redis-tools)" >&2
		exit 77
	}
}

host=${REDIS_HOST:-127.0.0.1}
bind=127.0.0.1
[ "$host" = 127.0.0.1 ] || bind="127.0.0.1 $host"

node() {	# node DIR PORT CLUSTER(yes|no) MAXMEMORY
	mkdir -p "$1/$2"
	set -- "$1" "$2" "$3" "${4:-0}"
	redis-server --port "$2" --bind "$bind" --cluster-announce-ip "$host" --daemonize yes \
		--dir "$1/$2" --pidfile "$1/$2/pid" --logfile "$1/$2/log" \
		--save '' --appendonly no --protected-mode no \
		--cluster-enabled "$3" --cluster-config-file "$1/$2/nodes.conf" \
		--cluster-node-timeout 1000 --cluster-replica-validity-factor 0 \
		--maxmemory "$4" --maxmemory-policy allkeys-lru >/dev/null
}

wait_ping() {	# wait_ping DIR PORT
	w=0	# not i: functions share the caller's variables
	until redis-cli -p "$2" ping >/dev/null 2>&1; do
		w=$((w + 1))
		[ $w -lt 100 ] || {
			echo "redis-cluster.sh: node $2 did not start:" >&2
			tail -3 "$1/$2/log" >&2
			exit 1
		}
		sleep 0.05
	done
}

cmd=${1:-}
need redis-server
need redis-cli
case "$cmd" in
start)
	dir=$2 port=$3 masters=${4:-3} replicas=${5:-1} mem=${6:-0}
	n=$((masters * (replicas + 1)))
	addrs=
	i=0
	while [ $i -lt $n ]; do
		node "$dir" $((port + i)) yes "$mem"
		addrs="$addrs $host:$((port + i))"
		i=$((i + 1))
	done
	i=0
	while [ $i -lt $n ]; do wait_ping "$dir" $((port + i)); i=$((i + 1)); done
	# shellcheck disable=SC2086
	redis-cli --cluster create $addrs --cluster-replicas "$replicas" --cluster-yes \
		>"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; exit 1; }
	i=0
	until redis-cli --cluster check "$host:$port" >"$dir/check.log" 2>&1 &&
	      ! grep -q 'not agree\|\[ERR\]\|\[WARNING\]' "$dir/check.log" &&
	      redis-cli -p "$port" cluster info | grep -q 'cluster_state:ok'; do
		i=$((i + 1))
		[ $i -lt 200 ] || { cat "$dir/check.log" >&2; exit 1; }
		sleep 0.05
	done
	# every node says the cluster is up (each learns it on its own)
	i=0
	while [ $i -lt $n ]; do
		w=0
		until redis-cli -p $((port + i)) cluster info | grep -q 'cluster_state:ok'; do
			w=$((w + 1))
			[ $w -lt 200 ] || { echo "redis-cluster.sh: node $((port + i)) never saw the cluster up" >&2; exit 1; }
			sleep 0.05
		done
		i=$((i + 1))
	done
	# every replica is attached and in sync
	i=0
	while [ "$(redis-cli -p "$port" cluster nodes | grep -c ' slave ')" -lt $((masters * replicas)) ]; do
		i=$((i + 1))
		[ $i -lt 200 ] || { echo "redis-cluster.sh: replicas did not attach" >&2; exit 1; }
		sleep 0.05
	done
	;;
single)
	node "$2" "$3" no "${4:-0}"
	wait_ping "$2" "$3"
	;;
kill)
	[ -f "$2/$3/pid" ] && kill -9 "$(cat "$2/$3/pid")" 2>/dev/null || true
	;;
stop)
	for p in "$2"/*/pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null || true
	done
	;;
*)
	echo "usage: redis-cluster.sh start|single|kill|stop DIR [PORT ...]" >&2
	exit 2
	;;
esac
