/*
 * Benchmark sharding tasks, after NeuroShard's tools/gen_tasks.py
 * (neuroshard.md 2.4): each task is a random multiset of tables from a pool,
 * each with a freshly drawn dim, whose total fp32 size is within a cap.
 *
 * Task j depends only on (seed, j): it draws from rng_derive(seed, j), so a
 * longer run begins with the same tasks as a shorter one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "problem/problem.h"
#include "shardd/hash.h"

#define TASK_DEFAULT_COUNT 10
#define TASK_DEFAULT_MIN   10
#define TASK_DEFAULT_MAX   59 /* randint(10, 60) in the original */
#define TASK_DEFAULT_BYTES ((uint64_t)15 << 30)
/*
 * Draws of one task before giving up.  gen_tasks.py redraws forever.  With
 * tables matched to the benchmark's statistics, 59 tables fit in 15 GiB
 * about once in 30,000 draws, 45 tables once in 200; a million draws of
 * abandoned-early prefixes take well under a second.  The budget of single
 * table draws bounds the time of hopeless requests with very many tables.
 */
#define TASK_REDRAWS     1000000
#define TASK_DRAW_BUDGET ((uint64_t)1 << 26)
#define TASK_TABLES_MAX  ((size_t)1 << 20)
#define TASK_COUNT_MAX   ((size_t)1 << 24)
#define TASK_FP32_BYTES  4

static const int32_t task_dims[] = {4, 8, 16, 32, 64, 128};
#define TASK_NDIMS (sizeof(task_dims) / sizeof(task_dims[0]))

void task_params_default(struct task_params *p)
{
    p->count = TASK_DEFAULT_COUNT;
    p->seed = 0;
    p->min_tables = TASK_DEFAULT_MIN;
    p->max_tables = TASK_DEFAULT_MAX;
    p->max_bytes = TASK_DEFAULT_BYTES;
}

void task_array_free(struct task *tasks, size_t n)
{
    size_t i;

    if (tasks == NULL)
        return;
    for (i = 0; i < n; i++) {
        free(tasks[i].source);
        free(tasks[i].tables);
    }
    free(tasks);
}

/* ------------------------------------------------------------------------ */
/* Unique names                                                              */

/*
 * A set of the names given so far in one task: open addressing over
 * indices into the task's tables, capacity a power of two at least twice the
 * task's size.
 */
struct name_set {
    const struct table *tables;
    size_t *slots; /* index + 1; 0 = empty */
    size_t mask;
};

static bool name_set_has(const struct name_set *ns, const char *name)
{
    size_t h = (size_t)sd_fnv1a_str(name) & ns->mask;

    while (ns->slots[h] != 0) {
        if (strcmp(ns->tables[ns->slots[h] - 1].name, name) == 0)
            return true;
        h = (h + 1) & ns->mask;
    }
    return false;
}

static void name_set_add(struct name_set *ns, size_t idx)
{
    size_t h = (size_t)sd_fnv1a_str(ns->tables[idx].name) & ns->mask;

    while (ns->slots[h] != 0)
        h = (h + 1) & ns->mask;
    ns->slots[h] = idx + 1;
}

/*
 * Renames the tables of a task so that names are unique: the first table of
 * a name keeps it, later ones get "_2", "_3", .. (the first suffix not yet
 * taken; the base is shortened if the result would not fit).  Returns 0 or
 * SD_ENOMEM.
 */
