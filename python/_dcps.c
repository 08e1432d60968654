/* dcps._dcps — the Python binding of libdcps's worker step (worker/step.h).
 *
 * One type, Step, owns one dcps_step_t and frees it in tp_dealloc. Arrays come
 * in through the buffer protocol (PyObject_GetBuffer with PyBUF_C_CONTIGUOUS |
 * PyBUF_FORMAT, released on every path): float32, C-contiguous, exactly n
 * elements, writable where the step writes; anything else is refused with
 * dcps.ArrayError before a byte is sent. Every call that may wait on the
 * network runs with the GIL released and touches no Python object meanwhile;
 * a second Python thread that calls the same Step while one call is waiting
 * gets dcps.StateError (a step object is used by one thread at a time).
 *
 * After Step.use_stream(stream) (device arrays, dcps_step_use_stream) start,
 * run and finish take CUDA device pointers as Python ints instead of buffers
 * (torch: tensor.data_ptr() of a contiguous float32 CUDA tensor of n
 * elements): the binding cannot see their dtype, size or device, so the
 * caller answers for them; 0 and non-ints are refused with dcps.ArrayError.
 *
 * The job's values (Step.job), the data shares (share) and the final: line
 * (Step.summary) come from worker/job.h, which dcps-worker's trainer uses too,
 * so that both deal the same examples and print the same line.
 *
 * Failures raise dcps.Error or a subclass by kind, with .code (the negative
 * DCPS_E_… value), .name ("TIMEOUT") and the library's sentence as the message. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <string.h>

#include "common/error.h"
#include "config.h"
#include "kernels/gpu.h"
#include "proto/quant.h"
#include "worker/job.h"
#include "worker/step.h"

#define MAX_OVERRIDES 256

/* The exception hierarchy, made at module init. */
static PyObject *Error, *ConfigError, *ConnectionError_, *AuthError, *SizeError, *StateError,
    *NoGPUError, *NonFiniteError, *ArrayError;

static PyObject *exception_for(int code)
{
    switch (code) {
    case DCPS_E_CONFIG:
        return ConfigError;
    case DCPS_E_ZMQ:
    case DCPS_E_TIMEOUT:
    case DCPS_E_CLOSED:
    case DCPS_E_REMOTE:
        return ConnectionError_;
    case DCPS_E_AUTH:
    case DCPS_E_SESSION:
        return AuthError;
    case DCPS_E_SIZE:
        return SizeError;
    case DCPS_E_STATE:
    case DCPS_E_LIVE:
    case DCPS_E_NOTREADY:
        return StateError;
    case DCPS_E_NOGPU:
        return NoGPUError;
    case DCPS_E_NONFINITE:
        return NonFiniteError;
    default:
        return Error;
    }
}

/* Raises the exception for code with `text` (the library's sentence, or the
 * code's own when empty); returns NULL. */
static PyObject *raise_code(PyObject *type, int code, const char *text)
{
    if (!text || !*text)
        text = dcps_strerror(code);
    PyObject *exc = PyObject_CallFunction(type, "s", text);
    if (!exc)
        return NULL;
    PyObject *c = PyLong_FromLong(code), *n = PyUnicode_FromString(dcps_errname(code));
    if (c && n && PyObject_SetAttrString(exc, "code", c) == 0 &&
        PyObject_SetAttrString(exc, "name", n) == 0)
        PyErr_SetObject(type, exc);
    Py_XDECREF(c);
    Py_XDECREF(n);
    Py_DECREF(exc);
    return NULL;
}

static PyObject *raise_error(int code, const char *text)
{
    return raise_code(exception_for(code), code, text);
}

typedef struct {
    PyObject_HEAD
    dcps_step_t *step;
    dcps_job_t job;
    int busy;   /* a call runs without the GIL: no other thread may enter */
    int device; /* use_stream succeeded: arrays are device pointers (ints) */
} StepObject;

/* Takes the buffer of obj as `what`: float32, C-contiguous, n elements,
 * writable if asked. Returns 0, or -1 with dcps.ArrayError set. */
static int get_array(PyObject *obj, Py_buffer *view, size_t n, int writable, const char *what)
{
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, view, flags) != 0) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *why = value ? PyObject_Str(value) : NULL;
        PyErr_Format(ArrayError,
                     "%s: a %s C-contiguous float32 array of %zu elements is needed (%s); for a "
                     "torch tensor use .contiguous()",
                     what, writable ? "writable" : "readable", n,
                     why ? PyUnicode_AsUTF8(why) : "no buffer");
        Py_XDECREF(why);
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(tb);
        return -1;
    }
    const char *fmt = view->format ? view->format : "B";
    if (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@')
        fmt++;
    if (strcmp(fmt, "f") != 0 || view->itemsize != 4) {
        PyErr_Format(ArrayError, "%s: the array's elements are '%s' (%zd bytes each), not float32",
                     what, view->format ? view->format : "B", view->itemsize);
        goto refuse;
    }
    if ((size_t)(view->len / 4) != n) {
        PyErr_Format(ArrayError, "%s: the array has %zd elements, the model has %zu", what,
                     view->len / 4, n);
        goto refuse;
    }
    return 0;
refuse:
    PyBuffer_Release(view);
    return -1;
}

