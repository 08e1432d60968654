/* Tests for model/mlp: the parameter layout and initialisation, the gradient
 * against finite differences of an independent double-precision forward pass,
 * the loss at known points, training on a separable problem, evaluation and
 * argument checks. */
#include "model/mlp.h"

#include "common/error.h"
#include "common/rng.h"

#include <check.h>

#include "tests/check_run.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Random inputs, labels and parameters with non-zero biases, so that the
 * gradient check also sees the biases' effect on the forward pass. */
static void fill_random(const int *layers, int n_layers, int batch, uint64_t seed, float *params,
                        float *x, uint8_t *y)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, seed);
    dcps_mlp_init_params(layers, n_layers, seed, params);
    float *p = params;
    for (int l = 1; l < n_layers; l++) {
        p += (size_t)layers[l - 1] * layers[l];
        for (int k = 0; k < layers[l]; k++)
            *p++ = 0.3f * dcps_rng_normal(&r);
    }
    for (int i = 0; i < batch * layers[0]; i++)
        x[i] = dcps_rng_normal(&r);
    for (int i = 0; i < batch; i++)
        y[i] = (uint8_t)dcps_rng_below(&r, (uint64_t)layers[n_layers - 1]);
}

/* The mean loss, written from the layout contract in mlp.h alone, in double:
 * W_l is out x in row-major followed by b_l; ReLU between layers. */
static double ref_loss(const int *layers, int n_layers, const double *params, const float *x,
                       const uint8_t *y, int batch)
{
    double a[2][64], total = 0.0;
    for (int i = 0; i < batch; i++) {
        for (int k = 0; k < layers[0]; k++)
            a[0][k] = x[i * layers[0] + k];
        const double *p = params;
        int cur = 0;
        for (int l = 1; l < n_layers; l++) {
            int in = layers[l - 1], out = layers[l];
            const double *W = p, *b = p + in * out;
            for (int o = 0; o < out; o++) {
                double z = b[o];
                for (int k = 0; k < in; k++)
                    z += W[o * in + k] * a[cur][k];
                a[!cur][o] = (l < n_layers - 1 && z < 0.0) ? 0.0 : z;
            }
            cur = !cur;
            p += in * out + out;
        }
        int classes = layers[n_layers - 1];
        double mx = a[cur][0], sum = 0.0;
        for (int k = 1; k < classes; k++)
            mx = fmax(mx, a[cur][k]);
        for (int k = 0; k < classes; k++)
            sum += exp(a[cur][k] - mx);
        total += log(sum) + mx - a[cur][y[i]];
    }
    return total / batch;
}

START_TEST(param_count_of_reference_model)
{
    const int layers[] = {784, 256, 128, 10};
    ck_assert_uint_eq(dcps_mlp_param_count(layers, 4), 235146);
    ck_assert_uint_eq(dcps_mlp_param_count(layers, 1), 0);
    const int bad[] = {784, 0, 10};
    ck_assert_uint_eq(dcps_mlp_param_count(bad, 3), 0);
}
END_TEST

START_TEST(init_is_deterministic_he_normal_with_zero_bias)
{
    const int layers[] = {784, 256, 128, 10};
    size_t n = dcps_mlp_param_count(layers, 4);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    dcps_mlp_init_params(layers, 4, 1, a);
    dcps_mlp_init_params(layers, 4, 1, b);
    dcps_mlp_init_params(layers, 4, 2, c);
    ck_assert_mem_eq(a, b, n * sizeof *a);
    size_t same = 0;
    for (size_t i = 0; i < n; i++)
        same += a[i] == c[i];
    /* Only the zero biases (394 of them) may coincide. */
    ck_assert_uint_lt(same, 1000);

    const float *p = a;
    for (int l = 1; l < 4; l++) {
        size_t nw = (size_t)layers[l - 1] * layers[l];
        double s = 0.0, s2 = 0.0;
        for (size_t i = 0; i < nw; i++) {
            s += p[i];
            s2 += (double)p[i] * p[i];
        }
        double mean = s / nw, std = sqrt(s2 / nw - mean * mean), want = sqrt(2.0 / layers[l - 1]);
        ck_assert_double_lt(fabs(std - want), 0.1 * want);
        ck_assert_double_lt(fabs(mean), 0.1 * want);
        p += nw;
        for (int k = 0; k < layers[l]; k++)
            ck_assert_float_eq(*p++, 0.0f);
    }
    free(a);
    free(b);
    free(c);
}
END_TEST

