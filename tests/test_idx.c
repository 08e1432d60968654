/* Tests for model/idx: round trips through plain and gzip IDX files, each
 * malformation with its code and a message naming the file, the data set's
 * checks and scaling, and the installed Fashion-MNIST test set when present. */
#include "model/idx.h"

#include "common/error.h"
#include "tests/check_run.h"
#include "tests/scratch.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define FMNIST "/usr/share/datasets/fashion-mnist/"

static dcps_scratch_t scratch; /* this test's directory (tests/scratch.h) */
static const char *dir;        /* its path */

/* The path of a file in the test directory; static storage, one per slot. */
static const char *tmp_path(int slot, const char *name)
{
    static char buf[4][sizeof scratch.path + 1 + 256]; /* d_name holds at most 255 */
    snprintf(buf[slot], sizeof buf[slot], "%s/%s", dir, name);
    return buf[slot];
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Writes an IDX file with the given type byte, dims, and data bytes, plainly or
 * through gzip. The header is written as given, so it may lie about the data. */
static const char *write_idx(int slot, const char *name, int gz, uint8_t type, int ndim,
                             const uint32_t *dims, const uint8_t *data, size_t len)
{
    const char *path = tmp_path(slot, name);
    uint8_t hdr[16] = {0, 0, type, (uint8_t)ndim};
    for (int i = 0; i < ndim; i++)
        put32(hdr + 4 + 4 * i, dims[i]);
    size_t hlen = 4 + 4 * (size_t)ndim;
    if (gz) {
        gzFile f = gzopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_int_eq(gzwrite(f, hdr, (unsigned)hlen), (int)hlen);
        if (len)
            ck_assert_int_eq(gzwrite(f, data, (unsigned)len), (int)len);
        ck_assert_int_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        ck_assert_ptr_nonnull(f);
        ck_assert_uint_eq(fwrite(hdr, 1, hlen, f), hlen);
        if (len)
            ck_assert_uint_eq(fwrite(data, 1, len, f), len);
        ck_assert_int_eq(fclose(f), 0);
    }
    return path;
}

/* 3 images of 2 x 4 with distinct bytes, 255 included, and 3 labels. */
static const uint8_t pixels[24] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                                   100, 128, 200, 254, 255, 17, 33, 65, 99, 127, 129, 250};
static const uint32_t img_dims[3] = {3, 2, 4};
static const uint8_t labels3[3] = {9, 0, 4};
static const uint32_t lab_dims[1] = {3};

/* Loads path expecting code; checks the message names the file and contains
 * the word that says what was wrong. */
static void expect_error(const char *path, int code, const char *word)
{
    dcps_idx_t x = {1, 1, 1, (uint8_t *)1};
    char err[512] = "";
    ck_assert_int_eq(dcps_idx_load(path, &x, err, sizeof err), code);
    ck_assert_msg(strstr(err, path) == err, "message does not start with the path: %s", err);
    ck_assert_msg(strstr(err, word) != NULL, "message lacks \"%s\": %s", word, err);
    ck_assert_ptr_null(x.data);
    ck_assert_uint_eq(x.count, 0);
}

START_TEST(images_and_labels_round_trip_exactly)
{
    for (int gz = 0; gz < 2; gz++) {
        dcps_idx_t img, lab;
        char err[256];
        const char *ip = write_idx(0, gz ? "img.gz" : "img", gz, 8, 3, img_dims, pixels, 24);
        const char *lp = write_idx(1, gz ? "lab.gz" : "lab", gz, 8, 1, lab_dims, labels3, 3);
        ck_assert_int_eq(dcps_idx_load(ip, &img, err, sizeof err), 0);
        ck_assert_int_eq(dcps_idx_load(lp, &lab, err, sizeof err), 0);
        ck_assert_uint_eq(img.count, 3);
        ck_assert_uint_eq(img.rows, 2);
        ck_assert_uint_eq(img.cols, 4);
        ck_assert_mem_eq(img.data, pixels, 24);
        ck_assert_uint_eq(lab.count, 3);
        ck_assert_uint_eq(lab.rows, 0);
        ck_assert_uint_eq(lab.cols, 0);
        ck_assert_mem_eq(lab.data, labels3, 3);
        dcps_idx_free(&img);
        dcps_idx_free(&lab);
        ck_assert_ptr_null(img.data);
        dcps_idx_free(&img); /* twice is harmless */
    }
}
END_TEST

