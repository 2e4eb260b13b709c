/*
 * nccl-tests outputs and their alpha-beta fit (formats.h).
 *
 * The parser reads posted outputs as they are (research: nccl/FORMAT.md):
 * each line loses launcher tags ("0: ", "[1,0]<stdout>:", "[0]") and its
 * indentation, then is a data row when it reads
 *   size count type [redop] [root] time algbw busbw wrong time algbw busbw
 * wrong (read from the right, so that a missing redop or root does not shift
 * the figures, and a "-S" timestamp at the end is dropped), a rank line when it
 * has "Rank N ... on HOST device D [...] NAME", and otherwise is ignored
 * (NCCL INFO, MPI help, prompts, trailers).  The collective comes from an
 * "X_perf" anywhere in the text, else the caller's hint, else the ratio of
 * busbw to algbw, which only all_reduce takes above 1.
 *
 * The fit: time = alpha + bytes / beta per band of consecutive sizes,
 * least squares on the relative error (x = (1/t, s/t), target 1), bands by
 * dynamic programming over prefix sums, so a band's fit and its error cost
 * O(1) and the whole fit O(rows^2 x bands).
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/formats.h"
#include "problem/problem.h"

#define LINE_MAX_  4096
#define TOKENS_MAX 64
#define HOSTS_MAX  512
#define HOST_MAX   64

static const char *const coll_names[NCCL_COLL_COUNT] = {
    [NCCL_ALL_REDUCE] = "all_reduce",
    [NCCL_ALL_GATHER] = "all_gather",
    [NCCL_REDUCE_SCATTER] = "reduce_scatter",
    [NCCL_ALL_TO_ALL] = "alltoall",
};

const char *nccl_coll_name(enum nccl_coll c)
{
    return c < NCCL_COLL_COUNT ? coll_names[c] : "?";
}

int nccl_coll_parse(const char *s, enum nccl_coll *out)
{
    int k;

    for (k = 0; k < NCCL_COLL_COUNT; k++)
        if (strcmp(s, coll_names[k]) == 0) {
            *out = (enum nccl_coll)k;
            return 0;
        }
    if (strcmp(s, "all_to_all") == 0) {
        *out = NCCL_ALL_TO_ALL;
        return 0;
    }
    return SD_EINVAL;
}

/* The collective a text names as "<name>_perf" (the first), or -1. */
static int coll_in(const char *s)
{
    const char *best = NULL;
    char pat[32];
    int k, found = -1;

    for (k = 0; k < NCCL_COLL_COUNT; k++) {
        const char *at;

        snprintf(pat, sizeof(pat), "%s_perf", coll_names[k]);
        at = strstr(s, pat);
        /* reduce_scatter_perf holds no other name; all_reduce_perf is not
         * inside any: the earliest mention wins */
        if (at != NULL && (best == NULL || at < best)) {
            best = at;
            found = k;
        }
    }
    return found;
}

/* The collective a file name hints at ("...-all_gather-..."), or -1. */
static int coll_hinted(const char *hint)
{
    int k;

    if (hint == NULL)
        return -1;
    for (k = 0; k < NCCL_COLL_COUNT; k++)
        if (strstr(hint, coll_names[k]) != NULL)
            return k;
    return strstr(hint, "all_to_all") != NULL ? NCCL_ALL_TO_ALL : -1;
}

/* ------------------------------------------------------------------------ */
/* Lines                                                                     */

/*
 * A line without its launcher tags: "[d]" or "[d,d]" (with "<stdout>:" or
 * "<stderr>:" after it) anywhere, a leading "  12: " (srun --label), CR.
 */
static void clean(const char *in, size_t len, char *out)
{
    size_t i = 0, o = 0, j;

    while (i < len && isspace((unsigned char)in[i]))
        i++;
    for (j = i; j < len && isdigit((unsigned char)in[j]); j++)
        ;
    if (j > i && j < len && in[j] == ':')
        i = j + 1;
    while (i < len && o + 1 < LINE_MAX_) {
        if (in[i] == '[') {
            j = i + 1;
            while (j < len && (isdigit((unsigned char)in[j]) || in[j] == ','))
                j++;
            if (j > i + 1 && j < len && in[j] == ']') {
                j++;
                if (len - j >= 9 && (strncmp(in + j, "<stdout>:", 9) == 0 ||
                                     strncmp(in + j, "<stderr>:", 9) == 0))
                    j += 9;
                i = j;
                continue;
            }
        }
        out[o++] = in[i] == '\r' ? ' ' : in[i];
        i++;
    }
    out[o] = '\0';
}

static int split(char *s, char **tok)
{
    int n = 0;
    char *save = NULL, *t;

    for (t = strtok_r(s, " \t", &save); t != NULL && n < TOKENS_MAX;
         t = strtok_r(NULL, " \t", &save))
        tok[n++] = t;
    return n;
}