START_TEST(gradient_matches_finite_differences_on_every_entry)
{
    enum { B = 4 };
    const int layers[] = {5, 7, 4, 3};
    size_t n = dcps_mlp_param_count(layers, 4);
    float params[128], grad[128], x[B * 5], loss;
    double pd[128];
    uint8_t y[B];
    ck_assert_uint_le(n, 128);
    fill_random(layers, 4, B, 99, params, x, y);
    for (size_t i = 0; i < n; i++) {
        pd[i] = params[i];
        grad[i] = NAN; /* every entry must be written */
    }
    int err, correct = -1;
    dcps_mlp_t *m = dcps_mlp_new(layers, 4, B, &err);
    ck_assert_ptr_nonnull(m);
    ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, B, grad, &loss, &correct), 0);
    ck_assert_int_ge(correct, 0);
    ck_assert_int_le(correct, B);
    double ref = ref_loss(layers, 4, pd, x, y, B);
    ck_assert_double_lt(fabs(loss - ref), 1e-5 * fmax(1.0, ref));

    /* Central differences in double with eps 1e-6 have error ~1e-10, far below
     * the tolerance; a ReLU kink within eps of a pre-activation is unlikely at
     * this seed and would show as a single outlier. The tolerance sits far
     * below the typical entry (~0.1), so a missing mask, bias gradient, batch
     * mean or a transposed product fails it. */
    const double eps = 1e-6;
    size_t checked = 0, nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        double keep = pd[i];
        pd[i] = keep + eps;
        double up = ref_loss(layers, 4, pd, x, y, B);
        pd[i] = keep - eps;
        double down = ref_loss(layers, 4, pd, x, y, B);
        pd[i] = keep;
        double fd = (up - down) / (2 * eps), diff = fabs(grad[i] - fd);
        ck_assert_msg(diff <= 1e-5 + 1e-3 * fabs(fd), "param %zu: analytic %g, numeric %g", i,
                      (double)grad[i], fd);
        nonzero += fabs(fd) > 1e-3;
        checked++;
    }
    ck_assert_uint_eq(checked, n);
    /* Guards against a vacuous check: most entries carry a real gradient. */
    ck_assert_uint_gt(nonzero, n / 2);

    /* The gradient is overwritten, not accumulated. */
    float again[128];
    memcpy(again, grad, n * sizeof *grad);
    ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, B, again, NULL, NULL), 0);
    ck_assert_mem_eq(again, grad, n * sizeof *grad);
    dcps_mlp_destroy(&m);
    ck_assert_ptr_null(m);
}
END_TEST

START_TEST(uniform_logits_give_log_of_class_count)
{
    const int layers[] = {8, 6, 10};
    size_t n = dcps_mlp_param_count(layers, 3);
    float params[256], grad[256], x[3 * 8], loss;
    uint8_t y[3];
    fill_random(layers, 3, 3, 5, params, x, y);
    /* Zero output weights and biases make every logit 0 whatever the input. */
    size_t last = (size_t)8 * 6 + 6;
    memset(params + last, 0, (n - last) * sizeof *params);
    dcps_mlp_t *m = dcps_mlp_new(layers, 3, 3, NULL);
    ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, 3, grad, &loss, NULL), 0);
    ck_assert_float_eq_tol(loss, logf(10.0f), 1e-6f);
    dcps_mlp_destroy(&m);
}
END_TEST

/* Three classes in 4 dimensions: class c sits around 2 * e_c with noise 0.2. */
static void separable(dcps_dataset_t *ds, float *x, uint8_t *y, int n)
{
    dcps_rng_t r;
    dcps_rng_seed(&r, 3);
    for (int i = 0; i < n; i++) {
        y[i] = (uint8_t)(i % 3);
        for (int k = 0; k < 4; k++)
            x[i * 4 + k] = 0.2f * dcps_rng_normal(&r) + (k == y[i] ? 2.0f : 0.0f);
    }
    ds->n = (uint32_t)n;
    ds->dim = 4;
    ds->x = x;
    ds->y = y;
}

START_TEST(sgd_learns_separable_problem)
{
    enum { N = 90 };
    const int layers[] = {4, 16, 3};
    size_t n = dcps_mlp_param_count(layers, 3);
    float x[N * 4], params[256], grad[256], first = 0.0f, loss = 0.0f, acc = 0.0f;
    uint8_t y[N];
    dcps_dataset_t ds;
    separable(&ds, x, y, N);
    dcps_mlp_init_params(layers, 3, 11, params);
    dcps_mlp_t *m = dcps_mlp_new(layers, 3, N, NULL);
    ck_assert_ptr_nonnull(m);
    for (int step = 0; step < 200; step++) {
        ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, N, grad, &loss, NULL), 0);
        if (step == 0)
            first = loss;
        for (size_t i = 0; i < n; i++)
            params[i] -= 0.1f * grad[i];
    }
    ck_assert_int_eq(dcps_mlp_evaluate(m, params, &ds, &loss, &acc), 0);
    ck_assert_msg(loss * 5.0f < first, "loss %g -> %g", (double)first, (double)loss);
    ck_assert_float_eq(acc, 1.0f);
    dcps_mlp_destroy(&m);
}
END_TEST