START_TEST(gzip_file_loads_same_as_plain)
{
    enum { N = 50, R = 28, C = 28 };
    static uint8_t big[N * R * C];
    for (size_t i = 0; i < sizeof big; i++)
        big[i] = (uint8_t)(i * 2654435761u >> 13);
    const uint32_t dims[3] = {N, R, C};
    const char *pp = write_idx(0, "big", 0, 8, 3, dims, big, sizeof big);
    const char *gp = write_idx(1, "big.gz", 1, 8, 3, dims, big, sizeof big);
    dcps_idx_t a, b;
    ck_assert_int_eq(dcps_idx_load(pp, &a, NULL, 0), 0);
    ck_assert_int_eq(dcps_idx_load(gp, &b, NULL, 0), 0);
    ck_assert_uint_eq(a.count, b.count);
    ck_assert_uint_eq(a.rows, b.rows);
    ck_assert_uint_eq(a.cols, b.cols);
    ck_assert_mem_eq(a.data, b.data, sizeof big);
    ck_assert_mem_eq(a.data, big, sizeof big);
    dcps_idx_free(&a);
    dcps_idx_free(&b);
}
END_TEST

START_TEST(bad_magic_is_data_error)
{
    /* Non-zero leading bytes (e.g. a PNG) and a dimension count of 2. */
    const char *p = tmp_path(0, "png");
    FILE *f = fopen(p, "wb");
    fwrite("\x89PNG\r\n\x1a\n\0\0\0\0", 1, 12, f);
    fclose(f);
    expect_error(p, DCPS_E_DATA, "magic");
    const uint32_t dims[2] = {1, 1};
    expect_error(write_idx(1, "twodim", 0, 8, 2, dims, pixels, 1), DCPS_E_DATA, "magic");
}
END_TEST

START_TEST(non_byte_element_type_is_data_error)
{
    expect_error(write_idx(0, "float", 0, 0x0d, 1, lab_dims, labels3, 3), DCPS_E_DATA,
                 "unsupported element type 0x0d");
}
END_TEST

START_TEST(zero_dimension_is_data_error)
{
    const uint32_t dims[3] = {3, 0, 4};
    expect_error(write_idx(0, "zero", 0, 8, 3, dims, NULL, 0), DCPS_E_DATA, "zero");
    const uint32_t none[1] = {0};
    expect_error(write_idx(1, "nolabels", 1, 8, 1, none, NULL, 0), DCPS_E_DATA, "zero");
}
END_TEST

START_TEST(oversized_header_is_rejected_before_allocating)
{
    const uint32_t dims[3] = {60000, 65536, 65536};
    expect_error(write_idx(0, "huge", 0, 8, 3, dims, pixels, 24), DCPS_E_DATA, "limit");
}
END_TEST

START_TEST(truncated_data_reports_expected_and_got)
{
    for (int gz = 0; gz < 2; gz++) {
        const char *p = write_idx(0, gz ? "short.gz" : "short", gz, 8, 3, img_dims, pixels, 20);
        char want[512];
        snprintf(want, sizeof want, "%s: truncated: expected 24 bytes of data, got 20", p);
        dcps_idx_t x;
        char err[512];
        ck_assert_int_eq(dcps_idx_load(p, &x, err, sizeof err), DCPS_E_DATA);
        ck_assert_str_eq(err, want);
    }
    /* A header cut inside the dimensions. */
    const char *p = tmp_path(1, "cuthdr");
    FILE *f = fopen(p, "wb");
    fwrite("\0\0\x08\x03\0\0\0\x03\0\0", 1, 10, f);
    fclose(f);
    expect_error(p, DCPS_E_DATA, "truncated");
    /* An empty file. */
    f = fopen(p, "wb");
    fclose(f);
    expect_error(p, DCPS_E_DATA, "truncated");
}
END_TEST

