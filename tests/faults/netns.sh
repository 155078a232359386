#!/usr/bin/env bash
# Multi-host test: three producers, each in a network namespace of its own,
# push to one consumer in a fourth namespace over veth pairs. One producer's
# link is cut: the others go on. It is restored: that producer resumes.
#
# With `curve`, every connection is CURVE: the consumer admits the three
# producers' keys only, and two intruders beside producer 3 (one without
# keys, one with a key not admitted) get no message through.
#
# usage: netns.sh PATH/TO/tenbin-fault-peer [curve]
# Needs root and `ip` (iproute2); otherwise exits 77 (meson: skipped).
# Touches only what it creates: namespaces tb{c,p1,p2,p3}-PID, veth pairs
# in them, addresses 10.77.N.1/24 (consumer) and 10.77.N.2/24 (producer N)
# inside those namespaces. All is removed at exit, also on failure.
set -uo pipefail
peer="${1:?usage: netns.sh PATH/TO/tenbin-fault-peer [curve]}"
mode="${2:-plain}"

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "network namespaces need root"
command -v ip >/dev/null || skip "no 'ip' command (iproute2)"

tag=$$
cns="tbc-$tag"
pns=("tbp1-$tag" "tbp2-$tag" "tbp3-$tag")
work="$(mktemp -d /tmp/tenbin-netns-XXXXXX)"
pids=()

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  for ns in "$cns" "${pns[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

ip netns add "$cns" 2>/dev/null || skip "cannot create a network namespace here"
ip -n "$cns" link set lo up
for i in 1 2 3; do
  ns="${pns[$((i - 1))]}"
  ip netns add "$ns" || { echo "FAIL: cannot create $ns"; exit 1; }
  ip -n "$ns" link set lo up
  ip link add "tbc$i-$tag" type veth peer name "tbp$i-$tag" || { echo "FAIL: cannot create a veth pair"; exit 1; }
  ip link set "tbc$i-$tag" netns "$cns"
  ip link set "tbp$i-$tag" netns "$ns"
  ip -n "$cns" addr add "10.77.$i.1/24" dev "tbc$i-$tag"
  ip -n "$ns" addr add "10.77.$i.2/24" dev "tbp$i-$tag"
  ip -n "$cns" link set "tbc$i-$tag" up
  ip -n "$ns" link set "tbp$i-$tag" up
done

consumer_keys=() producer_keys=()
if [ "$mode" = curve ]; then
  keys="$work/keys"
  mkdir -p "$keys/allowed"
  for name in consumer p1 p2 p3 stranger; do
    "$peer" keygen "$keys" "$name" || { echo "FAIL: cannot write certificates"; exit 1; }
  done
  for i in 1 2 3; do cp "$keys/p$i.key" "$keys/allowed/"; done
  consumer_keys=(--curve-cert "$keys/consumer.key_secret" --curve-allow "$keys/allowed")
fi
# producer_keys NAME: the options of a producer holding the key pair NAME.
producer_keys() {
  [ "$mode" = curve ] && producer_keys=(--curve-cert "$keys/$1.key_secret" --curve-server "$keys/consumer.key")
}

# The consumer binds a port the kernel picks, in its own namespace.
ip netns exec "$cns" "$peer" recv 'zpull://0.0.0.0:*' --report-ms 200 --idle-ms 60000 "${consumer_keys[@]}" \
  >"$work/consumer.log" 2>&1 &
consumer=$!
pids+=("$consumer")
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/^endpoint tcp:\/\/0\.0\.0\.0:\([0-9]*\)$/\1/p' "$work/consumer.log")
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || { echo "FAIL: the consumer did not bind"; cat "$work/consumer.log"; exit 1; }
echo "consumer listens on port $port in $cns"

for i in 1 2 3; do
  producer_keys "p$i"
  ip netns exec "${pns[$((i - 1))]}" "$peer" send "zpush://10.77.$i.1:$port" --tag "$i" --interval-us 2000 \
    "${producer_keys[@]}" >"$work/producer$i.log" 2>&1 &
  pids+=("$!")
