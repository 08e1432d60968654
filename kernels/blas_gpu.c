/* dcps — cuBLAS loaded at run time; see blas_gpu.h.
 *
 * <cublas_v2.h> is included for its types, constants and declarations only: the
 * function pointers below take the declared types (__typeof__), so a signature
 * that does not match the header is a compile error, yet nothing links against
 * libcublas. */
#include "kernels/blas_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "config.h"

#ifdef HAVE_CUDA
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>

/* Tried in order when dcps_blas_load() gets no name: the soname of the toolkit
 * we build against, then the development link, which may be another major
 * version with the same v2 entry points. */
static const char *const default_names[] = {"libcublas.so.13", "libcublas.so"};

/* The loaded library. Written once under lock; after dl is set the pointers
 * never change, and handles exist only after a successful load. */
static struct {
    pthread_mutex_t lock;
    void *dl;
    __typeof__(cublasCreate_v2) *create;
    __typeof__(cublasDestroy_v2) *destroy;
    __typeof__(cublasSetStream_v2) *set_stream;
    __typeof__(cublasSgemm_v2) *sgemm;
    __typeof__(cublasGetStatusString) *status_string; /* NULL in old releases */
} lib = {.lock = PTHREAD_MUTEX_INITIALIZER};

struct dcps_blas {
    cublasHandle_t h;
};

/* POSIX guarantees that a dlsym() result can be used as a function pointer;
 * copying the bytes avoids the object-to-function cast that ISO C leaves
 * undefined. */
_Static_assert(sizeof lib.sgemm == sizeof(void *), "function pointers must fit a void *");

static int lookup(void *dl, const char *symbol, void *fn)
{
    void *p = dlsym(dl, symbol);
    if (!p)
        return -1;
    memcpy(fn, &p, sizeof p);
    return 0;
}

/* Opens name and binds every entry point, or leaves lib unchanged and appends
 * the reason to why (len bytes, NUL-terminated). */
static int open_one(const char *name, char *why, size_t len)
{
    size_t used = strlen(why);
    const char *sep = used ? "; " : "";
    void *dl = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        const char *e = dlerror();
        snprintf(why + used, len - used, "%s%s", sep, e ? e : name);
        return DCPS_E_NOGPU;
    }
    static const char *const required[] = {"cublasCreate_v2", "cublasDestroy_v2",
                                           "cublasSetStream_v2", "cublasSgemm_v2"};
    void *fn[sizeof required / sizeof *required];
    for (size_t i = 0; i < sizeof required / sizeof *required; i++)
        if (lookup(dl, required[i], &fn[i]) != 0) {
            snprintf(why + used, len - used, "%s%s has no %s", sep, name, required[i]);
            dlclose(dl);
            return DCPS_E_NOGPU;
        }
    memcpy(&lib.create, &fn[0], sizeof fn[0]);
    memcpy(&lib.destroy, &fn[1], sizeof fn[1]);
    memcpy(&lib.set_stream, &fn[2], sizeof fn[2]);
    memcpy(&lib.sgemm, &fn[3], sizeof fn[3]);
    if (lookup(dl, "cublasGetStatusString", &lib.status_string) != 0)
        lib.status_string = NULL;
    lib.dl = dl;
    DCPS_DEBUG("loaded cuBLAS from %s", name);
    return 0;
}

int dcps_blas_load(const char *name)
{
    int rc = 0;
    char why[512] = "";
    pthread_mutex_lock(&lib.lock);
    if (!lib.dl) {
        if (name) {
            rc = open_one(name, why, sizeof why);
        } else {
            rc = DCPS_E_NOGPU;
            for (size_t i = 0; i < sizeof default_names / sizeof *default_names && rc; i++)
                rc = open_one(default_names[i], why, sizeof why);
        }
    }
    pthread_mutex_unlock(&lib.lock);
    if (rc)
        DCPS_WARN("cuBLAS is not usable, so the GPU path is off: %s", why);
    return rc;
}

/* A cuBLAS status as 0 or DCPS_E_CUDA, logging cuBLAS's description with the
 * caller's file and line. */
static int check(cublasStatus_t status, const char *what, const char *file, int line)
{
    if (status == CUBLAS_STATUS_SUCCESS)
        return 0;
    const char *why = lib.status_string ? lib.status_string(status) : NULL;
    DCPS_ERR("%s:%d: %s: %s (cuBLAS status %d)", file, line, what, why ? why : "failed",
             (int)status);
    return DCPS_E_CUDA;
}
#define BLAS_CHECK(what, call) check((call), (what), __FILE__, __LINE__)

dcps_blas_t *dcps_blas_new(dcps_stream_t stream, int *err)
{
    int rc;
    dcps_blas_t *b;
    if (dcps_gpu_count() == 0) {
        rc = DCPS_E_NOGPU;
        goto fail;
    }
    if ((rc = dcps_blas_load(NULL)) != 0)
        goto fail;
    b = calloc(1, sizeof *b);
    if (!b) {
        rc = DCPS_E_NOMEM;
        goto fail;
    }
    if ((rc = BLAS_CHECK("cublasCreate", lib.create(&b->h))) != 0)
        goto fail_handle;
    if ((rc = BLAS_CHECK("cublasSetStream", lib.set_stream(b->h, (cudaStream_t)stream))) != 0)
        goto fail_stream;
    if (err)
        *err = 0;
    return b;

fail_stream:
    lib.destroy(b->h);
fail_handle:
    free(b);
fail:
    if (err)
        *err = rc;
    return NULL;
}

void dcps_blas_destroy(dcps_blas_t **b)
{
    if (!b || !*b)
        return;
    BLAS_CHECK("cublasDestroy", lib.destroy((*b)->h));
    free(*b);
    *b = NULL;
}

static cublasOperation_t op(dcps_blas_op_t t)
{
    return t == DCPS_BLAS_T ? CUBLAS_OP_T : CUBLAS_OP_N;
}

/* cuBLAS is column-major, and a row-major r x c matrix with row stride ld is,
 * read as column-major, its transpose (c x r, leading dimension ld). So the
 * row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T: the same
 * call with A and B swapped and m and n swapped, the operations and leading
 * dimensions unchanged. No matrix is ever transposed in memory. */
int dcps_blas_sgemm(dcps_blas_t *b, dcps_blas_op_t ta, dcps_blas_op_t tb, int m, int n, int k,
                    float alpha, const float *d_a, int lda, const float *d_b, int ldb, float beta,
                    float *d_c, int ldc)
{
    return BLAS_CHECK("cublasSgemm", lib.sgemm(b->h, op(tb), op(ta), n, m, k, &alpha, d_b, ldb, d_a,
                                               lda, &beta, d_c, ldc));
}

#else /* built without CUDA */

int dcps_blas_load(const char *name)
{
    return DCPS_E_NOGPU;
}

dcps_blas_t *dcps_blas_new(dcps_stream_t stream, int *err)
{
    if (err)
        *err = DCPS_E_NOGPU;
    return NULL;
}

void dcps_blas_destroy(dcps_blas_t **b)
{
    if (b)
        *b = NULL;
}

int dcps_blas_sgemm(dcps_blas_t *b, dcps_blas_op_t ta, dcps_blas_op_t tb, int m, int n, int k,
                    float alpha, const float *d_a, int lda, const float *d_b, int ldb, float beta,
                    float *d_c, int ldc)
{
    return DCPS_E_NOGPU;
}
#endif