START_TEST(gzip_stream_cut_short_is_truncated)
{
    enum { N = 4096 };
    static uint8_t noise[N];
    for (size_t i = 0; i < N; i++)
        noise[i] = (uint8_t)(i * 2654435761u >> 11);
    const uint32_t dims[1] = {N};
    const char *p = write_idx(0, "cut.gz", 1, 8, 1, dims, noise, N);
    /* Drop the trailer and part of the compressed data. */
    FILE *f = fopen(p, "rb");
    static uint8_t buf[2 * N];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    f = fopen(p, "wb");
    fwrite(buf, 1, len / 2, f);
    fclose(f);
    expect_error(p, DCPS_E_DATA, "truncated");
}
END_TEST

START_TEST(trailing_bytes_are_data_error)
{
    for (int gz = 0; gz < 2; gz++) {
        const char *p =
            write_idx(0, gz ? "long.gz" : "long", gz, 8, 1, lab_dims, pixels, sizeof pixels);
        expect_error(p, DCPS_E_DATA, "21 trailing bytes");
    }
}
END_TEST

START_TEST(missing_file_is_io_error)
{
    expect_error(tmp_path(0, "does-not-exist"), DCPS_E_IO, "No such file");
}
END_TEST

START_TEST(dataset_scales_pixels_by_255)
{
    const char *ip = write_idx(0, "img", 0, 8, 3, img_dims, pixels, 24);
    const char *lp = write_idx(1, "lab.gz", 1, 8, 1, lab_dims, labels3, 3);
    dcps_dataset_t ds;
    char err[256];
    ck_assert_int_eq(dcps_dataset_load(ip, lp, 0, &ds, err, sizeof err), 0);
    ck_assert_uint_eq(ds.n, 3);
    ck_assert_uint_eq(ds.dim, 8);
    for (int i = 0; i < 24; i++)
        ck_assert_float_eq(ds.x[i], (float)pixels[i] / 255.0f);
    ck_assert_float_eq(ds.x[16], 1.0f);
    ck_assert_float_eq(ds.x[0], 0.0f);
    ck_assert_mem_eq(ds.y, labels3, 3);
    dcps_dataset_free(&ds);
    ck_assert_ptr_null(ds.x);
    ck_assert_ptr_null(ds.y);
}
END_TEST

START_TEST(dataset_limit_keeps_a_prefix)
{
    const char *ip = write_idx(0, "img", 0, 8, 3, img_dims, pixels, 24);
    const char *lp = write_idx(1, "lab", 0, 8, 1, lab_dims, labels3, 3);
    const uint32_t limits[] = {1, 2, 3, 4, 1000, 0}, want[] = {1, 2, 3, 3, 3, 3};
    for (int k = 0; k < 6; k++) {
        dcps_dataset_t ds;
        ck_assert_int_eq(dcps_dataset_load(ip, lp, limits[k], &ds, NULL, 0), 0);
        ck_assert_uint_eq(ds.n, want[k]);
        ck_assert_float_eq(ds.x[ds.n * 8 - 1], (float)pixels[ds.n * 8 - 1] / 255.0f);
        ck_assert_uint_eq(ds.y[ds.n - 1], labels3[ds.n - 1]);
        dcps_dataset_free(&ds);
    }
}
END_TEST

START_TEST(dataset_count_mismatch_is_data_error)
{
    const char *ip = write_idx(0, "img", 0, 8, 3, img_dims, pixels, 24);
    const uint32_t two[1] = {2};
    const char *lp = write_idx(1, "lab2", 0, 8, 1, two, labels3, 2);
    dcps_dataset_t ds = {1, 1, (float *)1, (uint8_t *)1};
    char err[512];
    ck_assert_int_eq(dcps_dataset_load(ip, lp, 0, &ds, err, sizeof err), DCPS_E_DATA);
    ck_assert_ptr_nonnull(strstr(err, lp));
    ck_assert_ptr_nonnull(strstr(err, "2 labels"));
    ck_assert_ptr_null(ds.x);
    ck_assert_ptr_null(ds.y);
    /* Swapped arguments are caught too. */
    ck_assert_int_eq(dcps_dataset_load(lp, ip, 0, &ds, err, sizeof err), DCPS_E_DATA);
    ck_assert_ptr_nonnull(strstr(err, lp));
}
END_TEST

