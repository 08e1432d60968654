"""dcps.torch: train a PyTorch model through dcps shards.

A few lines added to a training script, in the conventions of Horovod's and
BytePS's ``DistributedOptimizer``::

    import dcps.torch as dt
    worker = dt.Worker(model)                 # job from DCPS_JOB, rank from DCPS_RANK
    for x, y in dt.shard(dataset):            # this rank's batches, every epoch of the job
        loss_fn(model(x), y).backward()
        worker.step()                         # push the gradients, pull the parameters
    worker.finish()                           # exact pull, barrier, close; the final: line

The model's parameters are flattened once into one contiguous float32 buffer and
become views of it; their gradients likewise. ``step()`` hands both buffers to
libdcps's step (``dcps.Step``), which compresses, pushes and pulls in place:
no copy of the model per step, and no optimizer in the script (the shards apply
the job's update rule). Everything a step does is the C library's; this module
only flattens, shards the data and reports.

A model on the CPU uses host buffers. A model on one CUDA device gets its two
buffers on that device and libdcps's device path (``Step.use_stream``): error
feedback and the Top-k selection run on the GPU, only the k pushed pairs and
what the pull brings cross PCIe, and the step works on the device's current
stream (``torch.cuda.current_stream``) at each call, so it is ordered with the
script's own work there. With ``bucket_mb`` a CUDA model's buckets go through
pinned host buffers instead (_Staging): libdcps's step in ranges takes host
arrays.
"""
import concurrent.futures
import contextlib
import math
import os
import sys
import time
import weakref

import numpy
import torch

from . import ArrayError, ConfigError, Error, StateError, Step, share

__all__ = ["Worker", "shard", "decay_groups", "sampler", "Sampler"]

_current = None  # the Worker shard() uses when none is given


_BUFFER_MODES = ("rank0", "average", "local")


def _env(name, what):
    value = os.environ.get(name)
    if value is None or value == "":
        raise ConfigError(f"no {what}: pass it to dcps.torch.Worker or set {name}")
    return value


def _bucket_cap(bucket_mb):
    """bucket_mb as MiB: None, 0 or False for no buckets, True for DDP's 25."""
    if bucket_mb is None or bucket_mb is False:
        return 0.0
    if bucket_mb is True:
        return 25.0
    cap = float(bucket_mb)
    if not (math.isfinite(cap) and cap >= 0):
        raise ValueError(f"bucket_mb={bucket_mb!r}: a size in MiB above 0 (DDP's bucket_cap_mb "
                         "is 25), or None for the whole gradient at step()")
    return cap