static bool all_digits(const char *s)
{
    if (*s == '\0')
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

/* A finite number that is the whole token. */
static bool number(const char *s, double *v)
{
    char *end;

    *v = strtod(s, &end);
    return end != s && *end == '\0' && isfinite(*v);
}

/* "N/A", or a count of wrong elements (%g, %le). */
static bool wrong_cell(const char *s)
{
    double v;

    return strcmp(s, "N/A") == 0 || (number(s, &v) && v >= 0);
}

static bool is_date(const char *s)
{
    return strlen(s) == 10 && s[4] == '-' && s[7] == '-';
}

/* A data row: its out-of-place figures into *row.  Returns false for any
 * other line. */
static bool data_row(char **tok, int n, struct nccl_row *row, bool *zero)
{
    double t, t_in, a, b;
    int mid;

    if (n >= 2 && is_date(tok[n - 2]) && strchr(tok[n - 1], ':') != NULL)
        n -= 2; /* -S: a timestamp after the figures */
    if (n < 11 || !all_digits(tok[0]) || !all_digits(tok[1]) ||
        !isalpha((unsigned char)tok[2][0]))
        return false;
    mid = n - 3 - 8; /* redop and root: 0, 1 or 2 of them */
    if (mid < 0 || mid > 2)
        return false;
    if (!number(tok[n - 8], &t) || !number(tok[n - 7], &a) ||
        !number(tok[n - 6], &b) || !wrong_cell(tok[n - 5]) ||
        !number(tok[n - 4], &t_in) || !wrong_cell(tok[n - 1]))
        return false;
    row->bytes = strtoull(tok[0], NULL, 10);
    row->time_us = t;
    row->algbw = a;
    row->busbw = b;
    *zero = row->bytes == 0 || !(t > 0);
    return true;
}

/* The hosts of the rank lines seen so far. */
struct hosts {
    char name[HOSTS_MAX][HOST_MAX];
    int n;
    int ranks;
    char device[NCCL_DEVICE_MAX];
};

/* "Rank N [Group G] [Pid P] on HOST device D [bus] NAME..." */
static void rank_line(char **tok, int n, struct hosts *h)
{
    int k, on = -1, dev = -1, i;
    size_t len = 0;

    for (k = 0; k + 1 < n && strcmp(tok[k], "Rank") != 0; k++)
        ;
    if (k + 1 >= n || !all_digits(tok[k + 1]))
        return;
    for (i = k + 2; i < n; i++) {
        if (on < 0 && strcmp(tok[i], "on") == 0)
            on = i;
        else if (on >= 0 && dev < 0 && strcmp(tok[i], "device") == 0)
            dev = i;
    }
    if (on < 0 || dev != on + 2)
        return;
    h->ranks++;
    for (i = 0; i < h->n; i++)
        if (strcmp(h->name[i], tok[on + 1]) == 0)
            break;
    if (i == h->n && h->n < HOSTS_MAX)
        snprintf(h->name[h->n++], HOST_MAX, "%s", tok[on + 1]);
    if (h->device[0] != '\0' || dev + 3 >= n)
        return;
    /* the GPU's name: every token after the bus id */
    for (i = dev + 3; i < n && len + 1 < sizeof(h->device); i++)
        len += (size_t)snprintf(h->device + len, sizeof(h->device) - len,
                                "%s%s", len ? " " : "", tok[i]);
}

/* nranks from busbw / algbw (nccl/FORMAT.md 6.3): rows with algbw
 * >= 5 GB/s, where the rounding of the printed figures does not matter. */
static int32_t ranks_from_ratio(const struct nccl_run *r)
{
    double sum = 0, ratio, n;
    size_t k, m = 0;

    for (k = 0; k < r->nrows; k++)
        if (r->rows[k].algbw >= 5) {
            sum += r->rows[k].busbw / r->rows[k].algbw;
            m++;
        }
    if (m == 0)
        return 0;
    ratio = sum / (double)m;
    n = r->coll == NCCL_ALL_REDUCE ? 2 / (2 - ratio) : 1 / (1 - ratio);
    return isfinite(n) && n >= 1 && n < 1e6 ? (int32_t)lround(n) : 0;
}

static int add_row(struct nccl_run *r, size_t *cap, const struct nccl_row *row)
{
    if (r->nrows == *cap) {
        size_t c = *cap ? 2 * *cap : 64;
        struct nccl_row *g = realloc(r->rows, c * sizeof(*g));

        if (g == NULL)
            return SD_ENOMEM;
        r->rows = g;
        *cap = c;
    }
    r->rows[r->nrows++] = *row;
    return 0;
}

/* Collective, ranks and hosts once every line is read. */
static int settle(struct nccl_run *r, int named, const char *hint,
                  const struct hosts *h, bool ratio_above_1, struct sd_diag *d)
{
    int32_t by_ratio;

    if (named < 0)
        named = coll_hinted(hint);
    if (named < 0 && ratio_above_1)
        named = NCCL_ALL_REDUCE;
    if (named < 0)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: no X_perf names the collective and busbw / "
                           "algbw fits several: name it (--collective)",
                           hint ? hint : "nccl-tests output");
    r->coll = (enum nccl_coll)named;
    by_ratio = ranks_from_ratio(r);
    /* rank lines can belong to another run than the table (a posted
     * table swapped under its header): the table's ratio wins */
    r->nranks = by_ratio > 0 ? by_ratio : h->ranks;
    r->nhosts = h->n;
    snprintf(r->device, sizeof(r->device), "%s", h->device);
    if (r->nranks < 2)
        return sd_diag_set(d, SD_EINVAL,
                           "%s: how many ranks ran is not in the output (no "
                           "rank lines, no row of 5 GB/s or more)",
                           hint ? hint : "nccl-tests output");
    return 0;
}

