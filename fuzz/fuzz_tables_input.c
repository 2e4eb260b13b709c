/*
 * Fuzz target: tables as users describe them (planner/formats: json.c,
 * json_trec.c, input.c, derive.c), shardd's form without bins and TorchRec's
 * form, then their trip through wire/ (wire_inputs.c) as shardctl sends
 * them and the daemon reads them.
 *
 * Invariants: an input is refused with a code and a message, or
 * tables_input_resolve() at a batch of 4096 either refuses the same way or
 * gives tables that pass table_validate_all() with every histogram summing
 * to at most 1 (to 1 when derived for a table that is read); every note
 * has a message and the notes make JSON (json_tables_noted()); and the
 * tables sent as a request (wire_tables_input_out(), packed, unpacked,
 * wire_tables_input_in(), resolved at the same batch) come back the same,
 * bit for bit, with the same notes but those only a JSON reader makes
 * (keys it does not know): what shardctl plans offline is what the daemon
 * plans online.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "planner.h"
#include "wire.h"

#define FUZZ_BATCH 4096

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static int same_table(const struct table *a, const struct table *b)
{
    return strcmp(a->name, b->name) == 0 && a->rows == b->rows &&
           a->dim == b->dim && a->dtype == b->dtype &&
           memcmp(&a->pooling_factor, &b->pooling_factor,
                  sizeof(a->pooling_factor)) == 0 &&
           memcmp(a->bins, b->bins, sizeof(a->bins)) == 0;
}

/* The notes of `in` that a message can carry: all but NOTE_UNKNOWN. */
static size_t carried(const struct input_notes *ns, size_t i)
{
    size_t k, seen = 0;

    for (k = 0; k < ns->n; k++) {
        if (ns->v[k].kind == NOTE_UNKNOWN)
            continue;
        if (seen++ == i)
            return k;
    }
    return ns->n;
}

/* in, as shardctl sends it and the daemon reads it, against in itself. */
static void wire_trip(const struct tables_input *in)
{
    Shardd__V1__PlanRequest rq = SHARDD__V1__PLAN_REQUEST__INIT;
    Shardd__V1__PlanRequest *back;
    struct wire_arena arena = WIRE_ARENA_INIT;
    struct wire_limits lim;
    struct tables_input again;
    struct sd_diag d;
    uint8_t *buf = NULL;
    size_t len = 0, i, k;
    int rv;

    FUZZ_CHECK(wire_tables_input_out(&arena, in, &rq.tables, &rq.n_tables,
                                     &rq.torchrec_tables,
                                     &rq.n_torchrec_tables) == 0);
    FUZZ_CHECK(wire_pack(&rq.base, &buf, &len, &d) == 0);
    wire_arena_free(&arena);
    back = shardd__v1__plan_request__unpack(NULL, len, buf);
    free(buf);
    FUZZ_CHECK(back != NULL);
    wire_limits_default(&lim);
    rv = wire_tables_input_in(&lim, back->tables, back->n_tables,
                              back->torchrec_tables, back->n_torchrec_tables,
                              &again, &d);
    if (rv != 0)
        fprintf(stderr, "wire refused what JSON took: %s\n", d.msg);
    FUZZ_CHECK(rv == 0);
    rv = tables_input_resolve(&again, FUZZ_BATCH, &d);
    FUZZ_CHECK(rv == 0);
    FUZZ_CHECK(again.n == in->n && again.whole_tables == in->whole_tables);
    for (i = 0; i < in->n; i++)
        FUZZ_CHECK(same_table(&in->tables[i], &again.tables[i]));
    for (i = 0; i < again.notes.n; i++) {
        k = carried(&in->notes, i);
        FUZZ_CHECK(k < in->notes.n);
        FUZZ_CHECK(strcmp(in->notes.v[k].text, again.notes.v[i].text) == 0);
    }
    FUZZ_CHECK(carried(&in->notes, again.notes.n) == in->notes.n);
    tables_input_destroy(&again);
    shardd__v1__plan_request__free_unpacked(back, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct tables_input in;
    struct sd_diag d;
    double sum;
    size_t i;
    char *json;
    int rv, k;

    d.msg[0] = '\0';
    rv = json_parse_tables_input((const char *)data, size, 0, TABLES_FORM_AUTO,
                                 &in, &d);
    if (rv != 0) {
        fuzz_check_refusal(rv, &d);
        return 0;
    }
    FUZZ_CHECK(in.n >= 1 && in.form != TABLES_FORM_AUTO);
    d.msg[0] = '\0';
    rv = tables_input_resolve(&in, FUZZ_BATCH, &d);
    if (rv != 0) {
        fuzz_check_refusal(rv, &d);
        tables_input_destroy(&in);
        return 0;
    }
    FUZZ_CHECK(table_validate_all(in.tables, in.n, &d) == 0);
    for (i = 0; i < in.n; i++) {
        for (sum = 0, k = 0; k < TABLE_NBINS; k++)
            sum += in.tables[i].bins[k];
        FUZZ_CHECK(sum <= 1.0 + 1e-9);
        if (!in.specs[i].has_bins && in.tables[i].pooling_factor > 0)
            FUZZ_CHECK(fabs(sum - 1.0) <= 1e-9);
    }
    for (i = 0; i < in.notes.n; i++)
        FUZZ_CHECK(in.notes.v[i].text[0] != '\0');
    json = json_tables_noted(in.tables, in.n, &in.notes);
    FUZZ_CHECK(json != NULL);
    free(json);
    wire_trip(&in);
    tables_input_destroy(&in);
    return 0;
}