class Worker:
    """One worker rank of a dcps job for ``model``.

    ``job``: the job file (default: ``$DCPS_JOB``); ``rank``: this worker's rank
    (default: ``$DCPS_RANK``); ``overrides``: ``"section.key=value"`` strings, as
    ``--set``, after those in ``$DCPS_SET`` (one a line; deploy/launch-local.sh
    puts the shards' endpoints there). Rank 0's parameters initialise the
    shards; every rank starts from the shards' parameters. Parameters must be float32, all on the CPU or all
    on one CUDA device (then the device path, see the module's text; without a
    usable GPU or with a job option the device path does not do, the Step
    refuses with dcps.NoGPUError or dcps.ConfigError naming the key).

    ``param_groups``: torch.optim's structure, a list of dicts each with
    ``"params"`` (the group's parameters) and optionally ``"weight_decay"``
    (absolute) and ``"lr_factor"`` (a factor of the shards' lr) or ``"lr"``
    (absolute, taken as the factor lr / [optimizer] lr). Every parameter of the
    model must be in exactly one group. The shards apply each group's options
    to its parameters (docs/pytorch.md, "Parameter groups"); rank 0 sets the
    groups, and every rank's must be the same. ``decay_groups(model)`` builds
    the usual split.

    ``buffers``: what becomes of the model's buffers (BatchNorm's running
    statistics; docs/pytorch.md, "Buffers"). ``"rank0"`` (the default, as
    DDP's ``broadcast_buffers``): rank 0 publishes its buffers to the shards
    every ``[worker] buffer_every`` steps and at ``finish()``, and the other
    ranks take them; ``"average"``: every rank publishes and takes the mean of
    every live rank's latest (integer buffers such as ``num_batches_tracked``
    follow rank 0); ``"local"``: every rank keeps its own. After ``finish()``
    every rank holds the same parameters and, but with ``"local"``, the same
    buffers. Every rank of a job must be given the same mode.

    ``bucket_mb``: push the gradients in buckets during the backward pass, as
    DDP's ``bucket_cap_mb`` (docs/pytorch.md, "Buckets"): the parameters in
    reverse order of registration, grouped in buckets of about that many MiB
    (``True``: 25, DDP's default), each pushed as soon as autograd has produced
    all its gradients while backward goes on (libdcps's step in ranges), each
    with its own Top-k and error-feedback residual. ``None`` or 0 (the
    default): the whole gradient at ``step()``. One backward pass a step, and
    no change to the gradients after it (clip_grad_norm_ is refused at
    ``step()``). A CUDA model's buckets are copied to host memory as autograd
    hands them over and pushed by a thread of their own. ``ordered_pull``: with
    buckets, ``step()`` returns once its pushes are acknowledged, and the pull
    goes on front first while the next forward pass starts: a hook before each
    module's forward waits only for that module's own parameters (and, on a
    CUDA model, copies them to the device).
    """

    def __init__(self, model, job=None, rank=None, overrides=(), param_groups=None,
                 buffers="rank0", bucket_mb=None, ordered_pull=False):
        global _current
        if buffers not in _BUFFER_MODES:
            raise ValueError(f"buffers={buffers!r}: the modes are \"rank0\" (rank 0's, as "
                             "DDP's broadcast_buffers), \"average\" and \"local\"")
        bucket_mb = _bucket_cap(bucket_mb)
        if ordered_pull and not bucket_mb:
            raise ValueError("ordered_pull=True needs bucket_mb: the pull is asked for per "
                             "bucket (give bucket_mb=25, say)")
        if job is None:
            job = _env("DCPS_JOB", "job file")
        if rank is None:
            text = _env("DCPS_RANK", "rank")
            try:
                rank = int(text)
            except ValueError:
                raise ConfigError(f"DCPS_RANK={text!r} is not a rank") from None
        overrides = [line for line in os.environ.get("DCPS_SET", "").splitlines()
                     if line.strip()] + list(overrides)
        self.model = model
        named = []
        seen = set()
        devices = set()
        for name, p in model.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            if p.dtype != torch.float32:
                raise ArrayError(f"parameter {name} is {p.dtype}; dcps trains float32 "
                                 "parameters only (model.float())" + _HALF.get(p.dtype, ""))
            if p.device.type not in ("cpu", "cuda"):
                raise ArrayError(f"parameter {name} is on {p.device}; dcps takes CPU or CUDA "
                                 "tensors")
            if devices and p.device not in devices:
                raise ArrayError(f"parameter {name} is on {p.device}, others on "
                                 f"{next(iter(devices))}; a dcps worker's model is on one "
                                 "device")
            devices.add(p.device)
            named.append((name, p))
        if not named:
            raise ArrayError("the model has no parameters")
        n = sum(p.numel() for _, p in named)
        self._params = [p for _, p in named]
        self._index = {id(p): i for i, p in enumerate(self._params)}
        self.device = next(iter(devices))
        self._cuda = self.device.type == "cuda"
        # One buffer each for parameters and gradients; the tensors become views.
        self._flat = torch.empty(n, dtype=torch.float32, device=self.device)
        self._grad = torch.zeros(n, dtype=torch.float32, device=self.device)
        self._slices = []  # each parameter's view of the gradient buffer
        offsets, names, at = [], [], 0
        with torch.no_grad():
            for name, p in named:
                k = p.numel()
                self._flat[at:at + k].copy_(p.detach().reshape(-1))
                p.data = self._flat[at:at + k].view_as(p)
                p.grad = self._grad[at:at + k].view_as(p)
                self._slices.append(self._grad[at:at + k])
                offsets.append(at)
                names.append(name)
                at += k
        self._names = names
        self._bound = _binding(self._params)  # what step() checks the model against
        self._live = True  # the shards own the parameters: until finish() or close()
        self._finished = False  # finish() ran: the model holds the final parameters
        self._hooks = _guard_model(self, model)
        self.skipped_steps = 0  # steps whose gradient was not finite: nothing pushed
        self._shard_next = 1  # the job-epoch dt.shard serves next on this worker
        self._step = Step(os.fspath(job), rank, n, overrides)
        self._step.set_names(offsets, names)
        if param_groups is not None:
            ranges, options = _group_table(named, param_groups, self._step.job)
            self._step.set_groups(ranges, options)
        self._buckets = None
        self._pulling = False  # an ordered pull is in flight
        # A CUDA model with buckets: the step in ranges takes host arrays, so
        # the gradients are staged through host buffers (_Staging).
        self._staging = None
        if bucket_mb and (self._cuda or _STAGE_CPU):
            self._staging = _Staging(n, self._cuda)
        if bucket_mb:
            self._buckets_setup(model, offsets, bucket_mb, ordered_pull)
        if self._staging is not None:
            self._p_arg, self._g_arg = self._staging.p_np, self._staging.g_np
            self._staging.p.copy_(self._flat)  # rank 0's initial parameters
        elif self._cuda:
            # Device pointers on the current stream; the buffers never move.
            self._stream = None
            self._use_current_stream()
            self._p_arg, self._g_arg = self._flat.data_ptr(), self._grad.data_ptr()
        else:
            self._p_arg, self._g_arg = self._flat.numpy(), self._grad.numpy()
        self._device_step = self._cuda and self._staging is None
        job_values = self._step.job
        self.rank = job_values["rank"]
        self.workers = job_values["workers"]
        self.epochs = job_values["epochs"]
        self.batch_size = job_values["batch_size"]
        self.seed = job_values["seed"]
        self.log_every = job_values["log_every"]
        self.mode = job_values["mode"]
        self.n = n
        self.epoch = 1
        self.samples = 0
        # Losses are summed as they come (tensors: no device synchronisation per
        # step) and read when a progress line or the final line needs them.
        self._loss_sum, self._loss_count = 0.0, 0
        self._epoch_loss, self._epoch_count, self._epoch_of_loss = 0.0, 0, 1
        self._t_win, self._win_samples = time.monotonic(), 0
        with self._on_device():
            self._step.start(self._p_arg)
        self._landed()
        self._t_start = time.monotonic()  # training time counts from here (final:)
        self.resumed = self._step.resumed
        self._buffers_setup(buffers, job_values["buffer_every"])
        _current = self

    def _buckets_setup(self, model, offsets, cap_mb, ordered):
        """Buckets of at most cap_mb MiB (a parameter larger than that is a
        bucket of its own) in reverse order of registration: each a range of
        the flat buffer, which the step is told once. A hook on each
        parameter's gradient accumulator pushes its bucket when the bucket's
        last gradient is in; with ordered pulls, a forward pre-hook on every
        module that holds parameters waits for them."""
        cap = cap_mb * 2.0 ** 20
        ends = [o + p.numel() for o, p in zip(offsets, self._params)]
        buckets, cur, size = [], [], 0.0
        for i in reversed(range(len(self._params))):
            cur.append(i)
            size += self._params[i].numel() * 4
            if size >= cap:
                buckets.append(cur)
                cur, size = [], 0.0
        if cur:
            buckets.append(cur)
        # bucket b: (lo, hi, its parameters' indices), b = 0 the model's end
        self._buckets = [(offsets[min(b)], ends[max(b)], b) for b in buckets]
        self._bucket_of = {}
        for k, (_, _, members) in enumerate(self._buckets):
            for i in members:
                self._bucket_of[i] = k
        try:
            self._step.set_ranges(sorted(hi for _, hi, _ in self._buckets))
        except Error as e:
            if e.name != "INVAL":
                raise
            raise ValueError(f"bucket_mb={cap_mb:g} makes {len(self._buckets)} buckets: {e}; "
                             "give a larger bucket_mb") from None
        self._ordered = bool(ordered)
        self._in_step = False
        # Only parameters that require a gradient get one: the others (frozen)
        # count as zero, as unused ones do, and a bucket of them goes at step().
        self._trained = [p.requires_grad for p in self._params]
        self._sent = [False] * len(self._buckets)
        self._left = self._to_come()
        self._grad_version = self._grad._version  # the last write autograd made
        self._g_np = None if self._staging is not None else self._grad.numpy()
        ref = weakref.ref(self)

        def grad_ready(i):
            w = ref()
            if w is not None and w._live:
                w._grad_ready(i)

        self._accumulators = []  # torch 1.13: the nodes' hooks live as long as the nodes
        for i, p in enumerate(self._params):
            if not p.requires_grad:
                continue
            if hasattr(p, "register_post_accumulate_grad_hook"):  # torch >= 2.1
                self._hooks.append(p.register_post_accumulate_grad_hook(
                    lambda _p, i=i: grad_ready(i)))
            else:
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._accumulators.append(acc)
                self._hooks.append(acc.register_hook(lambda *_, i=i: grad_ready(i)))
        if not self._ordered:
            return
        for m in model.modules():
            own = [self._index[id(p)] for p in m.parameters(recurse=False)
                   if id(p) in self._index]
            if not own:
                continue
            lo, hi = min(offsets[i] for i in own), max(ends[i] for i in own)

            def before_forward(module, inputs, lo=lo, hi=hi):
                w = ref()
                if w is not None and w._pulling:
                    w._step.wait_range(lo, hi)
                    if w._staging is not None:
                        w._staging.land_range(w._flat, lo, hi)

            self._hooks.append(m.register_forward_pre_hook(before_forward))

    def _to_come(self):
        """Per bucket, the gradients autograd will produce: its parameters that
        require one."""
        return [sum(self._trained[i] for i in b[2]) for b in self._buckets]

    def _grad_ready(self, i):
        """Parameter i's gradient is in (autograd's hook): its bucket is pushed
        once all of its gradients are."""
        b = self._bucket_of[i]
        if self._sent[b]:
            lo, hi, _ = self._buckets[b]
            raise StateError(
                f"{self._names[i]} got a second gradient in step {self._step.clock + 1}, whose "
                f"bucket [{lo}, {hi}) was pushed already: with bucket_mb a step takes one "
                "backward pass (accumulate gradients without bucket_mb)")
        self._left[b] -= 1
        if self._left[b] == 0:
            self._push_bucket(b)
        # Every write into the gradient buffer bumps its version (views share
        # it): the last one dcps knows of is autograd's, just before this hook.
        self._grad_version = self._grad._version

    def _push_bucket(self, b):
        """Pushes bucket b (the step begins with its first bucket)."""
        lo, hi, members = self._buckets[b]
        if not self._in_step:
            if self._pulling:
                self.wait()  # the last pull is the model's before this step's pull ahead
            self._step.begin(self.epoch)
            self._in_step = True
        for i in members:
            self._gather_one(i)
        self._sent[b] = True
        if self._staging is not None:
            self._staging.push(self._step, lo, hi, self._grad)
        else:
            self._step.push_range(lo, hi, self._g_np[lo:hi])

    def _step_in_buckets(self):
        """The step's end: the buckets that no gradient completed (parameters
        unused by this step's forward pass: their gradient counts as zero) are
        pushed now, then the pull, whole or (ordered) front first. A parameter
        whose requires_grad changed since Worker(...) is refused: it has no
        hook, or a hook that will never fire."""
        trained = [p.requires_grad for p in self._params]
        if trained != self._trained:
            i = next(i for i, (a, b) in enumerate(zip(trained, self._trained)) if a != b)
            raise StateError(
                f"{self._names[i]}.requires_grad became {trained[i]} after dcps.torch.Worker("
                "model, bucket_mb=...), which hooks the parameters that require a gradient "
                "when it is made: set requires_grad before making the Worker")
        if any(self._sent):
            self._check_unchanged()
        for b, sent in enumerate(self._sent):
            if not sent:
                self._push_bucket(b)
        if self._staging is not None:
            self._staging.drain()
        self._step.end(self._p_arg, ordered=self._ordered)
        if not self._ordered:
            self._landed()  # ordered: range by range, as the next forward needs them
        self._in_step = False
        self._pulling = self._ordered
        self._sent = [False] * len(self._buckets)
        self._left = self._to_come()
        self._grad.zero_()  # the step read it until end() returned

    def _check_unchanged(self):
        """Refuses a step whose gradients changed after autograd wrote its last
        one (clip_grad_norm_, an in-place op on .grad, .grad replaced): their
        buckets went during the backward pass, so the change would be lost.
        The buffer's version counts every in-place write through any view;
        a replaced .grad is no longer a view of it."""
        where = None
        for b, sent in enumerate(self._sent):
            for i in self._buckets[b][2] if sent else ():
                g = self._params[i].grad
                if g is None or g.data_ptr() != self._slices[i].data_ptr():
                    where = (f"{self._names[i]}.grad was "
                             f"{'set to None' if g is None else 'replaced'}")
                    break
            if where:
                break
        if where is None and self._grad._version != self._grad_version:
            where = "a gradient was changed in place (torch.nn.utils.clip_grad_norm_ does)"
        if where is None:
            return
        raise StateError(
            f"{where} after the backward pass of step {self._step.clock + 1}, whose buckets "
            "were pushed as autograd produced them (bucket_mb): the change would be lost. "
            "Change gradients before they are accumulated (a hook on the tensor), or leave "
            "bucket_mb out to change them between backward() and step()")

    def _buffers_setup(self, mode, every):
        """The model's buffers, floating-point and integer ones apart, and one
        host array of each kind for the exchanges with shard 0. A first
        exchange that publishes nothing says the mode (a shard refuses one that
        is not the job's) and takes the job's buffers if the shards have some
        (a resumed run)."""
        self.buffers = mode
        self._buffer_every = every
        seen = set()
        self._buf_f, self._buf_i = [], []
        for _, b in self.model.named_buffers():
            if id(b) in seen or b.numel() == 0:
                continue
            seen.add(id(b))
            (self._buf_f if b.is_floating_point() else self._buf_i).append(b)
        self._bf = numpy.zeros(sum(b.numel() for b in self._buf_f), dtype=numpy.float32)
        self._bi = numpy.zeros(sum(b.numel() for b in self._buf_i), dtype=numpy.float64)
        self._buffers_exchange(publish=False)

    def _buffers_exchange(self, publish):
        """One exchange with shard 0: publishes this rank's buffers if
        ``publish``, then takes the job's into the model if the shards have
        them (not with "local")."""
        if publish:
            with torch.no_grad():
                for bufs, arr in ((self._buf_f, self._bf), (self._buf_i, self._bi)):
                    at = 0
                    for b in bufs:
                        k = b.numel()
                        arr[at:at + k] = b.detach().reshape(-1).cpu().numpy()
                        at += k
        took = self._step.buffers(self.buffers, publish, self._bf, self._bi)
        if not took or self.buffers == "local":
            return
        with torch.no_grad():
            for bufs, arr in ((self._buf_f, self._bf), (self._buf_i, self._bi)):
                at = 0
                for b in bufs:
                    k = b.numel()
                    b.copy_(torch.from_numpy(arr[at:at + k]).view_as(b))
                    at += k

    def _buffers_publishes(self):
        return self.buffers == "average" or (self.buffers == "rank0" and self.rank == 0)

    def _on_device(self):
        """The model's CUDA device as the current one (libdcps launches its
        kernels there); nothing for a CPU model."""
        return torch.cuda.device(self.device) if self._cuda else contextlib.nullcontext()

    def _landed(self):
        """The parameters the step just wrote into the host buffer go to the
        model on the device (staged buckets; nothing otherwise)."""
        if self._staging is not None:
            self._staging.land(self._flat)

    def _use_current_stream(self):
        """Hands the device's current stream to the Step when it changed."""
        stream = torch.cuda.current_stream(self.device)
        if self._stream is None or stream.cuda_stream != self._stream.cuda_stream:
            with torch.cuda.device(self.device):
                self._step.use_stream(stream.cuda_stream)
            self._stream = stream

    @property
    def clock(self):
        """The step computed next (from 0 for the job)."""
        return self._step.clock

    @property
    def lr(self):
        """The learning rate the shards had in force at the last pull: the lr of
        their next update, ``[optimizer] lr`` times the schedule's f(t) (what
        ``scheduler.get_last_lr()[0]`` says in a torch script); nan before the
        first pull."""
        return self._step.stats()["lr"]

    def _gather_grads(self):
        """Makes the gradient buffer hold every parameter's gradient."""
        for i in range(len(self._params)):
            self._gather_one(i)

    def _gather_one(self, i):
        """Makes the gradient buffer hold parameter i's gradient: one whose
        .grad was replaced (zero_grad(set_to_none=True), say) is copied in and
        re-attached; one without a gradient counts as zero."""
        p, view = self._params[i], self._slices[i]
        g = p.grad
        if g is None:
            view.zero_()
        elif g.data_ptr() != view.data_ptr():
            if g.is_sparse:
                g = g.to_dense()
            view.copy_(g.reshape(-1))
        else:
            return
        p.grad = view.view_as(p)

    def step(self, loss=None):
        """Pushes the gradients accumulated since the last step and pulls the
        parameters in place; then zeroes the gradients. ``loss`` (a float or a
        one-element tensor) is reported in the progress lines and the final line.
        With a CUDA model the step runs on the device's current stream: the new
        parameters (and the zeroed gradients) are queued there when it returns,
        so the next forward pass on that stream sees them."""
        self._check_bound()
        if self._buckets is not None:
            self._step_in_buckets()
        elif not self._whole_step():
            return
        if loss is not None:
            value = loss.detach() if isinstance(loss, torch.Tensor) else float(loss)
            if self._epoch_of_loss != self.epoch:
                self._epoch_loss, self._epoch_count, self._epoch_of_loss = 0.0, 0, self.epoch
            self._loss_sum += value
            self._loss_count += 1
            self._epoch_loss += value
            self._epoch_count += 1
        clock = self._step.clock
        if self.buffers != "local" and clock % self._buffer_every == 0:
            self._buffers_exchange(self._buffers_publishes())
        if self.log_every > 0 and clock % self.log_every == 0:
            self._progress(clock)

    def _whole_step(self):
        """The step of the whole gradient; False when it was skipped (not
        finite)."""
        self._gather_grads()
        if not bool(torch.isfinite(self._grad).all()):
            self._skip_step()
            return False
        if self._cuda:
            self._use_current_stream()
            with torch.cuda.device(self.device):
                self._step.run(self._g_arg, self._p_arg, self.epoch)
        else:
            self._step.run(self._g_arg, self._p_arg, self.epoch)
        self._grad.zero_()
        return True

    def _check_bound(self):
        """Refuses a model whose parameters are no longer the views of the
        flat buffer that Worker made (model.to(...), p.data = ...): dcps would
        go on training its buffer while the model keeps the new tensors."""
        if _binding(self._params) == self._bound:
            return
        for name, p, (ptr, stride) in zip(self._names, self._params, self._bound):
            if (p.data_ptr(), p.stride()) != (ptr, stride):
                break
        raise ArrayError(
            f"parameter {name} is no longer a view of dcps's parameter buffer (the model was "
            f"moved or converted after dcps.torch.Worker(model): model.to(...), "
            f"memory_format=, .half(), or {name}.data was replaced), so dcps would train "
            "its buffer while the model keeps the new tensor. Move or convert the model "
            "before dcps.torch.Worker(model); dcps keeps each parameter contiguous, float32, "
            "on one device")

    def _skip_step(self):
        """A step whose gradient holds NaN or Inf (a float16 overflow that a
        GradScaler would skip too): pushes nothing, zeroes the gradients,
        counts it and says so; the clock does not move."""
        for name, view in zip(self._names, self._slices):
            bad = (~torch.isfinite(view)).nonzero()
            if len(bad):
                at = int(bad[0])
                what = f"{name} entry {at} is {float(view[at]):g}"
                break
        self._grad.zero_()
        self.skipped_steps += 1
        print(f"rank={self.rank} step={self._step.clock} skipped: the gradient of {what}, not "
              f"finite; nothing pushed (skipped_steps={self.skipped_steps})",
              file=sys.stderr, flush=True)

    def _progress(self, clock):
        st = self._step.stats()
        now = time.monotonic()
        loss = float(self._loss_sum) / self._loss_count if self._loss_count else math.nan
        stale = st["staleness_sum"] / st["staleness_count"] if st["staleness_count"] else 0.0
        rate = self._win_samples / (now - self._t_win) if now > self._t_win else 0.0
        print(f"rank={self.rank} step={clock} epoch={self.epoch} loss={loss:.4f} "
              f"samples_per_s={rate:.0f} bytes_pushed={st['bytes_pushed']} "
              f"bytes_pulled={st['bytes_pulled']} staleness={stale:.2f} lr={st['lr']:.6g}",
              flush=True)
        self._loss_sum, self._loss_count = 0.0, 0
        self._t_win, self._win_samples = now, 0

    def stats(self):
        """The client's counters (bytes, pushes, pulls, staleness, clock)."""
        return self._step.stats()

    def wait(self):
        """With the pipeline: waits for the step in flight. With
        ``ordered_pull``: waits until the whole pull has landed (before
        reading the parameters outside a forward pass)."""
        self._step.wait()
        if self._staging is not None and self._pulling:
            self._staging.land_rest(self._flat)
        self._pulling = False

    def finish(self, evaluate=None, test_acc=None, test_loss=None, out=sys.stdout):
        """Ends training: done, final barrier and an exact pull, so that every
        rank holds the final model (dcps_step_finish); then ``evaluate(model)`` if
        given (returning accuracy, or (loss, accuracy)), prints the ``final:``
        line (as dcps-worker's) and closes. Returns the line's values as a dict."""
        global _current
        if self._device_step:
            self._use_current_stream()
        self._check_bound()
        # Buffers: published before the final barrier, taken after it, so that
        # every rank takes the same final ones.
        if self._buffers_publishes():
            self._buffers_exchange(True)
        if self._staging is not None:
            self._staging.drain()
        with self._on_device():
            self._step.finish(self._p_arg)
        self._pulling = False  # finish() waited for it, then pulled exactly
        self._landed()
        trained = time.monotonic() - self._t_start  # before evaluate(): final: counts training
        if self.buffers != "local":
            self._buffers_exchange(False)
        self._live = False
        self._finished = True
        if evaluate is not None:
            result = evaluate(self.model)
            if isinstance(result, tuple):
                test_loss, test_acc = result
            else:
                test_acc = result
        nan = math.nan
        train_loss = float(self._epoch_loss) / self._epoch_count if self._epoch_count else nan
        line = self._step.summary(
            test_acc=nan if test_acc is None else float(test_acc),
            test_loss=nan if test_loss is None else float(test_loss),
            train_loss=train_loss, epochs=self.epoch, samples=self.samples,
            device="gpu" if self._cuda else "cpu", elapsed_s=trained)
        print(line, file=out, flush=True)
        self.close()
        if _current is self:
            _current = None
        return _parse_final(line)

    def close(self):
        """Says BYE and frees the worker (finish() does it)."""
        self._live = False
        if self._staging is not None:
            self._staging.close()
        self._step.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def state_dict(self):
        """The model's state dict with the parameters as the shards hold them
        now: an exact pull (not an async delta pull's mirror, nor a pipeline's
        local update; in sync mode with delta pulls the shared mirror, which is
        the model) into a buffer of its own, the model left as it is. Every tensor
        is a clone that owns its storage, so ``torch.save`` of it writes only
        the model and ``load_state_dict`` of it needs no dcps. Buffers are this
        rank's. Mid-run it waits for the step in flight; after finish() it is
        the final model (which finish()'s exact pull left in the model, with
        the job's buffers)."""
        if self._finished:
            return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        if self._staging is not None:  # staged: host arrays, to the device below
            self._staging.drain()
        flat = torch.empty(self.n, dtype=torch.float32,
                           device=self.device if self._device_step else "cpu")
        if self._device_step:  # device arrays: a pointer, on the current stream
            self._use_current_stream()
            with self._on_device():
                self._step.pull(flat.data_ptr())
        else:
            self._step.pull(flat.numpy())
        # A parameter's entry in state_dict() is a view of the flat buffer at
        # its own offset: found by where it points (shared ones too).
        values, at = {}, 0
        for p in self._params:
            values[(p.data_ptr(), tuple(p.shape))] = flat[at:at + p.numel()].view(p.shape)
            at += p.numel()
        # keep_vars: the parameters themselves (state_dict() gives copies,
        # which point nowhere in the flat buffer).
        out = self.model.state_dict(keep_vars=True)
        for key, t in out.items():
            v = values.get((t.data_ptr(), tuple(t.shape)))
            out[key] = (t if v is None else v).detach().clone().to(t.device)
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """DDP's ``no_sync()``, for scripts ported from it: a no-op here.
        Nothing is pushed until ``step()``, so gradients of several backward
        passes already add up in the model's .grad (the flat buffer) until the
        next step pushes their sum as one gradient. With ``bucket_mb`` each
        bucket is pushed during its backward pass: refused (StateError)."""
        if self._buckets is not None:
            raise StateError("no_sync() with bucket_mb: each bucket is pushed during its "
                             "backward pass, so gradients of several passes cannot add up "
                             "before a push; leave bucket_mb out to accumulate")
        yield

    def optimizer(self):
        """A stand-in ``torch.optim.Optimizer`` for what expects one (a
        ``GradScaler``): its ``step()`` is ``worker.step()``, its
        ``zero_grad()`` zeroes the gradients, its param_groups hold the
        model's parameters. A step whose gradients hold an Inf or NaN (a
        scaler's overflow that reached it) pushes nothing and prints so."""
        if self._buckets is not None:
            raise ConfigError("worker.optimizer() with bucket_mb: a GradScaler unscales the "
                              "gradients at step(), after the buckets were pushed during "
                              "backward; leave bucket_mb out with a GradScaler")
        if getattr(self, "_shim", None) is None:
            self._shim = _StepOptimizer(self)
        return self._shim


