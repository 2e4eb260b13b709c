/*
 * Orders for qsort() that several modules, tests and benches share.
 *
 * sd_cmp_double orders doubles ascending (NaNs compare equal to
 * everything: callers sort finite values).
 */
#ifndef SHARDD_SORT_H
#define SHARDD_SORT_H

int sd_cmp_double(const void *a, const void *b);

#endif /* SHARDD_SORT_H */