static int make_names_unique(struct table *tables, size_t n)
{
    char base[TABLE_NAME_MAX], suffix[32];
    struct name_set ns;
    size_t cap = 2, i, k;
    int keep;

    while (cap < 2 * n)
        cap *= 2;
    ns.tables = tables;
    ns.mask = cap - 1;
    ns.slots = calloc(cap, sizeof(*ns.slots));
    if (ns.slots == NULL)
        return SD_ENOMEM;
    for (i = 0; i < n; i++) {
        if (name_set_has(&ns, tables[i].name)) {
            memcpy(base, tables[i].name, sizeof(base));
            base[TABLE_NAME_MAX - 1] = '\0';
            for (k = 2; name_set_has(&ns, tables[i].name); k++) {
                snprintf(suffix, sizeof(suffix), "_%zu", k);
                keep = TABLE_NAME_MAX - 1 - (int)strlen(suffix);
                snprintf(tables[i].name, sizeof(tables[i].name), "%.*s%s", keep,
                         base, suffix);
            }
        }
        name_set_add(&ns, i);
    }
    free(ns.slots);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Drawing tasks                                                             */

static int check_params(const struct task_params *p, const struct table *pool,
                        size_t npool, struct sd_diag *d)
{
    size_t i;

    if (p->count == 0 || p->count > TASK_COUNT_MAX)
        return sd_diag_set(d, SD_EINVAL, "task count %zu not in [1, %zu]",
                           p->count, TASK_COUNT_MAX);
    if (p->min_tables < 1 || p->min_tables > p->max_tables ||
        p->max_tables > TASK_TABLES_MAX)
        return sd_diag_set(d, SD_EINVAL,
                           "tables per task [%zu, %zu] is not a range in "
                           "[1, %zu]",
                           p->min_tables, p->max_tables, TASK_TABLES_MAX);
    if (pool == NULL || npool == 0)
        return sd_diag_set(d, SD_EINVAL, "the table pool is empty");
    for (i = 0; i < npool; i++)
        if (pool[i].rows < 1 || pool[i].rows > TABLE_ROWS_MAX)
            return sd_diag_set(
                d, SD_EINVAL, "pool[%zu] \"%.*s\": rows %lld not in [1, %lld]",
                i, TABLE_NAME_MAX - 1, pool[i].name, (long long)pool[i].rows,
                (long long)TABLE_ROWS_MAX);
    return 0;
}

/* Scratch space for one draw: table ids and dims of up to max_tables. */
struct draw {
    size_t *ids;
    int32_t *dims;
};

/*
 * Draws task j into t: T tables with replacement and their dims, redrawn
 * until their fp32 total fits.  On success t owns its arrays; on failure t
 * is untouched.
 */
static int draw_task(const struct task_params *p, size_t j,
                     const struct table *pool, size_t npool,
                     const struct draw *w, struct task *t, struct sd_diag *d)
{
    uint64_t total, bytes, drawn = 0;
    struct rng r;
    size_t n, i, tries;
    bool fits = false;
    int rv;

    rng_seed(&r, rng_derive(p->seed, (uint64_t)j));
    n = p->min_tables +
        (size_t)rng_below(&r, (uint64_t)(p->max_tables - p->min_tables) + 1);
    /*
     * Rejection sampling: T ids and dims drawn until their total fits.  A
     * draw is abandoned at the first table that breaks the cap, which
     * changes the cost but not the distribution of the accepted draw.
     */
    for (tries = 0; tries < TASK_REDRAWS && drawn < TASK_DRAW_BUDGET && !fits;
         tries++) {
        total = 0;
        fits = true;
        for (i = 0; i < n && fits; i++, drawn++) {
            w->ids[i] = (size_t)rng_below(&r, (uint64_t)npool);
            w->dims[i] = task_dims[rng_below(&r, TASK_NDIMS)];
            /* rows <= 2^40 and dim <= 128: a table is < 2^50 bytes, and
             * total <= max_bytes holds while it fits, so nothing wraps. */
            bytes = (uint64_t)pool[w->ids[i]].rows * (uint64_t)w->dims[i] *
                    TASK_FP32_BYTES;
            fits = bytes <= p->max_bytes - total;
            total += bytes;
        }
    }
    if (!fits)
        return sd_diag_set(d, SD_EINVAL,
                           "task %zu: no draw of %zu tables fit in %llu bytes "
                           "(fp32) in %zu tries; raise the size cap or lower "
                           "the table counts",
                           j, n, (unsigned long long)p->max_bytes, tries);
    t->source = malloc(n * sizeof(*t->source));
    t->tables = malloc(n * sizeof(*t->tables));
    if (t->source == NULL || t->tables == NULL) {
        rv = SD_ENOMEM;
        goto out_free_arrays;
    }
    for (i = 0; i < n; i++) {
        t->source[i] = w->ids[i];
        t->tables[i] = pool[w->ids[i]];
        t->tables[i].dim = w->dims[i];
    }
    t->ntables = n;
    rv = make_names_unique(t->tables, n);
    if (rv == 0)
        return 0;
out_free_arrays:
    free(t->source);
    free(t->tables);
    t->source = NULL;
    t->tables = NULL;
    t->ntables = 0;
    return rv;
}

int task_generate(const struct task_params *p, const struct table *pool,
                  size_t npool, struct task **out, struct sd_diag *d)
{
    struct task *tasks = NULL;
    struct draw w = {NULL, NULL};
    size_t j;
    int rv;

    rv = check_params(p, pool, npool, d);
    if (rv != 0)
        return rv;
    w.ids = malloc(p->max_tables * sizeof(*w.ids));
    w.dims = malloc(p->max_tables * sizeof(*w.dims));
    tasks = calloc(p->count, sizeof(*tasks));
    if (w.ids == NULL || w.dims == NULL || tasks == NULL) {
        rv = SD_ENOMEM;
        goto out_free_scratch;
    }
    for (j = 0; j < p->count; j++) {
        rv = draw_task(p, j, pool, npool, &w, &tasks[j], d);
        if (rv != 0)
            goto out_free_scratch;
    }
    *out = tasks;
    tasks = NULL;
out_free_scratch:
    task_array_free(tasks, p->count); /* NULL-safe; undrawn tasks are zero */
    free(w.ids);
    free(w.dims);
    return rv;
}

int task_split_pool(const struct table *pool, size_t npool, uint64_t seed,
                    struct table **train, size_t *ntrain, struct table **test,
                    size_t *ntest)
{
    struct table *a = NULL, *b = NULL;
    size_t *ids, i, j, t, half = npool / 2;
    struct rng r;

    if (npool < 2)
        return SD_EINVAL;
    ids = malloc(npool * sizeof(*ids));
    a = malloc(half * sizeof(*a));
    b = malloc((npool - half) * sizeof(*b));
    if (ids == NULL || a == NULL || b == NULL) {
        free(ids);
        free(a);
        free(b);
        return SD_ENOMEM;
    }
    /* Fisher-Yates over the ids, seeded: numpy's shuffle, not its
     * stream. */
    rng_seed(&r, seed);
    for (i = 0; i < npool; i++)
        ids[i] = i;
    for (i = npool; i > 1; i--) {
        j = (size_t)rng_below(&r, i);
        t = ids[i - 1];
        ids[i - 1] = ids[j];
        ids[j] = t;
    }
    for (i = 0; i < half; i++)
        a[i] = pool[ids[i]];
    for (i = half; i < npool; i++)
        b[i - half] = pool[ids[i]];
    free(ids);
    *train = a;
    *ntrain = half;
    *test = b;
    *ntest = npool - half;
    return 0;
}

void task_split_free(struct task_split *s)
{
    if (s == NULL)
        return;
    task_array_free(s->train, s->ntrain);
    task_array_free(s->val, s->nval);
    task_array_free(s->test, s->ntest);
    memset(s, 0, sizeof(*s));
}

int task_generate_split(const struct task_params *p, size_t ntrain, size_t nval,
                        size_t ntest, const struct table *pool, size_t npool,
                        struct task_split *out, struct sd_diag *d)
{
    struct table *a = NULL, *b = NULL;
    struct task_split s;
    struct task_params q = *p;
    size_t na = 0, nb = 0;
    int rv;

    memset(&s, 0, sizeof(s));
    if (ntrain == 0 || ntest == 0)
        return sd_diag_set(d, SD_EINVAL,
                           "task sets: no training or no held-out tasks");
    rv = task_split_pool(pool, npool, p->seed, &a, &na, &b, &nb);
    if (rv == SD_ENOMEM)
        return sd_diag_set(d, rv, "out of memory");
    if (rv != 0)
        return sd_diag_set(
            d, rv, "task sets: a pool of %zu tables cannot be split", npool);
    q.count = ntrain;
    q.seed = rng_derive(p->seed, 1);
    rv = task_generate(&q, a, na, &s.train, d);
    if (rv == 0) {
        s.ntrain = ntrain;
        q.count = nval;
        q.seed = rng_derive(p->seed, 2);
        rv = nval > 0 ? task_generate(&q, a, na, &s.val, d) : 0;
    }
    if (rv == 0) {
        s.nval = nval;
        q.count = ntest;
        q.seed = rng_derive(p->seed, 3);
        rv = task_generate(&q, b, nb, &s.test, d);
    }
    if (rv == 0) {
        s.ntest = ntest;
        *out = s;
    } else {
        task_split_free(&s);
    }
    free(a);
    free(b);
    return rv;
}