START_TEST(evaluate_in_chunks_agrees_with_forward_backward)
{
    enum { N = 10 };
    const int layers[] = {5, 7, 4, 3};
    float params[128], grad[128], x[N * 5], loss_fb, loss_ev, acc;
    uint8_t y[N];
    int correct;
    fill_random(layers, 4, N, 21, params, x, y);
    dcps_mlp_t *whole = dcps_mlp_new(layers, 4, N, NULL);
    dcps_mlp_t *chunks = dcps_mlp_new(layers, 4, 3, NULL); /* 3+3+3+1 */
    ck_assert_int_eq(dcps_mlp_forward_backward(whole, params, x, y, N, grad, &loss_fb, &correct),
                     0);
    dcps_dataset_t ds = {N, 5, x, y};
    ck_assert_int_eq(dcps_mlp_evaluate(chunks, params, &ds, &loss_ev, &acc), 0);
    ck_assert_float_eq_tol(loss_ev, loss_fb, 1e-5f * loss_fb);
    ck_assert_float_eq(acc, (float)correct / N);
    dcps_mlp_destroy(&whole);
    dcps_mlp_destroy(&chunks);
}
END_TEST

START_TEST(invalid_batch_or_label_is_rejected_and_grad_untouched)
{
    const int layers[] = {5, 7, 4, 3};
    size_t n = dcps_mlp_param_count(layers, 4);
    float params[128], grad[128], x[5 * 5], loss;
    uint8_t y[5];
    fill_random(layers, 4, 5, 1, params, x, y);
    for (size_t i = 0; i < n; i++)
        grad[i] = 42.0f;
    dcps_mlp_t *m = dcps_mlp_new(layers, 4, 4, NULL);
    ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, 0, grad, &loss, NULL),
                     DCPS_E_INVAL);
    ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, -1, grad, &loss, NULL),
                     DCPS_E_INVAL);
    ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, 5, grad, &loss, NULL),
                     DCPS_E_INVAL);
    y[2] = 3;
    ck_assert_int_eq(dcps_mlp_forward_backward(m, params, x, y, 4, grad, &loss, NULL),
                     DCPS_E_INVAL);
    for (size_t i = 0; i < n; i++)
        ck_assert_float_eq(grad[i], 42.0f);

    float l = -1.0f, a = -1.0f;
    dcps_dataset_t ds = {5, 5, x, y};
    ck_assert_int_eq(dcps_mlp_evaluate(m, params, &ds, &l, &a), DCPS_E_INVAL);
    y[2] = 0;
    ds.dim = 4;
    ck_assert_int_eq(dcps_mlp_evaluate(m, params, &ds, &l, &a), DCPS_E_INVAL);
    ds.dim = 5;
    ds.n = 0;
    ck_assert_int_eq(dcps_mlp_evaluate(m, params, &ds, &l, &a), DCPS_E_INVAL);
    ck_assert_float_eq(l, -1.0f);
    ck_assert_float_eq(a, -1.0f);
    dcps_mlp_destroy(&m);

    int err = 0;
    ck_assert_ptr_null(dcps_mlp_new(layers, 1, 4, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    err = 0;
    ck_assert_ptr_null(dcps_mlp_new(layers, 4, 0, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
    const int zero[] = {5, 0, 3};
    err = 0;
    ck_assert_ptr_null(dcps_mlp_new(zero, 3, 4, &err));
    ck_assert_int_eq(err, DCPS_E_INVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mlp");
    TCase *tc = tcase_create("mlp");
    tcase_add_test(tc, param_count_of_reference_model);
    tcase_add_test(tc, init_is_deterministic_he_normal_with_zero_bias);
    tcase_add_test(tc, gradient_matches_finite_differences_on_every_entry);
    tcase_add_test(tc, uniform_logits_give_log_of_class_count);
    tcase_add_test(tc, sgd_learns_separable_problem);
    tcase_add_test(tc, evaluate_in_chunks_agrees_with_forward_backward);
    tcase_add_test(tc, invalid_batch_or_label_is_rejected_and_grad_untouched);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
