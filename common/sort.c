/* Orders for qsort() (shardd/sort.h). */
#include "shardd/sort.h"

int sd_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}
