#!/bin/bash
# harness-timeout: 240
# rsw's RoCEv2 packets through Wireshark's dissector: two rsw devices in
# RoCEv2 mode (RSW_ROCEV2) in two network namespaces joined by veth
# pairs; tshark captures in A while RC moves multi-packet SENDs
# (ibv_rc_pingpong -c), WRITEs and READs (ib_write_bw, ib_read_bw; a
# WRITE run with packets lost by RSW_FAULTS, for NAKs and resends) at
# MTU 1024 and atomics (ib_atomic_bw), UC multi-packet SENDs
# (ibv_uc_pingpong -c), and UD its SENDs over IPv4 and IPv6
# (ibv_ud_pingpong). Then tshark, decoding UDP 4791 as RoCEv2, must find
# every packet of it InfiniBand, none malformed, no expert error, each
# RC, UC and UD opcode the traffic uses; and every ICRC, computed here from the captured bytes
# (IBA Annex A17's masks; tshark 4.0 shows the ICRC but does not check
# it), must equal what tshark reads as the packet's invariant CRC.
# RSV_ICRC_BREAK=1 corrupts one packet's ICRC in the capture first: the
# test must then fail (how the check was checked). Skipped without tshark
# (apt-get install tshark).
set -u
. "$(dirname "$0")/lib/common.sh"

