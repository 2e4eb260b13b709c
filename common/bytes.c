/* Sizes for people (include/shardd/bytes.h). */
#include "shardd/bytes.h"

#include <stdio.h>

const char *sd_bytes_text(uint64_t n, char out[SD_BYTES_TEXT])
{
    static const char *const unit[] = {"KiB", "MiB", "GiB",
                                       "TiB", "PiB", "EiB"};
    double v = (double)n;
    int u = -1;

    if (n < 1024) {
        snprintf(out, SD_BYTES_TEXT, "%llu bytes", (unsigned long long)n);
        return out;
    }
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(out, SD_BYTES_TEXT,
             v < 9.995   ? "%.2f %s"
             : v < 99.95 ? "%.1f %s"
                         : "%.0f %s",
             v, unit[u]);
    return out;
}