# The tests set this to stage a CPU model's buckets as a CUDA model's are.
_STAGE_CPU = False


class _Staging:
    """A CUDA model's buckets (bucket_mb) go through host buffers, since the
    step in ranges takes host arrays. A bucket's gradient is copied to the host
    on the current stream as autograd hands it over, and pushed by a thread of
    its own once that copy is done: neither the backward pass nor its kernels
    wait for a push. The step's pull lands in the host buffer and goes to the
    device on the current stream: whole (land), or with ordered pulls a
    module's range as its forward hook finds it landed (land_range) and the
    rest once the pull is done (land_rest). A CPU model staged so (_STAGE_CPU)
    copies at once."""

    def __init__(self, n, cuda):
        self.cuda = cuda
        self.p = torch.empty(n, dtype=torch.float32, pin_memory=cuda)
        self.g = torch.zeros(n, dtype=torch.float32, pin_memory=cuda)
        self.p_np, self.g_np = self.p.numpy(), self.g.numpy()
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dcps-push")
        self._pending = []
        self._landing = None  # recorded after the last copy of p to the device
        self._landed = set()  # the ranges of an ordered pull copied so far

    def _event(self):
        """An event behind the work queued on the current stream (CUDA)."""
        if not self.cuda:
            return None
        event = torch.cuda.Event()
        event.record()
        return event

    def push(self, step, lo, hi, grad):
        """Copies grad[lo:hi] to the host behind the kernels that made it, and
        has the pushing thread push it once the copy is done (and once p, which
        the pull ahead that a push may send writes, has gone to the device)."""
        self.g[lo:hi].copy_(grad[lo:hi], non_blocking=self.cuda)
        copied, landing = self._event(), self._landing

        def send():
            for event in (landing, copied):
                if event is not None:
                    event.synchronize()
            step.push_range(lo, hi, self.g_np[lo:hi])

        self._pending.append(self._pool.submit(send))

    def drain(self):
        """Waits for every push given, and for p's last copy to the device
        (the step's next call may write p); raises the first push's error."""
        pending, self._pending = self._pending, []
        if self._landing is not None:
            self._landing.synchronize()
        errors = [f.exception() for f in pending]
        error = next((e for e in errors if e is not None), None)
        if error is not None:
            raise error

    def land(self, flat):
        """The parameters the step wrote into p, to the model's flat buffer."""
        flat.copy_(self.p, non_blocking=self.cuda)
        self._landing = self._event()
        self._landed = set()

    def land_range(self, flat, lo, hi):
        """[lo, hi) of an ordered pull, landed in p, to the model's flat
        buffer (once a pull: a module called twice takes it once)."""
        if (lo, hi) in self._landed:
            return
        flat[lo:hi].copy_(self.p[lo:hi], non_blocking=self.cuda)
        self._landing = self._event()
        self._landed.add((lo, hi))

    def land_rest(self, flat):
        """Once an ordered pull has landed whole in p: what no forward hook
        took (modules the forward pass did not call), to the flat buffer."""
        at = 0
        for lo, hi in sorted(self._landed) + [(flat.numel(), flat.numel())]:
            if lo > at:
                flat[at:lo].copy_(self.p[at:lo], non_blocking=self.cuda)
            at = max(at, hi)
        self._landing = self._event()
        self._landed = set()

    def close(self):
        self._pool.shutdown(wait=True)
        self._pending = []