command -v tshark >/dev/null || { echo "SKIP: no tshark (apt-get install tshark)"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
command -v ip >/dev/null || { echo "no iproute2"; exit 77; }
A=rtsA$$ B=rtsB$$
ip netns add $A 2>/dev/null || { echo "cannot create network namespaces"; exit 77; }
ip netns add $B
drop_ns() { ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null; }
cleanup_hooks="drop_ns"
ip link add a4$$ type veth peer name b4$$ || fail "veth"
ip link add a6$$ type veth peer name b6$$ || fail "veth"
for x in a b; do
    ns=$A n=1
    [ $x = b ] && ns=$B n=2
    ip link set "${x}4$$" netns $ns
    ip link set "${x}6$$" netns $ns
    ip -n $ns link set "${x}6$$" addrgenmode none
    ip -n $ns addr add 192.0.2.$n/24 dev "${x}4$$"
    ip -n $ns addr add 2001:db8::$n/64 dev "${x}6$$" nodad
    ip -n $ns link set lo up
    ip -n $ns link set "${x}4$$" up
    ip -n $ns link set "${x}6$$" up
done

in_ns() {
    ns=$1
    shift
    timeout 60 ip netns exec "$ns" env LD_LIBRARY_PATH="$LD_LIBRARY_PATH" \
        IBV_CONFIG_DIR="$IBV_CONFIG_DIR" RSW_ROCEV2=all "$@"
}

# One capture of all of A's interfaces (Linux cooked frames), classic
# pcap for python below.
cap=$work/cap.pcap
ip netns exec $A tshark -q -n -i any -f "udp port 4791" -F pcap -w "$cap" \
    >"$work/tshark.out" 2>"$work/tshark.log" &
tshark_pid=$!
bg_pids="$bg_pids $tshark_pid"
for _ in $(seq 400); do
    grep -q "^Capturing on" "$work/tshark.log" && break
    sleep 0.05 # polling tshark's start, bounded (20 s)
done
grep -q "^Capturing on" "$work/tshark.log" || { cat "$work/tshark.log"; fail "tshark did not start"; }

port=$(free_port)
# pair SERVER_DEV CLIENT_DEV CLIENT_ENV CMD...: server in A, client in B.
pair() {
    sdev=$1 cdev=$2 cenv=$3
    shift 3
    port=$((port + 1))
    in_ns $A "$@" -d $sdev -p $port >"$work/srv" 2>&1 &
    srv=$!
    bg_pids="$bg_pids $srv"
    wait_listen $port $A
    in_ns $B env $cenv "$@" -d $cdev -p $port 192.0.2.1 >"$work/cli" 2>&1
    c=$?
    wait $srv
    s=$?
    if [ $c != 0 ] || [ $s != 0 ]; then
        echo "--- server"; cat "$work/srv"; echo "--- client"; cat "$work/cli"
        fail "$*: client $c server $s"
    fi
}
pair rsw_a4$$ rsw_b4$$ "" ibv_rc_pingpong -g 0 -m 1024 -s 4000 -n 5 -c
pair rsw_a4$$ rsw_b4$$ "" ib_write_bw -x 0 -F -m 1024 -s 8192 -n 5
pair rsw_a4$$ rsw_b4$$ "RSW_FAULTS=roce:drop:op=write_middle:after=3:count=2" \
    ib_write_bw -x 0 -F -m 1024 -s 8192 -n 5
pair rsw_a4$$ rsw_b4$$ "" ib_read_bw -x 0 -F -m 1024 -s 8192 -n 5
pair rsw_a4$$ rsw_b4$$ "" ibv_uc_pingpong -g 0 -m 1024 -s 4000 -n 5 -c
pair rsw_a4$$ rsw_b4$$ "" ib_atomic_bw -x 0 -F -n 5
pair rsw_a4$$ rsw_b4$$ "" ib_atomic_bw -x 0 -F -n 5 -A CMP_AND_SWAP
pair rsw_a4$$ rsw_b4$$ "" ibv_ud_pingpong -g 0 -s 1024 -n 5 -c
pair rsw_a6$$ rsw_b6$$ "" ibv_ud_pingpong -g 0 -s 1024 -n 5 -c
echo "ok traffic: RC SEND, WRITE (and resent), READ, atomics; UC SEND; UD over IPv4 and IPv6"

# tshark stops at SIGINT with what it has read: the last packets (UD
# over IPv6, 5 each way) must be in the file first.
for _ in $(seq 100); do
    v6=$(tshark -n -r "$cap" -Y "ipv6 && udp.port == 4791" 2>/dev/null | wc -l)
    [ "$v6" -ge 10 ] && break
    sleep 0.1 # polling the capture file, bounded (about 30 s with tshark's runs)
done
kill -INT $tshark_pid
wait $tshark_pid

if [ "${RSV_ICRC_BREAK:-0}" = 1 ]; then
    # Flip a bit of the last ICRC byte of the 10th packet (pcap: 24
    # bytes of file header, then 16 of record header per packet).
    python3 - "$cap" <<'EOF' || fail "could not corrupt the capture"
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
off = 24
for _ in range(9):
    off += 16 + struct.unpack_from("<I", b, off + 8)[0]
n = struct.unpack_from("<I", b, off + 8)[0]
b[off + 16 + n - 1] ^= 0x01
open(sys.argv[1], "wb").write(b)
EOF
    echo "corrupted the ICRC of packet 10 of $cap"
fi

ts() { tshark -n -o infiniband.rroce.port:4791 "$@" 2>>"$work/tshark.err"; }
n=$(ts -r "$cap" -Y "udp.port == 4791" | wc -l)
ib=$(ts -r "$cap" -Y "infiniband" | wc -l)
[ "$n" -gt 0 ] || fail "no RoCEv2 packet captured"
[ "$ib" = "$n" ] || fail "$ib of $n UDP 4791 packets decoded as InfiniBand"
# 0x00800000: PI_ERROR, the highest expert severity.
ts -r "$cap" -Y "_ws.malformed || _ws.expert.severity >= 0x00800000" >"$work/bad" ||
    fail "tshark refused the filter: $(tail -3 "$work/tshark.err")"
[ ! -s "$work/bad" ] || { head "$work/bad"; fail "malformed packets or expert errors"; }
for v in ip ipv6; do
    ts -r "$cap" -Y "$v && infiniband" -T fields -e infiniband.bth.opcode | sort -un >"$work/$v.ops"
done
# frame number and tshark's invariant CRC, for python to compare with the
# ICRC it computes from the frame's bytes.
ts -r "$cap" -T fields -e frame.number -e infiniband.invariant.crc >"$work/crc"
python3 - "$cap" "$work/crc" <<'EOF' || fail "ICRC check failed"
import struct, sys, zlib

def packets(path):
    b = open(path, "rb").read()
    magic = struct.unpack_from("<I", b, 0)[0]
    assert magic == 0xA1B2C3D4, "a pcap file, little-endian, microseconds"
    assert struct.unpack_from("<I", b, 20)[0] == 113, "Linux cooked frames"
    off = 24
    while off < len(b):
        n = struct.unpack_from("<I", b, off + 8)[0]
        yield b[off + 16:off + 16 + n]
        off += 16 + n

def icrc(ip):
    # IBA Annex A17: 8 bytes of ones for the LRH, then the IP and UDP
    # headers with the fields a router may change set to ones, the BTH
    # with its byte 4 (FECN, BECN, reserved) set to ones, the rest as is.
    ip = bytearray(ip)
    if ip[0] >> 4 == 4:
        ip[1] = 0xFF  # TOS
        ip[8] = 0xFF  # TTL
        ip[10:12] = b"\xff\xff"  # header checksum
        hl = (ip[0] & 15) * 4
    else:
        ip[0] |= 0x0F  # traffic class, low 4 bits
        ip[1:4] = b"\xff\xff\xff"  # traffic class high 4 bits, flow label
        ip[7] = 0xFF  # hop limit
        hl = 40
    ip[hl + 6:hl + 8] = b"\xff\xff"  # UDP checksum
    ip[hl + 8 + 4] = 0xFF  # BTH byte 4
    return zlib.crc32(b"\xff" * 8 + bytes(ip[:-4])) & 0xFFFFFFFF

want = {}
for line in open(sys.argv[2]):
    f = line.split()
    if len(f) == 2:
        want[int(f[0])] = int(f[1], 16)
checked = 0
for num, frame in enumerate(packets(sys.argv[1]), 1):
    et = struct.unpack_from(">H", frame, 14)[0]
    ip = frame[16:]
    if et == 0x0800:
        ip = ip[:struct.unpack_from(">H", ip, 2)[0]]
    elif et == 0x86DD:
        ip = ip[:40 + struct.unpack_from(">H", ip, 4)[0]]
    else:
        continue
    carried = struct.unpack_from("<I", ip, len(ip) - 4)[0]
    computed = icrc(ip)
    if computed != carried:
        sys.exit("frame %d: ICRC %08x carried, %08x computed" % (num, carried, computed))
    # tshark shows the field as the bytes read big-endian.
    shown = struct.unpack_from(">I", ip, len(ip) - 4)[0]
    if want.get(num) != shown:
        sys.exit("frame %d: tshark's invariant CRC %s, the packet's last 4 bytes %08x"
                 % (num, want.get(num), shown))
    checked += 1
if checked == 0:
    sys.exit("no packet checked")
print("%d ICRCs right" % checked)
EOF
echo "ok $n packets, InfiniBand all, none malformed, no expert error"
echo "ok opcodes over IPv4: $(tr '\n' ' ' <"$work/ip.ops")"
echo "ok opcodes over IPv6: $(tr '\n' ' ' <"$work/ipv6.ops")"
# RC: SEND first/middle/last, WRITE first/middle/last, READ request and
# response first/middle/last, ACK (NAKs too), ATOMIC ACKNOWLEDGE,
# COMPARE_SWAP, FETCH_ADD; UC SEND first/middle/last; over IPv4; UD
# SEND only over both.
for op in 0 1 2 6 7 8 12 13 14 15 17 18 19 20 32 33 34 100; do
    grep -qx "$op" "$work/ip.ops" || fail "no packet of opcode $op over IPv4"
done
grep -qx 100 "$work/ipv6.ops" || fail "no UD SEND ONLY over IPv6"
nak=$(ts -r "$cap" -Y "infiniband.bth.opcode == 17 && infiniband.aeth.syndrome >= 0x60" | wc -l)
[ "$nak" -gt 0 ] || fail "no NAK captured though WRITE packets were lost"
echo "ok: $n RoCEv2 packets as Wireshark reads them, $nak NAKs among them"
