/*
 * The parts of the synthetic table generator (synth.c) that the table
 * families (families.c) draw with too: a keyed bijection of [0, rows) that
 * scatters popular ranks over the rows, Zipf sampling by
 * rejection-inversion, and geometric bag lengths.  Private to the formats
 * room.
 */
#ifndef SHARDD_PLANNER_SYNTH_INT_H
#define SHARDD_PLANNER_SYNTH_INT_H

#include <stddef.h>
#include <stdint.h>

#include "problem/problem.h"

/*
 * A bijection of [0, rows): a keyed invertible mixer of k-bit words (k the
 * bit length of rows - 1), cycle-walked until it lands below rows.
 */
struct perm {
    uint64_t rows;
    uint64_t mask;
    uint64_t a, b, c; /* a and b odd */
    int shift;
};

/* Keys p for [0, rows) from r. */
void synth__perm_init(struct perm *p, uint64_t rows, struct rng *r);
uint64_t synth__perm_apply(const struct perm *p, uint64_t x);

/* Zipf sampling of ranks 1..n with exponent s > 0, mapped to rows. */
struct zipf_rank {
    double edge;   /* H(k + 0.5): the upper end of rank k's interval */
    double accept; /* u >= accept is accepted */
    int64_t row;   /* the row rank k is mapped to */
};

struct zipf {
    double s;
    double n;
    double h_x1;     /* H(1.5) - 1 */
    double h_n;      /* H(n + 0.5) */
    double s_accept; /* quick-acceptance distance */
    size_t nhead;    /* ranks 1 .. nhead are tabulated */
    struct zipf_rank *head;
    size_t nguide;
    uint32_t *guide;    /* nguide buckets over (h_x1, head[nhead-1].edge] */
    double guide_scale; /* buckets per unit of u */
    const struct perm *perm;
};

/*
 * Prepares sampling of ranks 1..n with exponent s, mapped to rows by perm
 * (borrowed: it must outlive z), with up to nhead ranks tabulated.
 * Returns 0 or SD_ENOMEM; release with synth__zipf_destroy().
 */
int synth__zipf_init(struct zipf *z, double s, uint64_t n, size_t nhead,
                     const struct perm *perm);
void synth__zipf_destroy(struct zipf *z);
/* A row: rank k in [1, n] drawn, then mapped through the permutation. */
int64_t synth__zipf_sample(const struct zipf *z, struct rng *r);

/* The ranks worth tabulating for a trace of n lookups. */
size_t synth__head_size(int64_t nindices);

/*
 * Bag lengths: geometric on {0, 1, ..} with mean pf, by inversion.  Fills
 * offsets[0 .. nbags] and returns the total.
 */
int64_t synth__draw_offsets(struct rng *r, double pf, int64_t nbags,
                            int64_t *offsets);

#endif /* SHARDD_PLANNER_SYNTH_INT_H */
