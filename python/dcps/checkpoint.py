"""dcps.checkpoint: a job's model from its shards' checkpoint files, without shards.

    python3 -m dcps.checkpoint DIR --job JOB.ini --out model.pt [--model MOD:CLASS] [--state]

reads the newest usable checkpoint of every shard of the job in DIR (the job's
``[server] checkpoint_dir``) and writes the model's parameters, in dcps.torch's
flat order, as a file ``torch.load`` reads. In Python::

    import dcps.checkpoint as dc
    flat = dc.load(DIR, "job.ini")                # numpy float32, n parameters
    model.load_state_dict(dc.state_dict(DIR, "job.ini", model))

The file format is server/checkpoint.h's (formats 1, 2 and 3): a 128-byte
header ("DCPSCKPT", format, header size, job id, n_params, the shard's range
[lo, hi), shard index, workers, rule, mode, pull, flags, version, seq, creation
time, floats, payload length, and a CRC-32C of the header before it), a payload
whose first floats are the shard's w over its range, then the rule's state
(momentum's and adagrad's one array, adam's and adamw's m then v, then the
adaptive delay compensation's mean square), and a CRC-32C of header and
payload. This module reads the floats only; the sessions, counters and
consistency state after them are the server's business. Every file is
checked as the server checks it before restoring: magic, format, both CRCs,
size; a file that fails is skipped for the next older one of its shard, as
the server does, and if none of a shard's files is usable the load fails with
a sentence naming the newest and what is wrong with it (``CheckpointError``).
"""
import argparse
import configparser
import os
import re
import sys

import numpy

__all__ = ["CheckpointError", "Shard", "read", "newest", "load", "state", "state_dict",
           "crc32c"]

HEADER_SIZE = 128
_CRC_AT = 124
_FORMATS = (1, 2, 3)
# enum dcps_optimizer (common/config.h) and each rule's state arrays in the
# order the shard keeps them (dcps_rule_states, server/optimizer.h).
_KINDS = ("sgd", "momentum", "dcasgd", "adam", "adamw", "adagrad")
_STATES = {"sgd": (), "momentum": ("momentum_buffer",), "adagrad": ("sum",),
           "adam": ("exp_avg", "exp_avg_sq"), "adamw": ("exp_avg", "exp_avg_sq")}
_MODES = ("async", "sync", "ssp")
_FLAG_INITIALIZED, _FLAG_ADAPTIVE, _FLAG_DELAY = 1, 2, 4
_NAME = re.compile(r"^shard-(\d+)-(\d+)-v(\d+)\.ckpt$")


class CheckpointError(ValueError):
    """A checkpoint file or directory that cannot give the model, with the
    file's path and what is wrong."""


# --- CRC-32C (Castagnoli, reflected), as dcps_checkpoint_crc32c ------------------

def _table():
    t = numpy.arange(256, dtype=numpy.uint32)
    for _ in range(8):
        t = numpy.where(t & 1, (t >> 1) ^ numpy.uint32(0x82F63B78), t >> 1).astype(numpy.uint32)
    return t


_T = _table()
_ROW = 2048  # bytes per row: the rows' registers advance together, one byte per numpy op


def _advance(reg, cols):
    """The raw CRC registers reg (uint32 array) after feeding each one its
    column of bytes: cols is (len, len(reg)) uint8, or an int: that many zero bytes."""
    zeros = isinstance(cols, int)
    for j in range(cols if zeros else cols.shape[0]):
        idx = reg & 0xFF if zeros else (reg ^ cols[j]) & 0xFF
        reg = _T[idx] ^ (reg >> 8)
    return reg


def crc32c(data, crc=0):
    """CRC-32C of data (bytes-like), chained as dcps_checkpoint_crc32c:
    crc32c(b, crc32c(a)) is the CRC of a followed by b. The CRC is linear, so
    the data is cut into rows of 2048 bytes whose registers numpy advances
    together; the rows are then joined by the zero-shift matrix of one row."""
    b = numpy.frombuffer(memoryview(data).cast("B"), dtype=numpy.uint8)
    reg = (~crc) & 0xFFFFFFFF
    rows = b.size // _ROW
    if rows > 1:
        body = b[:rows * _ROW].reshape(rows, _ROW)
        part = _advance(numpy.zeros(rows, dtype=numpy.uint32), numpy.ascontiguousarray(body.T))
        basis = _advance(numpy.uint32(1) << numpy.arange(32, dtype=numpy.uint32), _ROW)
        basis = [int(v) for v in basis]
        for r in part.tolist():  # reg = shift(reg by one row of zeros) ^ the row's own
            shifted, bit = 0, 0
            while reg:
                if reg & 1:
                    shifted ^= basis[bit]
                reg >>= 1
                bit += 1
            reg = shifted ^ r
        b = b[rows * _ROW:]
    t = _T.tolist()
    for byte in b.tolist():
        reg = t[(reg ^ byte) & 0xFF] ^ (reg >> 8)
    return (~reg) & 0xFFFFFFFF


