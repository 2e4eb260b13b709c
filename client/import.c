/*
 * Models and fits made from others' files (client.h): import-model turns
 * NeuroShard's PyTorch checkpoints into one shardd model set (compute and
 * comm models, held exactly: docs/models.md), written with --out and
 * stored as a model version with --db; comm-fit reads nccl-tests outputs
 * and fits an alpha-beta model per size band to each.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "shardd/file.h"
#include "store.h"

#define TEXT_MAX ((size_t)64 << 20) /* an nccl-tests output, a notice */

/* A whole text file into a new NUL-terminated buffer (*len bytes). */
static int read_text(const char *path, size_t max, const char *what, char **out,
                     size_t *len, struct sd_diag *d)
{
    void *buf = NULL;
    int rv;

    rv = sd_file_read(path, max, what, &buf, len, d);
    *out = buf;
    return rv;
}

/* ---------------------------------------------------------------------- */
/* import-model                                                            */

/*
 * The batch of the set: --batch-size, else the profile's last component
 * ("neuroshard/V100/65536").  0 when neither says.
 */
static int64_t profile_batch(const struct ctl_opts *o)
{
    const char *slash = strrchr(o->profile, '/');
    char *end;
    long long v;

    if (o->batch)
        return o->batch;
    if (slash == NULL)
        return 0;
    errno = 0;
    v = strtoll(slash + 1, &end, 10);
    return errno == 0 && end != slash + 1 && *end == '\0' && v > 0 ? v : 0;
}

/* The three checkpoints (comm ones optional) into a set. */
static int import_set(const struct ctl_opts *o, int64_t batch,
                      const char *notice, struct cost_net **out)
{
    struct torch_ckpt *c = NULL, *fw = NULL, *bw = NULL;
    struct sd_diag d = {{0}};
    int rv;

    rv = torch_read(o->neuroshard, &c, &d);
    if (rv == 0 && o->comm_fw != NULL)
        rv = torch_read(o->comm_fw, &fw, &d);
    if (rv == 0 && o->comm_bw != NULL)
        rv = torch_read(o->comm_bw, &bw, &d);
    if (rv == 0)
        rv = net_import_neuroshard(c, fw, bw, o->profile, batch, notice, out,
                                   &d);
    torch_free(c);
    torch_free(fw);
    torch_free(bw);
    return rv ? ctl_fail(ctl_exit_for(rv), "import-model: %s", d.msg) : 0;
}

/* The set as a new model version of its profile (made when missing:
 * backend and device model from the name's first and middle parts). */
static int store_set(const struct ctl_opts *o, const struct cost_net *m,
                     int64_t *id)
{
    struct store *st = NULL;
    struct store_profile prof;
    struct store_model sm;
    struct sd_diag d = {{0}};
    const char *first = strchr(m->profile, '/'), *last;
    void *img = NULL;
    size_t len;
    int rv;

    memset(&prof, 0, sizeof(prof));
    last = strrchr(m->profile, '/');
    if (first == NULL || first == last)
        return ctl_fail(CTL_EXIT_USAGE,
                        "import-model: --profile \"%s\" is not "
                        "BACKEND/DEVICE/BATCH, as a store's profiles are",
                        m->profile);
    snprintf(prof.name, sizeof(prof.name), "%s", m->profile);
    snprintf(prof.backend, sizeof(prof.backend), "%.*s",
             (int)(first - m->profile), m->profile);
    snprintf(prof.device_model, sizeof(prof.device_model), "%.*s",
             (int)(last - first - 1), first + 1);
    prof.batch_size = m->batch_size;
    rv = store_open(o->db, 0, &st, &d);
    if (rv == 0)
        rv = store_profile_get_or_create(st, &prof, &prof.id, &d);
    if (rv == 0 && net_serialize(m, &img, &len) != 0)
        rv = sd_diag_set(&d, SD_ENOMEM, "out of memory");
    if (rv == 0) {
        memset(&sm, 0, sizeof(sm));
        sm.info.profile_id = prof.id;
        sm.info.kind = STORE_KIND_COMPUTE;
        sm.info.format_version = net_format_version(m);
        sm.info.weights_bytes = len;
        sm.weights = img;
        rv = store_model_put(st, &sm, id, &d);
    }
    if (rv == 0 && o->activate)
        rv = store_model_activate(st, *id, NULL, &d);
    free(img);
    store_close(st);
    return rv ? ctl_fail(ctl_exit_for(rv), "import-model: --db: %s", d.msg) : 0;
}

static void print_set(const struct cost_net *m)
{
    int32_t k, l;

    printf("profile %s, batch %lld\n", m->profile, (long long)m->batch_size);
    printf("compute: 20-128-32 per table, summed, 32-64-1; inputs as they "
           "are, z-scored; output as it is\n");
    for (k = 0; k < m->ncomm; k++) {
        const struct comm_net *c = &m->comm[k];

        printf("comm %s, %d devices:",
               c->dir == COMM_FWD ? "forward" : "backward", (int)c->ndevices);
        for (l = 0; l <= c->nlayers; l++)
            printf("%s%d", l ? "-" : " ", (int)c->sizes[l]);
        printf("\n");
    }
    if (m->notice[0] != '\0')
        printf("notice: %.*s\n", (int)strcspn(m->notice, "\n"), m->notice);
}

