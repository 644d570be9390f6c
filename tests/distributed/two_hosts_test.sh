#!/usr/bin/env bash
# A job that spans two hosts: two network namespaces made here, joined by a veth pair whose
# addresses exist only inside them. mpirun runs in the first "host" and reaches the second
# through an `ip netns exec` stand-in for ssh, with a hostfile of one slot per host, so the
# TP=2 job has one rank on each. Its greedy ids must equal one process's. Needs root; removes
# its namespaces on exit.
#
# usage: two_hosts_test.sh UNDERCURRENT_BINARY MODEL_DIR PYTHON
set -euo pipefail
BIN=$1
MODEL=$2
PYTHON=$3
if [ "$(id -u)" -ne 0 ]; then
  echo "two_hosts_test: needs root to create network namespaces" >&2
  exit 1
fi

tag=$$
subnet=$((tag % 200 + 20))
host_a=uc-a-$tag
host_b=uc-b-$tag
ip_a=10.213.$subnet.1
ip_b=10.213.$subnet.2
work=$(mktemp -d)
cleanup() {
  ip netns del "$host_a" 2>/dev/null || true
  ip netns del "$host_b" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

ip netns add "$host_a"
ip netns add "$host_b"
ip link add "va$tag" netns "$host_a" type veth peer name "vb$tag" netns "$host_b"
ip -n "$host_a" addr add "$ip_a/24" dev "va$tag"
ip -n "$host_b" addr add "$ip_b/24" dev "vb$tag"
for ns in "$host_a" "$host_b"; do
  ip -n "$ns" link set lo up
done
ip -n "$host_a" link set "va$tag" up
ip -n "$host_b" link set "vb$tag" up

# The ssh stand-in: mpirun calls it as `agent [options] HOST command...`.
cat > "$work/ns-rsh" <<AGENT
#!/usr/bin/env bash
while [[ "\$1" == -* ]]; do shift; done
host="\$1"; shift
case "\$host" in
  $ip_a) ns=$host_a ;;
  $ip_b) ns=$host_b ;;
  *) echo "ns-rsh: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" unshare --uts sh -c "hostname \$ns; \$*"
AGENT
chmod +x "$work/ns-rsh"
printf '%s slots=1\n%s slots=1\n' "$ip_a" "$ip_b" > "$work/hostfile"

args=(generate --model "$MODEL" --prompt "Once upon a time" --max-tokens 48 --temperature 0
      --threads 1 --json)
"$BIN" "${args[@]}" > "$work/single.json"

OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  timeout 120 ip netns exec "$host_a" mpirun -np 2 --hostfile "$work/hostfile" \
  --mca plm_rsh_agent "$work/ns-rsh" --mca oob_tcp_if_include "10.213.$subnet.0/24" \
  --mca btl_tcp_if_include "10.213.$subnet.0/24" --mca btl tcp,self --bind-to none \
  --display-map -x PATH \
  "$BIN" "${args[@]}" --tensor-parallel-size 2 > "$work/multi.out" 2> "$work/multi.err" || {
    echo "two_hosts_test: the two-host job failed:" >&2
    cat "$work/multi.out" "$work/multi.err" >&2
    exit 1
  }

"$PYTHON" - "$work/single.json" "$work/multi.out" <<'PY'
import json, sys
single = json.load(open(sys.argv[1]))
lines = [l for l in open(sys.argv[2]) if l.startswith("{")]
assert len(lines) == 1, f"expected one JSON line from rank 0, got {len(lines)}"
multi = json.loads(lines[0])
assert multi["ids"] == single["ids"], f"ids differ:\n{multi['ids']}\n{single['ids']}"
print(f"two hosts, TP=2: {len(multi['ids'])} ids identical to one process")
PY
grep -q "$ip_b" "$work/multi.out" || grep -qi "uc-b" "$work/multi.out" || {
  echo "two_hosts_test: the job map does not show the second host:" >&2
  cat "$work/multi.out" >&2
  exit 1
}
echo "ranks placed on $ip_a and $ip_b"