# --- one file --------------------------------------------------------------------

class Shard:
    """One checkpoint file, read and checked: its header's fields (index,
    n_params, lo, hi, workers, format, job_id, kind, mode, version, seq,
    created, flags), ``w`` (hi - lo float32) and ``state``, a dict of the rule's
    state arrays by torch.optim's names (``momentum_buffer``; ``exp_avg`` and
    ``exp_avg_sq``; ``sum``), each over the same range."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise CheckpointError(f"{path}: cannot read: {e.strerror}") from None
        self._parse(raw)

    def _fail(self, why):
        raise CheckpointError(f"{self.path}: {why}")

    def _parse(self, raw):
        if raw[:8] != b"DCPSCKPT"[:len(raw)]:
            self._fail("not a dcps checkpoint (bad magic)")
        if len(raw) < HEADER_SIZE:
            self._fail(f"truncated: {len(raw)} of at least {HEADER_SIZE} bytes (no complete "
                       "header)")
        h = numpy.frombuffer(raw, dtype="<u4", count=HEADER_SIZE // 4)
        q = lambda at: int.from_bytes(raw[at:at + 8], "little")  # noqa: E731
        self.format, header_size = int(h[2]), int(h[3])
        if self.format not in _FORMATS or header_size != HEADER_SIZE:
            self._fail(f"format {self.format} with a header of {header_size} bytes, this "
                       f"reader reads formats 1 to 3 ({HEADER_SIZE})")
        stored, crc = int(h[_CRC_AT // 4]), crc32c(raw[:_CRC_AT])
        if stored != crc:
            self._fail(f"header checksum mismatch (stored {stored:08x}, computed {crc:08x})")
        self.job_id, self.n_params, self.lo, self.hi = q(16), q(24), q(32), q(40)
        self.index, self.workers, kind, mode, _pull, self.flags = (int(v) for v in h[12:18])
        self.version, self.seq, self.created, floats, payload = q(72), q(80), q(88), q(96), q(104)
        expect = HEADER_SIZE + payload + 4
        if len(raw) != expect:
            self._fail(f"truncated: {len(raw)} of {expect} bytes" if len(raw) < expect else
                       f"{len(raw)} bytes, {expect} expected")
        stored = int.from_bytes(raw[-4:], "little")
        crc = crc32c(memoryview(raw)[:-4])
        if stored != crc:
            self._fail(f"checksum mismatch (stored {stored:08x}, computed {crc:08x})")
        if kind >= len(_KINDS) or mode >= len(_MODES):
            self._fail(f"rule {kind} or mode {mode}, which this reader does not know")
        self.kind, self.mode = _KINDS[kind], _MODES[mode]
        if self.format <= 2:  # before format 3 the rule and delay compensation were one kind
            if self.kind == "dcasgd":
                self.kind, self.flags = "sgd", self.flags | _FLAG_DELAY
            else:
                self.flags &= ~_FLAG_ADAPTIVE
        n = self.hi - self.lo
        if not (self.lo <= self.hi <= self.n_params) or floats * 4 > payload or floats < n:
            self._fail(f"range [{self.lo}, {self.hi}) of {self.n_params} with {floats} floats "
                       f"in a payload of {payload} bytes does not fit")
        self.initialized = bool(self.flags & _FLAG_INITIALIZED)
        body = numpy.frombuffer(raw, dtype="<f4", count=floats, offset=HEADER_SIZE)
        self.w = body[:n].astype(numpy.float32)
        self.state = {}
        for j, name in enumerate(_STATES.get(self.kind, ())):
            if floats >= (j + 2) * n:
                self.state[name] = body[(j + 1) * n:(j + 2) * n].astype(numpy.float32)

    def __repr__(self):
        return (f"<dcps.checkpoint.Shard {self.path}: shard {self.index} [{self.lo}, {self.hi})"
                f" of {self.n_params}, {self.kind}, version {self.version}>")


read = Shard


def _listing(directory):
    try:
        names = os.listdir(directory)
    except OSError as e:
        raise CheckpointError(f"{directory}: cannot read the directory: {e.strerror}") from None
    by_shard = {}
    for name in names:
        m = _NAME.match(name)
        if m:
            by_shard.setdefault(int(m.group(1)), []).append((int(m.group(2)), name))
    for files in by_shard.values():
        files.sort(reverse=True)  # newest (highest seq) first, as the server tries them
    return by_shard


def newest(directory, index, job_id=None):
    """The newest usable checkpoint of shard ``index`` in directory (a Shard):
    files are tried newest first, as the server does, skipping one that is
    corrupt or of another job id; CheckpointError naming the newest file and why
    if none is usable, or if there is none."""
    files = _listing(directory).get(index)
    if not files:
        raise CheckpointError(f"no checkpoint of shard {index} in {directory}")
    first = None
    for _, name in files:
        try:
            s = Shard(os.path.join(directory, name))
            if job_id is not None and s.job_id != job_id:
                raise CheckpointError(f"{s.path}: job id {s.job_id}, this job is {job_id}")
            if s.index != index:
                raise CheckpointError(f"{s.path}: shard {s.index} in a file named for {index}")
            return s
        except CheckpointError as e:
            first = first or e
    raise CheckpointError(f"none of the {len(files)} checkpoints of shard {index} in "
                          f"{directory} is usable; the newest, {first}")


# --- the job ---------------------------------------------------------------------

def _fnv1a64(text):
    h = 14695981039346656037
    for byte in text.encode():
        h = ((h ^ byte) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def _job(job):
    """(job id, number of shards) of a job file, as the server derives them:
    [job] id, or FNV-1a of [job] name (default "dcps"); the entries of
    [servers] shards. None for a job not given."""
    if job is None:
        return None, None
    cp = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None,
                                   strict=False)
    try:
        with open(job) as f:
            cp.read_file(f)
    except (OSError, configparser.Error) as e:
        raise CheckpointError(f"{job}: cannot read the job file: {e}") from None
    name = cp.get("job", "name", fallback="dcps").strip()
    job_id = int(cp.get("job", "id", fallback="0").strip() or 0, 0) or _fnv1a64(name) or 1
    shards = cp.get("servers", "shards", fallback="").strip()
    count = len([s for s in shards.split(",") if s.strip()]) if shards else 2
    return job_id, count


def shards(directory, job=None):
    """The newest usable checkpoint of every shard of the job, a list of Shard
    by index. Without a job file, the shards are those the directory holds
    checkpoints of, and they must agree with each other; with one, its job id
    and number of shards must match."""
    job_id, count = _job(job)
    if count is None:
        found = sorted(_listing(directory))
        if not found:
            raise CheckpointError(f"no checkpoint in {directory}")
        count = found[-1] + 1
    out = [newest(directory, i, job_id) for i in range(count)]
    n = out[0].n_params
    at = 0
    for s in out:
        if s.n_params != n or s.job_id != out[0].job_id:
            raise CheckpointError(f"{s.path}: job id {s.job_id} with {s.n_params} parameters, "
                                  f"{out[0].path} has {out[0].job_id} with {n}")
        if s.lo != at:
            raise CheckpointError(f"{s.path}: range [{s.lo}, {s.hi}) does not follow the "
                                  f"previous shard's, which ends at {at}")
        at = s.hi
    if at != n:
        raise CheckpointError(f"the shards' ranges end at {at} of {n} parameters: is the "
                              "number of shards the job's?")
    if not all(s.initialized for s in out):
        raise CheckpointError(f"{[s.path for s in out if not s.initialized][0]}: the shard "
                              "was never initialised (no worker sent parameters)")
    return out


def load(directory, job=None):
    """The model's n parameters as the shards' newest usable checkpoints hold
    them: a numpy float32 array, in dcps.torch's flat order (the model's
    named_parameters(), each shared tensor once)."""
    return numpy.concatenate([s.w for s in shards(directory, job)])


def state(directory, job=None):
    """The update rule's state as the checkpoints hold it: (kind, {name: flat
    float32 array}) with torch.optim's names (sgd: none; momentum:
    momentum_buffer; adam, adamw: exp_avg, exp_avg_sq; adagrad: sum). Empty
    where a shard's file lacks a state array."""
    parts = shards(directory, job)
    names = set.intersection(*(set(s.state) for s in parts))
    return parts[0].kind, {k: numpy.concatenate([s.state[k] for s in parts]) for k in names}