done
if [ "$mode" = curve ]; then
  # Intruders on producer 3's host: tag 8 without keys, tag 9 not admitted.
  ip netns exec "${pns[2]}" "$peer" send "zpush://10.77.3.1:$port" --tag 8 --interval-us 2000 \
    >"$work/intruder8.log" 2>&1 &
  pids+=("$!")
  producer_keys stranger
  ip netns exec "${pns[2]}" "$peer" send "zpush://10.77.3.1:$port" --tag 9 --interval-us 2000 \
    "${producer_keys[@]}" >"$work/intruder9.log" 2>&1 &
  pids+=("$!")
fi

# count TAG: messages from producer TAG in the consumer's latest report.
count() {
  local line
  line=$(grep '^counts' "$work/consumer.log" | tail -1)
  sed -n "s/.* $1:\([0-9]*\).*/\1/p" <<<"$line" | grep . || echo 0
}
consumer_ok() {
  if ! kill -0 "$consumer" 2>/dev/null; then
    echo "FAIL: the consumer ended:"; tail -5 "$work/consumer.log"; exit 1
  fi
}
# wait_for SECONDS CONDITION...: polls the condition until it holds.
wait_for() {
  local deadline=$((SECONDS + $1)); shift
  until "$@"; do
    consumer_ok
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.2
  done
}
all_flowing() { [ "$(count 1)" -ge 50 ] && [ "$(count 2)" -ge 50 ] && [ "$(count 3)" -ge 50 ]; }
wait_for 20 all_flowing || { echo "FAIL: not every producer got through"; tail -3 "$work/consumer.log"; exit 1; }
echo "all flowing: 1:$(count 1) 2:$(count 2) 3:$(count 3)"

# Cut producer 1's link (inside its namespace).
ip -n "${pns[0]}" link set "tbp1-$tag" down
sleep 0.6
c1=$(count 1) c2=$(count 2) c3=$(count 3)
sleep 3
consumer_ok
d1=$(($(count 1) - c1)) d2=$(($(count 2) - c2)) d3=$(($(count 3) - c3))
echo "link 1 down for 3 s: producer 1 +$d1, producer 2 +$d2, producer 3 +$d3"
[ "$d1" -eq 0 ] || { echo "FAIL: messages from producer 1 arrived over a cut link"; exit 1; }
[ "$d2" -ge 100 ] && [ "$d3" -ge 100 ] || { echo "FAIL: the other producers stalled"; exit 1; }

# Restore it: producer 1's connection recovers and it resumes.
ip -n "${pns[0]}" link set "tbp1-$tag" up
r1=$(count 1)
resumed() { [ "$(count 1)" -ge $((r1 + 50)) ]; }
start=$SECONDS
wait_for 40 resumed || { echo "FAIL: producer 1 did not resume within 40 s"; exit 1; }
echo "link 1 restored: producer 1 resumed within $((SECONDS - start)) s (1:$(count 1) 2:$(count 2) 3:$(count 3))"
consumer_ok
# The consumer checked every message (content, checksum, order per producer).
if grep -E '^(corrupt|duplicate|malformed)' "$work/consumer.log"; then exit 1; fi
if [ "$mode" = curve ]; then
  refused=$(grep '^counts' "$work/consumer.log" | tail -1 | sed -n 's/.* refused=\([0-9]*\).*/\1/p')
  echo "intruders: tag 8 (no keys) $(count 8), tag 9 (not admitted) $(count 9); refused handshakes ${refused:-?}"
  [ "$(count 8)" -eq 0 ] && [ "$(count 9)" -eq 0 ] || { echo "FAIL: an intruder's message arrived"; exit 1; }
  [ "${refused:-0}" -gt 0 ] || { echo "FAIL: no refused handshake reported"; exit 1; }
fi
echo "PASS"