int nccl_parse(const char *text, size_t len, const char *hint,
               struct nccl_run *out, struct sd_diag *d)
{
    struct hosts *h = calloc(1, sizeof(*h));
    char line[LINE_MAX_], *tok[TOKENS_MAX];
    struct nccl_run r;
    size_t at = 0, cap = 0;
    int named = -1, n, rv = 0;
    bool above_1 = false;

    memset(&r, 0, sizeof(r));
    if (h == NULL)
        return SD_ENOMEM;
    while (at < len && rv == 0) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t ll = nl ? (size_t)(nl - (text + at)) : len - at;
        struct nccl_row row;
        bool zero;

        clean(text + at, ll, line);
        at += ll + 1;
        if (named < 0)
            named = coll_in(line);
        n = split(line, tok);
        if (data_row(tok, n, &row, &zero)) {
            if (!zero)
                rv = add_row(&r, &cap, &row);
            if (row.algbw >= 5 && row.busbw > 1.01 * row.algbw)
                above_1 = true;
        } else {
            rank_line(tok, n, h);
        }
    }
    if (rv == 0 && r.nrows == 0)
        rv = sd_diag_set(d, SD_EINVAL,
                         "%s: no nccl-tests data row of a size above 0",
                         hint ? hint : "nccl-tests output");
    if (rv == 0)
        rv = settle(&r, named, hint, h, above_1, d);
    free(h);
    if (rv != 0) {
        nccl_run_free(&r);
        return rv;
    }
    *out = r;
    return 0;
}

void nccl_run_free(struct nccl_run *r)
{
    if (r == NULL)
        return;
    free(r->rows);
    r->rows = NULL;
    r->nrows = 0;
}

/* ------------------------------------------------------------------------ */
/* The fit                                                                   */

/* Prefix sums of x x^T and x for x = (1/t, s/t), sizes in MB so that the
 * sums stay well scaled. */
struct sums {
    double s11, s12, s22, t1, t2;
};

struct fit_ab {
    double a, b; /* us, us per MB */
    double sse;  /* squared relative error */
};

/* The least-squares alpha-beta of rows [i, j) from prefix sums p. */
static struct fit_ab fit_range(const struct sums *p, size_t i, size_t j)
{
    struct sums s = {p[j].s11 - p[i].s11, p[j].s12 - p[i].s12,
                     p[j].s22 - p[i].s22, p[j].t1 - p[i].t1, p[j].t2 - p[i].t2};
    double det = s.s11 * s.s22 - s.s12 * s.s12, n = (double)(j - i);
    struct fit_ab f;

    f.a = det > 0 ? (s.t1 * s.s22 - s.t2 * s.s12) / det : -1;
    f.b = det > 0 ? (s.s11 * s.t2 - s.s12 * s.t1) / det : 0;
    if (!(f.a >= 0) || !(f.b > 0)) {
        /* a latency is never negative: the bandwidth alone */
        f.a = 0;
        f.b = s.s22 > 0 ? s.t2 / s.s22 : 0;
    }
    /* sum (x . theta - 1)^2 = theta' S theta - 2 theta' T + n */
    f.sse = f.a * f.a * s.s11 + 2 * f.a * f.b * s.s12 + f.b * f.b * s.s22 -
            2 * (f.a * s.t1 + f.b * s.t2) + n;
    if (f.sse < 0)
        f.sse = 0; /* rounding */
    return f;
}

static int cmp_row(const void *x, const void *y)
{
    const struct nccl_row *a = x, *b = y;

    return (a->bytes > b->bytes) - (a->bytes < b->bytes);
}

/* Bands by dynamic programming: best[k][i] the least error of rows [i, n)
 * in k bands, cut[k][i] where the first of them ends. */
