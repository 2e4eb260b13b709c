/*
 * `plan --svg FILE` and `estimate --svg FILE`: the per-device picture of a
 * plan as a standalone SVG, the same one the daemon's status page draws
 * (daemon/www/app.js): per device a stacked bar of compute, backward
 * comm, the wait for the slowest device and the forward comm itself, a
 * memory bar against the device's capacity, the critical device outlined.
 * Every bar carries data-device, data-part and data-ms so that a program
 * can check it against the plan (tests/cli/test_svg.sh).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#define SVG_W     760 /* the picture's width */
#define SVG_LABEL 80  /* the device labels' column */
#define SVG_MEM_W 160 /* the memory bars' width */
#define SVG_GAP   24
#define SVG_ROW   30 /* one device's row */
#define SVG_BAR   20 /* a bar's height */
#define SVG_TOP   58 /* title, legend, scale */
#define SVG_BAR_W (SVG_W - SVG_LABEL - SVG_MEM_W - SVG_GAP - 12)
#define SVG_MEM_X (SVG_LABEL + SVG_BAR_W + SVG_GAP)
#define SVG_PARTS 4

/* A growing text; `bad` once an append failed. */
struct svg_buf {
    char *p;
    size_t n, cap;
    bool bad;
};

static void put(struct svg_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void put(struct svg_buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->bad)
        return;
    va_start(ap, fmt);
    n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->bad = true;
        return;
    }
    if (b->n + (size_t)n + 1 > b->cap) {
        size_t cap = (b->cap + (size_t)n + 1) * 2;
        char *p = realloc(b->p, cap);

        if (p == NULL) {
            b->bad = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
}

/* Text with the five XML specials escaped. */
static void put_text(struct svg_buf *b, const char *s)
{
    for (; *s != '\0'; s++) {
        switch (*s) {
        case '<':
            put(b, "&lt;");
            break;
        case '>':
            put(b, "&gt;");
            break;
        case '&':
            put(b, "&amp;");
            break;
        case '"':
            put(b, "&quot;");
            break;
        case '\'':
            put(b, "&apos;");
            break;
        default:
            put(b, "%c", *s);
        }
    }
}

/* The device the others wait for: the plan's, else the largest compute +
 * backward comm. */
static int32_t critical_of(const struct plan *p)
{
    int32_t d, best = 0;

    if (p->explain.critical_device >= 0 &&
        p->explain.critical_device < p->ndevices)
        return p->explain.critical_device;
    for (d = 1; d < p->ndevices; d++)
        if (p->devices[d].compute_ms + p->devices[d].bwd_comm_ms >
            p->devices[best].compute_ms + p->devices[best].bwd_comm_ms)
            best = d;
    return best;
}

static void legend(struct svg_buf *b)
{
    static const char *const name[] = {"compute", "backward comm",
                                       "wait for the slowest", "forward comm",
                                       "memory"};
    static const char *const fill[] = {"#4c6ef5", "#f08c00", "url(#hatch)",
                                       "#37b24d", "#ae3ec9"};
    int i, x = 8;

    for (i = 0; i < 5; i++) {
        put(b,
            "<rect x=\"%d\" y=\"26\" width=\"12\" height=\"12\" fill=\"%s\" "
            "stroke=\"#888\" stroke-width=\"0.5\"/>"
            "<text x=\"%d\" y=\"36\" font-size=\"11\">%s</text>\n",
            x, fill[i], x + 16, name[i]);
        x += 30 + (int)strlen(name[i]) * 7;
    }
}

/* One device's row: the stacked time bar and the memory bar. */
static void device_row(struct svg_buf *b, const struct plan *p, int32_t d,
                       double scale, uint64_t cap, double max_ready, bool crit)
{
    static const char *const part[SVG_PARTS] = {"compute", "bwd", "wait",
                                                "fwd"};
    static const char *const fill[SVG_PARTS] = {"#4c6ef5", "#f08c00",
                                                "url(#hatch)", "#37b24d"};
    const struct plan_device *dv = &p->devices[d];
    double wait = max_ready - (dv->compute_ms + dv->bwd_comm_ms);
    double ms[SVG_PARTS], x = SVG_LABEL, used;
    int y = SVG_TOP + d * SVG_ROW, i;

    if (wait < 0)
        wait = 0;
    if (wait > dv->fwd_comm_ms)
        wait = dv->fwd_comm_ms;
    ms[0] = dv->compute_ms;
    ms[1] = dv->bwd_comm_ms;
    ms[2] = wait;
    ms[3] = dv->fwd_comm_ms - wait;
    put(b, "<g data-device=\"%d\"%s>\n", (int)d,
        crit ? " data-critical=\"1\"" : "");
    put(b,
        "<text x=\"6\" y=\"%d\" font-size=\"12\" font-weight=\"%s\" "
        "fill=\"%s\">dev %d</text>\n",
        y + 15, crit ? "bold" : "normal", crit ? "#e03131" : "#1d2330", (int)d);
    for (i = 0; i < SVG_PARTS; i++) {
        double w = ms[i] * scale;

        put(b,
            "<rect x=\"%.3f\" y=\"%d\" width=\"%.3f\" height=\"%d\" "
            "fill=\"%s\" data-part=\"%s\" data-ms=\"%.9g\">"
            "<title>device %d %s %.4f ms</title></rect>\n",
            x, y, w, SVG_BAR, fill[i], part[i], ms[i], (int)d, part[i], ms[i]);
        x += w;
    }
    if (crit)
        put(b,
            "<rect x=\"%d\" y=\"%d\" width=\"%.3f\" height=\"%d\" "
            "fill=\"none\" stroke=\"#e03131\" stroke-width=\"2\"/>\n",
            SVG_LABEL, y, x - SVG_LABEL, SVG_BAR);
    used = cap > 0 ? (double)dv->mem_bytes / (double)cap : 0;
    put(b,
        "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"#eee\"/>"
        "<rect x=\"%d\" y=\"%d\" width=\"%.3f\" height=\"%d\" fill=\"%s\" "
        "data-part=\"mem\" data-bytes=\"%llu\" data-capacity=\"%llu\">"
        "<title>device %d memory %.3f of %.3f GiB</title></rect>\n",
        SVG_MEM_X, y, SVG_MEM_W, SVG_BAR, SVG_MEM_X, y,
        (used > 1 ? 1 : used) * SVG_MEM_W, SVG_BAR,
        used > 1 ? "#e03131" : "#ae3ec9", (unsigned long long)dv->mem_bytes,
        (unsigned long long)cap, (int)d, (double)dv->mem_bytes / (1 << 30),
        (double)cap / (1 << 30));
    put(b, "</g>\n");
}

char *svg_plan(const struct plan *p, const struct topology *topo)
{
    struct svg_buf b = {0};
    double max_total = 0, max_ready = 0, scale;
    int32_t d, crit = critical_of(p);
    int h = SVG_TOP + p->ndevices * SVG_ROW + 8;

    for (d = 0; d < p->ndevices; d++) {
        const struct plan_device *dv = &p->devices[d];

        if (dv->total_ms > max_total)
            max_total = dv->total_ms;
        if (dv->compute_ms + dv->bwd_comm_ms > max_ready)
            max_ready = dv->compute_ms + dv->bwd_comm_ms;
    }
    scale = max_total > 0 ? SVG_BAR_W / max_total : 0;
    put(&b,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
        "height=\"%d\" viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" "
        "data-plan-cost-ms=\"%.9g\" data-critical-device=\"%d\">\n",
        SVG_W, h, SVG_W, h, p->cost_ms, (int)crit);
    put(&b, "<defs><pattern id=\"hatch\" width=\"6\" height=\"6\" "
            "patternUnits=\"userSpaceOnUse\" "
            "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" "
            "fill=\"#fff\"/><rect width=\"3\" height=\"6\" "
            "fill=\"#ced4da\"/></pattern></defs>\n");
    put(&b, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    put(&b, "<text x=\"8\" y=\"16\" font-size=\"13\" font-weight=\"bold\">");
    put_text(&b, p->algorithm != NULL ? p->algorithm : "plan");
    put(&b, ": %.4f ms per step on %d devices; critical device %d</text>\n",
        p->cost_ms, (int)p->ndevices, (int)crit);
    legend(&b);
    put(&b,
        "<text x=\"%d\" y=\"52\" font-size=\"10\">0 ms</text>"
        "<text x=\"%d\" y=\"52\" font-size=\"10\" text-anchor=\"end\">%.4f "
        "ms</text><text x=\"%d\" y=\"52\" font-size=\"10\">memory / "
        "capacity</text>\n",
        SVG_LABEL, SVG_LABEL + SVG_BAR_W, max_total, SVG_MEM_X);
    for (d = 0; d < p->ndevices; d++)
        device_row(&b, p, d, scale, topology_mem(topo, d), max_ready,
                   d == crit);
    put(&b, "</svg>");
    if (b.bad) {
        free(b.p);
        return NULL;
    }
    return b.p;
}

int ctl_write_svg(const struct ctl_opts *o, const char *cmd,
                  const struct plan *p, const struct topology *topo)
{
    char *text;
    int rv;

    if (o->svg == NULL)
        return 0;
    text = svg_plan(p, topo);
    if (text == NULL)
        return ctl_fail(1, "%s: out of memory", cmd);
    rv = ctl_write_file("--svg", o->svg, text);
    free(text);
    return rv;
}
