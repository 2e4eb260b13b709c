/*
 * PyTorch checkpoints without torch (models.h): a strict unpickler for the
 * subset torch.save() writes for a dict of tensors and numbers, and the zip
 * container (libzip).
 *
 * The pickle is a small stack machine.  This one knows the opcodes a
 * checkpoint of protocol 2 uses (and their size variants: BININT,
 * LONG_BINPUT/LONG_BINGET, TUPLE3, NEWTRUE) and three globals, which it
 * never imports or calls: REDUCE of OrderedDict makes an empty dict, REDUCE
 * of _rebuild_tensor_v2 records a tensor's storage, offset, shape and
 * strides, and BINPERSID records a storage's key.  Anything else is refused
 * with the opcode and its offset.  Values live in an arena freed at the
 * end; the memo holds pointers into it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zip.h>

#include "models/models.h"
#include "problem/problem.h"
#include "shardd/file.h"
#include "shardd/le.h"

#define PK_STACK_MAX   4096
#define PK_MARKS_MAX   64
#define PK_MEMO_MAX    65536
#define PK_STR_MAX     65536
#define PK_ITEMS_MAX   (1u << 20) /* items of all containers */
#define PK_DEPTH_MAX   8          /* nested dicts flattened */
#define TORCH_FILE_MAX ((size_t)256 << 20)

enum pv_type {
    PV_NONE_ = 0, /* unused: None is refused */
    PV_BOOL,
    PV_INT,
    PV_STR,
    PV_TUPLE,
    PV_LIST,
    PV_DICT,
    PV_GLOBAL,
    PV_STORAGE,
    PV_TENSOR,
};

enum pv_global {
    G_ORDERED_DICT = 0,
    G_REBUILD_TENSOR_V2,
    G_FLOAT_STORAGE,
};

struct pv {
    enum pv_type type;
    int64_t i;     /* BOOL, INT; STORAGE: numel; GLOBAL: enum pv_global */
    char *s;       /* STR; STORAGE: key */
    struct pv **v; /* TUPLE, LIST items; DICT keys and values, interleaved */
    size_t n, cap;
    bool built; /* DICT: made by OrderedDict (takes BUILD) */
    /* TENSOR */
    struct pv *storage;
    int64_t offset;
    int32_t ndim;
    int64_t shape[TORCH_DIMS_MAX], stride[TORCH_DIMS_MAX];
};

struct unpickler {
    const unsigned char *p;
    size_t len, off, op_off; /* op_off: the current opcode's offset */
    struct pv *stack[PK_STACK_MAX];
    size_t sp;
    size_t marks[PK_MARKS_MAX];
    size_t nmarks;
    struct pv **memo;
    size_t nmemo;
    void **arena; /* every allocation, freed together */
    size_t narena, arena_cap;
    size_t items;
    struct sd_diag *d;
};