static void choose_bands(const struct sums *p, size_t n, int32_t bands,
                         size_t *ends, int32_t *nb)
{
    double *best = malloc((size_t)(bands + 1) * (n + 1) * sizeof(*best));
    size_t *cut = malloc((size_t)(bands + 1) * (n + 1) * sizeof(*cut));
    size_t i, j;
    int32_t k;

    if (best == NULL || cut == NULL) { /* one band then */
        free(best);
        free(cut);
        ends[0] = n;
        *nb = 1;
        return;
    }
#define B(k, i) best[(size_t)(k) * (n + 1) + (i)]
#define C(k, i) cut[(size_t)(k) * (n + 1) + (i)]
    for (k = 0; k <= bands; k++)
        for (i = 0; i <= n; i++)
            B(k, i) = i == n ? 0 : INFINITY;
    for (k = 1; k <= bands; k++)
        for (i = n; i-- > 0;) {
            /* the band [i, j) has two rows at least */
            for (j = i + 2; j <= n; j++) {
                double e = fit_range(p, i, j).sse + B(k - 1, j);

                /* fewer bands win ties: strictly better only */
                if (e < B(k, i) * (1 - 1e-12)) {
                    B(k, i) = e;
                    C(k, i) = j;
                }
            }
        }
    /* the fewest bands within rounding of the best: exact data is one */
    for (k = 1; k < bands && B(k, 0) > B(bands, 0) * (1 + 1e-6) + 1e-12 * n;
         k++)
        ;
    for (*nb = 0, i = 0; i < n; (*nb)++) {
        ends[*nb] = C(k - *nb, i);
        i = ends[*nb];
    }
#undef B
#undef C
    free(best);
    free(cut);
}

int nccl_fit(const struct nccl_run *r, int32_t bands, struct nccl_fit *out,
             struct sd_diag *d)
{
    struct nccl_row *rows;
    struct sums *p;
    size_t n = r->nrows, i, ends[NCCL_BANDS_MAX], from = 0;
    int32_t nb, k;

    if (bands < 1 || bands > NCCL_BANDS_MAX)
        return sd_diag_set(d, SD_EINVAL, "bands %d is not in [1, %d]",
                           (int)bands, NCCL_BANDS_MAX);
    if (n < 2)
        return sd_diag_set(d, SD_EINVAL, "%zu rows: a fit needs 2", n);
    if ((size_t)bands > n / 2)
        bands = (int32_t)(n / 2);
    rows = malloc(n * sizeof(*rows));
    p = calloc(n + 1, sizeof(*p));
    if (rows == NULL || p == NULL) {
        free(rows);
        free(p);
        return SD_ENOMEM;
    }
    memcpy(rows, r->rows, n * sizeof(*rows));
    qsort(rows, n, sizeof(*rows), cmp_row);
    for (i = 0; i < n; i++) {
        double t = rows[i].time_us, s = (double)rows[i].bytes / 1e6;

        p[i + 1] = p[i];
        p[i + 1].s11 += 1 / (t * t);
        p[i + 1].s12 += s / (t * t);
        p[i + 1].s22 += s * s / (t * t);
        p[i + 1].t1 += 1 / t;
        p[i + 1].t2 += s / t;
    }
    choose_bands(p, n, bands, ends, &nb);
    memset(out, 0, sizeof(*out));
    out->nbands = nb;
    out->nrows = n;
    for (k = 0; k < nb; k++) {
        struct fit_ab f = fit_range(p, from, ends[k]);
        struct nccl_band *b = &out->band[k];

        b->from_bytes = rows[from].bytes;
        b->to_bytes = rows[ends[k] - 1].bytes;
        b->alpha_us = f.a;
        /* b us per MB: 1e6 bytes / (b us) = 1e6 / b bytes per us */
        b->beta_gbps = f.b > 0 ? 1e6 / f.b / 1e3 : INFINITY;
        for (i = from; i < ends[k]; i++) {
            double e = fabs((f.a + f.b * (double)rows[i].bytes / 1e6) /
                                rows[i].time_us -
                            1);

            out->mape += e;
            out->max_err = e > out->max_err ? e : out->max_err;
        }
        from = ends[k];
    }
    out->mape /= (double)n;
    free(rows);
    free(p);
    return 0;
}

double nccl_fit_us(const struct nccl_fit *f, uint64_t bytes)
{
    const struct nccl_band *b = &f->band[0];
    int32_t k;

    for (k = 1; k < f->nbands; k++)
        if (bytes >= f->band[k].from_bytes)
            b = &f->band[k];
    /* beta in GB/s is bytes per ns: bytes / beta ns = bytes / beta / 1e3
     * us */
    return b->alpha_us + (double)bytes / b->beta_gbps / 1e3;
}