def _binding(params):
    """Where each parameter's data is and how it is laid out: what Worker
    bound it to, compared at every step."""
    return [(p.data_ptr(), p.stride()) for p in params]


def _guard_model(worker, model):
    """Hooks on every module of model, so that the parameters being views of
    one flat buffer does not show: a state_dict holds copies of them (torch.save
    of a part writes that part, not the whole buffer its views share), and a
    load_state_dict while the shards own the parameters is refused (the next
    pull would overwrite what it loaded). Returns the hooks' handles."""
    flat = worker._flat
    lo, device = flat.data_ptr(), flat.device
    hi = lo + flat.numel() * flat.element_size()
    ref = weakref.ref(worker)

    def copy_views(module, state, prefix, local_metadata):
        for name, p in module._parameters.items():
            v = state.get(prefix + name)
            # keep_vars=True gives the Parameter itself: torch's contract, kept.
            if (p is not None and isinstance(v, torch.Tensor)
                    and not isinstance(v, torch.nn.Parameter) and v.device == device
                    and lo <= v.data_ptr() < hi):
                state[prefix + name] = v.clone()

    def refuse_load(state, prefix, *rest):
        w = ref()
        if w is not None and w._live:
            raise StateError(
                f"load_state_dict into {prefix.rstrip('.') or 'the model'} after "
                "dcps.torch.Worker(model): the shards hold the parameters and the next step "
                "would pull them over what you load, and the protocol cannot set the shards' "
                "parameters once initialised. Load the weights before dcps.torch.Worker(model) "
                "(rank 0's initialise a new job's shards), or after worker.finish()")

    handles = []
    for m in model.modules():
        handles.append(m._register_state_dict_hook(copy_views))
        handles.append(m._register_load_state_dict_pre_hook(refuse_load))
    return handles


