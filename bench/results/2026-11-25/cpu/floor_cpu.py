#!/usr/bin/python3
# A bare ZeroMQ round trip (4n bytes up, 4 back, 4 up, 4n back; DEALER to a ROUTER in
# another context of this process), its wall time and the CPU time of the process
# per trip (getrusage). usage: floor_cpu.py [n floats, default 2^20]
import zmq, threading, time, resource, sys
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
ctx_s, ctx_c = zmq.Context(), zmq.Context()
r = ctx_s.socket(zmq.ROUTER); port = r.bind_to_random_port("tcp://127.0.0.1")
reply = bytes(4 * n); small = b"abcd"
def echo():
    while True:
        try: ident, m = r.recv_multipart(copy=False)
        except zmq.ContextTerminated: return
        r.send_multipart([ident, reply if len(m) == 4 else small], copy=False)
th = threading.Thread(target=echo, daemon=True); th.start()
d = ctx_c.socket(zmq.DEALER); d.connect("tcp://127.0.0.1:%d" % port)
buf = bytes(4 * n)
for i in range(20):
    d.send(buf, copy=False); d.recv(copy=False); d.send(small); d.recv(copy=False)
ru0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter(); k = 300
for i in range(k):
    d.send(buf, copy=False); d.recv(copy=False); d.send(small); d.recv(copy=False)
t1 = time.perf_counter(); ru1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
print("n=%d trip %.3f ms, cpu %.3f ms per trip: %.2f cores busy" % (n, (t1 - t0) / k * 1e3, cpu / k * 1e3, cpu / (t1 - t0)))