/* Device arrays: obj is a device pointer as a nonzero int. Returns 0, or -1
 * with dcps.ArrayError set. */
static int get_pointer(PyObject *obj, void **ptr, const char *what)
{
    *ptr = PyLong_Check(obj) ? PyLong_AsVoidPtr(obj) : NULL;
    if (*ptr)
        return 0;
    PyErr_Clear();
    PyErr_Format(ArrayError,
                 "%s: with device arrays (use_stream) a CUDA device pointer is needed, as a "
                 "nonzero int (tensor.data_ptr()), not %s",
                 what, Py_TYPE(obj)->tp_name);
    return -1;
}

/* Takes obj as `what`: a buffer (get_array) or, with device arrays, a device
 * pointer; *ptr is where it starts. view->obj is NULL for a pointer. */
static int get_arg(StepObject *s, PyObject *obj, Py_buffer *view, void **ptr, const char *what)
{
    view->obj = NULL;
    if (s->device)
        return get_pointer(obj, ptr, what);
    if (get_array(obj, view, s->job.n, 1, what) != 0)
        return -1;
    *ptr = view->buf;
    return 0;
}

static void release(Py_buffer *view)
{
    if (view->obj)
        PyBuffer_Release(view);
}

/* Marks s busy for a call without the GIL; -1 with StateError when it is. */
static int enter(StepObject *s)
{
    if (!s->step) {
        raise_code(StateError, DCPS_E_STATE, "this worker is closed");
        return -1;
    }
    if (s->busy) {
        raise_code(StateError, DCPS_E_STATE,
                   "another thread is using this worker: a worker is used by one thread at a "
                   "time");
        return -1;
    }
    s->busy = 1;
    return 0;
}

static PyObject *done(StepObject *s, int rc)
{
    s->busy = 0;
    if (rc != 0)
        return raise_error(rc, dcps_step_error(s->step));
    Py_RETURN_NONE;
}

static int Step_init(StepObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"job", "rank", "n", "overrides", NULL};
    PyObject *job_obj, *overrides = NULL, *bytes = NULL, *seq = NULL;
    int rank;
    Py_ssize_t n;
    const char *ov[MAX_OVERRIDES];
    int rc = -1;
    if (self->step) {
        PyErr_SetString(PyExc_RuntimeError, "Step.__init__ called twice");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&in|O:Step", kwlist, PyUnicode_FSConverter,
                                     &bytes, &rank, &n, &overrides))
        return -1;
    job_obj = bytes;
    if (rank < 0) {
        PyErr_Format(PyExc_ValueError, "rank %d: a rank is 0 or more", rank);
        goto out;
    }
    if (n < 1) {
        PyErr_Format(PyExc_ValueError, "n = %zd: the model needs at least one parameter", n);
        goto out;
    }
    Py_ssize_t k = 0;
    if (overrides && overrides != Py_None) {
        seq = PySequence_Fast(overrides, "overrides must be a sequence of \"section.key=value\"");
        if (!seq)
            goto out;
        k = PySequence_Fast_GET_SIZE(seq);
        if (k > MAX_OVERRIDES) {
            PyErr_Format(PyExc_ValueError, "%zd overrides; at most %d", k, MAX_OVERRIDES);
            goto out;
        }
        for (Py_ssize_t i = 0; i < k; i++) {
            PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
            if (!PyUnicode_Check(o)) {
                PyErr_Format(PyExc_TypeError, "override %zd is not a str", i);
                goto out;
            }
            if (!(ov[i] = PyUnicode_AsUTF8(o)))
                goto out;
        }
    }
    int err = 0;
    char text[1024] = "";
    const char *path = PyBytes_AS_STRING(job_obj);
    Py_BEGIN_ALLOW_THREADS
    self->step = dcps_step_open(path, rank, ov, (size_t)k, (size_t)n, &err, text, sizeof text);
    Py_END_ALLOW_THREADS
    if (!self->step) {
        raise_error(err, text);
        goto out;
    }
    dcps_job_get(self->step, &self->job);
    rc = 0;
out:
    Py_XDECREF(seq);
    Py_XDECREF(bytes);
    return rc;
}

static void close_step(StepObject *self)
{
    if (!self->step)
        return;
    Py_BEGIN_ALLOW_THREADS
    dcps_step_close(&self->step);
    Py_END_ALLOW_THREADS
}