# torch.optim's per-group keys that dcps applies once for the whole job: a
# group may carry one only with the job's value ([optimizer] key, or the
# value torch's default means: dcps does not do amsgrad, maximize, ...).
_JOB_KEYS = {
    "momentum": lambda j: j["momentum"],
    "nesterov": lambda j: j["nesterov"],
    "betas": lambda j: (j["beta1"], j["beta2"]),
    "eps": lambda j: j["eps"],
    "dampening": lambda j: 0,
    "amsgrad": lambda j: False,
    "maximize": lambda j: False,
    "capturable": lambda j: False,
    "differentiable": lambda j: False,
    "lr_decay": lambda j: 0,
    "initial_accumulator_value": lambda j: 0,
}
# Keys of how torch runs the step on a device, which mean nothing here.
_IGNORED_KEYS = {"foreach", "fused"}


def _group_table(named, param_groups, job):
    """The group table of param_groups over the flat order of named (the
    model's parameters as Worker flattens them): (end, group) pairs of the
    ranges, merged where neighbours share a group, and (lr_factor,
    weight_decay) pairs per group. Raises ValueError naming the group or
    the parameter for what it cannot honour."""
    if isinstance(param_groups, dict) or not hasattr(param_groups, "__iter__"):
        raise ValueError("param_groups is a list of dicts, as torch.optim takes")
    groups = list(param_groups)
    if not groups:
        raise ValueError("param_groups is empty: every parameter must be in one group")
    name_of = {id(p): name for name, p in named}
    group_of, options = {}, []
    for i, g in enumerate(groups):
        if not isinstance(g, dict) or "params" not in g:
            raise ValueError(f"param_groups[{i}] is not a dict with \"params\"")
        params = g["params"]
        params = [params] if isinstance(params, torch.Tensor) else list(params)
        for p in params:
            if id(p) not in name_of:
                raise ValueError(f"param_groups[{i}] holds a tensor that is not a parameter "
                                 "of the model")
            if id(p) in group_of:
                raise ValueError(f"parameter {name_of[id(p)]} is in param_groups"
                                 f"[{group_of[id(p)]}] and param_groups[{i}]: each parameter "
                                 "is in one group")
            group_of[id(p)] = i
        for key, value in g.items():
            if key in ("params", "lr", "lr_factor", "weight_decay") or key in _IGNORED_KEYS:
                continue
            if key not in _JOB_KEYS:
                raise ValueError(f"param_groups[{i}] has {key!r}, which dcps does not take per "
                                 "group (it takes params, lr or lr_factor, weight_decay)")
            want = _JOB_KEYS[key](job)
            have = tuple(value) if isinstance(value, (list, tuple)) else value
            if have != want:
                raise ValueError(f"param_groups[{i}] has {key} = {value!r}, the job's is "
                                 f"{want!r}: the shards apply one {key} to every group "
                                 "(set it in the job file's [optimizer])")
        if "lr" in g and "lr_factor" in g:
            raise ValueError(f"param_groups[{i}] has both lr and lr_factor: give one")
        factor = float(g["lr"]) / job["lr"] if "lr" in g else float(g.get("lr_factor", 1.0))
        wd = float(g.get("weight_decay", job["weight_decay"]))
        if not (math.isfinite(factor) and 0 < factor <= 1000):
            raise ValueError(f"param_groups[{i}]: its lr factor {factor:g} (lr / the job's lr "
                             f"{job['lr']:g}) must be above 0 and at most 1000")
        if not (math.isfinite(wd) and 0 <= wd <= 1):
            raise ValueError(f"param_groups[{i}]: weight_decay {wd:g} must be from 0 to 1")
        options += [factor, wd]
    ranges, at = [], 0
    for name, p in named:
        if id(p) not in group_of:
            raise ValueError(f"parameter {name} is in no group of param_groups: every "
                             "parameter of the model must be in one")
        at += p.numel()
        g = group_of[id(p)]
        if ranges and ranges[-1] == g:
            ranges[-2] = at
        else:
            ranges += [at, g]
    return ranges, options