int import_model(const struct ctl_opts *o)
{
    struct cost_net *m = NULL;
    struct sd_diag d = {{0}};
    char *notice = NULL;
    size_t len;
    int64_t batch, id = 0;
    int rv;

    if (o->neuroshard == NULL || o->profile == NULL ||
        (o->out == NULL && o->db == NULL))
        return ctl_fail(CTL_EXIT_USAGE,
                        "import-model: --neuroshard, --profile and --out or "
                        "--db are required");
    if ((o->comm_fw == NULL) != (o->comm_bw == NULL))
        return ctl_fail(CTL_EXIT_USAGE, "import-model: --comm-fw and "
                                        "--comm-bw go together");
    if (o->activate && o->db == NULL)
        return ctl_fail(CTL_EXIT_USAGE, "import-model: --activate needs --db");
    batch = profile_batch(o);
    if (batch < 1)
        return ctl_fail(CTL_EXIT_USAGE,
                        "import-model: the profile \"%s\" does not end in its "
                        "batch: give --batch-size",
                        o->profile);
    if (o->notice != NULL) {
        rv = read_text(o->notice, NET_NOTICE_MAX - 1, "a notice", &notice, &len,
                       &d);
        if (rv != 0)
            return ctl_fail(ctl_exit_for(rv), "import-model: --notice: %s",
                            d.msg);
    }
    rv = import_set(o, batch, notice, &m);
    free(notice);
    if (rv != 0)
        return rv;
    if (o->out != NULL && (rv = net_write_file(o->out, m, &d)) != 0) {
        rv = ctl_fail(ctl_exit_for(rv), "import-model: --out: %s", d.msg);
        goto out;
    }
    if (o->db != NULL && (rv = store_set(o, m, &id)) != 0)
        goto out;
    print_set(m);
    if (o->db != NULL)
        printf("model %lld for profile %s%s\n", (long long)id, m->profile,
               o->activate ? " (active)" : "");
    rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
out:
    free(m);
    return rv;
}

/* ---------------------------------------------------------------------- */
/* comm-fit                                                                */

/* The bytes of a size, in B, KiB, MiB or GiB. */
static void human_bytes(uint64_t b, char *out, size_t size)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;

    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(out, size, "%g %s", v, unit[u]);
}

static void print_fit(const char *name, const struct nccl_run *r,
                      const struct nccl_fit *f, const struct nccl_fit *one)
{
    char from[32], to[32];
    int32_t k;

    printf("%s: %s, %d ranks", name, nccl_coll_name(r->coll), (int)r->nranks);
    if (r->nhosts > 0)
        printf(" on %d host%s", (int)r->nhosts, r->nhosts > 1 ? "s" : "");
    if (r->device[0] != '\0')
        printf(" (%s)", r->device);
    printf(", %zu sizes\n", r->nrows);
    for (k = 0; k < f->nbands; k++) {
        const struct nccl_band *b = &f->band[k];

        human_bytes(b->from_bytes, from, sizeof(from));
        human_bytes(b->to_bytes, to, sizeof(to));
        printf("  %10s .. %-10s alpha %9.2f us  beta %8.2f GB/s\n", from, to,
               b->alpha_us, b->beta_gbps);
    }
    printf("  error: %.1f %% mean, %.1f %% max (one band: %.1f %% mean)\n",
           100 * f->mape, 100 * f->max_err, 100 * one->mape);
}

int import_comm_fit(const struct ctl_opts *o)
{
    int nfiles = o->nargs - 1, k;
    const char *const *names = o->args + 1;
    struct nccl_run runs[CTL_MAX_ARGS];
    struct nccl_fit fits[CTL_MAX_ARGS], one[CTL_MAX_ARGS];
    enum nccl_coll coll = NCCL_ALL_REDUCE;
    struct sd_diag d = {{0}};
    int32_t bands = o->bands ? (int32_t)o->bands : 3;
    char *text = NULL;
    size_t len;
    int rv = 0, done = 0;

    if (o->collective != NULL && nccl_coll_parse(o->collective, &coll) != 0)
        return ctl_fail(CTL_EXIT_USAGE,
                        "comm-fit: --collective \"%s\" is not all_reduce, "
                        "all_gather, reduce_scatter or alltoall",
                        o->collective);
    memset(runs, 0, sizeof(runs));
    for (k = 0; k < nfiles && rv == 0; k++) {
        rv = read_text(names[k], TEXT_MAX, "an nccl-tests output", &text, &len,
                       &d);
        if (rv == 0)
            rv = nccl_parse(text, len,
                            o->collective ? nccl_coll_name(coll) : names[k],
                            &runs[k], &d);
        free(text);
        text = NULL;
        if (rv == 0)
            rv = nccl_fit(&runs[k], bands, &fits[k], &d);
        if (rv == 0)
            rv = nccl_fit(&runs[k], 1, &one[k], &d);
        if (rv != 0)
            rv = ctl_fail(ctl_exit_for(rv), "comm-fit: %s", d.msg);
        else
            done++;
    }
    if (rv == 0 && o->json) {
        text = json_comm_fit(names, runs, fits, one, (size_t)done);
        rv = text ? ctl_write_output(o->out, text)
                  : ctl_fail(1, "comm-fit: out of memory");
        free(text);
    } else if (rv == 0) {
        for (k = 0; k < done; k++)
            print_fit(names[k], &runs[k], &fits[k], &one[k]);
        rv = fflush(stdout) == 0 ? 0 : ctl_fail(1, "cannot write to stdout");
    }
    for (k = 0; k < nfiles; k++)
        nccl_run_free(&runs[k]);
    return rv;
}