/* A call in progress holds a reference to self, so a busy Step is never freed. */
static void Step_dealloc(StepObject *self)
{
    close_step(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* start(params), finish(params): one writable array. */
static PyObject *one_array_call(StepObject *self, PyObject *arg, int (*fn)(dcps_step_t *, float *),
                                const char *what)
{
    Py_buffer p;
    void *ptr;
    if (enter(self) != 0)
        return NULL;
    if (get_arg(self, arg, &p, &ptr, what) != 0) {
        self->busy = 0;
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = fn(self->step, ptr);
    Py_END_ALLOW_THREADS
    release(&p);
    return done(self, rc);
}

static PyObject *Step_start(StepObject *self, PyObject *params)
{
    return one_array_call(self, params, dcps_step_start, "params");
}

static PyObject *Step_finish(StepObject *self, PyObject *params)
{
    return one_array_call(self, params, dcps_step_finish, "params");
}

static PyObject *Step_pull(StepObject *self, PyObject *params)
{
    return one_array_call(self, params, dcps_step_pull, "params");
}

static PyObject *Step_run(StepObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"grad", "params", "epoch", NULL};
    PyObject *g_obj, *p_obj;
    int epoch = 1;
    Py_buffer g, p;
    void *gp, *pp;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|i:run", kwlist, &g_obj, &p_obj, &epoch))
        return NULL;
    if (epoch < 1)
        return PyErr_Format(PyExc_ValueError, "epoch %d: epochs count from 1", epoch);
    if (enter(self) != 0)
        return NULL;
    if (get_arg(self, g_obj, &g, &gp, "grad") != 0) {
        self->busy = 0;
        return NULL;
    }
    if (get_arg(self, p_obj, &p, &pp, "params") != 0) {
        release(&g);
        self->busy = 0;
        return NULL;
    }
    if (gp == pp) {
        release(&p);
        release(&g);
        self->busy = 0;
        return raise_code(ArrayError, DCPS_E_INVAL, "grad and params are the same array");
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dcps_step_run(self->step, gp, pp, epoch);
    Py_END_ALLOW_THREADS
    release(&p);
    release(&g);
    return done(self, rc);
}

/* A writable C-contiguous host array of `fmt` elements ('f' float32, 'd'
 * float64) of any length, for buffers(). Returns 0, or -1 with ArrayError. */
static int get_host(PyObject *obj, Py_buffer *view, const char *fmt, const char *what)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) != 0) {
        PyErr_Clear();
        PyErr_Format(ArrayError, "%s: a writable C-contiguous host array is needed, not %s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    const char *f = view->format ? view->format : "B";
    if (f[0] == '<' || f[0] == '=' || f[0] == '@')
        f++;
    if (strcmp(f, fmt) != 0 || view->itemsize != (fmt[0] == 'f' ? 4 : 8)) {
        PyErr_Format(ArrayError, "%s: the array's elements are '%s', not %s", what,
                     view->format ? view->format : "B", fmt[0] == 'f' ? "float32" : "float64");
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

static PyObject *Step_buffers(StepObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"mode", "publish", "floats", "ints", NULL};
    static const char *const modes[] = {[DCPS_BUFFERS_RANK0] = "rank0",
                                        [DCPS_BUFFERS_AVERAGE] = "average",
                                        [DCPS_BUFFERS_LOCAL] = "local"};
    const char *mode_name;
    int publish, mode = -1;
    PyObject *f_obj, *i_obj;
    Py_buffer f, i;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "spOO:buffers", kwlist, &mode_name, &publish,
                                     &f_obj, &i_obj))
        return NULL;
    for (int k = 0; k < 3; k++)
        if (strcmp(mode_name, modes[k]) == 0)
            mode = k;
    if (mode < 0)
        return PyErr_Format(PyExc_ValueError,
                            "buffers=%R: the modes are \"rank0\", \"average\" and \"local\"",
                            PyTuple_GET_ITEM(args, 0));
    if (get_host(f_obj, &f, "f", "floats") != 0)
        return NULL;
    if (get_host(i_obj, &i, "d", "ints") != 0) {
        PyBuffer_Release(&f);
        return NULL;
    }
    if (enter(self) != 0) {
        PyBuffer_Release(&i);
        PyBuffer_Release(&f);
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dcps_step_buffers(self->step, mode, publish, f.buf, (size_t)f.len / 4, i.buf,
                           (size_t)i.len / 8, f.buf, i.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&i);
    PyBuffer_Release(&f);
    if (rc < 0)
        return done(self, rc);
    self->busy = 0;
    return PyBool_FromLong(rc);
}

static PyObject *Step_wait(StepObject *self, PyObject *unused)
{
    (void)unused;
    if (enter(self) != 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dcps_step_wait(self->step);
    Py_END_ALLOW_THREADS
    return done(self, rc);
}

static PyObject *Step_close(StepObject *self, PyObject *unused)
{
    (void)unused;
    if (self->busy)
        return raise_code(StateError, DCPS_E_STATE, "another thread is using this worker");
    close_step(self);
    Py_RETURN_NONE;
}

static PyObject *Step_use_stream(StepObject *self, PyObject *arg)
{
    void *stream = PyLong_AsVoidPtr(arg);
    if (!stream && PyErr_Occurred())
        return NULL;
    if (enter(self) != 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS /* it may wait for the old stream's uploads */
    rc = dcps_step_use_stream(self->step, stream);
    Py_END_ALLOW_THREADS
    if (rc == 0)
        self->device = 1;
    return done(self, rc);
}

/* set_ranges(ends): the ranges a step in ranges is pushed in. */
static PyObject *Step_set_ranges(StepObject *self, PyObject *ends)
{
    PyObject *es = PySequence_Fast(ends, "ends must be a sequence of int"), *result = NULL;
    size_t *e = NULL;
    if (!es)
        return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(es);
    if (!(e = PyMem_Calloc((size_t)k + 1, sizeof *e))) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        e[i] = PyLong_AsSize_t(PySequence_Fast_GET_ITEM(es, i));
        if (e[i] == (size_t)-1 && PyErr_Occurred())
            goto out;
    }
    if (enter(self) != 0)
        goto out;
    int rc;
    Py_BEGIN_ALLOW_THREADS /* it waits for an ordered pull in flight */
        rc = dcps_step_set_ranges(self->step, e, (size_t)k);
    Py_END_ALLOW_THREADS result = done(self, rc);
out:
    PyMem_Free(e);
    Py_DECREF(es);
    return result;
}

static PyObject *Step_begin(StepObject *self, PyObject *args)
{
    int epoch = 1, rc;
    if (!PyArg_ParseTuple(args, "|i:begin", &epoch))
        return NULL;
    if (epoch < 1)
        return PyErr_Format(PyExc_ValueError, "epoch %d: epochs count from 1", epoch);
    if (enter(self) != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS rc = dcps_step_begin(self->step, epoch);
    Py_END_ALLOW_THREADS return done(self, rc);
}

/* push_range(lo, hi, grad): grad a host buffer of hi - lo float32 values,
 * which the caller keeps unchanged until end() returns. */
static PyObject *Step_push_range(StepObject *self, PyObject *args)
{
    Py_ssize_t lo, hi;
    PyObject *g_obj;
    Py_buffer g;
    int rc;
    if (!PyArg_ParseTuple(args, "nnO:push_range", &lo, &hi, &g_obj))
        return NULL;
    if (lo < 0 || hi <= lo)
        return PyErr_Format(PyExc_ValueError, "range [%zd, %zd) is not a nonempty range", lo, hi);
    if (enter(self) != 0)
        return NULL;
    if (get_array(g_obj, &g, (size_t)(hi - lo), 1, "grad") != 0) {
        self->busy = 0;
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS rc = dcps_step_push_range(self->step, (size_t)lo, (size_t)hi, g.buf);
    Py_END_ALLOW_THREADS release(&g);
    return done(self, rc);
}

static PyObject *Step_end(StepObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"params", "ordered", NULL};
    PyObject *p_obj;
    int ordered = 0, rc;
    Py_buffer p;
    void *pp;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p:end", kwlist, &p_obj, &ordered))
        return NULL;
    if (enter(self) != 0)
        return NULL;
    if (get_arg(self, p_obj, &p, &pp, "params") != 0) {
        self->busy = 0;
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS rc = dcps_step_end(self->step, pp, ordered);
    Py_END_ALLOW_THREADS release(&p);
    return done(self, rc);
}

static PyObject *Step_wait_range(StepObject *self, PyObject *args)
{
    Py_ssize_t lo, hi;
    int rc;
    if (!PyArg_ParseTuple(args, "nn:wait_range", &lo, &hi))
        return NULL;
    if (lo < 0 || hi <= lo)
        return PyErr_Format(PyExc_ValueError, "range [%zd, %zd) is not a nonempty range", lo, hi);
    if (enter(self) != 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS rc = dcps_step_wait_range(self->step, (size_t)lo, (size_t)hi);
    Py_END_ALLOW_THREADS return done(self, rc);
}

static PyObject *Step_set_names(StepObject *self, PyObject *args)
{
    PyObject *offs, *names, *os = NULL, *ns = NULL, *result = NULL;
    size_t *off = NULL;
    const char **nm = NULL;
    if (!PyArg_ParseTuple(args, "OO:set_names", &offs, &names))
        return NULL;
    if (!(os = PySequence_Fast(offs, "offsets must be a sequence of int")) ||
        !(ns = PySequence_Fast(names, "names must be a sequence of str")))
        goto out;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(os);
    if (PySequence_Fast_GET_SIZE(ns) != k) {
        PyErr_SetString(PyExc_ValueError, "offsets and names differ in length");
        goto out;
    }
    off = PyMem_Calloc((size_t)k + 1, sizeof *off);
    nm = PyMem_Calloc((size_t)k + 1, sizeof *nm);
    if (!off || !nm) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        off[i] = PyLong_AsSize_t(PySequence_Fast_GET_ITEM(os, i));
        if (off[i] == (size_t)-1 && PyErr_Occurred())
            goto out;
        if (!(nm[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(ns, i))))
            goto out;
    }
    if (enter(self) != 0)
        goto out;
    result = done(self, dcps_step_set_names(self->step, off, nm, (size_t)k));
out:
    PyMem_Free(nm);
    PyMem_Free(off);
    Py_XDECREF(ns);
    Py_XDECREF(os);
    return result;
}

/* set_groups(ranges, options): ranges a sequence of ints, (end, group) pairs;
 * options a sequence of floats, (lr_factor, weight_decay) pairs. */
static PyObject *Step_set_groups(StepObject *self, PyObject *args)
{
    PyObject *ranges, *options, *rs = NULL, *os = NULL, *result = NULL;
    uint32_t *r = NULL;
    double *o = NULL;
    if (!PyArg_ParseTuple(args, "OO:set_groups", &ranges, &options))
        return NULL;
    if (!(rs = PySequence_Fast(ranges, "ranges must be a sequence of int")) ||
        !(os = PySequence_Fast(options, "options must be a sequence of float")))
        goto out;
    Py_ssize_t nr = PySequence_Fast_GET_SIZE(rs), no = PySequence_Fast_GET_SIZE(os);
    if (nr % 2 || no % 2) {
        PyErr_SetString(PyExc_ValueError, "ranges and options are sequences of pairs");
        goto out;
    }
    r = PyMem_Calloc((size_t)nr + 1, sizeof *r);
    o = PyMem_Calloc((size_t)no + 1, sizeof *o);
    if (!r || !o) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; i < nr; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(rs, i));
        if (PyErr_Occurred())
            goto out;
        if (v > UINT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "a group range's end or group exceeds 2**32 - 1");
            goto out;
        }
        r[i] = (uint32_t)v;
    }
    for (Py_ssize_t i = 0; i < no; i++) {
        o[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(os, i));
        if (o[i] == -1.0 && PyErr_Occurred())
            goto out;
    }
    if (enter(self) != 0)
        goto out;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = dcps_step_set_groups(self->step, r, (size_t)nr / 2, o, (size_t)no / 2);
    Py_END_ALLOW_THREADS
    result = done(self, rc);
out:
    PyMem_Free(o);
    PyMem_Free(r);
    Py_XDECREF(os);
    Py_XDECREF(rs);
    return result;
}

static PyObject *Step_stats(StepObject *self, PyObject *unused)
{
    (void)unused;
    dcps_client_stats_t st;
    if (!self->step)
        return raise_code(StateError, DCPS_E_STATE, "this worker is closed");
    dcps_step_stats(self->step, &st);
    double lr = dcps_step_lr(self->step);
    return Py_BuildValue(
        "{sKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsd}", "bytes_pushed", st.bytes_pushed, "bytes_pulled",
        st.bytes_pulled, "bytes_pushed_dense", st.bytes_pushed_dense, "bytes_pulled_dense",
        st.bytes_pulled_dense, "bytes_sent", st.bytes_sent, "bytes_received", st.bytes_received,
        "pushes", st.pushes, "pulls", st.pulls, "retries", st.retries, "duplicates",
        st.duplicates, "version", st.version, "staleness_sum", st.staleness_sum,
        "staleness_count", st.staleness_count, "staleness_max", st.staleness_max, "dropped",
        st.dropped, "clock", st.clock, "lr", lr);
}

static PyObject *Step_summary(StepObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"test_acc", "test_loss", "train_loss", "epochs",
                             "samples",  "device",    "elapsed_s",  NULL};
    dcps_job_result_t r = {.test_acc = NAN, .test_loss = NAN, .train_loss = NAN};
    unsigned long long samples = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|dddiKzd:summary", kwlist, &r.test_acc,
                                     &r.test_loss, &r.train_loss, &r.epochs, &samples, &r.device,
                                     &r.elapsed_s))
        return NULL;
    if (!self->step)
        return raise_code(StateError, DCPS_E_STATE, "this worker is closed");
    r.samples = samples;
    char line[1024];
    dcps_job_summary(self->step, &r, line, sizeof line);
    return PyUnicode_FromString(line);
}