# Modules whose parameters decay_groups never decays.
_NORMS = (torch.nn.modules.batchnorm._NormBase, torch.nn.LayerNorm, torch.nn.GroupNorm,
          torch.nn.LocalResponseNorm)


def decay_groups(model, weight_decay=None):
    """The usual split of ``model``'s parameters for AdamW: ``[{"params":
    decay}, {"params": no_decay, "weight_decay": 0.0}]``, ready for
    ``Worker(param_groups=...)`` or ``torch.optim.AdamW``. No decay for
    parameters of one dimension or none (biases, norm scales and shifts) and
    for every parameter of a normalisation layer (BatchNorm*, InstanceNorm*,
    LayerNorm, GroupNorm); everything else decays, embeddings included, as
    nanoGPT's configure_optimizers and timm's param_groups_weight_decay do.
    ``weight_decay``: the decaying group's (default: the job's [optimizer]
    weight_decay, so the key is left out)."""
    in_norm = set()
    for m in model.modules():
        if isinstance(m, _NORMS):
            in_norm.update(id(p) for p in m.parameters(recurse=False))
    decay, no_decay, seen = [], [], set()
    for _, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        (no_decay if p.ndim <= 1 or id(p) in in_norm else decay).append(p)
    first = {"params": decay}
    if weight_decay is not None:
        first["weight_decay"] = float(weight_decay)
    return [first, {"params": no_decay, "weight_decay": 0.0}]