static int pk_fail(struct unpickler *u, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* SD_EFORMAT, d saying what at the current opcode's offset. */
static int pk_fail(struct unpickler *u, const char *fmt, ...)
{
    char msg[160];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return sd_diag_set(u->d, SD_EFORMAT, "pickle: %s at offset %zu", msg,
                       u->op_off);
}

static void *pk_alloc(struct unpickler *u, size_t size)
{
    void *p;

    if (u->narena == u->arena_cap) {
        size_t cap = u->arena_cap ? 2 * u->arena_cap : 64;
        void **a = realloc(u->arena, cap * sizeof(*a));

        if (a == NULL)
            return NULL;
        u->arena = a;
        u->arena_cap = cap;
    }
    p = calloc(1, size);
    if (p != NULL)
        u->arena[u->narena++] = p;
    return p;
}

static void pk_release(struct unpickler *u)
{
    size_t i;

    for (i = 0; i < u->narena; i++)
        free(u->arena[i]);
    free(u->arena);
    free(u->memo);
}

static struct pv *pv_new(struct unpickler *u, enum pv_type type)
{
    struct pv *v = pk_alloc(u, sizeof(*v));

    if (v != NULL)
        v->type = type;
    return v;
}

/* Appends x to container c's items. */
static int pv_push_item(struct unpickler *u, struct pv *c, struct pv *x)
{
    if (++u->items > PK_ITEMS_MAX)
        return pk_fail(u, "%s", "more items than a checkpoint has");
    if (c->n == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 8;
        struct pv **v = pk_alloc(u, cap * sizeof(*v));

        if (v == NULL)
            return SD_ENOMEM;
        if (c->n)
            memcpy(v, c->v, c->n * sizeof(*v));
        c->v = v; /* the old array stays in the arena */
        c->cap = cap;
    }
    c->v[c->n++] = x;
    return 0;
}

static int push(struct unpickler *u, struct pv *v)
{
    if (v == NULL)
        return SD_ENOMEM;
    if (u->sp == PK_STACK_MAX)
        return pk_fail(u, "%s", "stack overflow");
    u->stack[u->sp++] = v;
    return 0;
}

/* The value on top (taken off when pop), or NULL with d set (empty stack,
 * or a mark above it). */
static struct pv *top(struct unpickler *u, bool pop, int *rv)
{
    size_t floor = u->nmarks ? u->marks[u->nmarks - 1] : 0;

    if (u->sp <= floor) {
        *rv = pk_fail(u, "%s", "stack underflow");
        return NULL;
    }
    return pop ? u->stack[--u->sp] : u->stack[u->sp - 1];
}

/* Bytes of the operand: n more must be there. */
static const unsigned char *take(struct unpickler *u, size_t n, int *rv)
{
    const unsigned char *p;

    if (n > u->len - u->off) {
        *rv = pk_fail(u, "%s", "truncated operand");
        return NULL;
    }
    p = u->p + u->off;
    u->off += n;
    return p;
}

/* ------------------------------------------------------------------------ */
/* The opcodes                                                               */

static int op_int(struct unpickler *u, size_t width)
{
    const unsigned char *b;
    struct pv *v;
    int rv = 0;

    b = take(u, width, &rv);
    if (b == NULL)
        return rv;
    v = pv_new(u, PV_INT);
    if (v == NULL)
        return SD_ENOMEM;
    v->i = width == 1   ? b[0]
           : width == 2 ? (int64_t)(b[0] | b[1] << 8)
                        : (int64_t)(int32_t)sd_le_get32(b);
    return push(u, v);
}

static int op_unicode(struct unpickler *u)
{
    const unsigned char *b;
    struct pv *v;
    uint32_t n;
    int rv = 0;

    b = take(u, 4, &rv);
    if (b == NULL)
        return rv;
    n = sd_le_get32(b);
    if (n > PK_STR_MAX)
        return pk_fail(u, "%s", "string longer than 64 KiB");
    b = take(u, n, &rv);
    if (b == NULL)
        return rv;
    if (memchr(b, 0, n) != NULL)
        return pk_fail(u, "%s", "string with a NUL byte");
    v = pv_new(u, PV_STR);
    if (v == NULL || (v->s = pk_alloc(u, (size_t)n + 1)) == NULL)
        return SD_ENOMEM;
    memcpy(v->s, b, n);
    return push(u, v);
}

/* GLOBAL "module\nname\n": only the three a checkpoint names. */
static int op_global(struct unpickler *u)
{
    static const char *const allowed[] = {
        [G_ORDERED_DICT] = "collections\nOrderedDict\n",
        [G_REBUILD_TENSOR_V2] = "torch._utils\n_rebuild_tensor_v2\n",
        [G_FLOAT_STORAGE] = "torch\nFloatStorage\n",
    };
    const unsigned char *nl1, *nl2;
    char name[96];
    size_t n, k;
    struct pv *v;

    nl1 = memchr(u->p + u->off, '\n', u->len - u->off);
    nl2 = nl1 ? memchr(nl1 + 1, '\n', (size_t)(u->p + u->len - nl1 - 1)) : NULL;
    if (nl2 == NULL)
        return pk_fail(u, "%s", "GLOBAL without two lines");
    n = (size_t)(nl2 + 1 - (u->p + u->off));
    for (k = 0; k < sizeof(allowed) / sizeof(allowed[0]); k++)
        if (n == strlen(allowed[k]) &&
            memcmp(u->p + u->off, allowed[k], n) == 0)
            break;
    if (k == sizeof(allowed) / sizeof(allowed[0])) {
        snprintf(name, sizeof(name), "%.*s", (int)(n - 1 < 80 ? n - 1 : 80),
                 (const char *)(u->p + u->off));
        for (k = 0; name[k]; k++)
            if (name[k] == '\n')
                name[k] = '.';
        return pk_fail(u, "global %s is not one a checkpoint uses", name);
    }
    u->off += n;
    v = pv_new(u, PV_GLOBAL);
    if (v == NULL)
        return SD_ENOMEM;
    v->i = (int64_t)k;
    return push(u, v);
}

/* The values above the topmost mark, which is dropped. */
static struct pv **pop_mark(struct unpickler *u, size_t *n, int *rv)
{
    size_t at;

    if (u->nmarks == 0) {
        *rv = pk_fail(u, "%s", "no MARK");
        return NULL;
    }
    at = u->marks[--u->nmarks];
    *n = u->sp - at;
    u->sp = at;
    return u->stack + at;
}

static int op_tuple(struct unpickler *u, int count)
{
    struct pv *t = pv_new(u, PV_TUPLE), **items;
    size_t n, k;
    int rv = 0;

    if (t == NULL)
        return SD_ENOMEM;
    if (count < 0) { /* TUPLE: to the mark */
        items = pop_mark(u, &n, &rv);
        if (items == NULL)
            return rv;
    } else {
        n = (size_t)count;
        if (u->sp < n || (u->nmarks && u->sp - n < u->marks[u->nmarks - 1]))
            return pk_fail(u, "%s", "stack underflow");
        u->sp -= n;
        items = u->stack + u->sp;
    }
    for (k = 0; k < n; k++)
        if ((rv = pv_push_item(u, t, items[k])) != 0)
            return rv;
    return push(u, t);
}

/* The dict below the mark gets the pairs above it (SETITEMS), or the dict
 * below the top two values gets them (SETITEM). */
static int op_setitems(struct unpickler *u, bool many)
{
    struct pv **items, *dict;
    size_t n = 2, k;
    int rv = 0;

    if (many) {
        items = pop_mark(u, &n, &rv);
        if (items == NULL)
            return rv;
    } else {
        if (u->sp < 3 || (u->nmarks && u->sp - 2 <= u->marks[u->nmarks - 1]))
            return pk_fail(u, "%s", "stack underflow");
        u->sp -= 2;
        items = u->stack + u->sp;
    }
    dict = top(u, false, &rv);
    if (dict == NULL)
        return rv;
    if (dict->type != PV_DICT || n % 2 != 0)
        return pk_fail(u, "%s",
                       many ? "SETITEMS not on a dict of pairs"
                            : "SETITEM not on a dict");
    for (k = 0; k < n; k++)
        if ((rv = pv_push_item(u, dict, items[k])) != 0)
            return rv;
    return 0;
}

static int op_appends(struct unpickler *u)
{
    struct pv **items, *list;
    size_t n, k;
    int rv = 0;

    items = pop_mark(u, &n, &rv);
    if (items == NULL)
        return rv;
    list = top(u, false, &rv);
    if (list == NULL)
        return rv;
    if (list->type != PV_LIST)
        return pk_fail(u, "%s", "APPENDS not on a list");
    for (k = 0; k < n; k++)
        if ((rv = pv_push_item(u, list, items[k])) != 0)
            return rv;
    return 0;
}

/* A tuple of ints into out[] (at most TORCH_DIMS_MAX), its length in *n. */
static bool int_tuple(const struct pv *t, int64_t *out, int32_t *n)
{
    size_t k;

    if (t->type != PV_TUPLE || t->n > TORCH_DIMS_MAX)
        return false;
    for (k = 0; k < t->n; k++) {
        if (t->v[k]->type != PV_INT)
            return false;
        out[k] = t->v[k]->i;
    }
    *n = (int32_t)t->n;
    return true;
}

/* _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks):
 * recorded, not run. */
static struct pv *rebuild_tensor(struct unpickler *u, const struct pv *args,
                                 int *rv)
{
    struct pv *t;
    int32_t nstride;

    if (args->n != 6 || args->v[0]->type != PV_STORAGE ||
        args->v[1]->type != PV_INT || args->v[4]->type != PV_BOOL ||
        args->v[5]->type != PV_DICT || args->v[5]->n != 0) {
        *rv = pk_fail(u, "%s",
                      "_rebuild_tensor_v2 arguments are not (storage, "
                      "offset, size, stride, requires_grad, {})");
        return NULL;
    }
    t = pv_new(u, PV_TENSOR);
    if (t == NULL) {
        *rv = SD_ENOMEM;
        return NULL;
    }
    t->storage = args->v[0];
    t->offset = args->v[1]->i;
    if (!int_tuple(args->v[2], t->shape, &t->ndim) ||
        !int_tuple(args->v[3], t->stride, &nstride) || nstride != t->ndim) {
        *rv = pk_fail(u, "%s",
                      "tensor size or stride is not a tuple of at most 4 "
                      "integers");
        return NULL;
    }
    return t;
}

static int op_reduce(struct unpickler *u)
{
    struct pv *args, *fn, *v;
    int rv = 0;

    args = top(u, true, &rv);
    fn = args ? top(u, true, &rv) : NULL;
    if (fn == NULL)
        return rv;
    if (fn->type != PV_GLOBAL || args->type != PV_TUPLE)
        return pk_fail(u, "%s", "REDUCE of something not a known global");
    if (fn->i == G_ORDERED_DICT) {
        if (args->n != 0)
            return pk_fail(u, "%s", "OrderedDict with arguments");
        v = pv_new(u, PV_DICT);
        if (v == NULL)
            return SD_ENOMEM;
        v->built = true;
        return push(u, v);
    }
    if (fn->i == G_REBUILD_TENSOR_V2) {
        v = rebuild_tensor(u, args, &rv);
        return v ? push(u, v) : rv;
    }
    return pk_fail(u, "%s", "REDUCE of torch.FloatStorage");
}

/* BINPERSID of ("storage", FloatStorage, key, location, numel). */
static int op_persid(struct unpickler *u)
{
    struct pv *pid, *s;
    int rv = 0;

    pid = top(u, true, &rv);
    if (pid == NULL)
        return rv;
    if (pid->type != PV_TUPLE || pid->n != 5 || pid->v[0]->type != PV_STR ||
        strcmp(pid->v[0]->s, "storage") != 0 || pid->v[1]->type != PV_GLOBAL ||
        pid->v[1]->i != G_FLOAT_STORAGE || pid->v[2]->type != PV_STR ||
        pid->v[3]->type != PV_STR || pid->v[4]->type != PV_INT ||
        pid->v[4]->i < 0)
        return pk_fail(u, "%s",
                       "persistent id is not (\"storage\", "
                       "torch.FloatStorage, key, location, numel)");
    if (strlen(pid->v[2]->s) >= sizeof(((struct torch_entry *)0)->storage))
        return pk_fail(u, "%s", "storage key longer than 31 bytes");
    s = pv_new(u, PV_STORAGE);
    if (s == NULL)
        return SD_ENOMEM;
    s->s = pid->v[2]->s;
    s->i = pid->v[4]->i;
    return push(u, s);
}

static int op_memo(struct unpickler *u, size_t width, bool put)
{
    const unsigned char *b;
    size_t i, cap;
    int rv = 0;

    b = take(u, width, &rv);
    if (b == NULL)
        return rv;
    i = width == 1 ? b[0] : sd_le_get32(b);
    if (!put) {
        if (i >= u->nmemo || u->memo[i] == NULL)
            return pk_fail(u, "%s", "BINGET of an empty memo slot");
        return push(u, u->memo[i]);
    }
    if (i >= PK_MEMO_MAX)
        return pk_fail(u, "%s", "memo index above 65535");
    if (i >= u->nmemo) {
        struct pv **m;

        cap = i + 1 > 2 * u->nmemo ? i + 1 : 2 * u->nmemo;
        m = realloc(u->memo, cap * sizeof(*m));
        if (m == NULL)
            return SD_ENOMEM;
        memset(m + u->nmemo, 0, (cap - u->nmemo) * sizeof(*m));
        u->memo = m;
        u->nmemo = cap;
    }
    u->memo[i] = top(u, false, &rv);
    return u->memo[i] ? 0 : rv;
}

/* BUILD on an OrderedDict: torch sets its _metadata; the state is dropped. */
static int op_build(struct unpickler *u)
{
    struct pv *state, *obj;
    int rv = 0;

    state = top(u, true, &rv);
    obj = state ? top(u, false, &rv) : NULL;
    if (obj == NULL)
        return rv;
    if (obj->type != PV_DICT || !obj->built || state->type != PV_DICT)
        return pk_fail(u, "%s", "BUILD on something not an OrderedDict");
    return 0;
}

static int op_simple(struct unpickler *u, enum pv_type type, int64_t i)
{
    struct pv *v = pv_new(u, type);

    if (v == NULL)
        return SD_ENOMEM;
    v->i = i;
    return push(u, v);
}

static int step(struct unpickler *u, unsigned char op)
{
    char what[32];

    switch (op) {
    case '}':
        return op_simple(u, PV_DICT, 0); /* EMPTY_DICT */
    case ']':
        return op_simple(u, PV_LIST, 0); /* EMPTY_LIST */
    case ')':
        return op_simple(u, PV_TUPLE, 0); /* EMPTY_TUPLE */
    case 0x89:
        return op_simple(u, PV_BOOL, 0); /* NEWFALSE */
    case 0x88:
        return op_simple(u, PV_BOOL, 1); /* NEWTRUE */
    case 'K':
        return op_int(u, 1); /* BININT1 */
    case 'M':
        return op_int(u, 2); /* BININT2 */
    case 'J':
        return op_int(u, 4); /* BININT */
    case 'X':
        return op_unicode(u); /* BINUNICODE */
    case 'c':
        return op_global(u); /* GLOBAL */
    case 'q':
        return op_memo(u, 1, true); /* BINPUT */
    case 'r':
        return op_memo(u, 4, true); /* LONG_BINPUT */
    case 'h':
        return op_memo(u, 1, false); /* BINGET */
    case 'j':
        return op_memo(u, 4, false); /* LONG_BINGET */
    case 't':
        return op_tuple(u, -1); /* TUPLE */
    case 0x85:
        return op_tuple(u, 1); /* TUPLE1 */
    case 0x86:
        return op_tuple(u, 2); /* TUPLE2 */
    case 0x87:
        return op_tuple(u, 3); /* TUPLE3 */
    case 's':
        return op_setitems(u, false); /* SETITEM */
    case 'u':
        return op_setitems(u, true); /* SETITEMS */
    case 'e':
        return op_appends(u); /* APPENDS */
    case 'R':
        return op_reduce(u); /* REDUCE */
    case 'Q':
        return op_persid(u); /* BINPERSID */
    case 'b':
        return op_build(u); /* BUILD */
    case '(':               /* MARK */
        if (u->nmarks == PK_MARKS_MAX)
            return pk_fail(u, "%s", "marks nested too deep");
        u->marks[u->nmarks++] = u->sp;
        return 0;
    default:
        if (op >= 0x20 && op < 0x7f)
            snprintf(what, sizeof(what), "'%c' (0x%02x)", op, op);
        else
            snprintf(what, sizeof(what), "0x%02x", op);
        return pk_fail(u, "opcode %s is not one a checkpoint uses", what);
    }
}

/* Runs the machine to STOP; *result is the value it left. */
static int run(struct unpickler *u, struct pv **result)
{
    int rv;

    if (u->len < 3 || u->p[0] != 0x80 || u->p[1] != 2)
        return sd_diag_set(u->d, SD_EFORMAT,
                           "pickle: does not start with PROTO 2 (torch.save's "
                           "default protocol)");
    u->off = 2;
    while (u->off < u->len) {
        unsigned char op = u->p[u->off];

        u->op_off = u->off++;
        if (op == '.') { /* STOP */
            if (u->nmarks != 0 || u->sp != 1)
                return pk_fail(u, "%s",
                               "STOP with a mark or more than one "
                               "value left");
            if (u->off != u->len)
                return pk_fail(u, "%s", "bytes after STOP");
            *result = u->stack[0];
            return 0;
        }
        rv = step(u, op);
        if (rv != 0)
            return rv;
    }
    u->op_off = u->len;
    return pk_fail(u, "%s", "no STOP");
}

/* ------------------------------------------------------------------------ */
/* The value tree as checkpoint entries                                      */

static int add_entry(struct torch_ckpt *c, struct torch_entry **e)
{
    struct torch_entry *a = realloc(c->e, (c->n + 1) * sizeof(*a));

    if (a == NULL)
        return SD_ENOMEM;
    c->e = a;
    *e = &a[c->n++];
    memset(*e, 0, sizeof(**e));
    return 0;
}

static int tensor_entry(const struct pv *t, struct torch_entry *e,
                        struct sd_diag *d)
{
    int64_t n = 1, want = 1;
    int32_t k;

    e->kind = TORCH_TENSOR;
    e->ndim = t->ndim;
    for (k = t->ndim - 1; k >= 0; k--) {
        if (t->shape[k] < 0 || t->shape[k] > (int64_t)1 << 31)
            return sd_diag_set(d, SD_EFORMAT, "%s: shape[%d] %lld is invalid",
                               e->key, (int)k, (long long)t->shape[k]);
        /* row-major: each stride the product of the sizes after it (a dim
         * of size 1 may have any) */
        if (t->shape[k] > 1 && t->stride[k] != want)
            return sd_diag_set(d, SD_EFORMAT,
                               "%s: not a contiguous row-major tensor "
                               "(stride[%d] %lld, expected %lld)",
                               e->key, (int)k, (long long)t->stride[k],
                               (long long)want);
        want *= t->shape[k];
        e->shape[k] = t->shape[k];
        n *= t->shape[k];
    }
    if (n > (int64_t)TORCH_FILE_MAX / 4 || t->offset < 0 ||
        t->offset > t->storage->i || n > t->storage->i - t->offset)
        return sd_diag_set(d, SD_EFORMAT,
                           "%s: %lld elements at offset %lld do not fit its "
                           "storage of %lld",
                           e->key, (long long)n, (long long)t->offset,
                           (long long)t->storage->i);
    e->n = (size_t)n;
    snprintf(e->storage, sizeof(e->storage), "%s", t->storage->s);
    e->storage_offset = t->offset;
    return 0;
}

static int ints_entry(struct torch_ckpt *c, const struct pv *v,
                      struct torch_entry *e)
{
    size_t k;

    (void)c;
    e->kind = v->type == PV_INT ? TORCH_INT : TORCH_INTS;
    e->n = v->type == PV_INT ? 1 : v->n;
    e->i = calloc(e->n ? e->n : 1, sizeof(*e->i));
    if (e->i == NULL)
        return SD_ENOMEM;
    if (v->type == PV_INT)
        e->i[0] = v->i;
    for (k = 0; v->type != PV_INT && k < v->n; k++)
        e->i[k] = v->v[k]->i;
    return 0;
}

static bool all_ints(const struct pv *v)
{
    size_t k;

    for (k = 0; k < v->n; k++)
        if (v->v[k]->type != PV_INT)
            return false;
    return true;
}

/* The pairs of dict v under `prefix` into c. */
static int flatten(struct torch_ckpt *c, const struct pv *v, const char *prefix,
                   int depth, struct sd_diag *d)
{
    size_t k;
    int rv;

    if (depth > PK_DEPTH_MAX)
        return sd_diag_set(d, SD_EFORMAT, "%s: dicts nested too deep", prefix);
    for (k = 0; k < v->n; k += 2) {
        const struct pv *key = v->v[k], *val = v->v[k + 1];
        struct torch_entry *e;
        char path[TORCH_KEY_MAX];

        if (key->type != PV_STR)
            return sd_diag_set(d, SD_EFORMAT, "%s: a key is not a string",
                               prefix[0] ? prefix : "checkpoint");
        if ((size_t)snprintf(path, sizeof(path), "%s%s%s", prefix,
                             prefix[0] ? "." : "", key->s) >= sizeof(path))
            return sd_diag_set(d, SD_EFORMAT, "%s.%s: key too long", prefix,
                               key->s);
        if (torch_find(c, path) != NULL)
            return sd_diag_set(d, SD_EFORMAT, "%s: key given twice", path);
        if (val->type == PV_DICT) {
            rv = flatten(c, val, path, depth + 1, d);
        } else if (val->type == PV_TENSOR || val->type == PV_INT ||
                   ((val->type == PV_LIST || val->type == PV_TUPLE) &&
                    all_ints(val))) {
            rv = add_entry(c, &e);
            if (rv != 0)
                return rv;
            snprintf(e->key, sizeof(e->key), "%s", path);
            rv = val->type == PV_TENSOR ? tensor_entry(val, e, d)
                                        : ints_entry(c, val, e);
        } else if (val->type == PV_BOOL || val->type == PV_STR) {
            rv = 0; /* flags and names: not weights, skipped */
        } else {
            rv = sd_diag_set(d, SD_EFORMAT,
                             "%s: a value that is no tensor, integer, list "
                             "of integers or dict",
                             path);
        }
        if (rv != 0)
            return rv;
    }
    return 0;
}

int torch_unpickle(const void *pkl, size_t len, struct torch_ckpt **out,
                   struct sd_diag *d)
{
    struct unpickler *u = calloc(1, sizeof(*u));
    struct torch_ckpt *c = calloc(1, sizeof(*c));
    struct pv *root = NULL;
    int rv;

    if (u == NULL || c == NULL) {
        free(u);
        free(c);
        return SD_ENOMEM;
    }
    u->p = pkl;
    u->len = len;
    u->d = d;
    rv = run(u, &root);
    if (rv == 0 && root->type != PV_DICT)
        rv = sd_diag_set(d, SD_EFORMAT, "pickle: the checkpoint is not a dict");
    if (rv == 0)
        rv = flatten(c, root, "", 0, d);
    pk_release(u);
    free(u);
    if (rv != 0) {
        torch_free(c);
        return rv;
    }
    *out = c;
    return 0;
}

void torch_free(struct torch_ckpt *c)
{
    size_t k;

    if (c == NULL)
        return;
    for (k = 0; k < c->n; k++) {
        free(c->e[k].f);
        free(c->e[k].i);
    }
    free(c->e);
    free(c);
}

const struct torch_entry *torch_find(const struct torch_ckpt *c,
                                     const char *key)
{
    size_t k;

    for (k = 0; k < c->n; k++)
        if (strcmp(c->e[k].key, key) == 0)
            return &c->e[k];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* The zip container                                                         */

/* Entry `name` of z, whole, into a new buffer (*len bytes); CRC checked by
 * libzip.  SD_ENOENT when there is none. */
static int zip_read_entry(zip_t *z, const char *name, unsigned char **out,
                          size_t *len, struct sd_diag *d)
{
    zip_stat_t st;
    zip_file_t *f;
    zip_int64_t idx = zip_name_locate(z, name, 0), got;
    unsigned char *buf;

    if (idx < 0)
        return sd_diag_set(d, SD_ENOENT, "zip: no entry %s", name);
    if (zip_stat_index(z, (zip_uint64_t)idx, 0, &st) != 0 ||
        !(st.valid & ZIP_STAT_SIZE) || st.size > TORCH_FILE_MAX)
        return sd_diag_set(d, SD_EFORMAT, "zip: %s: no size, or too large",
                           name);
    buf = malloc(st.size ? (size_t)st.size : 1);
    if (buf == NULL)
        return SD_ENOMEM;
    f = zip_fopen_index(z, (zip_uint64_t)idx, 0);
    got = f ? zip_fread(f, buf, st.size) : -1;
    /* reading to the end makes libzip check the entry's CRC */
    if (f == NULL || got != (zip_int64_t)st.size ||
        (st.size > 0 && zip_fread(f, buf, 1) != 0)) {
        sd_diag_set(d, SD_EFORMAT, "zip: %s: %s", name,
                    f ? zip_error_strerror(zip_file_get_error(f))
                      : zip_error_strerror(zip_get_error(z)));
        if (f)
            zip_fclose(f);
        free(buf);
        return SD_EFORMAT;
    }
    zip_fclose(f);
    *out = buf;
    *len = (size_t)st.size;
    return 0;
}

/* The archive's directory: the one "<dir>/data.pkl" entry. */
static int find_prefix(zip_t *z, char *prefix, size_t size, struct sd_diag *d)
{
    zip_int64_t n = zip_get_num_entries(z, 0), k;
    int found = 0;

    for (k = 0; k < n; k++) {
        const char *name = zip_get_name(z, (zip_uint64_t)k, ZIP_FL_ENC_RAW);
        const char *slash = name ? strchr(name, '/') : NULL;

        if (slash && strcmp(slash, "/data.pkl") == 0 &&
            (size_t)(slash - name) < size) {
            snprintf(prefix, size, "%.*s", (int)(slash - name), name);
            found++;
        }
    }
    if (found != 1)
        return sd_diag_set(d, SD_EFORMAT,
                           "zip: %d entries <dir>/data.pkl, a checkpoint has "
                           "one",
                           found);
    return 0;
}

/* Each tensor's floats from its storage entry. */
static int load_tensors(zip_t *z, const char *prefix, struct torch_ckpt *c,
                        struct sd_diag *d)
{
    size_t k, j, len;
    unsigned char *raw;
    char name[256];
    int rv;

    for (k = 0; k < c->n; k++) {
        struct torch_entry *e = &c->e[k];

        if (e->kind != TORCH_TENSOR)
            continue;
        snprintf(name, sizeof(name), "%s/data/%s", prefix, e->storage);
        rv = zip_read_entry(z, name, &raw, &len, d);
        if (rv != 0)
            return rv == SD_ENOENT
                       ? sd_diag_set(d, SD_EFORMAT, "%s: storage %s is missing",
                                     e->key, name)
                       : rv;
        if (len % 4 != 0 || (int64_t)(len / 4) < e->storage_offset ||
            len / 4 - (size_t)e->storage_offset < e->n) {
            free(raw);
            return sd_diag_set(d, SD_EFORMAT,
                               "%s: storage %s has %zu bytes, fewer than its "
                               "%zu floats at offset %lld",
                               e->key, name, len, e->n,
                               (long long)e->storage_offset);
        }
        e->f = malloc((e->n ? e->n : 1) * sizeof(float));
        if (e->f == NULL) {
            free(raw);
            return SD_ENOMEM;
        }
        for (j = 0; j < e->n; j++) {
            uint32_t v = sd_le_get32(raw + 4 * ((size_t)e->storage_offset + j));

            memcpy(&e->f[j], &v, sizeof(v));
        }
        free(raw);
    }
    return 0;
}

int torch_load(const void *buf, size_t len, struct torch_ckpt **out,
               struct sd_diag *d)
{
    zip_error_t ze;
    zip_source_t *src;
    zip_t *z;
    struct torch_ckpt *c = NULL;
    unsigned char *pkl = NULL;
    size_t plen;
    char prefix[128], name[160];
    int rv;

    zip_error_init(&ze);
    src = zip_source_buffer_create(buf, len, 0, &ze);
    z = src ? zip_open_from_source(src, ZIP_RDONLY | ZIP_CHECKCONS, &ze) : NULL;
    if (z == NULL) {
        rv = sd_diag_set(d, SD_EFORMAT, "not a PyTorch zip checkpoint: %s",
                         zip_error_strerror(&ze));
        if (src)
            zip_source_free(src);
        zip_error_fini(&ze);
        return rv;
    }
    zip_error_fini(&ze);
    rv = find_prefix(z, prefix, sizeof(prefix), d);
    if (rv == 0) {
        unsigned char *bo;
        size_t bolen;

        /* torch >= 1.10 says its byte order; the storages must be
         * little-endian */
        snprintf(name, sizeof(name), "%s/byteorder", prefix);
        rv = zip_read_entry(z, name, &bo, &bolen, d);
        if (rv == 0) {
            if (bolen != 6 || memcmp(bo, "little", 6) != 0)
                rv = sd_diag_set(d, SD_EFORMAT, "zip: %s is not \"little\"",
                                 name);
            free(bo);
        } else if (rv == SD_ENOENT) {
            rv = 0;
        }
    }
    if (rv == 0) {
        snprintf(name, sizeof(name), "%s/data.pkl", prefix);
        rv = zip_read_entry(z, name, &pkl, &plen, d);
    }
    if (rv == 0)
        rv = torch_unpickle(pkl, plen, &c, d);
    if (rv == 0)
        rv = load_tensors(z, prefix, c, d);
    free(pkl);
    zip_discard(z); /* frees src */
    if (rv != 0) {
        torch_free(c);
        return rv;
    }
    *out = c;
    return 0;
}

int torch_read(const char *path, struct torch_ckpt **out, struct sd_diag *d)
{
    void *buf = NULL;
    size_t sz = 0;
    int rv;

    rv = sd_file_read(path, TORCH_FILE_MAX, "a PyTorch checkpoint", &buf, &sz,
                      d);
    if (rv != 0)
        return rv;
    rv = torch_load(buf, sz, out, d);
    free(buf);
    if (rv < 0 && d) {
        char msg[sizeof(d->msg)];

        memcpy(msg, d->msg, sizeof(msg));
        sd_diag_set(d, rv, "%s: %s", path, msg);
    }
    return rv;
}