static PyObject *Step_enter(PyObject *self, PyObject *unused)
{
    (void)unused;
    Py_INCREF(self);
    return self;
}

static PyObject *Step_exit(StepObject *self, PyObject *args)
{
    (void)args;
    return Step_close(self, NULL);
}

static PyObject *Step_get_clock(StepObject *self, void *closure)
{
    (void)closure;
    if (!self->step)
        return raise_code(StateError, DCPS_E_STATE, "this worker is closed");
    return PyLong_FromUnsignedLongLong(dcps_step_clock(self->step));
}

static PyObject *Step_get_resumed(StepObject *self, void *closure)
{
    (void)closure;
    if (!self->step)
        return raise_code(StateError, DCPS_E_STATE, "this worker is closed");
    return PyLong_FromUnsignedLongLong(dcps_step_resumed(self->step));
}

static PyObject *Step_get_job(StepObject *self, void *closure)
{
    (void)closure;
    static const char *const modes[] = {"async", "sync", "ssp"};
    const dcps_job_t *j = &self->job;
    return Py_BuildValue("{sisisssisisisisKsnsssdsdsdsdsdsdsN}", "rank", j->rank, "workers",
                         j->workers, "mode", modes[j->mode], "batch_size", j->batch_size,
                         "epochs", j->epochs, "log_every", j->log_every, "buffer_every",
                         j->buffer_every, "seed",
                         (unsigned long long)j->seed, "n", (Py_ssize_t)j->n, "optimizer",
                         j->optimizer, "lr", j->lr, "momentum", j->momentum, "beta1", j->beta1,
                         "beta2", j->beta2, "eps", j->eps, "weight_decay", j->weight_decay,
                         "nesterov", PyBool_FromLong(j->nesterov));
}