def _split(flat, model):
    """flat over model's parameters in dcps.torch's order, as a dict of tensors
    by parameter name (each a clone of its own)."""
    import torch

    out, seen, at = {}, {}, 0
    for name, p in model.named_parameters():
        if id(p) in seen:
            out[name] = out[seen[id(p)]]
            continue
        seen[id(p)] = name
        k = p.numel()
        if at + k > flat.size:
            break
        out[name] = torch.from_numpy(flat[at:at + k].copy()).view(p.shape)
        at += k
    if at != flat.size or len(out) != len(list(model.named_parameters())):
        total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
        raise CheckpointError(f"the checkpoint holds {flat.size} parameters, the model has "
                              f"{total}")
    return out


def state_dict(directory, job, model, optimizer_state=False):
    """model.state_dict() with the parameters the checkpoints hold (buffers
    keep model's values, which the shards do not hold), ready for
    model.load_state_dict. With optimizer_state, (state_dict, kind, {parameter
    name: {state name: tensor}})."""
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    params = _split(load(directory, job), model)
    sd.update(params)
    if not optimizer_state:
        return sd
    kind, flat = state(directory, job)
    per = {}
    for key, arr in flat.items():
        for name, t in _split(arr, model).items():
            per.setdefault(name, {})[key] = t
    return sd, kind, per


