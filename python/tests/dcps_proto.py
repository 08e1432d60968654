"""dcps_proto — a second dcps client, written from docs/protocol.md alone.

The suite drives real shards with it (test_protocol.py) to hold the spec and the
shard to each other: where they disagree, one of them is wrong. It knows the
protocol only from that page and from proto/dcps.proto, whose Python code protoc
generates at run time (``load``); nothing here comes from the C client
(worker/client.c). It needs pyzmq, protobuf's Python runtime, protoc and numpy.

The pieces, in the order of the spec:

- ``job_id(name)`` and ``shard_range(n, S, s)``: section 4.
- ``Conn``: one DEALER socket to one shard, speaking for one rank in one session
  (section 5). ``request`` sends a request with the next seq and waits for the
  reply with that seq (late replies to other seqs are dropped, HEARTBEAT WAITING
  restarts the wait) and sends the same bytes again, same seq, when none comes
  (section 8). An ERROR reply raises ``Error`` with its code and text. ``send``
  and ``recv`` are the raw halves, for messages a correct client would not send.
- ``Worker``: a rank on every shard of a job (section 12): HELLO, INIT, PULL (dense
  or delta, section 10), PUSH dense or sparse, BARRIER, DONE, BYE.
- ``encode`` and ``decode``: the shorter value formats of section 18 (float16,
  bfloat16, int8 with a scale per block, twobit), in numpy: the reference the
  suite holds the C codec to, bit for bit (test_values.py).

Arrays are numpy arrays: float32 and uint32, little-endian on the wire (section 2).
"""
import importlib
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq

PROTOCOL = 3
HEADER_MAX = 4096  # section 3: header bytes, unknown fields included
MAX_FRAMES = 4
BLOCK = 64  # section 4: shard ranges are whole blocks of 64 parameters

pb = None  # the module protoc generates from proto/dcps.proto (``load``)


def load(proto_dir):
    """Generates dcps_pb2 from proto_dir/dcps.proto with ``protoc --python_out``
    into a scratch directory, imports it as the module global ``pb`` and returns
    it. Raises FileNotFoundError without protoc, RuntimeError if it fails."""
    global pb
    if pb is not None:
        return pb
    protoc = shutil.which("protoc")
    if protoc is None:
        raise FileNotFoundError("protoc")
    out = tempfile.mkdtemp(prefix="dcps-pb2-")
    try:
        r = subprocess.run([protoc, f"--proto_path={proto_dir}", f"--python_out={out}",
                            os.path.join(proto_dir, "dcps.proto")],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"protoc failed: {r.stderr.strip()}")
        sys.path.insert(0, out)
        try:
            pb = importlib.import_module("dcps_pb2")
        finally:
            sys.path.remove(out)
    finally:
        shutil.rmtree(out, ignore_errors=True)  # the module is loaded: its file may go
    return pb


def job_id(name):
    """Section 4: the 64-bit FNV-1a hash of the name's bytes, 1 if that is 0."""
    h = 14695981039346656037
    for b in name.encode():
        h = ((h ^ b) * 1099511628211) % 2**64
    return h or 1


