/*
 * Fuzz target: the placement policy file loader, policy_parse()
 * (planner/models/policy.c), and dreamshard's inference with what it
 * accepts.
 *
 * The first byte picks how the rest is used:
 *  - even: the rest is a policy file image as it is;
 *  - odd: the rest is a list of 3-byte edits (offset u16 little-endian,
 *    modulo the image size, then the new byte) applied to the embedded
 *    policy's image, whose CRC-32 is then made right again, so edits reach
 *    the checks behind the checksum (architecture, profile, metrics,
 *    weights).
 *
 * Invariants: an input is refused with a code and a message, or the policy
 * has a NUL-terminated, non-empty profile, finite weights and ratios,
 * counts >= 0 and best_iteration <= iterations, and serialise then parse
 * gives the same policy; one still bound to the embedded model plans four
 * fixed tables on two devices into a valid plan (plan_run() validates it),
 * whatever its finite weights make of the logits.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "planner.h"

static uint8_t *image; /* the embedded policy, serialised */
static size_t image_len;
static const struct cost_net *net;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const struct policy_net *pn = policy_embedded(NULL);
    void *img;

    (void)argc;
    (void)argv;
    net = net_embedded(NULL);
    FUZZ_CHECK(pn != NULL && net != NULL);
    FUZZ_CHECK(policy_serialize(pn, &img, &image_len) == 0);
    image = img;
    return 0;
}

/* Four tables of dims 4 .. 32, a few MiB each. */
static void make_tables(struct table t[4])
{
    int i;

    memset(t, 0, 4 * sizeof(*t));
    for (i = 0; i < 4; i++) {
        snprintf(t[i].name, sizeof(t[i].name), "t%d", i);
        t[i].rows = 1000 * (i + 1);
        t[i].dim = 4 << i;
        t[i].pooling_factor = 1 + 3 * i;
        t[i].bins[0] = 0.5;
        t[i].bins[3] = 0.25;
    }
}

static void check_plans(const struct policy_net *pn)
{
    struct net_cost_model ncm;
    struct plan_options o;
    struct topology topo;
    struct table t[4];
    struct plan p;
    struct sd_diag d;

    if (policy_check_model(pn, net, NULL) != 0)
        return;
    make_tables(t);
    topology_default(&topo, 2, (uint64_t)1 << 30);
    topo.batch_size = net->batch_size;
    net_cost_model_init(&ncm, net);
    plan_options_default(&o);
    o.alg = PLAN_ALG_DREAMSHARD;
    o.net = net;
    o.policy = pn;
    d.msg[0] = '\0';
    FUZZ_CHECK(plan_run(t, 4, &topo, &o, &ncm.cm, &p, &d) == 0);
    FUZZ_CHECK(p.nshards == 4 && isfinite(p.cost_ms));
    plan_destroy(&p);
}

static void check_policy(const struct policy_net *pn)
{
    const struct policy_metrics *mx = &pn->metrics;
    struct policy_net *again = NULL;
    struct sd_diag d;
    void *img;
    size_t len, i;

    FUZZ_CHECK(memchr(pn->profile, '\0', sizeof(pn->profile)) != NULL);
    FUZZ_CHECK(pn->profile[0] != '\0');
    for (i = 0; i < POL_NPARAMS; i++)
        FUZZ_CHECK(isfinite(pn->p[i]));
    FUZZ_CHECK(isfinite(mx->val_ratio) && mx->val_ratio >= 0);
    FUZZ_CHECK(isfinite(mx->gate_ratio) && mx->gate_ratio >= 0);
    FUZZ_CHECK(mx->iterations >= 0 && mx->best_iteration >= 0 &&
               mx->best_iteration <= mx->iterations);
    FUZZ_CHECK(mx->train_devices >= 0 && mx->train_tasks >= 0 &&
               mx->val_tasks >= 0 && mx->gate_tasks >= 0);

    FUZZ_CHECK(policy_serialize(pn, &img, &len) == 0);
    d.msg[0] = '\0';
    FUZZ_CHECK(policy_parse(img, len, &again, &d) == 0);
    FUZZ_CHECK(memcmp(again, pn, sizeof(*pn)) == 0);
    free(again);
    free(img);
    check_plans(pn);
}

static void parse(const uint8_t *buf, size_t len)
{
    struct policy_net *pn = NULL;
    struct sd_diag d;
    int rv;

    d.msg[0] = '\0';
    rv = policy_parse(buf, len, &pn, &d);
    if (rv != 0) {
        FUZZ_CHECK(rv == SD_EFORMAT || rv == SD_ENEWER || rv == SD_ENOMEM);
        fuzz_check_refusal(rv, &d);
        return;
    }
    check_policy(pn);
    free(pn);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf;

    if (size == 0)
        return 0;
    if ((data[0] & 1) == 0) {
        /* An exact-size copy, so that a read past the end is caught. */
        buf = malloc(size - 1 ? size - 1 : 1);
        FUZZ_CHECK(buf != NULL);
        memcpy(buf, data + 1, size - 1);
        parse(buf, size - 1);
        free(buf);
        return 0;
    }
    buf = malloc(image_len);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, image, image_len);
    fuzz_edit_image(buf, image_len, data + 1, size - 1, 3);
    parse(buf, image_len);
    free(buf);
    return 0;
}
