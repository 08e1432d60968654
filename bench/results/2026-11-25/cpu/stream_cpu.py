#!/usr/bin/python3
# A one-way stream of 4 MiB messages (PUSH to PULL in another context of this
# process): time per message and how many cores the process keeps busy.
import zmq, threading, time, resource
n = 1 << 20
ctx_s, ctx_c = zmq.Context(), zmq.Context()
r = ctx_s.socket(zmq.PULL); port = r.bind_to_random_port("tcp://127.0.0.1")
k = 400
def sink():
    for i in range(k + 20): r.recv(copy=False)
th = threading.Thread(target=sink); th.start()
d = ctx_c.socket(zmq.PUSH); d.connect("tcp://127.0.0.1:%d" % port)
buf = bytes(4 * n)
for i in range(20): d.send(buf, copy=False)
time.sleep(0.5)
ru0 = resource.getrusage(resource.RUSAGE_SELF); t0 = time.perf_counter()
for i in range(k): d.send(buf, copy=False)
th.join()
t1 = time.perf_counter(); ru1 = resource.getrusage(resource.RUSAGE_SELF)
cpu = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
print("streaming 4 MiB messages: %.3f ms each, %.2f cores busy" % ((t1 - t0) / k * 1e3, cpu / (t1 - t0)))
