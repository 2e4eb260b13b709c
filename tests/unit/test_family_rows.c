/*
 * shardctl's errors by table family (client/family.c), against figures
 * computed by hand: the group of each sample's family label, the hold-outs
 * of --hold-out-family, and each family's count, MAPE, p90 and signed
 * median (net_errors(): order statistics at floor(q (n - 1)), the median of
 * an even count the upper middle one), as train and score print them and
 * the store keeps them.
 */
#include <string.h>

#include "client.h"
#include "harness.h"
#include "store.h"

/* Six samples: predicted / measured, and the signed errors by hand. */
static const struct {
    const char *family;
    double pred, meas; /* error (pred - meas) / meas */
} cases[] = {
    {"zipf", 11, 10},    /* +0.10 */
    {"zipf", 8, 10},     /* -0.20 */
    {"zipf", 10, 10},    /*  0    */
    {"exp", 30, 20},     /* +0.50 */
    {"dlrm+seq", 5, 10}, /* -0.50: mix */
    {"", 1, 1},          /*  0: other */
};
#define N (sizeof(cases) / sizeof(cases[0]))

static void fill(struct store_sample *smp, double *pred)
{
    size_t i;

    memset(smp, 0, N * sizeof(*smp));
    for (i = 0; i < N; i++) {
        snprintf(smp[i].family, sizeof(smp[i].family), "%s", cases[i].family);
        smp[i].measured_ms = cases[i].meas;
        pred[i] = cases[i].pred;
    }
}

static void test_rows(void)
{
    struct store_sample smp[N];
    struct ctl_family_row rows[FAMILY_OTHER + 1];
    struct store_model_metrics mx;
    double pred[N];
    bool pick[N] = {true, true, false, true, true, true};
    size_t n = 0;

    fill(smp, pred);
    CHECK(ctl_family_rows(smp, pred, N, NULL, false, rows, &n) == 0);
    CHECK(n == 4);
    if (n != 4)
        return;
    /* Group order: families first, then mix, then other. */
    CHECK(rows[0].group == FAMILY_ZIPF && rows[0].e.n == 3);
    CHECK_NEAR(rows[0].e.mape, (0.1 + 0.2 + 0) / 3, 1e-12);
    CHECK_NEAR(rows[0].e.signed_median, 0, 1e-12); /* of -0.2, 0, 0.1 */
    CHECK_NEAR(rows[0].e.p90, 0.1, 1e-12);         /* [0, 0.1, 0.2][1] */
    CHECK(rows[1].group == FAMILY_EXP && rows[1].e.n == 1);
    CHECK_NEAR(rows[1].e.mape, 0.5, 1e-12);
    CHECK_NEAR(rows[1].e.signed_median, 0.5, 1e-12);
    CHECK(rows[2].group == FAMILY_MIX && rows[2].e.n == 1);
    CHECK_NEAR(rows[2].e.signed_median, -0.5, 1e-12);
    CHECK(rows[3].group == FAMILY_OTHER && rows[3].e.mape == 0);
    CHECK(!rows[0].held_out);

    /* A subset: zipf without its third sample; the median of two is the
     * upper one. */
    CHECK(ctl_family_rows(smp, pred, N, pick, true, rows, &n) == 0);
    CHECK(n == 4 && rows[0].e.n == 2 && rows[0].held_out);
    CHECK_NEAR(rows[0].e.mape, 0.15, 1e-12);
    CHECK_NEAR(rows[0].e.signed_median, 0.1, 1e-12);

    /* As the store keeps them. */
    CHECK(ctl_family_rows(smp, pred, N, NULL, false, rows, &n) == 0);
    memset(&mx, 0, sizeof(mx));
    ctl_family_metrics(rows, n, &mx);
    CHECK(mx.nfamilies == 4 && strcmp(mx.families[0].family, "zipf") == 0 &&
          mx.families[0].samples == 3 &&
          strcmp(mx.families[2].family, "mix") == 0 &&
          strcmp(mx.families[3].family, "other") == 0 &&
          mx.families[1].mape == 0.5);
}

static void test_hold_out(void)
{
    bool hold[FAMILY_MIX + 1];

    CHECK(family_parse_list("zipf", hold, NULL) == 0);
    CHECK(ctl_held_out("zipf", hold) && !ctl_held_out("exp", hold));
    CHECK(ctl_held_out("zipf+exp", hold)); /* a zipf table in the shard */
    CHECK(!ctl_held_out("", hold) && !ctl_held_out("bogus", hold));
    CHECK(family_parse_list("mix", hold, NULL) == 0);
    CHECK(ctl_held_out("dlrm+seq", hold) && !ctl_held_out("seq", hold));
    CHECK(family_parse_list("seq,onehot", hold, NULL) == 0);
    CHECK(ctl_held_out("dlrm+seq", hold) && ctl_held_out("onehot", hold) &&
          !ctl_held_out("dlrm", hold));
}

int main(void)
{
    test_rows();
    test_hold_out();
    return tap_done();
}
