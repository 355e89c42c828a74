# free_port: a TCP port nobody holds, chosen below the kernel's ephemeral
# range. A port from bind(0) is itself ephemeral: the program under test
# opens its own sockets (rsw binds one per connection) between our pick and
# its listen(), and the kernel may hand one of them that very port
# ("Couldn't listen to port ..."). Ports under ip_local_port_range's floor
# are never handed out that way.
free_port() {
    python3 - <<'PY'
import random, socket
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except OSError:
    lo = 32768
floor = 10000 if lo > 11000 else 1025
for _ in range(1000):
    port = random.randrange(floor, lo)
    s = socket.socket()
    try:
        s.bind(("", port))
    except OSError:
        continue
    finally:
        s.close()
    print(port)
    break
else:
    raise SystemExit("no free TCP port below the ephemeral range")
PY
}
