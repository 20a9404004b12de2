/* The README's example: one inference on a model deployed to this machine (`hello MODEL`). */
#include <stdio.h>
#include "edgekit.h"

int main(int argc, char **argv) {
    float x[4] = {0.1f, 0.2f, 0.3f, 0.4f};
    int64_t shape[2] = {1, 4};
    ek_tensor input = {"input", EK_FLOAT32, 2, shape, x, 0};
    ek_client *client;
    ek_result *out;
    if (argc < 2 || ek_client_create_local(NULL, 5000, &client) != EK_OK) return 2;
    if (ek_infer(client, argv[1], &input, 1, &out) != EK_OK) {
        fprintf(stderr, "%d %s\n", ek_last_status(client), ek_last_error(client));
        return 1;
    }
    printf("%s: %zu outputs in %.3f ms\n", out->version, out->count, out->inference_ms);
    ek_result_free(out);
    ek_client_destroy(client);
    return 0;
}
