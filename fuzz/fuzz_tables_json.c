/*
 * Fuzz target: the tables reader, json_parse_tables() (planner/formats/json.c),
 * fed both tables files and tasks files.
 *
 * Invariants: an input is refused with a code and a message, or it gives
 * at least one table, the set passes table_validate_all(), every table's
 * cost-model features are finite, and writing the tables (json_tables())
 * and reading them back gives the same tables, bit for bit.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "planner.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

/* Same table, doubles compared by their bits (a -0.0 must stay -0.0). */
static int same_table(const struct table *a, const struct table *b)
{
    return strcmp(a->name, b->name) == 0 && a->rows == b->rows &&
           a->dim == b->dim && a->dtype == b->dtype &&
           memcmp(&a->pooling_factor, &b->pooling_factor,
                  sizeof(a->pooling_factor)) == 0 &&
           memcmp(a->bins, b->bins, sizeof(a->bins)) == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct table *tables = NULL, *again = NULL;
    struct sd_diag d;
    size_t n = 0, n2 = 0, i;
    float f[TABLE_NFEATURES];
    char *json;
    int rv, k;

    d.msg[0] = '\0';
    rv = json_parse_tables((const char *)data, size, 0, &tables, &n, &d);
    if (rv != 0) {
        fuzz_check_refusal(rv, &d);
        return 0;
    }
    FUZZ_CHECK(tables != NULL && n >= 1);
    FUZZ_CHECK(table_validate_all(tables, n, &d) == 0);
    for (i = 0; i < n; i++) {
        table_features(&tables[i], tables[i].dim, f);
        for (k = 0; k < TABLE_NFEATURES; k++)
            FUZZ_CHECK(isfinite(f[k]));
    }

    json = json_tables(tables, n);
    FUZZ_CHECK(json != NULL);
    d.msg[0] = '\0';
    rv = json_parse_tables(json, strlen(json), 0, &again, &n2, &d);
    if (rv != 0)
        fprintf(stderr, "round trip refused: %s\n", d.msg);
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(n2 == n);
    for (i = 0; i < n; i++)
        FUZZ_CHECK(same_table(&tables[i], &again[i]));
    free(json);
    free(again);
    free(tables);
    return 0;
}
