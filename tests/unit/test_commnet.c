/*
 * Learned communication models (planner/models/comm.c) and the comm-model
 * seam of the plan cost (planner/problem/cost.c): a tiny network whose
 * outputs are worked out by hand, the wait-for-slowest input, the batch
 * scaling, the plan cost and the evaluation through a learned model, the
 * name in the plan, and the alpha-beta model where the set has no model
 * for the device count.
 */
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "planner.h"

/*
 * Backward, 2 devices: x = (in - mean) / (std + eps) with mean (1, 1),
 * std (2, 2), eps 0; h = ReLU(W0 x + b0), W0 = [[1, 0], [0, -1]],
 * b0 = (0, 1); out = W1 h + b1, W1 = [[1, 1], [2, 0]], b1 = (0.5, 0).
 */
static const float bwd_p[] = {1, 0, 0, -1, 0, 1, 1, 1, 2, 0, 0.5f, 0};

/*
 * Forward, 2 devices, one layer: out_r = 1 + 0.01 dim_r + the other
 * device's lateness (its input "wait": ready time less the earliest), what
 * device r waits for it.
 */
static const float fwd_p[] = {0.01f, 0, 0, 1, 0, 0.01f, 1, 0, 1, 1};

static struct cost_net *tiny_set(int activation)
{
    struct cost_net *m = net_alloc();
    struct comm_net c;
    struct sd_diag d = {{0}};
    int i;

    if (m == NULL)
        return NULL;
    snprintf(m->profile, sizeof(m->profile), "test/tiny/100");
    m->batch_size = 100;
    for (i = 0; i < NET_IN; i++)
        m->std[i] = 1;

    memset(&c, 0, sizeof(c));
    c.dir = COMM_BWD;
    c.ndevices = 2;
    c.nlayers = 2;
    c.sizes[0] = c.sizes[1] = c.sizes[2] = 2;
    c.activation = activation;
    c.mean[0] = c.mean[1] = 1;
    c.std[0] = c.std[1] = 2;
    c.nparams = comm_net_nparams(2, c.sizes);
    CHECK(c.nparams == sizeof(bwd_p) / sizeof(bwd_p[0]));
    CHECK(net_add_comm(&m, &c, bwd_p, &d) == 0);

    memset(&c, 0, sizeof(c));
    c.dir = COMM_FWD;
    c.ndevices = 2;
    c.nlayers = 1;
    c.sizes[0] = 4;
    c.sizes[1] = 2;
    c.activation = activation;
    for (i = 0; i < 4; i++)
        c.std[i] = 1;
    c.nparams = comm_net_nparams(1, c.sizes);
    CHECK(c.nparams == sizeof(fwd_p) / sizeof(fwd_p[0]));
    CHECK(net_add_comm(&m, &c, fwd_p, &d) == 0);
    return m;
}

static void test_inference(void)
{
    struct cost_net *m = tiny_set(NET_ACT_NONE);
    double in[4], out[2];

    CHECK(m != NULL && m->ncomm == 2);
    if (m == NULL)
        return;
    /* in (3, 5): x = (1, 2), h = ReLU(1, -1) = (1, 0), out = (1.5, 2). */
    in[0] = 3;
    in[1] = 5;
    comm_net_run(m, net_comm_find(m, COMM_BWD, 2), in, out);
    CHECK_NEAR(out[0], 1.5, 1e-6);
    CHECK_NEAR(out[1], 2.0, 1e-6);
    /* in (-3, 1): x = (-2, 0), h = ReLU(-2, 1) = (0, 1), out = (1.5, 0). */
    in[0] = -3;
    in[1] = 1;
    comm_net_run(m, net_comm_find(m, COMM_BWD, 2), in, out);
    CHECK_NEAR(out[0], 1.5, 1e-6);
    CHECK_NEAR(out[1], 0.0, 1e-6);
    /* No ReLU after the last layer, but no time below 0: (100, 0) gives
     * x = (49.5, -0.5), h = (49.5, 1.5), out = (51.5, 99). */
    in[0] = 100;
    in[1] = 0;
    comm_net_run(m, net_comm_find(m, COMM_BWD, 2), in, out);
    CHECK_NEAR(out[0], 51.5, 1e-6);
    CHECK_NEAR(out[1], 99.0, 1e-6);
    in[0] = 1;
    in[1] = 20;
    in[2] = -500; /* out_1 = 1 + 0.2 - 500 < 0 */
    in[3] = 0;
    comm_net_run(m, net_comm_find(m, COMM_FWD, 2), in, out);
    CHECK_NEAR(out[0], 1.01, 1e-6);
    CHECK(out[1] == 0);
    free(m);

    /* Softplus outputs: log(1 + e^1.5) and log(1 + e^2). */
    m = tiny_set(NET_ACT_SOFTPLUS);
    if (m == NULL)
        return;
    in[0] = 3;
    in[1] = 5;
    comm_net_run(m, net_comm_find(m, COMM_BWD, 2), in, out);
    CHECK_NEAR(out[0], log1p(exp(1.5)), 1e-6);
    CHECK_NEAR(out[1], log1p(exp(2.0)), 1e-6);
    free(m);
}

