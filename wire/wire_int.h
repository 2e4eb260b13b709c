/*
 * Private to wire/ (wire.h): the pieces of a table's conversion that
 * wire.c (shardd's Table) and wire_inputs.c (inputs as users describe
 * them: TorchRec's tables, derived bins, notes, traces) share.
 */
#ifndef SHARDD_WIRE_INT_H
#define SHARDD_WIRE_INT_H

#include <stddef.h>

#include "wire.h"

/* A table name (NULL: "") into name; SD_EINVAL naming `where[i]`. */
int wire__name_in(const char *src, const char *where, size_t i,
                  char name[TABLE_NAME_MAX], struct sd_diag *d);

/*
 * n bins (17, or 0 to derive them with zipf, 0 meaning the default) into
 * t->bins and sp; SD_EINVAL naming `where[i] "name": bins` (any other
 * count, a value that is not finite) or zipf_exponent (out of range, or
 * given with bins).
 */
int wire__bins_in(const double *bins, size_t n, double zipf, const char *where,
                  size_t i, struct table *t, struct table_spec *sp,
                  struct sd_diag *d);

/* One Table into t and sp (zeroed first); the planner's checks come after,
 * for all tables at once. */
int wire__table_in(const Shardd__V1__Table *src, size_t i, struct table *t,
                   struct table_spec *sp, struct sd_diag *d);

#endif /* SHARDD_WIRE_INT_H */
