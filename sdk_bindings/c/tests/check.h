/* The unit tests' check macro. */
#ifndef CHECK_H
#define CHECK_H

#include <stdio.h>

extern int failures, checks;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            failures++;                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
        }                                                                            \
    } while (0)

void test_client_paths(void);
/* ek_client_create_local, with a device root made under scratch. */
void test_client_local(const char *scratch);

#endif