/*
 * The exchange of a plan: dims (3, 5), compute (10, 2).  bwd = (1.5, 2);
 * ready = (11.5, 4): device 0 is 7.5 late, device 1 waits for it;
 * fwd = (1 + 0.03, 1 + 0.05 + 7.5); the plan cost is
 * max(10 + 1.5 + 1.03, 2 + 2 + 8.55) = 12.55.
 */
static void test_exchange(void)
{
    struct cost_net *m = tiny_set(NET_ACT_NONE);
    struct net_comm_model ncm;
    struct topology t;
    int32_t dims[2] = {3, 5};
    double comp[2] = {10, 2}, fwd[2], bwd[2];

    if (m == NULL)
        return;
    topology_default(&t, 2, 1ull << 30);
    t.batch_size = 100;
    CHECK(net_comm_model_init(&ncm, m, &t));
    t.comm = &ncm.cm;
    CHECK(strcmp(cost_comm_exchange(&t, dims, comp, fwd, bwd),
                 "neural_comm:test/tiny/100 (2 devices)") == 0);
    CHECK_NEAR(bwd[0], 1.5, 1e-6);
    CHECK_NEAR(bwd[1], 2.0, 1e-6);
    CHECK_NEAR(fwd[0], 1.03, 1e-6);
    CHECK_NEAR(fwd[1], 8.55, 1e-6);
    CHECK_NEAR(cost_plan_ms(&t, comp, dims, fwd, bwd), 12.55, 1e-6);
    CHECK_NEAR(bwd[1], 2.0, 1e-6); /* left for the caller */

    /* Twice the set's batch: the same bytes as twice the dims, (6, 10):
     * x = (2.5, 4.5), h = (2.5, 0), bwd = (3, 5); ready (13, 7): device 1
     * waits 6; fwd = (1.06, 1.1 + 6). */
    t.comm = NULL;
    t.batch_size = 200;
    CHECK(net_comm_model_init(&ncm, m, &t));
    t.comm = &ncm.cm;
    CHECK(strstr(ncm.cm.name, "scaled from batch 100") != NULL);
    cost_comm_exchange(&t, dims, comp, fwd, bwd);
    CHECK_NEAR(bwd[0], 3.0, 1e-6);
    CHECK_NEAR(bwd[1], 5.0, 1e-6);
    CHECK_NEAR(fwd[0], 1.06, 1e-6);
    CHECK_NEAR(fwd[1], 7.1, 1e-6);

    /* No model for 4 devices: the caller keeps alpha-beta. */
    topology_default(&t, 4, 1ull << 30);
    CHECK(!net_comm_model_init(&ncm, m, &t));
    CHECK(strcmp(cost_comm_exchange(&t, (int32_t[]){1, 2, 3, 4}, NULL,
                                    (double[4]){0}, (double[4]){0}),
                 "alpha_beta") == 0);
    free(m);
}

/* A constant compute model: 2 ms per item. */
static double two_ms(void *ctx, const struct topology *t,
                     const struct shard_item *items, size_t n)
{
    (void)ctx;
    (void)t;
    (void)items;
    return 2.0 * (double)n;
}