static PyMethodDef Step_methods[] = {
    {"start", (PyCFunction)Step_start, METH_O,
     "start(params): rank 0 initialises the shards from params; every rank then pulls into "
     "params (a buffer, or after use_stream a device pointer as an int)."},
    {"run", (PyCFunction)(void (*)(void))Step_run, METH_VARARGS | METH_KEYWORDS,
     "run(grad, params, epoch=1): push grad (compressed per the job), pull into params (buffers, "
     "or after use_stream device pointers as ints)."},
    {"finish", (PyCFunction)Step_finish, METH_O,
     "finish(params): done, final barrier, exact pull into params (a buffer, or after "
     "use_stream a device pointer as an int)."},
    {"pull", (PyCFunction)Step_pull, METH_O,
     "pull(params): the shards' parameters, exactly, into params (not the model's array), "
     "mid-run or after finish; the next pull is dense."},
    {"buffers", (PyCFunction)(void (*)(void))Step_buffers, METH_VARARGS | METH_KEYWORDS,
     "buffers(mode, publish, floats, ints): one exchange of the model's buffers with shard 0 "
     "(mode \"rank0\", \"average\" or \"local\"); with publish, floats (float32) and ints "
     "(float64) are this rank's; then the job's are written into them: True, or False if the "
     "shard has none yet."},
    {"set_ranges", (PyCFunction)Step_set_ranges, METH_O,
     "set_ranges(ends): the ranges a step in ranges is pushed in, range j being [ends[j-1], "
     "ends[j]) (from 0, the last ending at n); each gets its own compressor."},
    {"begin", (PyCFunction)Step_begin, METH_VARARGS,
     "begin(epoch=1): begin a step in ranges (after an ordered end, waits for its pull)."},
    {"push_range", (PyCFunction)Step_push_range, METH_VARARGS,
     "push_range(lo, hi, grad): push the gradient of one of the ranges, grad a host float32 "
     "buffer of hi - lo values, kept unchanged until end() returns; sent at once."},
    {"end", (PyCFunction)(void (*)(void))Step_end, METH_VARARGS | METH_KEYWORDS,
     "end(params, ordered=False): wait for the shards' acknowledgements, then pull into params; "
     "ordered: the pull goes on front first after end() returns (wait_range)."},
    {"wait_range", (PyCFunction)Step_wait_range, METH_VARARGS,
     "wait_range(lo, hi): return when [lo, hi) of an ordered end's params has landed."},
    {"wait", (PyCFunction)Step_wait, METH_NOARGS,
     "wait(): with the pipeline, wait for the step in flight."},
    {"close", (PyCFunction)Step_close, METH_NOARGS, "close(): say BYE and free the worker."},
    {"use_stream", (PyCFunction)Step_use_stream, METH_O,
     "use_stream(stream): device arrays on the CUDA stream whose handle is the int stream "
     "(torch: torch.cuda.current_stream().cuda_stream; 0: the default stream), before start; "
     "then start, run and finish take device pointers as ints (tensor.data_ptr()). "
     "dcps.NoGPUError without a usable GPU."},
    {"set_names", (PyCFunction)Step_set_names, METH_VARARGS,
     "set_names(offsets, names): name the tensors of the flat vector for errors."},
    {"set_groups", (PyCFunction)Step_set_groups, METH_VARARGS,
     "set_groups(ranges, options): the job's parameter groups, (end, group) pairs over the "
     "flat vector and (lr_factor, weight_decay) pairs; before start()."},
    {"stats", (PyCFunction)Step_stats, METH_NOARGS,
     "stats(): the client's counters, and lr: the shards' learning rate in force at the last "
     "pull (nan before it)."},
    {"summary", (PyCFunction)(void (*)(void))Step_summary, METH_VARARGS | METH_KEYWORDS,
     "summary(test_acc=nan, test_loss=nan, train_loss=nan, epochs=0, samples=0, device=None, "
     "elapsed_s=0): the final: line; elapsed_s: the seconds of training (0: since start)."},
    {"__enter__", Step_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)Step_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Step_getset[] = {
    {"clock", (getter)Step_get_clock, NULL, "the step computed next", NULL},
    {"resumed", (getter)Step_get_resumed, NULL, "the step this process started at", NULL},
    {"job", (getter)Step_get_job, NULL, "the job's values a caller needs (a dict)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject StepType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "dcps._dcps.Step",
    .tp_doc = "Step(job, rank, n, overrides=()): one worker rank of a dcps job, for a model of "
              "n float32 parameters (libdcps's <dcps/step.h>).",
    .tp_basicsize = sizeof(StepObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Step_init,
    .tp_dealloc = (destructor)Step_dealloc,
    .tp_methods = Step_methods,
    .tp_getset = Step_getset,
};

/* share(seed, epoch, rank, workers, order): fills the writable uint32 buffer
 * order (n = its length) with rank's share of epoch, returns the share's length. */
static PyObject *mod_share(PyObject *mod, PyObject *args)
{
    (void)mod;
    unsigned long long seed;
    int epoch, rank, workers;
    PyObject *obj;
    Py_buffer v;
    if (!PyArg_ParseTuple(args, "KiiiO:share", &seed, &epoch, &rank, &workers, &obj))
        return NULL;
    if (workers < 1 || rank < 0 || rank >= workers)
        return PyErr_Format(PyExc_ValueError, "rank %d of %d workers", rank, workers);
    if (PyObject_GetBuffer(obj, &v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) != 0)
        return NULL;
    if (v.itemsize != 4 || !v.format || !strchr("IL", v.format[strlen(v.format) - 1]) ||
        v.len / 4 > UINT32_MAX) {
        PyBuffer_Release(&v);
        return PyErr_Format(ArrayError, "share: order must be a writable uint32 array");
    }
    uint32_t k = dcps_job_share(seed, epoch, rank, workers, (uint32_t)(v.len / 4), v.buf);
    PyBuffer_Release(&v);
    return PyLong_FromUnsignedLong(k);
}

static PyObject *mod_gpu_count(PyObject *mod, PyObject *unused)
{
    (void)mod;
    (void)unused;
    return PyLong_FromLong(dcps_gpu_count());
}

static PyObject *mod_strerror(PyObject *mod, PyObject *arg)
{
    (void)mod;
    long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(dcps_strerror((int)code));
}


/* A float32 buffer's values (n floats), or NULL with an exception set. */
static int float_buffer(PyObject *obj, Py_buffer *v, const char *what)
{
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0)
        return -1;
    if (v->itemsize != 4 || !v->format || v->format[strlen(v->format) - 1] != 'f') {
        PyBuffer_Release(v);
        PyErr_Format(ArrayError, "%s must be a contiguous float32 array", what);
        return -1;
    }
    return 0;
}

/* quantize(values, dtype, block=0, tau=0) -> (encoded, decoded): values (float32)
 * as a frame of that dtype (proto/quant.h) and the float32 values a receiver
 * decodes from it, both bytes. For tests against a reference. */
static PyObject *mod_quantize(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *kws[] = {"values", "dtype", "block", "tau", NULL};
    PyObject *obj;
    unsigned int dtype, block = 0;
    float tau = 0;
    Py_buffer v;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OI|If:quantize", kws, &obj, &dtype, &block, &tau))
        return NULL;
    if (!dcps_quant_is(dtype) || (dtype == DCPS_DTYPE_TWOBIT && !(tau > 0)))
        return PyErr_Format(PyExc_ValueError, "quantize: dtype %u (4 to 7; twobit needs tau > 0)",
                            dtype);
    if (float_buffer(obj, &v, "quantize: values") != 0)
        return NULL;
    size_t n = (size_t)v.len / 4;
    PyObject *enc = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)dcps_quant_bytes(dtype, n, block));
    PyObject *dec = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * sizeof(float)));
    if (enc && dec)
        dcps_quant_encode(dtype, block, tau, v.buf, n, PyBytes_AS_STRING(enc),
                          (float *)PyBytes_AS_STRING(dec));
    PyBuffer_Release(&v);
    if (!enc || !dec) {
        Py_XDECREF(enc);
        Py_XDECREF(dec);
        return NULL;
    }
    return Py_BuildValue("(NN)", enc, dec);
}