START_TEST(dataset_label_ten_or_more_names_index)
{
    const char *ip = write_idx(0, "img", 0, 8, 3, img_dims, pixels, 24);
    const uint8_t bad[3] = {1, 2, 10};
    const char *lp = write_idx(1, "badlab", 0, 8, 1, lab_dims, bad, 3);
    dcps_dataset_t ds;
    char err[512];
    /* The bad label lies beyond the limit: the file is still rejected. */
    ck_assert_int_eq(dcps_dataset_load(ip, lp, 1, &ds, err, sizeof err), DCPS_E_DATA);
    ck_assert_ptr_nonnull(strstr(err, lp));
    ck_assert_ptr_nonnull(strstr(err, "label 10 at index 2"));
}
END_TEST

START_TEST(dataset_missing_labels_file_is_io_error)
{
    const char *ip = write_idx(0, "img", 0, 8, 3, img_dims, pixels, 24);
    dcps_dataset_t ds;
    char err[512];
    const char *lp = tmp_path(1, "absent-labels");
    ck_assert_int_eq(dcps_dataset_load(ip, lp, 0, &ds, err, sizeof err), DCPS_E_IO);
    ck_assert_ptr_nonnull(strstr(err, lp));
}
END_TEST

START_TEST(fashion_mnist_test_set_has_1000_of_each_label)
{
    if (access(FMNIST "t10k-labels-idx1-ubyte.gz", R_OK) != 0)
        return; /* dataset-fashion-mnist not installed */
    dcps_dataset_t ds;
    char err[512];
    int rc = dcps_dataset_load(FMNIST "t10k-images-idx3-ubyte.gz",
                               FMNIST "t10k-labels-idx1-ubyte.gz", 0, &ds, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(ds.n, 10000);
    ck_assert_uint_eq(ds.dim, 28 * 28);
    int count[10] = {0};
    for (uint32_t i = 0; i < ds.n; i++)
        count[ds.y[i]]++;
    for (int k = 0; k < 10; k++)
        ck_assert_int_eq(count[k], 1000);
    float lo = 1.0f, hi = 0.0f;
    for (size_t i = 0; i < (size_t)ds.n * ds.dim; i++) {
        lo = ds.x[i] < lo ? ds.x[i] : lo;
        hi = ds.x[i] > hi ? ds.x[i] : hi;
    }
    ck_assert_float_eq(lo, 0.0f);
    ck_assert_float_eq(hi, 1.0f);
    dcps_dataset_free(&ds);

    dcps_idx_t img;
    ck_assert_int_eq(dcps_idx_load(FMNIST "t10k-images-idx3-ubyte.gz", &img, err, sizeof err), 0);
    ck_assert_uint_eq(img.count, 10000);
    ck_assert_uint_eq(img.rows, 28);
    ck_assert_uint_eq(img.cols, 28);
    dcps_idx_free(&img);
}
END_TEST

/* Each test writes its files in a directory of its own, made in its process. */
static void setup(void)
{
    ck_assert_msg(dcps_scratch_new(&scratch) == 0, "mkdtemp: %s", strerror(errno));
    dir = scratch.path;
}

int main(void)
{
    Suite *s = suite_create("idx");
    TCase *tc = tcase_create("idx");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, images_and_labels_round_trip_exactly);
    tcase_add_test(tc, gzip_file_loads_same_as_plain);
    tcase_add_test(tc, bad_magic_is_data_error);
    tcase_add_test(tc, non_byte_element_type_is_data_error);
    tcase_add_test(tc, zero_dimension_is_data_error);
    tcase_add_test(tc, oversized_header_is_rejected_before_allocating);
    tcase_add_test(tc, truncated_data_reports_expected_and_got);
    tcase_add_test(tc, gzip_stream_cut_short_is_truncated);
    tcase_add_test(tc, trailing_bytes_are_data_error);
    tcase_add_test(tc, missing_file_is_io_error);
    tcase_add_test(tc, dataset_scales_pixels_by_255);
    tcase_add_test(tc, dataset_limit_keeps_a_prefix);
    tcase_add_test(tc, dataset_count_mismatch_is_data_error);
    tcase_add_test(tc, dataset_label_ten_or_more_names_index);
    tcase_add_test(tc, dataset_missing_labels_file_is_io_error);
    tcase_add_test(tc, fashion_mnist_test_set_has_1000_of_each_label);
    suite_add_tcase(s, tc);
    return dcps_test_run(s);
}
