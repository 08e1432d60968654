/* tests/mlp_init — dcps-worker's initial MLP parameters, for the Python tests.
 *
 *   tests/mlp_init LAYERS SEED   (e.g. 784,64,10 42)
 *
 * Writes dcps_mlp_init_params's vector to stdout as raw little-endian float32,
 * so that a test training the built-in model through dcps.torch starts where
 * dcps-worker starts (python/tests/harness.py: mlp_init). The MLP is the
 * trainer's, not libdcps's: the Python extension does not carry it. Exit
 * status 2 on bad arguments, 1 if stdout fails. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mlp.h"

#define MAX_LAYERS 16

int main(int argc, char **argv)
{
    int layers[MAX_LAYERS], n_layers = 0;
    char *end;
    if (argc != 3) {
        fprintf(stderr, "usage: %s LAYERS SEED\n", argv[0]);
        return 2;
    }
    for (const char *p = argv[1]; *p && n_layers < MAX_LAYERS; p = *end ? end + 1 : end) {
        long v = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 1 || v > 1 << 20) {
            fprintf(stderr, "%s: bad layer list '%s'\n", argv[0], argv[1]);
            return 2;
        }
        layers[n_layers++] = (int)v;
    }
    unsigned long long seed = strtoull(argv[2], &end, 10);
    size_t n = dcps_mlp_param_count(layers, n_layers);
    if (*end || end == argv[2] || n == 0) {
        fprintf(stderr, "%s: need 2 to %d layers and a seed, got '%s' '%s'\n", argv[0],
                MAX_LAYERS, argv[1], argv[2]);
        return 2;
    }
    float *w = malloc(n * sizeof *w);
    if (!w)
        return 1;
    dcps_mlp_init_params(layers, n_layers, (uint64_t)seed, w);
    int rc = fwrite(w, sizeof *w, n, stdout) == n && fflush(stdout) == 0 ? 0 : 1;
    free(w);
    return rc;
}
