# Captures the RoCEv2 (UDP port 4791) packets seen on one interface, one
# line per packet: "in|out <hex of the IP packet>". Runs until SIGTERM
# (then reads what is still queued) or the time limit; prints "ready" once
# the socket is bound.
import signal
import socket
import sys
import time

ifname, out, limit = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))  # ETH_P_ALL
s.bind((ifname, 0))
s.settimeout(0.2)
stop = [False]
signal.signal(signal.SIGTERM, lambda *a: stop.__setitem__(0, True))
end = time.time() + limit
n = 0
with open(out, "w") as f:
    print("ready", flush=True)
    while time.time() < end:
        try:
            data, addr = s.recvfrom(65535)
        except socket.timeout:
            if stop[0]:
                break
            continue
        eth = int.from_bytes(data[12:14], "big")
        ip = data[14:]
        if eth == 0x0800 and ip[9] == 17:
            udp = ip[(ip[0] & 15) * 4:]
        elif eth == 0x86DD and ip[6] == 17:
            udp = ip[40:]
        else:
            continue
        if int.from_bytes(udp[2:4], "big") != 4791:
            continue
        # sll_pkttype: 4 is PACKET_OUTGOING
        f.write("%s %s\n" % ("out" if addr[2] == 4 else "in", ip.hex()))
        f.flush()
        n += 1
print("captured", n, flush=True)