def _model(spec):
    """MODULE:CALLABLE (a file path or a module name), called with no arguments."""
    import importlib
    import importlib.util

    mod, _, attr = spec.rpartition(":")
    if not mod or not attr:
        raise SystemExit(f"--model {spec!r}: give MODULE:CALLABLE, e.g. "
                         "examples/torch/fashion_cnn.py:FashionCNN")
    if mod.endswith(".py") or os.sep in mod:
        s = importlib.util.spec_from_file_location(os.path.basename(mod)[:-3], mod)
        m = importlib.util.module_from_spec(s)
        sys.path.insert(0, os.path.dirname(os.path.abspath(mod)))
        s.loader.exec_module(m)
    else:
        m = importlib.import_module(mod)
    return getattr(m, attr)()


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="python3 -m dcps.checkpoint",
        description="Writes the model a job's shard checkpoints hold as a torch-loadable file.")
    ap.add_argument("dir", help="the job's [server] checkpoint_dir")
    ap.add_argument("--job", help="the job file (checks its job id and number of shards)")
    ap.add_argument("--out", required=True, help="the file to write (torch.save)")
    ap.add_argument("--model", help="MODULE:CALLABLE building the model: the file is then its "
                    "state_dict (parameters from the checkpoint, buffers as built); without it, "
                    "{'params': flat float32 tensor}")
    ap.add_argument("--state", action="store_true", help="also the update rule's state "
                    "(momentum_buffer; exp_avg, exp_avg_sq; sum), under 'optimizer'")
    args = ap.parse_args(argv)
    import torch

    try:
        parts = shards(args.dir, args.job)
        if args.model:
            model = _model(args.model)
            if args.state:
                sd, kind, per = state_dict(args.dir, args.job, model, optimizer_state=True)
                out = {"model": sd, "optimizer": {"kind": kind, "state": per}}
            else:
                out = state_dict(args.dir, args.job, model)
        else:
            out = {"params": torch.from_numpy(numpy.concatenate([s.w for s in parts]))}
            if args.state:
                kind, flat = state(args.dir, args.job)
                out["optimizer"] = {"kind": kind,
                                    "state": {k: torch.from_numpy(v) for k, v in flat.items()}}
    except CheckpointError as e:
        print(f"dcps.checkpoint: {e}", file=sys.stderr)
        return 1
    torch.save(out, args.out)
    n = parts[0].n_params
    print(f"{args.out}: {n} parameters from {len(parts)} shards "
          f"(versions {', '.join(str(s.version) for s in parts)}; {parts[0].kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