def shard_range(n, shards, s):
    """Section 4: the range [lo, hi) shard s of `shards` owns of n parameters."""
    blocks = -(-n // BLOCK)
    return (min(BLOCK * (blocks * s // shards), n), min(BLOCK * (blocks * (s + 1) // shards), n))


def new_session():
    """Section 5: a random nonzero 64-bit session."""
    return secrets.randbits(64) or 1


# --- section 18: shorter values ------------------------------------------------------------

FORMATS = {"fp16": 4, "bf16": 5, "int8": 6, "twobit": 7}  # FrameDesc.dtype
BF16_MAX = np.array([0x7f7f0000], "<u4").view("<f4")[0]  # the largest finite bfloat16


def frame_bytes(dtype, count, block=0):
    """Section 17: a frame's length for `count` values: 4 per float32 or uint32
    value, 8 per float64, 2 per float16 or bfloat16; int8 and twobit: a float32
    scale per block of `block` values (0: one for the frame; none when count is
    0), then 1 byte per code (int8) or 1 per 4 codes (twobit)."""
    if dtype in (1, 2, 3):
        return count * (8 if dtype == 3 else 4)
    if dtype in (4, 5):
        return 2 * count
    blocks = 0 if count == 0 else 1 if block == 0 else -(-count // block)
    return 4 * blocks + (count if dtype == 6 else -(-count // 4))


def _blocks(x, block):
    per = block or max(len(x), 1)
    return [x[a:a + per] for a in range(0, len(x), per)]


def encode(values, fmt, block=0, tau=0.0):
    """Section 17: float32 values in format fmt ("fp16", "bf16", "int8",
    "twobit"); returns (bytes, decoded float32 values)."""
    x = np.ascontiguousarray(values, dtype="<f4").reshape(-1)
    if fmt == "fp16":  # clamp to the largest finite, then numpy's round to nearest even
        h = np.clip(x, -65504, 65504).astype("<f2")
        return h.tobytes(), h.astype("<f4")
    if fmt == "bf16":  # the top 16 bits, rounded to nearest even (torch's conversion)
        u = np.clip(x, -BF16_MAX, BF16_MAX).view("<u4").astype(np.uint64)
        h = ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype("<u2")
        return h.tobytes(), (h.astype("<u4") << 16).view("<f4")
    scales, codes, dec = [], [], []
    for b in _blocks(x, block):
        if fmt == "int8":  # scale = max|x| / 127 in float32; codes rint(x / scale), clamped
            s = np.float32(np.max(np.abs(b))) / np.float32(127)
            with np.errstate(over="ignore"):
                if not np.isfinite(np.float32(127) * s):  # one step down: 127 s finite
                    s = np.nextafter(s, np.float32(0))
            q = np.clip(np.rint(b / s), -127, 127) if s > 0 else np.zeros(len(b), "<f4")
            codes.append(q.astype("<i1"))
            dec.append((codes[-1].astype("<f4") * s).astype("<f4"))
        else:  # twobit: 1 (+tau) at x >= tau, 2 (-tau) at x <= -tau, else 0
            s = np.float32(tau)
            c = np.where(b >= s, 1, np.where(b <= -s, 2, 0)).astype(np.uint8)
            codes.append(c)
            dec.append(np.where(c == 1, s, np.where(c == 2, -s, np.float32(0))).astype("<f4"))
        scales.append(s)
    code = np.concatenate(codes) if codes else np.zeros(0, np.uint8)
    if fmt == "twobit":  # four to a byte, from the low bits up
        pad = np.zeros(-len(code) % 4, np.uint8)
        c4 = np.concatenate([code, pad]).reshape(-1, 4).astype(np.uint8)
        code = (c4[:, 0] | c4[:, 1] << 2 | c4[:, 2] << 4 | c4[:, 3] << 6).astype(np.uint8)
    out = np.array(scales, "<f4").tobytes() + code.tobytes()
    return out, (np.concatenate(dec) if dec else np.zeros(0, "<f4"))


def decode(data, dtype, count, block=0):
    """Section 17: the float32 values of a frame of `count` values in dtype (its
    FrameDesc.dtype), without the checks a shard makes."""
    if dtype == 1:
        return np.frombuffer(data, "<f4").copy()
    if dtype == 4:
        return np.frombuffer(data, "<f2").astype("<f4")
    if dtype == 5:
        return (np.frombuffer(data, "<u2").astype("<u4") << 16).view("<f4")
    blocks = 0 if count == 0 else 1 if block == 0 else -(-count // block)
    per = block or max(count, 1)
    s = np.repeat(np.frombuffer(data[:4 * blocks], "<f4"), per)[:count]
    if dtype == 6:
        return (np.frombuffer(data[4 * blocks:], "<i1").astype("<f4") * s).astype("<f4")
    b = np.frombuffer(data[4 * blocks:], np.uint8)
    c = np.stack([b & 3, b >> 2 & 3, b >> 4 & 3, b >> 6 & 3], axis=1).reshape(-1)[:count]
    return np.where(c == 1, s, np.where(c == 2, -s, np.float32(0))).astype("<f4")


def values_frame(kind, values, fmt, block=0, tau=0.0):
    """A DENSE or VALUES frame in format fmt (section 18), as frame() makes
    float32 ones."""
    data, _ = encode(values, fmt, block, tau)
    desc = dict(kind=kind, dtype=FORMATS[fmt], count=len(np.asarray(values).reshape(-1)),
                bytes=len(data))
    if block:
        desc["block"] = block
    return desc, data


class Error(Exception):
    """An ERROR reply: code (an ErrorCode value), name ("SESSION"), text."""

    def __init__(self, reply):
        self.reply = reply
        self.code = reply.h.error_code
        self.name = pb.ErrorCode.Name(self.code)[2:] if self.code in pb.ErrorCode.values() \
            else str(self.code)
        self.text = reply.h.error_text
        super().__init__(f"{self.name}: {self.text}")


class Timeout(Exception):
    """No reply within the timeout, after every retry."""


class Reply:
    """A message from a shard: h, its dcps.Header; arrays, its payload frames as
    numpy arrays (float32, uint32 or float64), in order."""

    def __init__(self, parts):
        self.h = pb.Header.FromString(parts[0])
        self.arrays = []
        if len(self.h.frames) != len(parts) - 1:
            raise ValueError(f"{len(self.h.frames)} frames described, {len(parts) - 1} sent")
        self.raw = parts[1:]
        for d, p in zip(self.h.frames, parts[1:]):
            if d.bytes != len(p) or d.bytes != frame_bytes(d.dtype, d.count, d.block):
                raise ValueError(f"frame of {len(p)} bytes described as {d.count} in {d.bytes}")
            if d.dtype in (4, 5, 6, 7):  # section 18: shorter values, as float32
                self.arrays.append(decode(p, d.dtype, d.count, d.block))
                continue
            dt = {pb.DTYPE_FLOAT32: "<f4", pb.DTYPE_FLOAT64: "<f8"}.get(d.dtype, "<u4")
            self.arrays.append(np.frombuffer(p, dtype=dt))

    @property
    def type(self):
        return self.h.type

    def kinds(self):
        return [d.kind for d in self.h.frames]


def frame(kind, array, wide=False):
    """A payload frame: (FrameDesc fields, bytes). Float arrays travel as float32
    (float64 when wide), integer arrays as uint32, little-endian."""
    a = np.ascontiguousarray(array).reshape(-1)
    if wide:
        a, dtype = a.astype("<f8"), pb.DTYPE_FLOAT64
    elif a.dtype.kind == "f":
        a, dtype = a.astype("<f4"), pb.DTYPE_FLOAT32
    else:
        a, dtype = a.astype("<u4"), pb.DTYPE_UINT32
    return dict(kind=kind, dtype=dtype, count=a.size, bytes=a.nbytes), a.tobytes()


def dense(values):
    return [frame(pb.FRAME_DENSE, np.asarray(values, dtype=np.float32))]


def groups(ranges, options):
    """A parameter group table (section 14): GROUP_RANGES, uint32 (end, group)
    pairs, then GROUP_OPTIONS, float64 (lr_factor, weight_decay) pairs."""
    return [frame(pb.FRAME_GROUP_RANGES, np.asarray(ranges, dtype=np.uint32)),
            frame(pb.FRAME_GROUP_OPTIONS, options, wide=True)]


def buffers(floats, ints):
    """A publish of the model's buffers (section 15): BUFFER_FLOATS, float32,
    then BUFFER_INTS, float64 (whole numbers)."""
    return [frame(pb.FRAME_BUFFER_FLOATS, np.asarray(floats, dtype=np.float32)),
            frame(pb.FRAME_BUFFER_INTS, ints, wide=True)]


def sparse(indices, values):
    return [frame(pb.FRAME_INDICES, np.asarray(indices, dtype=np.uint32)),
            frame(pb.FRAME_VALUES, np.asarray(values, dtype=np.float32))]


class Conn:
    """One DEALER socket to one shard, speaking for `rank` in `session`.

    Every request names protocol 3, the job id, the rank, the session and a seq;
    other header fields are given per request (a field left out is absent on the
    wire). With curve = (server_public, public, secret), Z85 keys, the socket is a
    CURVE client (section 1). seq counts from `seq` up, one per request; a retry
    sends the same bytes again. With `shard` (its index) every reply must name
    that shard (section 7)."""

    def __init__(self, ctx, endpoint, job, rank, session=None, seq=1, curve=None,
                 timeout_ms=2000, retries=2, shard=None, routing_id=None):
        self.job, self.rank, self.shard = job, rank, shard
        self.session = new_session() if session is None else session
        self.seq = seq
        self.timeout_ms, self.retries = timeout_ms, retries
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if curve:
            self.sock.curve_serverkey, self.sock.curve_publickey, self.sock.curve_secretkey = curve
        if routing_id:  # section 1: better not; for the tests of what happens then
            self.sock.setsockopt(zmq.ROUTING_ID, routing_id)
        self.sock.connect(endpoint)

    def close(self):
        self.sock.close(0)

    def header(self, type_, seq, frames=(), **fields):
        """The Header of a request: the connection's fields, then `fields` (a
        value of None leaves that field out), then the frames' descriptions."""
        h = pb.Header(protocol=PROTOCOL, type=type_, job_id=self.job, rank=self.rank,
                      session=self.session, seq=seq)
        for k, v in fields.items():
            if v is None:
                h.ClearField(k)
            else:
                setattr(h, k, v)
        for desc, _ in frames:
            h.frames.add(**desc)
        return h

    def send(self, type_, frames=(), seq=None, extra=b"", raw=None, **fields):
        """Sends one message and returns its seq (the next one unless given). The
        header is header()'s, with `extra` (raw protobuf bytes: unknown fields)
        appended, or `raw` bytes instead; frames as frame() makes them."""
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        hdr = raw if raw is not None else \
            self.header(type_, seq, frames, **fields).SerializeToString() + extra
        self.sock.send_multipart([hdr] + [data for _, data in frames])
        return seq

    def recv(self, timeout_ms=None):
        """The next message from the shard, or None within timeout_ms."""
        t = self.timeout_ms if timeout_ms is None else timeout_ms
        if not self.sock.poll(t):
            return None
        return Reply(self.sock.recv_multipart())

    def request(self, type_, frames=(), seq=None, check=True, **fields):
        """Sends a request and returns its reply (section 8): waits timeout_ms for
        the reply with its seq, dropping replies to other seqs and restarting the
        wait on a HEARTBEAT WAITING for it; sends the same message again (same
        seq) when none came, `retries` times, then raises Timeout. An ERROR
        raises Error unless check is false."""
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        hdr = self.header(type_, seq, frames, **fields).SerializeToString()
        parts = [hdr] + [data for _, data in frames]
        for _ in range(self.retries + 1):
            self.sock.send_multipart(parts)
            deadline = time.monotonic() + self.timeout_ms / 1000
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                    break
                r = Reply(self.sock.recv_multipart())
                if r.h.seq != seq:
                    continue  # a late reply to an earlier request
                if r.type == pb.HEARTBEAT and r.h.flags & pb.FLAG_WAITING \
                        and type_ != pb.HEARTBEAT:
                    deadline = time.monotonic() + self.timeout_ms / 1000
                    continue
                self.check(r)
                if r.type == pb.ERROR and check:
                    raise Error(r)
                return r
        raise Timeout(f"{pb.MsgType.Name(type_)} seq {seq}: no reply after "
                      f"{self.retries + 1} attempts of {self.timeout_ms} ms")

    def check(self, r):
        """Section 7: a reply names the shard that sends it and, unless it is an
        ERROR, the request's job id, rank and session. Raises ValueError."""
        if self.shard is not None and r.h.shard != self.shard:
            raise ValueError(f"{pb.MsgType.Name(r.type)} names shard {r.h.shard}, "
                             f"not {self.shard}")
        if r.type != pb.ERROR and (r.h.job_id, r.h.rank, r.h.session) != \
                (self.job, self.rank, self.session):
            raise ValueError(f"{pb.MsgType.Name(r.type)} names job {r.h.job_id}, rank "
                             f"{r.h.rank}, session {r.h.session:x}")

    # --- the requests (section 7) -----------------------------------------------------------

    def hello(self, shard, n_params, **kw):
        return self.request(pb.HELLO, shard=shard, n_params=n_params, **kw)

    def init(self, w, **kw):
        return self.request(pb.INIT, dense(w), **kw)

    def push(self, step, version, g=None, idx=None, values=None, fmt=None, block=0, tau=0.0,
             **kw):
        """PUSH of a dense gradient g, or of idx/values (sparse); fmt: its values
        in that shorter format (section 18)."""
        f = dense(g) if g is not None else sparse(idx, values)
        if fmt is not None:
            f[-1] = values_frame(pb.FRAME_DENSE if g is not None else pb.FRAME_VALUES,
                                 g if g is not None else values, fmt, block, tau)
        return self.request(pb.PUSH, f, step=step, param_version=version, **kw)

    def push_parts(self, step, version, g, bounds, lo, order=None, seq=None, fmts=None,
                   **kw):
        """PUSH of dense gradient g (the shard's range, which starts at global
        index lo) in parts (section 17): part i covers bounds[i] to bounds[i+1]
        (offsets in g) and has seq base + i. Sends them all in `order` (default
        0, 1, ...), then takes one reply per part; returns the replies by part.
        base: `seq`, or the connection's next seq (which then moves past them).
        fmts: part i's values in the format fmts[i] (section 18: (fmt, block)
        or None, float32), its blocks counted from the part's first value."""
        n = len(bounds) - 1
        if seq is None:
            seq, self.seq = self.seq, self.seq + n
        for i in order if order is not None else range(n):
            a, b = bounds[i], bounds[i + 1]
            f = dense(g[a:b])
            if fmts is not None and fmts[i] is not None:
                f = [values_frame(pb.FRAME_DENSE, g[a:b], *fmts[i])]
            self.send(pb.PUSH, f, seq=seq + i, step=step, param_version=version,
                      part=i, parts=n, part_lo=lo + a, part_hi=lo + b, **kw)
        replies = {}
        while len(replies) < len(order if order is not None else range(n)):
            r = self.recv()
            if r is None:
                raise Timeout(f"PUSH in {n} parts from seq {seq}: {len(replies)} replies")
            if r.type == pb.HEARTBEAT:
                continue
            self.check(r)
            replies[r.h.seq - seq] = r
        return replies

    def pull_parts(self, step, parts, lo, hi, **kw):
        """PULL asking for a dense reply in `parts` parts (section 17); takes the
        parts as they come, checking them as a client must (count, order, range,
        version), and returns (values of [lo, hi), the replies)."""
        seq = self.send(pb.PULL, step=step, parts=parts, **kw)
        out = np.empty(hi - lo, dtype=np.float32)
        replies, at = [], lo
        while True:
            r = self.recv()
            if r is None:
                raise Timeout(f"PULL seq {seq} in {parts} parts: {len(replies)} came")
            if r.h.seq != seq or r.type == pb.HEARTBEAT:
                continue
            self.check(r)
            if r.type == pb.ERROR:
                raise Error(r)
            h = r.h
            if not (h.parts <= parts and h.part == len(replies) and h.part_lo == at
                    and h.part_lo < h.part_hi <= hi and r.kinds() == [pb.FRAME_DENSE]
                    and len(r.arrays[0]) == h.part_hi - h.part_lo
                    and (not replies or h.param_version == replies[0].h.param_version)):
                raise ValueError(f"bad part: {h}")
            out[h.part_lo - lo:h.part_hi - lo] = r.arrays[0]
            replies.append(r)
            at = h.part_hi
            if h.part + 1 == h.parts:
                if at != hi:
                    raise ValueError(f"the parts end at {at}, the range at {hi}")
                return out, replies

    def pull(self, step, held=None, want=None, exact=False, **kw):
        """PULL for `step`; with held (the version the worker holds) a DELTA pull,
        want entries at most; exact: EXACT."""
        if held is not None:
            return self.request(pb.PULL, step=step, flags=pb.FLAG_DELTA, param_version=held,
                                want=want, **kw)
        return self.request(pb.PULL, step=step, flags=pb.FLAG_EXACT if exact else None, **kw)

    def barrier(self, step, **kw):
        return self.request(pb.BARRIER, step=step, **kw)

    def heartbeat(self, **kw):
        return self.request(pb.HEARTBEAT, **kw)

    def buffers(self, floats=None, ints=None, flags=0, **kw):
        """BUFFERS to shard 0 (section 15): publishes floats and ints if given,
        else only asks; the reply's frames are the job's buffers, if any."""
        frames = buffers(floats, ints) if floats is not None else ()
        return self.request(pb.BUFFERS, frames, flags=flags, **kw)

    def done(self, **kw):
        return self.request(pb.DONE, **kw)

    def bye(self, **kw):
        return self.request(pb.BYE, **kw)


class Worker:
    """A worker rank on every shard of a job (section 12): one session, one Conn
    per shard, the ranges from the WELCOMEs, and what it holds of each range
    with that range's version (delta pulls, section 10)."""

    def __init__(self, ctx, endpoints, job, rank, n_params, **conn):
        self.n = n_params
        self.session = new_session()
        self.conns = [Conn(ctx, ep, job, rank, self.session, shard=s, **conn)
                      for s, ep in enumerate(endpoints)]
        self.ranges, self.welcome = [], []
        self.held = np.zeros(n_params, dtype=np.float32)
        self.version = [None] * len(endpoints)  # the version held of each range
        self.replies = []  # the last pull's

    @property
    def kinds(self):
        """The frame kinds of the last pull's replies."""
        return [r.kinds() for r in self.replies]

    def close(self):
        for c in self.conns:
            c.close()

    def hello(self):
        """HELLO to every shard; returns the WELCOMEs."""
        self.welcome = [c.hello(s, self.n) for s, c in enumerate(self.conns)]
        self.ranges = [(w.h.range_lo, w.h.range_hi) for w in self.welcome]
        return self.welcome

    def init(self, w):
        """Rank 0: INIT of each range; returns the acks."""
        return [c.init(w[lo:hi]) for c, (lo, hi) in zip(self.conns, self.ranges)]

    def pull(self, step, delta=False, want=None, exact=False):
        """PULL from every shard; updates held (a delta is added to it) and the
        versions; returns held. delta: a DELTA pull where a version is held. The
        replies stay in `replies`."""
        self.replies = []
        for s, (c, (lo, hi)) in enumerate(zip(self.conns, self.ranges)):
            held = self.version[s] if delta else None
            r = c.pull(step, held=held, want=want if held is not None else None, exact=exact)
            self.replies.append(r)
            if r.kinds() == [pb.FRAME_DENSE]:
                self.held[lo:hi] = r.arrays[0]
            else:  # INDICES + VALUES to add, at global indices
                idx, val = r.arrays
                self.held[idx] = self.held[idx] + val
            self.version[s] = r.h.param_version
        return self.held

    def push(self, step, g=None, idx=None, values=None, **fmt):
        """PUSH a dense gradient of the whole model (g), or global idx/values,
        each shard its part; param_version is the version pulled; fmt: Conn.push's
        fmt, block and tau (section 18). Returns the acks."""
        acks = []
        for s, (c, (lo, hi)) in enumerate(zip(self.conns, self.ranges)):
            v = self.version[s] or 0
            if g is not None:
                acks.append(c.push(step, v, g=g[lo:hi], **fmt))
            else:
                idx = np.asarray(idx, dtype=np.uint32)
                m = (idx >= lo) & (idx < hi)
                acks.append(c.push(step, v, idx=idx[m], values=np.asarray(values)[m], **fmt))
        return acks

    def each(self, name, *args, **kw):
        """The same request to every shard (barrier, heartbeat, done, bye)."""
        return [getattr(c, name)(*args, **kw) for c in self.conns]