/*
 * plan_evaluate through the learned model: two tables of 4 and 8 columns
 * on devices 0 and 1, a third of 4 on device 0.  compute (4, 2), dims
 * (8, 8): x = (3.5, 3.5), h = (3.5, 0), bwd = (4, 7); ready (8, 9):
 * device 0 waits 1; fwd = (1 + 0.08 + 1, 1 + 0.08).  Totals 8 + 2.08 and
 * 9 + 1.08: both 10.08.
 */
static void test_evaluate(void)
{
    struct cost_net *m = tiny_set(NET_ACT_NONE);
    const struct cost_model cm = {"two", two_ms, NULL};
    struct net_comm_model ncm;
    struct topology t;
    struct table tb[3];
    struct plan p;
    int k;

    if (m == NULL)
        return;
    for (k = 0; k < 3; k++) {
        memset(&tb[k], 0, sizeof(tb[k]));
        snprintf(tb[k].name, sizeof(tb[k].name), "t%d", k);
        tb[k].rows = 10;
        tb[k].dim = k == 1 ? 8 : 4;
    }
    topology_default(&t, 2, 1ull << 30);
    t.batch_size = 100;
    CHECK(net_comm_model_init(&ncm, m, &t));
    t.comm = &ncm.cm;
    CHECK(plan_init(&p, 2) == 0);
    plan_add(&p, 0, 0, 0, 4);
    plan_add(&p, 1, 1, 0, 8);
    plan_add(&p, 2, 0, 0, 4);
    CHECK(plan_evaluate(&p, tb, 3, &t, OPTIMIZER_SGD, &cm) == 0);
    CHECK(strcmp(p.comm_model, ncm.cm.name) == 0);
    CHECK_NEAR(p.devices[0].bwd_comm_ms, 4.0, 1e-6);
    CHECK_NEAR(p.devices[1].bwd_comm_ms, 7.0, 1e-6);
    CHECK_NEAR(p.devices[0].fwd_comm_ms, 2.08, 1e-6);
    CHECK_NEAR(p.devices[1].fwd_comm_ms, 1.08, 1e-6);
    CHECK_NEAR(p.cost_ms, 10.08, 1e-6);
    /* The explanation's balanced exchange is the learned one's, no
     * compute: dims (8, 8), the least backward 4 and forward 1.08; mean
     * compute 3, the costliest table 2 (+ 0.01 latency): the bound is
     * max(3 + 4, 2 + 0.01) + 1.08 = 8.08. */
    CHECK(plan_explain(&p, tb, &t, &cm) == 0);
    CHECK_NEAR(p.explain.lower_bound_ms, 8.08, 1e-6);
    plan_destroy(&p);
    free(m);
}

/* Sets refuse comm nets that do not fit them. */
static void test_refusals(void)
{
    struct cost_net *m = net_alloc();
    struct comm_net c;
    struct sd_diag d = {{0}};
    float p[16] = {0};

    if (m == NULL)
        return;
    memset(&c, 0, sizeof(c));
    c.dir = COMM_BWD;
    c.ndevices = 2;
    c.nlayers = 1;
    c.sizes[0] = 4; /* a backward model of 2 devices has 2 inputs */
    c.sizes[1] = 2;
    c.std[0] = c.std[1] = c.std[2] = c.std[3] = 1;
    c.nparams = comm_net_nparams(1, c.sizes);
    CHECK(net_add_comm(&m, &c, p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "a backward model of 2 devices has 2 and 2") != NULL);
    c.sizes[0] = 2;
    c.nparams = 7;
    CHECK(net_add_comm(&m, &c, p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "7 parameters, its sizes have 6") != NULL);
    c.nparams = 6;
    c.ndevices = 1;
    CHECK(net_add_comm(&m, &c, p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "ndevices 1") != NULL);
    c.ndevices = 2;
    p[3] = NAN;
    CHECK(net_add_comm(&m, &c, p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "parameter 3 is not finite") != NULL);
    p[3] = 0;
    c.eps = -1;
    CHECK(net_add_comm(&m, &c, p, &d) == SD_EINVAL);
    CHECK(strstr(d.msg, "eps") != NULL);
    c.eps = 0;
    CHECK(net_add_comm(&m, &c, p, &d) == 0);
    CHECK(m->ncomm == 1 && m->ncomm_p == 6);
    free(m);
}

int main(void)
{
    test_inference();
    test_exchange();
    test_evaluate();
    test_refusals();
    return tap_done();
}