def _parse_final(line):
    values = {}
    for item in line.split()[1:]:
        key, _, value = item.partition("=")
        try:
            values[key] = float(value) if "." in value or value in ("nan", "inf") else int(value)
        except ValueError:
            values[key] = value
    return values


def _batches_of(data, order, batch_size):
    """Yields the batches of data at the indices in order, batch_size at a time."""
    if isinstance(data, torch.utils.data.TensorDataset):
        idx = torch.from_numpy(order.astype("int64"))
        for at in range(0, len(idx), batch_size):
            sel = idx[at:at + batch_size]
            yield tuple(t[sel] for t in data.tensors)
        return
    loader = data if isinstance(data, torch.utils.data.DataLoader) else None
    dataset = loader.dataset if loader is not None else data
    kwargs = {}
    if loader is not None:
        kwargs = {"collate_fn": loader.collate_fn, "num_workers": loader.num_workers,
                  "pin_memory": loader.pin_memory, "worker_init_fn": loader.worker_init_fn}
    yield from torch.utils.data.DataLoader(dataset, batch_size=batch_size,
                                           sampler=order.tolist(), **kwargs)


def shard(data, worker=None, epochs=None, batch_size=None, drop_last=None):
    """This rank's batches of ``data`` for the next ``epochs`` epochs of the job.

    ``data``: a map-style dataset (a ``TensorDataset`` is indexed directly) or a
    ``DataLoader`` over one (its dataset, batch_size, drop_last, collate_fn,
    num_workers, pin_memory and worker_init_fn are kept; its sampler or shuffle
    is replaced by dcps's permutation). An ``IterableDataset`` is refused:
    it has no index to permute and share. Each epoch is the permutation that
    dcps-worker uses (``dcps.share``: seeded by [job] seed and the epoch, rank r
    of P taking every P-th position), in batches of ``batch_size`` (default:
    the DataLoader's, else [data] batch_size), the last one shorter unless
    ``drop_last``.

    Each call continues where the job is on this worker: the first serves
    epochs from 1, the next one from the epoch after the last one served, so
    ``for e in range(E): for b in dt.shard(ds, epochs=1)`` trains epochs 1 to E.
    ``epochs=None``: every epoch left of [data] epochs (a call when none is
    left raises StateError rather than yielding nothing); a number may go past
    [data] epochs. Steps made outside shard do not count as batches served.
    The worker (default: the last one made) learns the epoch and counts the
    samples. A restarted worker skips the batches whose steps the shards
    already hold for its rank (``worker.resumed``, counted from epoch 1), and
    in sync mode a worker the job went on without (declared dead, then back)
    skips the batches of the rounds it missed, so it ends with the job; when
    the shards went back to an earlier round (a shard restarted: every shard
    restored the checkpoint all of them hold), the batches since that round are
    served again, as far back as this call's first epoch.
    """
    w = worker or _current
    if w is None:
        raise ConfigError("dcps.torch.shard: make the dcps.torch.Worker first")
    loader = data if isinstance(data, torch.utils.data.DataLoader) else None
    dataset = loader.dataset if loader is not None else data
    if isinstance(dataset, torch.utils.data.IterableDataset):
        raise TypeError(
            f"dcps.torch.shard takes a map-style dataset (__len__ and __getitem__), and "
            f"{type(dataset).__name__} is an IterableDataset: it has no index for dcps to "
            "permute and share among the ranks. Give each rank its part yourself "
            "(worker.rank of worker.workers) and call worker.step() after each batch")
    if batch_size is None:
        batch_size = w.batch_size if loader is None else loader.batch_size
        if batch_size is None:
            raise ValueError("dcps.torch.shard: this DataLoader has a batch_sampler and no "
                             "batch_size; give shard a DataLoader with batch_size, or "
                             "batch_size=")
    if drop_last is None:
        drop_last = loader is not None and loader.drop_last
    if batch_size < 1:
        raise ValueError(f"batch_size {batch_size}: at least 1")
    n = len(dataset)
    if n < w.workers:
        raise ValueError(f"{n} examples for {w.workers} workers")
    first = w._shard_next
    if epochs is None:
        last = w.epochs
        if first > last:
            raise StateError(
                f"dcps.torch.shard: all {w.epochs} epochs of the job ([data] epochs) were "
                f"served on this worker already; shard(data, epochs=k) serves k more")
    elif epochs < 1:
        raise ValueError(f"epochs {epochs}: at least 1")
    else:
        last = first + epochs - 1
    order = numpy.empty(n, dtype=numpy.uint32)

    def steps_of(epoch):
        k = share(w.seed, epoch, w.rank, w.workers, order)
        return (k // batch_size) if drop_last else (k + batch_size - 1) // batch_size

    held = 0  # batches of the first epoch on that the shards hold for this rank
    if w.resumed > 0:
        before = sum(steps_of(e) for e in range(1, first))
        total = before + sum(steps_of(e) for e in range(first, max(last, w.epochs) + 1))
        if w.resumed >= total:
            raise StateError(
                f"the shards hold all {total} steps of rank {w.rank}: this job has already run "
                "to its end (the shards still run from that run, or restored it from their "
                "checkpoints). To train again, restart the shards without those checkpoints, "
                "or give the job another [job] name")
        held = max(0, w.resumed - before)
        within = sum(steps_of(e) for e in range(first, last + 1))
        if held >= within:
            print(f"rank={w.rank}: epochs {first} to {last} are held by the shards already "
                  f"({w.resumed} steps of this rank, from an earlier process): skipped",
                  file=sys.stderr, flush=True)
    w._shard_next = last + 1
    return _serve(data, w, first, last, batch_size, drop_last, held)


def _serve(data, w, first, last, batch_size, drop_last, skip):
    """shard's batches of epochs first to last, the first skip of them left out.
    Sync: when the shards went back to an earlier round (a shard restarted,
    docs/algorithms.md "Restarts"), the batches of the rounds since are served
    again, as far back as this call's first epoch."""
    while skip is not None:
        skip = yield from _serve_from(data, w, first, last, batch_size, drop_last, skip)


def _serve_from(data, w, first, last, batch_size, drop_last, skip):
    """_serve's batches from position skip (batches from epoch first's start);
    returns None at the end, or the position to serve again from."""
    n = len(data.dataset if isinstance(data, torch.utils.data.DataLoader) else data)
    order = numpy.empty(n, dtype=numpy.uint32)
    sync = w.mode == "sync"
    at = 0  # the position of the next batch, from epoch first's start
    for epoch in range(first, last + 1):
        k = share(w.seed, epoch, w.rank, w.workers, order)
        end = k - k % batch_size if drop_last else k
        steps = (end + batch_size - 1) // batch_size
        j = 0
        while j < steps:
            if skip:
                t = min(skip, steps - j)
                j, skip, at = j + t, skip - t, at + t
                continue
            w.epoch = epoch
            for batch in _batches_of(data, order[j * batch_size:end].copy(), batch_size):
                b = len(batch[0]) if isinstance(batch, (tuple, list)) else len(batch)
                w.samples += b
                w._win_samples += b
                clock = w.clock
                yield batch
                j += 1
                at += 1
                # Sync: the step of this batch found the job rounds ahead (it
                # went on without this rank): skip the batches of those rounds.
                if sync and w.clock > clock + 1:
                    skip = w.clock - clock - 1
                    break
                # The shards went back to before this batch's round: serve the
                # batches since their round again (back to this batch's own
                # round reads as a skipped step, whose clock stays: that batch
                # is not served again).
                if sync and w.clock < clock:
                    return max(0, at - (clock + 1 - w.clock))
    return None


# A sentence for half-precision parameters: autocast computes in half precision
# while the model, and so the shards, keep float32 master parameters.
_HALF = {
    torch.float16: "; keep float32 master parameters and compute in half precision with "
                   "torch.autocast (docs/pytorch.md, \"Mixed precision\")",
    torch.bfloat16: "; keep float32 master parameters and compute in half precision with "
                    "torch.autocast (docs/pytorch.md, \"Mixed precision\")",
}


class _StepOptimizer(torch.optim.Optimizer):
    """What Worker.optimizer() returns: an Optimizer whose step is the
    worker's. A GradScaler unscales the model's .grad through param_groups (in
    place in the flat buffer) and calls step() only when it found no Inf/NaN;
    on the CPU of torch 1.13 the scaler disables itself and always calls step(),
    and the worker's step skips a non-finite gradient itself (one skip path:
    Worker.step, counted in worker.skipped_steps)."""

    def __init__(self, worker):
        super().__init__(list(worker._params), {})
        self.worker = worker

    @property
    def skipped(self):
        """Steps that pushed nothing: a non-finite gradient."""
        return self.worker.skipped_steps

    def step(self, closure=None, loss=None):
        if closure is not None:
            raise ValueError("dcps: worker.optimizer().step() takes no closure")
        self.worker.step(loss)
        return None

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradient buffer (the views stay: set_to_none is
        ignored). Gradients a GradScaler left unpushed because they overflowed
        are counted and reported as a skipped step."""
        w = self.worker
        w._gather_grads()
        if not bool(torch.isfinite(w._grad).all()):
            w._skip_step()
        else:
            w._grad.zero_()

    def state_dict(self):
        return {"state": {}, "param_groups": [{"params": list(range(len(self.worker._params)))}]}

    def load_state_dict(self, state_dict):
        pass


class Sampler(torch.utils.data.Sampler):
    """The indices of this rank's share of an epoch, in dt.shard's order, for a
    DataLoader (see sampler())."""

    def __init__(self, dataset, worker=None, batch_size=None):
        w = worker or _current
        if w is None:
            raise ConfigError("dcps.torch.sampler: make the dcps.torch.Worker first")
        self.worker = w
        self.batch_size = w.batch_size if batch_size is None else int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size {self.batch_size}: at least 1")
        self.n = len(dataset)
        if self.n < w.workers:
            raise ValueError(f"{self.n} examples for {w.workers} workers")
        self.epoch = w.epoch

    def set_epoch(self, epoch):
        """The epoch the next iteration yields (dcps counts from 1, as
        worker.epoch does: ``for epoch in range(1, worker.epochs + 1)``);
        sets worker.epoch too."""
        if int(epoch) < 1:
            raise ValueError(f"epoch {epoch}: dcps epochs count from 1 (worker.epoch), "
                             "so that every rank and dcps-worker take the same order; "
                             "for epoch in range(1, worker.epochs + 1): sampler.set_epoch(epoch)")
        self.epoch = int(epoch)
        self.worker.epoch = self.epoch

    def _order(self, epoch):
        w = self.worker
        order = numpy.empty(self.n, dtype=numpy.uint32)
        k = share(w.seed, epoch, w.rank, w.workers, order)
        return order[:k]

    def _skip(self):
        """Steps of this epoch that the shards held when this worker started."""
        w, bs = self.worker, self.batch_size
        done = 0
        for e in range(1, self.epoch):
            done += (len(self._order(e)) + bs - 1) // bs
        return max(0, w.resumed - done)

    def __iter__(self):
        """The indices; each counts as a sample of the worker's as it is handed
        to the DataLoader (its workers run a few batches ahead of training)."""
        w = self.worker
        for i in self._order(self.epoch)[self._skip() * self.batch_size:].tolist():
            w.samples += 1
            w._win_samples += 1
            yield i

    def __len__(self):
        return max(0, len(self._order(self.epoch)) - self._skip() * self.batch_size)


def sampler(dataset, worker=None, batch_size=None):
    """A ``torch.utils.data.Sampler`` of this rank's indices of dataset, for
    ``DataLoader(dataset, batch_size=B, sampler=dt.sampler(dataset), ...)``
    with any num_workers, pin_memory, collate_fn: the order of ``dt.shard``
    (``dcps.share`` seeded by [job] seed and the epoch, rank r of P taking every
    P-th position). ``set_epoch(e)`` chooses the epoch, counting from 1, as
    DistributedSampler's does. After a restart, the first epoch's iteration
    starts after the steps the shards already hold for this rank: the sampler
    yields indices, so it counts steps in batches of ``batch_size`` (default:
    the job's [data] batch_size), which must be the DataLoader's; keep the
    DataLoader's ``drop_last=False`` (an epoch's last batch may be short, as in
    dt.shard)."""
    return Sampler(dataset, worker, batch_size)