/* dequantize(data, dtype, count, block=0) -> bytes of count float32 values, or
 * dcps.Error with the code and the sentence a shard would answer. */
static PyObject *mod_dequantize(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *kws[] = {"data", "dtype", "count", "block", NULL};
    Py_buffer d;
    unsigned int dtype, block = 0;
    Py_ssize_t count;
    char why[256];
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*In|I:dequantize", kws, &d, &dtype, &count,
                                     &block))
        return NULL;
    if (count < 0 || dcps_quant_bytes(dtype, (uint64_t)count, block) != (uint64_t)d.len) {
        PyBuffer_Release(&d);
        return PyErr_Format(PyExc_ValueError, "dequantize: %zd bytes are not %zd values of dtype %u",
                            d.len, count, dtype);
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(float));
    int rc = out ? dcps_quant_decode(dtype, block, d.buf, (size_t)count,
                                     (float *)PyBytes_AS_STRING(out), why, sizeof why)
                 : 0;
    PyBuffer_Release(&d);
    if (rc != 0) {
        Py_DECREF(out);
        return raise_error(rc, why);
    }
    return out;
}

static PyMethodDef module_methods[] = {
    {"share", mod_share, METH_VARARGS,
     "share(seed, epoch, rank, workers, order) -> k: rank's share of an epoch, as dcps-worker "
     "takes it, into the uint32 array order."},
    {"gpu_count", mod_gpu_count, METH_NOARGS,
     "gpu_count(): usable GPUs for device arrays (0 without CUDA, driver or device)."},
    {"strerror", mod_strerror, METH_O, "strerror(code): the sentence for a DCPS_E_ code."},
    {"quantize", (PyCFunction)(void (*)(void))mod_quantize, METH_VARARGS | METH_KEYWORDS,
     "quantize(values, dtype, block=0, tau=0) -> (encoded, decoded): float32 values as a frame "
     "of a shorter dtype (4 fp16, 5 bf16, 6 int8, 7 twobit; docs/protocol.md, 17), and what a "
     "receiver decodes, as bytes."},
    {"dequantize", (PyCFunction)(void (*)(void))mod_dequantize, METH_VARARGS | METH_KEYWORDS,
     "dequantize(data, dtype, count, block=0) -> bytes: count float32 values decoded from a "
     "frame, checked as a shard checks it (dcps.Error otherwise)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "dcps._dcps",
    .m_doc = "The C binding of libdcps's worker step; use the dcps package.",
    .m_size = -1, .m_methods = module_methods,
};

/* Makes exception `name` (dcps.NAME) deriving from base (and extra, if any). */
static PyObject *new_error(PyObject *m, const char *name, PyObject *base, PyObject *extra,
                           const char *doc)
{
    char qual[64];
    snprintf(qual, sizeof qual, "dcps.%s", name);
    PyObject *bases = extra ? PyTuple_Pack(2, base, extra) : PyTuple_Pack(1, base);
    if (!bases)
        return NULL;
    PyObject *e = PyErr_NewExceptionWithDoc(qual, doc, bases, NULL);
    Py_DECREF(bases);
    if (e && PyModule_AddObjectRef(m, name, e) != 0)
        Py_CLEAR(e);
    return e;
}

PyMODINIT_FUNC PyInit__dcps(void); /* the module's one exported symbol */
PyMODINIT_FUNC PyInit__dcps(void)
{
    if (PyType_Ready(&StepType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (!(Error = new_error(m, "Error", PyExc_Exception, NULL,
                            "A dcps failure: .code is the DCPS_E_ value, .name its name.")) ||
        !(ConfigError = new_error(m, "ConfigError", Error, NULL, "A bad job file or override.")) ||
        !(ConnectionError_ = new_error(m, "ConnectionError", Error, PyExc_ConnectionError,
                                       "The shards did not answer, or answered an error.")) ||
        !(AuthError = new_error(m, "AuthError", Error, NULL,
                                "A shard refused the CURVE key, or this rank for it (AUTH), or "
                                "a request outside the worker's session (SESSION).")) ||
        !(SizeError = new_error(m, "SizeError", Error, NULL,
                                "The model's size differs from the shards'.")) ||
        !(StateError = new_error(m, "StateError", Error, NULL,
                                 "A call that is not valid now (closed, failed, in use).")) ||
        !(NoGPUError = new_error(m, "NoGPUError", Error, NULL, "No usable GPU.")) ||
        !(NonFiniteError = new_error(m, "NonFiniteError", Error, NULL,
                                     "A gradient with NaN or Inf.")) ||
        !(ArrayError = new_error(m, "ArrayError", Error, PyExc_ValueError,
                                 "An array of the wrong dtype, size or layout.")))
        goto fail;
    /* Refused arrays are raised by PyErr_Format: their code is the class's. */
    PyObject *inval = PyLong_FromLong(DCPS_E_INVAL), *inval_name = PyUnicode_FromString("INVAL");
    int bad = !inval || !inval_name || PyObject_SetAttrString(ArrayError, "code", inval) != 0 ||
              PyObject_SetAttrString(ArrayError, "name", inval_name) != 0;
    Py_XDECREF(inval);
    Py_XDECREF(inval_name);
    if (bad)
        goto fail;
    Py_INCREF(&StepType);
    if (PyModule_AddObject(m, "Step", (PyObject *)&StepType) != 0) {
        Py_DECREF(&StepType);
        goto fail;
    }
    if (PyModule_AddStringConstant(m, "version", PACKAGE_VERSION) != 0)
        goto fail;
#define ADD_CODE(name, value, msg)                                                            \
    if (PyModule_AddIntConstant(m, "E_" #name, value) != 0)                                   \
        goto fail;
    DCPS_ERRORS(ADD_CODE)
#undef ADD_CODE
    return m;
fail:
    Py_DECREF(m);
    return NULL;
}
